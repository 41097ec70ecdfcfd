"""Building a derived table: pin the sources, run the query, write the dates it changes under a new build
name, and publish them in one catalog transaction (docs/design.md)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass, field

from siltlake.catalog import BuildPartition, BuildRecord, DerivedRecord, TableRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.derived.define import siltlake_type
from siltlake.derived.writer import WRITTEN, BuildWriter
from siltlake.errors import SiltError
from siltlake.hosts import local_host
from siltlake.spark import time_bound
from siltlake.storage.keys import build_prefix
from siltlake.storage.manifests import write_manifests

# An incremental build whose result has at most this many rows writes it from the driver: a Spark stage
# (a shuffle by dt and a Python writer stage) costs more than the few dates it rewrites.
DRIVER_ROWS = 1_000_000


@dataclass
class BuildReport:
    table: str
    build: str | None = None
    kind: str = "full"
    dates: list[dt.date] = field(default_factory=list)  # the dates published (rebuilt or emptied)
    rows: int = 0
    bytes: int = 0
    table_version: int | None = None  # the derived table's version it published (None: nothing changed)
    source_versions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


# str(table id) -> {"version": table version, "dates": {partition: version}}, a partition named by its ISO date and,
# for a source with partition_by, its values below dt ("2026-11-20/action=a1/user_id_bucket=3"): each of a date's
# partitions changes on its own.
SourceState = dict[str, dict]


def partition_name(date: dt.date, values: str) -> str:
    """A source partition's name in a SourceState."""
    return f"{date.isoformat()}/{values}" if values else date.isoformat()


def source_state(deployment: Deployment, sources: list[TableRecord]) -> SourceState:
    """Each source's newest published table version and, in it, each partition's version."""
    state: SourceState = {}
    for source in sources:
        _, newest = deployment.catalog.version_reads.table_bounds(source.id)
        views = (
            deployment.catalog.version_reads.reader_snapshot(
                source.id, as_of_version=newest, table_name=source.qualified_name
            )
            if newest
            else []
        )
        state[str(source.id)] = {
            "version": newest,
            "dates": {partition_name(view.partition_date, view.partition_values): view.version for view in views},
        }
    return state


def changed_dates(before: SourceState, now: SourceState) -> set[dt.date]:
    """Dates of which some source's partition version changed (new, rewritten or gone)."""
    changed: set[str] = set()
    for table_id, current in now.items():
        old = before.get(table_id, {}).get("dates", {})
        new = current["dates"]
        changed |= {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}
    return {dt.date.fromisoformat(name.split("/", 1)[0]) for name in changed}


def sources_of(deployment: Deployment, record: DerivedRecord) -> list[TableRecord]:
    live = {table.id: table for table in deployment.catalog.tables.list()}
    missing = [table_id for table_id in record.source_ids if table_id not in live]
    if missing:
        raise SiltError(
            f"{record.qualified_name} reads a table that was dropped; drop the derived table "
            "(`silt derived drop`) or create that table again"
        )
    return [live[table_id] for table_id in record.source_ids]


def _heartbeat(deployment: Deployment, build: BuildRecord, stop: threading.Event) -> None:
    while not stop.wait(deployment.config.derived.heartbeat_interval):
        try:
            deployment.catalog.derived.heartbeat(build.id, utcnow())
        except Exception:  # the catalog is briefly away: the next beat tries again
            continue


def build_lost(deployment: Deployment, build: BuildRecord, now: dt.datetime) -> bool:
    """Whether a running build's builder is gone: its process on this host ended, or it went silent."""
    host = local_host()
    if build.owner_host == host.name and not host.alive(build.owner_pid):
        return True
    return (now - build.heartbeat_time).total_seconds() > deployment.config.derived.build_timeout


def build_derived(
    deployment: Deployment,
    name: str,
    *,
    full: bool = False,
    trigger_value: str | None = None,
    now: dt.datetime | None = None,
) -> BuildReport:
    """Build the derived table `name` once: only the dates whose source partitions changed since the last
    build when it is incremental (and not `full`), every date otherwise. Readers see the previous build
    until the catalog commit that publishes this one."""
    started = time.monotonic()
    catalog = deployment.catalog
    record = catalog.derived.get(name)
    definition = record.definition
    sources = sources_of(deployment, record)
    last = catalog.derived.last_published(record.id)
    state = source_state(deployment, sources)
    # The last published build's source versions, when this build may read only what changed since.
    since = last.source_state if definition.incremental and not full and last is not None else None
    incremental = since is not None
    dates = changed_dates(since, state) if since is not None else None
    report = BuildReport(
        record.qualified_name,
        kind="incremental" if incremental else "full",
        source_versions={s.qualified_name: state[str(s.id)]["version"] for s in sources},
    )
    bound = (deployment.config.sql.write_timeout, "sql.write_timeout", f"building {record.qualified_name}")
    if definition.rule == "sql" and trigger_value is None:
        with time_bound(*bound):
            trigger_value = trigger_value_of(deployment, record)
    given = now is not None
    now = now or utcnow()
    build = catalog.derived.start_build(
        record,
        reg_key=deployment.instance_key,
        catalog_id=catalog.instances.ensure_catalog_id(),
        kind=report.kind,
        host=local_host().name,
        pid=local_host().pid,
        now=now,
        dead=lambda running: build_lost(deployment, running, utcnow()),
    )
    report.build = build.name
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(deployment, build, stop), daemon=True, name="derived-heartbeat")
    beat.start()
    try:
        with time_bound(*bound):  # past it, the build fails below: its objects are deleted, nothing published
            partitions = _write(deployment, record, build, state, sources, dates)
        expire = now + dt.timedelta(seconds=definition.persist_for) if definition.persist_for else None
        # Stamped on the caller's clock (`now` plus the time the build took), as publish's `now`.
        finished = now + dt.timedelta(seconds=time.monotonic() - started)
        report.table_version = catalog.derived.publish_build(
            record,
            build,
            partitions,
            source_state=state,
            trigger_value=trigger_value,
            expire_time=expire,
            now=finished,
            given=given,
        )
    except BaseException as exc:
        catalog.derived.fail_build(build.id, f"{type(exc).__name__}: {exc}", utcnow())
        deployment.lake.delete_prefix(build_prefix(build.name))
        raise
    finally:
        stop.set()
        beat.join()
    report.dates = [p.partition_date for p in partitions]
    report.rows = sum(p.row_count for p in partitions)
    report.bytes = sum(p.byte_count for p in partitions)
    report.seconds = time.monotonic() - started
    return report


def _write(
    deployment: Deployment,
    record: DerivedRecord,
    build: BuildRecord,
    state: SourceState,
    sources: list[TableRecord],
    dates: set[dt.date] | None,
) -> list[BuildPartition]:
    """Run the query over the pinned sources (only `dates` of them, when given), write the build's objects
    and each written date's manifests; return what to publish."""
    from siltlake.read import sql

    spark = deployment.spark()
    reads = {}
    for source in sources:
        newest = state[str(source.id)]["version"]
        reads[source.qualified_name] = {"as_of_version": newest} if newest else {"dates": []}
        if dates is not None:
            reads[source.qualified_name]["dates"] = sorted(dates) if newest else []
    frame = sql(spark, record.definition.query, deployment, reads=reads)
    expected = [("dt", "date"), *((c.name, c.type) for c in record.table.definition.columns)]
    got = sorted((f.name, siltlake_type(f.dataType)) for f in frame.schema.fields)
    if got != sorted(expected):
        raise SiltError(
            f"{record.qualified_name}: the query now returns {', '.join(f'{n} {t}' for n, t in got)}, "
            f"not the table's {', '.join(f'{n} {t}' for n, t in expected)} (a source's columns changed?); "
            "drop the derived table and create it again"
        )
    allowed = frozenset(d.isoformat() for d in dates) if dates is not None else None
    writer = BuildWriter(deployment.lake, build.name, record.table.definition.to_json(), allowed)
    collected = frame.limit(DRIVER_ROWS + 1).toArrow() if dates is not None else None
    if collected is not None and collected.num_rows <= DRIVER_ROWS:
        written = [row for batch in writer(iter(collected.to_batches()), part=0) for row in batch.to_pylist()]
    else:
        tasks = max(1, min(spark.sparkContext.defaultParallelism, len(dates) if dates is not None else 1 << 30))
        written = [row.asDict() for row in frame.repartition(tasks, "dt").mapInArrow(writer, WRITTEN).collect()]
    outside = next((row["outside"] for row in written if row["outside"]), None)
    if outside is not None:
        raise SiltError(
            f"{record.qualified_name}: the query put rows of dt={outside} into a build of the dates whose "
            "sources changed: its dt does not follow its sources' dt, so it cannot build incrementally; "
            "set incremental = false"
        )
    null_dates = max((row["null_dates"] for row in written), default=0)
    if null_dates:
        raise SiltError(f"{record.qualified_name}: the query returned rows whose dt is null; filter them out")
    files: dict[dt.date, list[tuple[str, int, int]]] = {}
    for row in written:
        if row["key"] is not None:
            files.setdefault(dt.date.fromisoformat(row["dt"]), []).append((row["key"], row["bytes"], row["rows"]))
    if dates is None:  # a full build also empties the dates the table holds and the query no longer returns
        dates = set(files) | set(deployment.catalog.derived.newest_versions(record.table.id))
    layout = record.table.layout(deployment.instance_key)
    partitions = []
    for date in sorted(dates):
        objects = sorted(files.get(date, []))
        manifest_key, _ = write_manifests(
            deployment.lake, layout, date, 0, [(key, size) for key, size, _ in objects], label=f"build-{build.id:010d}"
        )
        partitions.append(
            BuildPartition(date, manifest_key, sum(r for _, _, r in objects), sum(size for _, size, _ in objects))
        )
    return partitions


def trigger_value_of(deployment: Deployment, record: DerivedRecord) -> str:
    """The value of the definition's trigger_sql now (its first row's columns, as text)."""
    from siltlake.read import sql

    assert record.definition.trigger_sql is not None
    rows = sql(deployment.spark(), record.definition.trigger_sql, deployment).limit(1).collect()
    return repr(tuple(rows[0])) if rows else "()"
