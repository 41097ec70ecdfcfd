"""What the reaper reads of the catalog (docs/design.md, "Reap"): every row that references an object, read in one
snapshot, and the scope of an incremental run. Plain data, with no SQL (catalog.reaping reads them)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReapTable:
    id: int
    physical_schema_name: str
    physical_table_name: str
    timezone: str
    ttl_days: int | None
    dropped_time: dt.datetime | None

    @property
    def physical_name(self) -> str:
        return f"{self.physical_schema_name}.{self.physical_table_name}"


@dataclass(frozen=True)
class ReapPartition:
    id: int
    table_id: int
    partition_date: dt.date
    partition_values: str = ""


@dataclass(frozen=True)
class ReapVersion:
    id: int
    partition_id: int
    version: int
    commit_op: str
    live_watermark: int | None
    manifest_key: str | None
    covered_upper: int | None
    created_at: dt.datetime
    file_list_key: str | None = None  # the manifest of exactly its files (== manifest_key when merged/updated)
    table_version: int | None = None  # the table version it was published in (tags name table versions)


@dataclass(frozen=True)
class ReapRange:
    partition_id: int
    lower: int | None
    upper: int
    object_key: str | None


@dataclass(frozen=True)
class ReapSmallObject:
    id: int
    partition_id: int
    delayed: bool
    content_length: int


@dataclass
class ReapView:
    """Everything that references an object, read in one snapshot."""

    tables: list[ReapTable] = field(default_factory=list)
    partitions: list[ReapPartition] = field(default_factory=list)
    versions: list[ReapVersion] = field(default_factory=list)
    ranges: list[ReapRange] = field(default_factory=list)
    small_objects: list[ReapSmallObject] = field(default_factory=list)
    running_jobs: list[tuple[int, dt.datetime | None]] = field(default_factory=list)  # (partition id, heartbeat)
    error_keys: set[str] = field(default_factory=set)
    instances: dict[str, bool] = field(default_factory=dict)  # instance key -> is_self
    scope: set[int] | None = None  # an incremental view: the partitions it holds (None: every partition)
    tagged: dict[int, set[int]] = field(default_factory=dict)  # table id -> the table versions its tags name
    max_small_object_id: int = 0


@dataclass(frozen=True)
class ReapScope:
    """What an incremental reap reads: partitions changed at or after `since` (versions, merge ranges, merge
    job ends, new partitions), small object ids above `small_above`, partitions with a version created in
    `crossing` (its predecessor left the retention window since the last run), partitions dated before
    their table's TTL cutoff, and every partition with a merge job row."""

    since: dt.datetime
    crossing: tuple[dt.datetime, dt.datetime]
    small_above: int
    ttl_cutoff: Callable[[ReapTable], dt.date | None]  # partitions dated before it are past the table's TTL
    table_id: int | None = None  # set: every partition of this table, and nothing else (a reap of one table)


@dataclass(frozen=True)
class ReapRun:
    run_time: dt.datetime
    full_sweep: bool
    retention: int
    max_small_object_id: int
