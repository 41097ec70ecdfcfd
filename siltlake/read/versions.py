"""What one table version is made of: its exact data files, from its partitions' manifests (plus, for the
current state, the live objects the catalog lists), and the time-travel time that picks a version.

A table's state is read in one catalog snapshot (a constant number of queries, whatever the partitions);
no directory is ever listed. The table API (siltlake.lake) and the Iceberg publish target read here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from siltlake.errors import SiltError
from siltlake.storage import manifests

if TYPE_CHECKING:
    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment

_MANIFEST_READERS = 16


def parse_as_of(value: dt.datetime | dt.date | str) -> dt.datetime:
    """A time-travel time as naive UTC (siltlake.clock.parse_time); SiltError names a text that is none."""
    from siltlake.clock import parse_time

    try:
        return parse_time(value)
    except ValueError as exc:
        raise SiltError(str(exc)) from None


@dataclass(frozen=True)
class DataFile:
    """One data file of a table version: its URI (as the catalog and manifests store it), partition date
    and size in bytes (None for a live object of the current state, not yet in any manifest)."""

    uri: str
    partition_date: dt.date
    size: int | None


def version_files(deployment: Deployment, record: TableRecord, *, as_of_version: int | None = None,
                  as_of: dt.datetime | None = None, dates: set[dt.date] | None = None,
                  date_filter: Callable[[list[dt.date]], set[dt.date]] | None = None) -> list[DataFile]:
    """The exact data files of a table version (as_of_version, or the versions published at or before the
    naive UTC time as_of, or the current state), of the partitions `dates` (None: all) that `date_filter`
    (given the dates present, returns those to read) keeps; manifests are read only for those."""
    views = deployment.catalog.versions.reader_snapshot(
        record.id, as_of_version=as_of_version, as_of=as_of, table_name=record.qualified_name, dates=dates,
        date_filter=date_filter)
    lake = deployment.lake
    keys = [view.manifest_key for view in views if view.manifest_key]
    if len(keys) <= 1:  # a day's read: no thread pool to start
        listed = {key: manifests.read_manifest(lake, key) for key in keys}
    else:
        with ThreadPoolExecutor(min(_MANIFEST_READERS, len(keys))) as pool:
            listed = dict(zip(keys, pool.map(lambda key: manifests.read_manifest(lake, key), keys), strict=True))
    layout = record.layout(deployment.instance_key)
    files: list[DataFile] = []
    for view in views:
        if view.manifest_key:
            files += [DataFile(uri, view.partition_date, size) for uri, size in listed[view.manifest_key]]
        files += [DataFile(lake.uri(layout.small_object(view.partition_date, object_id, False)),
                           view.partition_date, None) for object_id in view.live_object_ids]
    return files
