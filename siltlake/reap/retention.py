"""Which versions of a partition reap keeps (docs/design.md, "Reap"): those current inside the retention window, and
those a tag names."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

from siltlake.catalog import ReapVersion


def retained_versions(
    versions: Sequence[ReapVersion], cutoff: dt.datetime, tagged: Collection[int] = ()
) -> tuple[list[ReapVersion], list[ReapVersion]]:
    """(retained, expired) versions of one partition, ordered by version.

    The newest is always retained. An older one is retained while it was the current version at some moment
    inside the retention window, i.e. while the version that superseded it (the next one) was created at or after
    `cutoff`: time travel to any time in the window then finds its version, and a reader that started on it just
    before it was superseded keeps its objects for the whole retention. Only the next version counts (and the
    version's own time, should a publisher's clock have stamped the next one earlier): a version once expired
    stays expired whatever is published later, which a reap killed between deleting an expired version's files
    and its row relies on (its next run must find the row expired still, not retained and missing its files).

    A version a tagged table version shows (of `tagged`, the table versions the table's tags name: the newest
    version published in it or before) is retained whatever its age. A tag names only a version readable when it
    is given, so none of these was expired before.
    """
    shown = tagged_versions(versions, tagged) if tagged else set()
    retained: list[ReapVersion] = []
    expired: list[ReapVersion] = []
    for version, superseding in zip(versions, [*versions[1:], None], strict=True):
        tagged_now = bool(shown) and version.id in shown  # (a caller may pass versions without ids and no tags)
        if superseding is None or max(superseding.created_at, version.created_at) >= cutoff or tagged_now:
            retained.append(version)
        else:
            expired.append(version)
    return retained, expired


def tagged_versions(versions: Sequence[ReapVersion], tagged: Collection[int]) -> set[int]:
    """The ids of the versions (one partition's, by version) that the table versions `tagged` show."""
    shown: set[int] = set()
    for table_version in tagged:
        published = [v for v in versions if v.table_version is not None and v.table_version <= table_version]
        if published:
            shown.add(published[-1].id)
    return shown
