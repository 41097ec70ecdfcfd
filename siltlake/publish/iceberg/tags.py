"""siltlake's tags as Iceberg tags (docs/design.md, "Iceberg target"): a tag named on a table version is a tag ref of
the same name on that version's snapshot, so engines read `VERSION AS OF 'name'` (or the snapshot refs) as siltlake
reads `as_of_version="name"`. siltlake's catalog says which tags there are; this module only moves refs to match."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable


def tag_refs(table: IcebergTable, wanted: Mapping[str, int], removed: Mapping[str, int]) -> list[str]:
    """Point each tag of `wanted` (name -> snapshot id) at its snapshot, and drop each tag of `removed` (name -> the
    snapshot it was made on) that still heads that snapshot, in one commit; the statements made (none: nothing
    differed). A branch's name (Iceberg's `main` above all) is never taken for a tag, and a tag an engine moved
    elsewhere is not removed: it is that engine's now."""
    from pyiceberg.table.refs import SnapshotRefType

    refs = table.metadata.refs
    made = {
        name: snapshot_id
        for name, snapshot_id in wanted.items()
        if (ref := refs.get(name)) is None
        or (ref.snapshot_ref_type == SnapshotRefType.TAG and ref.snapshot_id != snapshot_id)
    }
    gone = [
        name
        for name, snapshot_id in removed.items()
        if name not in wanted
        and (ref := refs.get(name)) is not None
        and ref.snapshot_ref_type == SnapshotRefType.TAG
        and ref.snapshot_id == snapshot_id
    ]
    if not made and not gone:
        return []
    with table.manage_snapshots() as refs_update:
        for name in gone:
            refs_update.remove_tag(name)
        for name, snapshot_id in made.items():
            # A tag moved (`move=True`) is set again: the update asserts the snapshot it headed, as a removal does.
            refs_update.create_tag(snapshot_id, name)
    ident = ".".join(table.name())
    return [
        *(f"ALTER TABLE {ident} DROP TAG {name}" for name in gone),
        *(
            f"ALTER TABLE {ident} CREATE OR REPLACE TAG {name} AS OF VERSION {snapshot_id}"
            for name, snapshot_id in made.items()
        ),
    ]
