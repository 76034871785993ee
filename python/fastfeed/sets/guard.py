"""The mass-delete guard every snapshot shares (`fastfeed sync`, `fastfeed thunderstone sync`,
`fastfeed seedlist load --snapshot`): a snapshot that would delete more than
`DEFAULT_ALLOWED_DELETES` of what is held, or anything when it is empty, is refused before
anything changes (`MassDelete`) unless `allow_deletes` allows it. A partial or empty export is
far likelier than a source that lost that much."""

from __future__ import annotations

from fastfeed.errors import MassDelete

#: The share of a collection a snapshot may delete without `allow_deletes`.
DEFAULT_ALLOWED_DELETES = 0.10

#: How many deletes a snapshot may make: a share of what is held (a float up to 1), or a
#: number of documents (an int).
AllowDeletes = float | int


def check_deletes(
    deleted: int,
    held: int,
    records: int,
    allow: AllowDeletes | None,
    collection: str,
    *,
    unchanged: str = "nothing was sent",
    again: str = "sync again",
) -> None:
    """Raises `MassDelete` if a snapshot of `records` records would delete more of the `held`
    documents of `collection` than `allow` (None: the default) lets it. The message says what
    was left `unchanged` and how to go on (`again` with --allow-deletes)."""
    if not deleted:
        return
    if allow is None:
        limit = int(held * DEFAULT_ALLOWED_DELETES)
        allowed = f"the default, {DEFAULT_ALLOWED_DELETES:.0%} of it"
        if records == 0:
            limit, allowed = 0, "none when the snapshot is empty"
    elif isinstance(allow, float):
        limit, allowed = int(held * allow), f"{allow:.0%} of it"
    else:
        limit, allowed = allow, f"{allow:,} documents"
    if deleted <= limit:
        return
    share = deleted / held if held else 1.0
    empty = " The snapshot is empty." if records == 0 else ""
    raise MassDelete(
        f"the snapshot would delete {deleted:,} of the {held:,} documents of {collection} "
        f"({share:.0%}), more than allowed ({allowed}); {unchanged}.{empty} A partial or empty "
        "export is likelier than a source that lost that much: check the input, and if the "
        f"documents are really gone, {again} with --allow-deletes {deleted} "
        f"(Python: allow_deletes={deleted})",
        deleted=deleted,
        held=held,
    )
