"""The catalog's rows and records, and its exceptions: plain data that every concern of the catalog and
every caller imports, with no SQL (see catalog.py for the operations that read and write them); the reaper's
are in reap_rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from siltlake.derivedef import DerivedDef

# UpdateConflict, MergeConflict and VersionOutOfRange are siltlake's public errors (siltlake.errors), named here
# as before.
from siltlake.errors import CatalogError
from siltlake.errors import MergeConflict as MergeConflict
from siltlake.errors import UpdateConflict as UpdateConflict
from siltlake.errors import VersionOutOfRange as VersionOutOfRange
from siltlake.storage.keys import TableLayout
from siltlake.tabledef import TableDef


class CatalogReplaced(CatalogError):
    """The SQLite catalog file was deleted or replaced under this process: every daemon stops (never retried)."""


class LostMergeJob(CatalogError):
    """The job is no longer ours: another worker took it over after our heartbeat went stale."""


class VersionTimeBehind(CatalogError):
    """A user-given time is earlier than the table's newest version: version times only go forward."""


class RequestApplied(CatalogError):
    """A write's request id was recorded by another commit while this one ran: this one must not commit."""


@dataclass(frozen=True)
class WriteRequest:
    """A write's request id, recorded in the transaction that commits the write (catalog.requests)."""

    table_id: int
    request_id: str
    operation: str  # append, upsert, delete, update, restore


@dataclass(frozen=True)
class AppliedRequest:
    """A request id whose write was committed: what it did and when (one row of applied_requests)."""

    table_id: int
    request_id: str
    operation: str
    table_version: int | None  # the table version it published (None: none, e.g. an append, or nothing matched)
    detail: str  # what it did, in words
    created_at: dt.datetime


# --- tables, staging objects, partitions and small objects -------------------------------------------


@dataclass(frozen=True)
class TableRecord:
    id: int
    definition: TableDef
    physical_schema_name: str
    physical_table_name: str
    create_time: dt.datetime

    @property
    def qualified_name(self) -> str:
        return self.definition.qualified_name

    def layout(self, instance_key: str) -> TableLayout:
        return TableLayout(instance_key, self.physical_schema_name, self.physical_table_name)


@dataclass(frozen=True)
class PendingStagingObject:
    id: int
    uri: str
    size: int
    table: TableRecord
    failure_count: int = 0  # failed attempts so far: an object that failed once is decoded alone (stream.group_bytes)
    # What was noted of a local file when its name was registered, while no delivery has consumed it: its
    # device:inode and its first bytes' CRC (stream/tails.py NotedFile)
    noted_identity: str | None = None
    noted_head: tuple[int, int] | None = None


@dataclass(frozen=True)
class FailingStagingObject:
    """A pending staging object whose processing failed; at stream.max_failures it moves to unknown objects."""

    uri: str
    table_name: str
    failure_count: int
    last_failure: str
    last_failure_time: dt.datetime


@dataclass(frozen=True)
class Redelivery:
    """A registered staging key put again: its size when registered and now (different = new bytes, not loaded)."""

    uri: str
    put_time: dt.datetime
    registered_size: int
    size: int

    @property
    def changed(self) -> bool:
        return self.size != self.registered_size


@dataclass(frozen=True)
class DiscoveryCursor:
    """Where a staging root's discovery stands (catalog.discovery; docs/design.md, "Staging objects")."""

    cursor_time: dt.datetime  # objects changed before it were seen by a completed listing
    full_listing_time: dt.datetime  # when the last completed full listing started
    # Rows of objects that arrived before it may have been pruned: a full listing skips such objects.
    expired_before: dt.datetime | None = None
    expired_recorded: dt.datetime | None = None  # the reap run's `now` that recorded expired_before
    # An object store's rolling sweep: the pass started at sweep_started has listed every key up to sweep_after
    # (None: from the start; sweep_started None: no pass begun yet).
    sweep_after: str | None = None
    sweep_started: dt.datetime | None = None
    checked_time: dt.datetime | None = None  # the start of the last completed listing that looked everything up


@dataclass(frozen=True)
class PrefixCursor:
    """An object store's listing cursor under one key prefix (catalog.discovery; docs/design.md, "Discovery on
    an object store"). Keys are raw, relative to the staging root."""

    prefix: str
    kind: str  # "stream": a first-level or a stream's prefix; "recent": a day's prefix
    start_after: str  # the next listing of the prefix starts after this key ("": from its start)
    newest_put: dt.datetime | None = None  # the greatest LastModified seen under it (days, nested streams)


@dataclass(frozen=True)
class UnknownObject:
    uri: str
    reason: str
    size: int | None
    detect_time: dt.datetime
    table_name: str | None


# A partition's lifecycle, in order (docs/design.md): never published, published live, closed (later objects are
# delayed), switched to its merged versions. Every listing names partition states by these words.
PARTITION_STATES = ("new", "live", "closed", "switched")
# A partition's place: (table id, date, values path below dt: "" for a table partitioned by dt alone).
PartitionKey = tuple[int, dt.date, str]
# A derived table's partitions have no stream, no delayed objects and no merge: built by its last published build
# and current by its rule, or stale (its next build rewrites them). catalog.derived.derived_table_states says which.
DERIVED_PARTITION_STATES = ("built", "stale")


def partition_state(switched: bool, closed: bool, current_manifest_version: int) -> str:
    """The PARTITION_STATES name of a partition's switched and closed flags and current manifest version."""
    if switched:
        return "switched"
    if closed:
        return "closed"
    return "live" if current_manifest_version >= 0 else "new"


@dataclass(frozen=True)
class PartitionRow:
    id: int
    table_id: int
    partition_date: dt.date
    current_manifest_version: int
    desired_manifest_version: int
    last_live_object_id: int | None
    switched: bool
    partition_values: str = ""  # below dt (siltlake.partspec's values path); "" for a table partitioned by dt alone

    @property
    def key(self) -> PartitionKey:
        return self.table_id, self.partition_date, self.partition_values

    @property
    def closed(self) -> bool:
        return self.last_live_object_id is not None

    @property
    def state(self) -> str:
        """Where the partition is in its lifecycle (docs/design.md), one of PARTITION_STATES."""
        return partition_state(self.switched, self.closed, self.current_manifest_version)


@dataclass(frozen=True)
class SmallObjectRow:
    id: int
    partition_date: dt.date
    delayed: bool
    content_length: int
    row_count: int
    partition_values: str = ""  # below dt: PartitionRow.partition_values


@dataclass(frozen=True)
class SourceRange:
    """Rows of a small object that came from one staging object: [first_row, first_row + row_count)."""

    small_object_id: int
    staging_object_id: int
    partition_date: dt.date
    first_row: int
    row_count: int


# --- the merge queue ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalHost:
    """The claiming process: its host (as siltlake.hosts.claim_host names it) and pid, recorded with each
    claim, and whether a pid of this host still runs. A claim of this host whose process is gone is stale at
    once; a claim of another host waits out merge.job_timeout (its pids mean nothing here)."""

    name: str
    pid: int
    alive: Callable[[int], bool]

    def holds_dead_claim(self, row) -> bool:  # a merge_jobs row with owner_host and owner_pid
        return bool(self.dead_claims([row]))

    def dead_claims(self, rows: Iterable) -> list:
        """The rows (with owner_host and owner_pid) whose claim a gone process of this host holds. Each pid is
        asked once: a daemon's wave holds hundreds of claims, and each answer reads /proc."""
        gone: dict[int, bool] = {}
        found = []
        for row in rows:
            if row.owner_host != self.name or row.owner_pid is None:
                continue
            if row.owner_pid not in gone:
                gone[row.owner_pid] = not self.alive(row.owner_pid)
            if gone[row.owner_pid]:
                found.append(row)
        return found


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    partition_id: int
    partition_date: dt.date
    table: TableRecord
    attempts: int
    taken_over: bool  # the previous holder's heartbeat went stale
    partition_values: str = ""  # below dt: PartitionRow.partition_values


@dataclass(frozen=True)
class RangeRow:
    lower: int | None
    upper: int
    content_length: int
    row_count: int
    object_key: str | None = None  # set when the object is not named by its bounds (an update's output)

    def key(self, layout: TableLayout, partition_date: dt.date, values: str = "") -> str:
        """The range's object."""
        if self.object_key is not None:
            return self.object_key
        assert self.lower is not None, "the sentinel has no object"
        return layout.merged_object(partition_date, self.lower, self.upper, values)


@dataclass(frozen=True)
class UnmergedObject:
    id: int
    delayed: bool
    content_length: int
    row_count: int


@dataclass(frozen=True)
class RangeWrite:
    """One written merged object: a new range (lower, upper], or the open range extended from old_upper."""

    lower: int
    upper: int
    old_upper: int | None
    content_length: int
    row_count: int


@dataclass(frozen=True)
class JobOutcome:
    mode: str | None
    objects_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows_out: int = 0
    bytes_decoded: int = 0
    start_time: dt.datetime | None = None
    note: str | None = None


# --- versions and publishing ----------------------------------------------------------------------


@dataclass(frozen=True)
class FileStats:
    """What a data file holds: its size, rows and event time range (naive UTC; None: unknown)."""

    content_length: int
    row_count: int
    min_event_time: dt.datetime | None
    max_event_time: dt.datetime | None


@dataclass(frozen=True)
class VersionRef:
    """A partition version by its number and the operation that published it."""

    version: int
    commit_op: str


class TableBounds(NamedTuple):
    """A table's readable versions: the oldest (older ones were reaped) and the newest (0: none published). A
    named tuple: most callers unpack the pair."""

    oldest: int
    newest: int


@dataclass(frozen=True)
class ListedObject:
    """A small object a version lists by itself, beyond what its manifest holds."""

    id: int
    delayed: bool
    content_length: int
    row_count: int


@dataclass(frozen=True)
class PublishedVersion:
    partition_id: int
    version: int
    commit_op: str
    live_watermark: int | None
    manifest_key: str | None
    created_at: dt.datetime
    row_count: int
    byte_count: int
    covered_upper: int | None = None  # the largest small object id the manifest holds
    table_version: int = 0  # the table version it was published in
    file_list_key: str | None = None  # the manifest listing exactly its data files

    def shows(self) -> str:
        """What the version shows, in words."""
        if self.manifest_key is None:
            return f"live objects <= {self.live_watermark}"
        if self.live_watermark is None or self.live_watermark == self.covered_upper:
            return self.manifest_key
        return f"{self.manifest_key} + live objects in ({self.covered_upper}, {self.live_watermark}]"


@dataclass(frozen=True)
class LiveCandidate:
    """A not-switched partition with live objects beyond its newest version: the append version to publish.

    It keeps what the newest version shows (an update's manifest, ids <= covered_upper) and shows the live
    objects above it up to `watermark`. Its file list is the newest version's file list followed by
    `objects`, the live objects above that version's watermark; when the newest version has no file list
    (published before revision 0006), the newest version's manifest (if any) followed by `objects`, then
    every live object above covered_upper."""

    partition_id: int
    table_id: int
    partition_date: dt.date
    first: bool  # the partition's first version ever
    base_version: int | None
    manifest_key: str | None
    covered_upper: int | None
    watermark: int
    row_count: int
    byte_count: int
    objects: tuple[tuple[int, int], ...]  # (small object id, content length), in id order
    base_file_list_key: str | None = None
    partition_values: str = ""  # below dt: PartitionRow.partition_values

    @property
    def version(self) -> int:
        return (self.base_version or 0) + 1


@dataclass(frozen=True)
class SwitchedPartition:
    """A switched partition whose merged state is not published yet: the ranges it will show."""

    partition_id: int
    table_id: int
    partition_date: dt.date
    current: int
    desired: int
    ranges: tuple[RangeRow, ...]  # the ranges the merged version shows, sentinel left out
    # Small objects above desired that the newest version already shows (an upsert's `merge` version published
    # after the merge job planned), in id order: listed after the ranges, so nothing is hidden.
    beyond: tuple[ListedObject, ...] = ()
    partition_values: str = ""  # below dt: PartitionRow.partition_values

    @property
    def upper(self) -> int:
        """The largest small object id the merged version holds (its covered_upper)."""
        return self.beyond[-1].id if self.beyond else self.desired


@dataclass(frozen=True)
class PartitionView:
    """What a reader sees of one partition: a manifest's objects (merged or updated), live small objects
    above the ids the manifest holds, or both (objects appended after an update)."""

    partition_date: dt.date
    version: int | None  # None: never published (a new partition read at the current state)
    live_object_ids: tuple[int, ...] = ()
    manifest_key: str | None = None
    table_version: int | None = None  # the table version that published `version`
    partition_values: str = ""  # below dt: PartitionRow.partition_values


@dataclass(frozen=True)
class UpdateWrite:
    """An update's written object of one partition, read from `base`: what commit_updates publishes."""

    base: UpdateBase
    object_key: str
    manifest_key: str
    row_count: int
    byte_count: int


@dataclass(frozen=True)
class UpdateBase:
    """What an update of one partition reads: its newest version's manifest (ids <= covered_upper) and
    every small object above it, live or delayed, up to the partition's largest id `upper`. Together
    they are everything the partition holds, shown or not yet shown."""

    partition_id: int
    partition_date: dt.date
    version: int | None  # the newest version read (None: never published)
    manifest_key: str | None
    covered_upper: int
    objects: tuple[tuple[int, bool], ...]  # (small object id, delayed)
    upper: int
    partition_values: str = ""  # below dt: PartitionRow.partition_values


@dataclass(frozen=True)
class MergeBase:
    """What an upsert's `merge` version lists before its own object, read inside its commit: the newest
    version's manifest (ids <= covered_upper) and the partition's small objects above it, live or delayed."""

    partition_id: int
    version: int | None  # the newest version (None: never published)
    manifest_key: str | None
    covered_upper: int
    row_count: int  # the newest version's
    byte_count: int
    objects: tuple[ListedObject, ...]  # above covered_upper, in id order
    added_rows: int  # rows and bytes of the objects the newest version's counts leave out
    added_bytes: int


# --- external catalogs (publish targets) -------------------------------------------------------------


@dataclass(frozen=True)
class SyncedTable:
    """A table as a target last saw it. dropped: the siltlake table is gone, the target still has it."""

    table_id: int
    database_name: str
    table_name: str
    columns: tuple[tuple[str, str], ...]
    dropped: bool
    synced_version: int = 0  # the table version whose partitions the target points at
    syncing_version: int = 0  # above synced_version: a run set out to sync up to it and died part way


@dataclass(frozen=True)
class Removals:
    """Partitions reap removed from a table the target pointed at: the dates to drop and the rows to delete
    once dropped."""

    ids: tuple[int, ...]
    dates: tuple[dt.date, ...]
    partitions: tuple[tuple[dt.date, str], ...] = ()  # (date, values below dt) of each partition to drop


@dataclass(frozen=True)
class PartitionToSync:
    """A published partition whose newest version shows something other than what the target points at."""

    partition_id: int
    table_id: int
    partition_date: dt.date
    file_list_key: str | None  # the newest version's JSON manifest of exactly its files; None: a live
    partition_values: str = ""  # below dt: PartitionRow.partition_values
    # version published before file lists (migration 0006), which only the live directory shows


# --- derived tables ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DerivedRecord:
    id: int
    table: TableRecord  # what readers read: a table of kind "derived"
    definition: DerivedDef
    definition_hash: str
    source_ids: tuple[int, ...]
    create_time: dt.datetime

    @property
    def qualified_name(self) -> str:
        return self.table.qualified_name


@dataclass(frozen=True)
class BuildRecord:
    id: int
    derived_id: int
    name: str  # <reg_key>-<hash>: its objects lie under storage.keys.build_prefix(name)
    reg_key: str
    status: str  # building, published, failed
    kind: str  # full, incremental
    owner_host: str
    owner_pid: int
    start_time: dt.datetime
    heartbeat_time: dt.datetime
    end_time: dt.datetime | None
    source_state: dict | None
    trigger_value: str | None
    dates_written: int
    rows_written: int
    bytes_written: int
    error: str | None


@dataclass(frozen=True)
class BuildPartition:
    """One date a build publishes: the manifest listing its files (none: the date is now empty)."""

    partition_date: dt.date
    manifest_key: str
    row_count: int
    byte_count: int


@dataclass(frozen=True)
class DerivedReapView:
    """What the derived reaper reads in one snapshot."""

    builds: dict[str, BuildRecord]  # every build row, by name
    active: dict[int, dt.datetime | None]  # active build id -> expire time
    referenced: set[int]  # builds a retained partition version was published by
    current: set[int]  # builds the newest version of some live derived table's partition was published by
    live_derived: set[int]  # derived table ids whose table is not dropped


class BuildInProgress(CatalogError):
    """Another build of the derived table is running."""
