"""`fastfeed validate`: the DTD and the protocol's rules, reported as file:line: problem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from fastfeed import read_manifest
from fastfeed.cli import main
from fastfeed.gsa.validate import validate_file

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<!DOCTYPE gsafeed PUBLIC "-//Google//DTD GSA Feeds//EN" "">\n'
)

# The guide's own example, "Web Feed with Base64 Encoded Metadata".
GUIDE_EXAMPLE = (
    HEAD
    + """<gsafeed>
  <header>
    <datasource>example3</datasource>
    <feedtype>metadata-and-url</feedtype>
  </header>
  <group>
    <record url="http://example.com/myfeed.html" action="add" mimetype="text/html">
      <metadata>
        <meta encoding="base64binary" name="cHJvamVjdF9uYW1l" content="Y2lyY2xlZ19yb2Nrcw=="/>
      </metadata>
    </record>
  </group>
</gsafeed>
"""
)


def rec(inner: str = "", attrs: str = "") -> str:
    """A record line for http://a.example.com/ with the given children and extra attributes."""
    return f'<record url="http://a.example.com/" mimetype="t"{attrs}>{inner}</record>\n'


def feed(
    tmp_path: Path, body: str, datasource: str = "docs", feedtype: str = "incremental"
) -> Path:
    """A feed file whose group opens on line 8, so that its records start on line 9."""
    path = tmp_path / "feed.xml"
    header = f"<datasource>{datasource}</datasource>\n<feedtype>{feedtype}</feedtype>\n"
    path.write_text(
        HEAD + f"<gsafeed>\n<header>\n{header}</header>\n<group>\n{body}</group>\n</gsafeed>\n",
        encoding="utf-8",
    )
    return path


def test_the_guides_example_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "example.xml"
    path.write_text(GUIDE_EXAMPLE)
    assert validate_file(path) == []


@pytest.mark.parametrize(
    ("body", "feedtype", "words"),
    [
        (
            '<record url="http://a.example.com/"><content>x</content></record>\n',
            "incremental",
            "does not carry attribute mimetype",
        ),
        (
            rec(attrs=' lock="maybe"'),
            "incremental",
            "lock",
        ),
        ('<record url="http://a/" mimetype="t"/>\n', "incremental", "not fully qualified"),
        (
            rec(attrs=' pagerank="40"'),
            "incremental",
            "pagerank '40'",
        ),
        (
            rec("<content>x</content>"),
            "metadata-and-url",
            "carries no content",
        ),
        (
            rec('<metadata><meta name="a" content=""/></metadata>'),
            "incremental",
            "empty content",
        ),
        (
            rec('<metadata><meta name="a" content="b"/></metadata>'),
            "full",
            "metadata alone",
        ),
        (
            rec('<content encoding="base64binary">a$b</content>'),
            "incremental",
            "not valid base64binary",
        ),
        (
            rec('<content encoding="base64compressed">QUJD</content>'),
            "incremental",
            "does not inflate",
        ),
        (
            rec(attrs=' last-modified="soon"'),
            "incremental",
            "RFC 822",
        ),
        (
            rec("<content>x</content><metadata/>"),
            "incremental",
            "does not follow the DTD",
        ),
        (
            rec(
                '<acl><principal scope="user" access="permit">ann</principal></acl>'
                '<metadata><meta encoding="base64binary" name="Z29vZ2xlOmFjbHVzZXJz"'
                ' content="am9l"/></metadata><content>x</content>'
            ),
            "incremental",
            "both in an <acl> element and in google:acl* metadata",
        ),
    ],
)
def test_each_problem_is_reported_with_its_line(
    tmp_path: Path, body: str, feedtype: str, words: str
) -> None:
    path = feed(
        tmp_path,
        '<record url="http://ok.example.com/" mimetype="text/plain"/>\n' + body,
        feedtype=feedtype,
    )
    problems = validate_file(path)
    assert problems, body
    assert any(words in p.message for p in problems), problems
    assert {p.line for p in problems} == {10}


@pytest.mark.parametrize(
    ("body", "datasource", "words"),
    [
        (
            rec('<metadata><meta name="author" content="ann"/></metadata>'),
            "web",
            "takes no metadata",
        ),
        (
            rec('<metadata><meta name="google:aclusers" content="joe=reader"/></metadata>'),
            "docs",
            "role suffix",
        ),
        (
            rec('<metadata><meta name="google:aclusers" content="eng=peeker"/></metadata>'),
            "docs",
            "role suffix '=peeker'",
        ),
    ],
)
def test_what_the_appliance_ignores_or_changes_is_reported_but_not_fatal(
    tmp_path: Path, body: str, datasource: str, words: str
) -> None:
    [problem] = validate_file(feed(tmp_path, body, datasource=datasource))
    assert words in problem.message and not problem.fatal
    assert problem.line == 9


def test_role_suffixes_concern_permitted_user_names_only(tmp_path: Path) -> None:
    """The guide strips them from "the user name" of google:aclusers, of no other meta."""
    metas = "".join(
        f'<meta name="{name}" content="x=reader"/>'
        for name in ("google:aclgroups", "google:acldenyusers", "google:acldenygroups")
    )
    assert validate_file(feed(tmp_path, rec(f"<metadata>{metas}</metadata>"))) == []


def test_an_acl_in_both_forms_fails_validate_but_only_skips_its_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = rec(
        '<acl><principal scope="user" access="permit">ann</principal></acl>'
        '<metadata><meta name="google:aclusers" content="joe"/></metadata><content>x</content>'
    )
    path = feed(tmp_path, both)

    [problem] = validate_file(path)

    assert (problem.fatal, problem.skips_record) == (True, True)
    assert main(["validate", str(path)]) == 1
    assert "both in an <acl> element and in google:acl* metadata" in capsys.readouterr().out


def test_a_metadata_and_url_feed_of_the_web_datasource_takes_metadata(tmp_path: Path) -> None:
    body = rec('<metadata><meta name="author" content="ann"/></metadata>')
    assert validate_file(feed(tmp_path, body, "web", "metadata-and-url")) == []


def test_a_groups_pagerank_follows_the_records_rules(tmp_path: Path) -> None:
    path = feed(tmp_path, rec("<content>x</content>"))
    path.write_text(path.read_text().replace("<group>", '<group pagerank="40">'))

    [problem] = validate_file(path)

    assert (problem.line, problem.message) == (8, "pagerank '40' is not an integer from 68 to 100")
    [web] = validate_file(path, feedtype="metadata-and-url", datasource="docs")[-1:]
    assert web.message == "pagerank applies to content feeds only"


def test_unpadded_base64_as_in_the_guide_is_accepted(tmp_path: Path) -> None:
    body = rec('<content encoding="base64binary">Zm9vIGJhcgo</content>')
    assert validate_file(feed(tmp_path, body)) == []


def test_rules_follow_the_pushed_feed_type_over_the_header(tmp_path: Path) -> None:
    path = feed(tmp_path, rec("<content>x</content>"))
    assert validate_file(path) == []
    [problem] = validate_file(path, datasource="docs", feedtype="metadata-and-url")
    assert "carries no content" in problem.message


def test_header_rules(tmp_path: Path) -> None:
    problems = validate_file(feed(tmp_path, "", datasource="1bad", feedtype="partial"))
    messages = " ".join(p.message for p in problems)
    assert "datasource '1bad'" in messages and "feedtype 'partial'" in messages


def test_not_well_formed_and_wrong_doctype(tmp_path: Path) -> None:
    path = tmp_path / "broken.xml"
    path.write_text(HEAD + "<gsafeed>\n<header>\n</gsafeed>\n")
    [problem] = validate_file(path)
    assert problem.line == 5 and "not well-formed" in problem.message
    path.write_text(
        '<?xml version="1.0"?>\n<gsafeed><header><datasource>a</datasource>'
        "<feedtype>full</feedtype></header><group/></gsafeed>"
    )
    assert [p.message for p in validate_file(path)] == [
        'the DOCTYPE must be <!DOCTYPE gsafeed PUBLIC "-//Google//DTD GSA Feeds//EN" "">'
    ]


def test_command_prints_problems_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.xml"
    good.write_text(GUIDE_EXAMPLE)
    bad = feed(tmp_path, '<record url="http://a/" mimetype="t"/>\n')
    assert main(["validate", str(good)]) == 0
    assert main(["validate", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:9: url: host 'a' is not fully qualified" in out
    assert str(good) not in out


def test_a_feed_set_is_checked_as_push_takes_it(
    make_feed_set: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = make_feed_set("docs", "full", files=3)
    second = feeds / read_manifest(feeds)[1].file

    assert main(["validate", str(feeds)]) == 0
    assert capsys.readouterr().err == "fastfeed validate: 3 files valid\n"
    # A file of a set follows its manifest entry, as push sends it, not its header: pushed as
    # a metadata-and-url feed, a record's content is a problem.
    manifest = feeds / "manifest.jsonl"
    manifest.write_bytes(manifest.read_bytes().replace(b'"incremental"', b'"metadata-and-url"'))
    assert main(["validate", str(feeds)]) == 1
    out, err = capsys.readouterr()
    assert f"{second}:" in out and "carries no content" in out
    assert err.endswith("fastfeed validate: 2 of 3 files have problems\n")
    assert main(["validate", str(second)]) == 1
    loose = tmp_path / "loose.xml"
    loose.write_bytes(second.read_bytes())
    assert main(["validate", str(loose)]) == 0


def test_a_directory_that_is_no_feed_set_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "loose").mkdir()

    assert main(["validate", str(tmp_path / "loose"), "--json"]) == 3

    out, err = capsys.readouterr()
    assert orjson.loads(out) == {
        "ok": False,
        "error": f"{tmp_path / 'loose' / 'manifest.jsonl'} does not exist: {tmp_path / 'loose'} "
        "is not a finished feed set (did a `fastfeed build` or `fastfeed run` into it stop "
        "before its end? then build or run again into a new --out)",
    }
    assert "is not a finished feed set" in err


def test_json_says_ok_as_the_exit_status_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.xml"
    good.write_text(GUIDE_EXAMPLE)

    assert main(["validate", str(good), "--json"]) == 0
    summary = orjson.loads(capsys.readouterr().out)
    assert summary["ok"] is True and summary["files"] == 1 and summary["problems"] == []

    bad = feed(tmp_path, '<record url="http://a/" mimetype="t"/>\n')
    assert main(["validate", str(bad), "--json"]) == 1
    out, err = capsys.readouterr()
    summary = orjson.loads(out)  # the problems go to stderr: stdout holds the summary alone
    assert summary["ok"] is False and summary["invalid"] == 1
    assert summary["problems"] == [
        {
            "file": str(bad),
            "line": 9,
            "message": "url: host 'a' is not fully qualified (the appliance needs a name like "
            "host.example.com)",
            "fatal": True,
        }
    ]
    assert f"{bad}:9: url:" in err
    assert err.endswith("fastfeed validate: 1 of 1 file has problems\n")
