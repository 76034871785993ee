"""Fuzzing, bounded in time, on every test run: what reads untrusted bytes (the validator, the
emulator's feed parser, the seedlist's query parameters) answers with a problem or a refusal,
never a crash. The Rust core's readers are fuzzed by `cargo fuzz` (fuzz/, run by .ci/run)."""

from __future__ import annotations

import httpx
import pytest
from conftest import TLSFiles
from fastfeed.emulator import Emulator
from fastfeed.gsa.validate import validate_file
from fastfeed.seedlist.server import Refused, parse_query
from fastfeed.seedlist.tokens import Signer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VALID = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<!DOCTYPE gsafeed PUBLIC "-//Google//DTD GSA Feeds//EN" "">\n'
    b"<gsafeed><header><datasource>docs</datasource><feedtype>full</feedtype></header>"
    b'<group><record url="http://e.example.com/a" mimetype="text/plain">'
    b'<metadata><meta name="k" content="v"/></metadata>'
    b'<content encoding="base64compressed">eJzLSM3JyQcABiwCFQ==</content></record></group>'
    b"</gsafeed>\n"
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid feed with bytes flipped, cut, or spliced in: near enough to get past the
    first checks."""
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[at : at + draw(st.integers(1, 40))]
        else:
            data[at:at] = draw(st.binary(max_size=40))
    return bytes(data)


feeds = st.one_of(st.binary(max_size=400), mutated())


@settings(max_examples=300, deadline=None)
@given(data=feeds)
def test_validate_answers_problems_never_crashes(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "feed.xml"
    path.write_bytes(data)
    problems = validate_file(path)
    assert isinstance(problems, list)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=feeds)
def test_the_emulator_applies_or_fails_any_feed_and_keeps_going(
    emulator: Emulator, tls: TLSFiles, data: bytes
) -> None:
    with httpx.Client(verify=tls.client_context(), timeout=30) as client:
        response = client.post(
            f"{emulator.url}/xmlfeed",
            data={"datasource": "docs", "feedtype": "full"},
            files={"data": ("feed.xml", data, "text/xml")},
        )
    assert response.status_code in (200, 400, 413), response.text
    emulator.wait_idle()
    outcome = emulator.pushes()[-1].outcome
    assert outcome == "applied" or outcome.startswith(("failed in error: ", "refused: "))


SIGNER = Signer("0123456789abcdef", b"k" * 32)
parameters = st.dictionaries(
    st.sampled_from(["Action", "Range", "Start", "State", "Timestamp", "Other"]),
    st.one_of(st.text(max_size=60), st.from_regex(r"\A[0-9]{1,25}\Z")),
)


@settings(max_examples=500, deadline=None)
@given(query=parameters)
def test_seedlist_parameters_are_read_or_refused_with_400(query: dict[str, str]) -> None:
    try:
        parse_query(query, SIGNER)
    except Refused as refused:
        assert refused.status == 400 and refused.message
