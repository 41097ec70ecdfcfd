"""Every object key siltlake writes, built here and parsed back here, nowhere else.

Under the lake's root, a deployment writes only below its instance key:

    <instance>/_instance.json                                          the marker: which catalog owns the key
    <instance>/<schema>.<table>/live/dt=<date>/obj-<id>.parquet        a small object (delayed/: a closed day's)
    <instance>/<schema>.<table>/live/dt=<date>/<values>/obj-<id>.parquet  ... of a table with partition_by, whose
                                                                       values path (service=api/...) follows dt
                                                                       in every dated area
    <instance>/<schema>.<table>/merged/dt=<date>/part-<lower>-<upper>.parquet   merge range (lower, upper]
    <instance>/<schema>.<table>/merged/dt=<date>/update-<time>-<token>.parquet  an update's object
    <instance>/<schema>.<table>/manifests/dt=<date>/manifest-<name>.json       a version's JSON manifest
    <instance>/<schema>.<table>/manifests/dt=<date>/symlink-<name>/manifest    ... and its Hive symlink form
    <instance>/<schema>.<table>/errors/staging-<id>.jsonl             a staging object's rejected records
    <instance>/<schema>.<table>/errors/<update label>.jsonl           rows a column's rewrite could not convert
    <instance>/_tmp/<run>/...                                         a run's temporary objects
    <instance>/_iceberg/<schema>.<table>/...                          the Iceberg target's metadata

Derived table builds (docs/design.md) share one area of the lake, as Looker's builds share a scratch schema;
each build's name starts with the reg_key (instance key) of the deployment that wrote it:

    _derived/<reg_key>-<hash>/dt=<date>/part-<n>.parquet                 one build's objects of a date

Keys are derived from ids (zero-padded to 19 digits, so they sort as numbers), so a retried write lands on
the same key. Outside the lake: the staging keys replays write, and a load's error files.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass

INSTANCE_MARKER = "_instance.json"
TEMPORARY_AREA = "_tmp"
ICEBERG_AREA = "_iceberg"
# The areas of a table's prefix.
LIVE, DELAYED, MERGED, MANIFESTS, ERRORS = "live", "delayed", "merged", "manifests", "errors"

_SMALL = re.compile(r"^obj-(\d{19})\.parquet$")
_PART = re.compile(r"^part-(\d{19})-(\d{19})\.parquet$")
_UPDATE = re.compile(r"^(update-[A-Za-z0-9-]+)\.parquet$")
_TABLE_SEGMENT = re.compile(r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$")


DERIVED_AREA = "_derived"
_BUILD_NAME = re.compile(r"^([a-z0-9]{4,32})-([0-9a-f]{16})$")


# --- derived table builds ------------------------------------------------------------------------------


def build_prefix(name: str) -> str:
    """Where one build's objects lie (reap lists and deletes under it)."""
    return f"{DERIVED_AREA}/{name}"


def build_object(name: str, partition_date: dt.date, part: int) -> str:
    return f"{build_prefix(name)}/{partition_segment(partition_date)}/part-{part:05d}.parquet"


def build_reg_key(name: str) -> str | None:
    """The reg_key a build name starts with (None: not a build name)."""
    match = _BUILD_NAME.match(name)
    return match.group(1) if match else None


def build_of(key: str) -> str | None:
    """The build name of an object under the derived area (None: another key)."""
    area, _, rest = key.partition("/")
    return rest.split("/", 1)[0] or None if area == DERIVED_AREA else None


# --- an instance key's own keys ------------------------------------------------------------------------


def instance_prefix(instance_key: str) -> str:
    """The prefix every key of the instance starts with (the listing prefix of reap)."""
    return f"{instance_key}/"


def instance_of(key: str) -> str:
    """The instance key a key lies under (its first segment)."""
    return key.split("/", 1)[0]


def instance_marker(instance_key: str) -> str:
    """The `_instance.json` that says which catalog owns the instance key."""
    return f"{instance_key}/{INSTANCE_MARKER}"


def temporary_area(instance_key: str) -> str:
    """The prefix of every run's temporary objects (an incremental reap lists it whole)."""
    return f"{instance_key}/{TEMPORARY_AREA}/"


def temporary_run(instance_key: str, run_id: str) -> str:
    """The prefix of one run's temporary objects (deleted when the run ends; reap takes what a dead run left)."""
    return f"{instance_key}/{TEMPORARY_AREA}/{run_id}"


def temporary(instance_key: str, run_id: str, name: str) -> str:
    return f"{temporary_run(instance_key, run_id)}/{name}"


def load_job_run(run_id: str, job: str) -> str:
    """The run id of a load job's tasks, whose temporary objects lie under temporary_run(key, it)."""
    return f"{run_id}/{job}"


def place_tag(date: dt.date, values: str = "") -> str:
    """A flat name for one partition (date and values) among a task's temporary objects."""
    if not values:
        return date.isoformat()
    return f"{date.isoformat()}.{hashlib.sha1(values.encode()).hexdigest()[:16]}"


def date_part(date: dt.date, values: str = "") -> str:
    """A task's output for one partition (TableLayout.task_temporary names it)."""
    return f"{place_tag(date, values)}.parquet"


def spilled_run(date: dt.date, number: int, values: str = "") -> str:
    """A sorted run a task spilled for one partition."""
    return f"{place_tag(date, values)}.run-{number:04d}.parquet"


def merge_pass(date: dt.date, number: int, values: str = "") -> str:
    """Sorted runs of one partition merged into one, when there are too many to merge at once."""
    return f"{place_tag(date, values)}.merged-{number:04d}.parquet"


TASK_ERRORS = "errors.jsonl"  # a task's bad records, before they move to the table's error area
TASK_INPUT = "in.parquet"  # a load sql stage's input rows


def load_sql_run(run_id: str, job: str) -> str:
    """The run id of a load job's sql stage, whose temporary objects lie under temporary_run(key, it)."""
    return f"{load_job_run(run_id, job)}/sql"


def iceberg_warehouse(instance_key: str) -> str:
    """The Iceberg target's warehouse: every Iceberg table's metadata lies under it."""
    return f"{instance_key}/{ICEBERG_AREA}"


def iceberg_table_location(instance_key: str, physical_schema: str, physical_table: str) -> str:
    """Where a table's Iceberg metadata lives: by physical name, which renames keep."""
    return f"{iceberg_warehouse(instance_key)}/{table_segment(physical_schema, physical_table)}"


def iceberg_metadata_file(key: str) -> bool:
    """Whether a key under the Iceberg warehouse lies in a table's `metadata/` (metadata files, manifests), not
    beside it (the `data/` an engine's writer fills through the catalog)."""
    parts = key.split("/")
    return len(parts) > 4 and parts[1] == ICEBERG_AREA and parts[3] == "metadata"


def table_segment(physical_schema: str, physical_table: str) -> str:
    """The segment naming a table under the instance key: its physical `schema.table`."""
    return f"{physical_schema}.{physical_table}"


def partition_segment(partition_date: dt.date, values: str = "") -> str:
    """The path of a partition below an area: dt=<date>, then its values path (siltlake.partspec) if any."""
    return f"dt={partition_date.isoformat()}/{values}" if values else f"dt={partition_date.isoformat()}"


def partition_date_of(segment: str) -> dt.date | None:
    """The date of a `dt=YYYY-MM-DD` segment (None: another segment)."""
    if not segment.startswith("dt="):
        return None
    try:
        return dt.date.fromisoformat(segment[3:])
    except ValueError:
        return None


def date_in_key(key: str) -> dt.date | None:
    """The partition date of an object's key or URI: its last dt=<date> directory (None: none; a URI's
    segments may be percent-encoded)."""
    from urllib.parse import unquote

    for segment in reversed(key.split("/")[:-1]):
        if segment.startswith("dt") and (date := partition_date_of(unquote(segment))) is not None:
            return date
    return None


# --- labels and manifests ------------------------------------------------------------------------------


def live_label(version: int, watermark: int) -> str:
    """The manifest label of a live (append) version: its partition version and live watermark, which fix
    its contents (the version before it and the live objects up to the watermark)."""
    return f"live-{version:06d}-{watermark:019d}"


def update_label(started: dt.datetime, token: str) -> str:
    """The label of one update: names its object and its manifests (the token makes it unique)."""
    return f"update-{started:%Y%m%dT%H%M%S}-{token}"


def merge_label(version: int, upper: int) -> str:
    """The manifest label of an upsert's `merge` version: its partition version and the largest small object
    id it lists (its own object's), which fix its contents."""
    return f"merge-{version:06d}-{upper:019d}"


def beyond_label(desired: int, upper: int) -> str:
    """The manifest label of a merged version that lists, after the ranges up to `desired`, an upsert's small
    objects up to `upper`: a name of its own, never the plain merged manifest of `desired`."""
    return f"{desired:019d}-{upper:019d}"


def _manifest_directory(table_prefix: str, partition: str) -> str:
    return f"{table_prefix}/{MANIFESTS}/{partition}"


def _manifest_pair(directory: str, name: str) -> tuple[str, str]:
    return f"{directory}/manifest-{name}.json", f"{directory}/symlink-{name}/manifest"


def symlink_directory(json_manifest_key: str) -> str:
    """The directory of the symlink manifest paired with a JSON manifest (what a Hive partition points at)."""
    directory, name = json_manifest_key.rsplit("/", 1)
    return f"{directory}/symlink-{name.removeprefix('manifest-').removesuffix('.json')}"


def symlink_key(json_manifest_key: str) -> str:
    """The symlink manifest paired with a JSON manifest."""
    return f"{symlink_directory(json_manifest_key)}/manifest"


def merged_directory_of(json_manifest_key: str) -> str:
    """The merged/dt=<date> directory of the partition a JSON manifest belongs to: the manifest's directory
    with its manifests area read as the merged one."""
    segments = json_manifest_key.split("/")
    if len(segments) == 1:
        return json_manifest_key
    for index in range(1, len(segments) - 1):
        if segments[index] == MANIFESTS:
            segments[index] = MERGED
            break
    return "/".join(segments[:-1])


def partition_base(key: str) -> str:
    """The area above an object's dt=<date> directory (a key or a URI): the base path from which an engine's
    partition discovery reads dt."""
    return key.rsplit("/dt=", 1)[0]


def area_glob(area: str) -> str:
    """A glob, relative to the lake's root, of one area's objects in every table (manifests: the JSON ones)."""
    name = "manifest-*.json" if area == MANIFESTS else "*.parquet"
    return f"*/*/{area}/dt=*/{name}"


# --- a table's keys ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableLayout:
    """Keys of one table's objects, all under its prefix `<instance>/<schema>.<table>`."""

    instance_key: str
    physical_schema: str
    physical_table: str

    @property
    def prefix(self) -> str:
        return f"{self.instance_key}/{table_segment(self.physical_schema, self.physical_table)}"

    def small_object(self, partition_date: dt.date, object_id: int, delayed: bool, values: str = "") -> str:
        area = DELAYED if delayed else LIVE
        return f"{self.prefix}/{area}/{partition_segment(partition_date, values)}/obj-{object_id:019d}.parquet"

    def merged_object(self, partition_date: dt.date, lower: int, upper: int, values: str = "") -> str:
        """The object of merge range (lower, upper]: the partition's small objects with lower < id <= upper."""
        segment = partition_segment(partition_date, values)
        return f"{self.prefix}/{MERGED}/{segment}/part-{lower:019d}-{upper:019d}.parquet"

    def update_object(self, partition_date: dt.date, label: str, values: str = "") -> str:
        """The object an update (update_label) writes: the partition's whole new contents."""
        return f"{self.prefix}/{MERGED}/{partition_segment(partition_date, values)}/{label}.parquet"

    def manifest_keys(
        self, partition_date: dt.date, version: int, label: str | None = None, values: str = ""
    ) -> tuple[str, str]:
        """The JSON manifest's key and the symlink manifest's key (inside a directory of its own, which a
        Hive SymlinkTextInputFormat partition can point at). A merged version's manifests are named by the
        upper bound they show; an update's or a live version's by its own label, so they never replace a
        manifest an older version lists."""
        directory = _manifest_directory(self.prefix, partition_segment(partition_date, values))
        return _manifest_pair(directory, label or f"{version:019d}")

    def partition_directories(self, partition_date: dt.date, values: str = "") -> tuple[str, ...]:
        """The directories (with their trailing slash) of one partition's objects in every dated area."""
        segment = partition_segment(partition_date, values)
        return tuple(f"{self.prefix}/{area}/{segment}/" for area in (LIVE, DELAYED, MERGED, MANIFESTS))

    def live_prefix(self) -> str:
        return f"{self.prefix}/{LIVE}"

    def live_partition(self, partition_date: dt.date, values: str = "") -> str:
        """The directory of a partition's live small objects."""
        return f"{self.live_prefix()}/{partition_segment(partition_date, values)}"

    def errors(self, staging_object_id: int) -> str:
        return f"{self.prefix}/{ERRORS}/staging-{staging_object_id:019d}.jsonl"

    def rewrite_errors(self, label: str) -> str:
        """The error file of a column's rewrite (update_label): the rows whose value did not convert."""
        return f"{self.prefix}/{ERRORS}/{label}.jsonl"

    def task_temporary(self, run_id: str, task_id: int, name: str) -> str:
        """A task's temporary object: <instance>/_tmp/<run>/<task id>.<name> (date_part, spilled_run, ...). All of
        a run's tasks write into its one directory: a directory per task cost a mkdir per small object (5% of it)."""
        return temporary(self.instance_key, run_id, f"{task_id:019d}.{name}")

    def iceberg_location(self) -> str:
        return iceberg_table_location(self.instance_key, self.physical_schema, self.physical_table)


# --- parsing keys back ---------------------------------------------------------------------------------


def small_object_id(name: str) -> int | None:
    """The id of a small object's file name `obj-<id>.parquet` (None: another name)."""
    match = _SMALL.match(name)
    return int(match.group(1)) if match else None


def merge_range_of(name: str) -> tuple[int, int] | None:
    """(lower, upper) of a merged object's file name `part-<lower>-<upper>.parquet` (None: another name)."""
    match = _PART.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def update_label_of(name: str) -> str | None:
    """The update label of an update's object file name `<label>.parquet` (None: another name)."""
    match = _UPDATE.match(name)
    return match.group(1) if match else None


def is_table_segment(segment: str) -> bool:
    """Whether a segment under the instance key has the form of a table's `schema.table`."""
    return _TABLE_SEGMENT.match(segment) is not None


@dataclass(frozen=True)
class KeyParts:
    """A key under an instance key, split along the layout: `<owner>/<area>/<partition>/<name>`, the owner
    being a table's `schema.table`, _tmp (then the area is a run id) or _iceberg."""

    instance_key: str
    segments: tuple[str, ...]  # the key's segments after the instance key

    @property
    def owner(self) -> str | None:
        """The first segment, when something lies under it (a key right under the instance key has none)."""
        return self.segments[0] if len(self.segments) > 1 else None

    @property
    def area(self) -> str:
        return self.segments[1] if len(self.segments) > 1 else ""

    @property
    def depth(self) -> int:
        return len(self.segments)

    @property
    def name(self) -> str:
        return self.segments[-1]

    @property
    def partition_date(self) -> dt.date | None:
        """The date of a partition's object (`<table>/<area>/dt=<date>/<name>` and deeper)."""
        return partition_date_of(self.segments[2]) if len(self.segments) > 3 else None

    @property
    def partition_values(self) -> str:
        """The values path below dt of a partition's object ("" for a table partitioned by dt alone): the
        `name=value` segments after dt=<date> (names of objects, manifests and symlink directories have no "=")."""
        values = []
        for segment in self.segments[3:-1]:
            if "=" not in segment:
                break
            values.append(segment)
        return "/".join(values)

    @property
    def directory(self) -> str:
        """The key without its last segment."""
        return "/".join((self.instance_key, *self.segments[:-1]))

    @property
    def is_temporary(self) -> bool:
        return self.segments[0] == TEMPORARY_AREA and len(self.segments) > 1

    @property
    def temporary_run(self) -> str | None:
        """The temporary_run prefix of a run's temporary object (None: no run's)."""
        if self.segments[0] == TEMPORARY_AREA and len(self.segments) > 2:
            return temporary_run(self.instance_key, self.segments[1])
        return None

    def update_manifest_key(self, label: str) -> str:
        """The JSON manifest the update `label` wrote beside this object of its partition's merged area."""
        table_prefix = f"{self.instance_key}/{self.segments[0]}"
        partition = "/".join(filter(None, (self.segments[2], self.partition_values)))
        return _manifest_pair(_manifest_directory(table_prefix, partition), label)[0]


def split_key(instance_key: str, key: str) -> KeyParts | None:
    """The parts of a key under the instance key (None: the key lies elsewhere)."""
    prefix = instance_prefix(instance_key)
    if not key.startswith(prefix):
        return None
    return KeyParts(instance_key, tuple(key[len(prefix) :].split("/")))


# --- outside the lake ----------------------------------------------------------------------------------


def replay_staging_key(schema_name: str, table_name: str, received: dt.datetime, digest: str) -> str:
    """The staging key a replay stages an error file's records under (a shipper `replay` for the table)."""
    return f"replay.{schema_name}.{table_name}/{received:%Y/%m/%d}/replay-{digest}.jsonl"


def load_error_file(base_uri: str, run_id: str, job: str, index: int) -> str:
    """The file a load task writes its bad records to, under the job's error.path (a URI)."""
    return f"{base_uri.rstrip('/')}/{run_id}/{job}/task-{index:05d}.jsonl"
