"""The load driver: plan tasks, run them as one Spark stage, keep a resume state, commit once.

All jobs of a config commit together in one catalog transaction, after every task of every job has
succeeded (see docs/design.md, "Load").
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from siltlake.catalog import TableRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import ConfigError, NotFoundError, SiltError
from siltlake.load.commit import commit_run
from siltlake.load.config import JobConfig, LoadConfig
from siltlake.load.state import new_state, one_run_per_state, read_state, write_state
from siltlake.load.task import LoadTask, LoadTaskReport, output_columns, run_load_task
from siltlake.logs import event
from siltlake.spark import run_tasks
from siltlake.storage.filesystem import open_filesystem
from siltlake.storage.keys import load_error_file, load_sql_run, temporary_run
from siltlake.tabledef import Column, TableDef

log = logging.getLogger(__name__)

# A Spark SQL type name (DataType.simpleString) -> the siltlake column type an `out.create` table gets.
SPARK_TYPES = {
    "bigint": "bigint",
    "int": "int",
    "smallint": "int",
    "tinyint": "int",
    "double": "double",
    "float": "float",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "string": "string",
    "date": "date",
}


class LoadFailed(SiltError):
    """Some tasks failed: their resume state was written (or not, then the message says why)."""


@dataclass
class JobStats:
    name: str
    table: str
    records_in: int = 0
    loaded: int = 0
    bad: int = 0
    bytes_in: int = 0
    tasks: int = 0
    ran: int = 0
    seconds: float = 0.0
    bad_samples: list[str] = field(default_factory=list)
    error_files: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.name} -> {self.table}: {self.records_in:,} records in, {self.loaded:,} loaded, "
            f"{self.bad:,} bad, {self.bytes_in / 1e6:,.1f} MB, {self.tasks} tasks ({self.ran} run), "
            f"{self.seconds:.1f} s"
        )


@dataclass
class LoadReport:
    run_id: str
    jobs: list[JobStats]
    committed: bool
    already_committed: bool = False
    failed: list[tuple[str, str]] = field(default_factory=list)
    state_path: str | None = None


class LoadProgress:
    """What the driver tells a progress display (tasks and input bytes done, records read so far); the
    default shows nothing."""

    def start(self, tasks: int, total_bytes: int) -> None: ...

    def advance(self, tasks: int, input_bytes: int, records: int) -> None: ...


# --------------------------------------------------------------------------------------------
# Planning: the target table and the columns rows are coerced to


def _table_columns(job: JobConfig, table: TableDef) -> list[Column]:
    """The target's columns, each read from the record field of its own name (filters already renamed)."""
    produced = output_columns(job)
    if produced is not None and job.sql is None:
        names = {name for name, _ in produced}
        extra = [name for name in names if name not in {c.name for c in table.columns}]
        if extra:
            raise ConfigError(
                f"out.table: {table.qualified_name} has no column {sorted(extra)[0]}; drop or rename "
                "it with a filter, or add the column (silt table add-column)"
            )
        missing = [
            c.name for c in table.columns if c.name not in names and (not c.nullable or c.name == table.time_column)
        ]
        if missing:
            raise ConfigError(
                f"out.table: the input has no column {missing[0]}, which {table.qualified_name} "
                "requires; rename an input column to it"
            )
    return [Column(name=c.name, type=c.type, nullable=c.nullable, field_id=c.field_id) for c in table.columns]


def _create_definition(job: JobConfig, columns: list[tuple[str, str]]) -> TableDef:
    schema_name, name = job.out.table.split(".")
    return TableDef.from_mapping(
        {
            "schema": schema_name,
            "name": name,
            "time_column": job.out.time_column,
            "timezone": job.out.timezone,
            "columns": [{"name": n, "type": t, "nullable": n != job.out.time_column} for n, t in columns],
        },
        f"out.table {job.out.table} (create)",
    )


def _existing_target(deployment: Deployment, job: JobConfig) -> TableRecord | None:
    """The target table, or None when it does not exist yet and out.create asks to create it."""
    try:
        table = deployment.catalog.tables.get(job.out.table)
    except NotFoundError:
        if not job.out.create:
            raise ConfigError(
                f"out.table: no table {job.out.table}; create it (silt table create) or set out.create: true"
            ) from None
        return None
    if table.definition.kind == "derived":
        raise ConfigError(
            f"out.table: {job.out.table} is a derived table, built from its query "
            "(`silt derived build`); load into the table it reads instead"
        )
    return table


def _target(deployment: Deployment, job: JobConfig, columns: list[tuple[str, str]] | None) -> TableRecord:
    table = _existing_target(deployment, job)
    if table is not None:
        return table
    if columns is None:
        raise ConfigError("parser.columns: out.create needs the parser columns (silt guess writes them)")
    return deployment.catalog.tables.create(_create_definition(job, columns))


def _error_uri(job: JobConfig, run_id: str, job_name: str, index: int) -> str | None:
    base = job.error.path
    if base is None:  # error type file, and only it, has a path (ErrorConfig checks)
        return None
    if "://" not in base:
        base = "file://" + str(Path(base).expanduser().absolute())
    return load_error_file(base, run_id, job_name, index)


# --------------------------------------------------------------------------------------------
# The sql filter: a Spark stage over the parsed rows of every task of the job


def _sql_stage(
    deployment: Deployment, name: str, job: JobConfig, table: TableRecord, reports: list[dict], run_id: str
) -> list[dict]:
    from pyspark import TaskContext

    from siltlake.load.task import row_table
    from siltlake.read.objects import parquet_frame
    from siltlake.records.writer import ObjectWriter
    from siltlake.storage.keys import TableLayout

    sql = job.sql
    assert sql is not None  # this stage runs for a job with a sql filter only
    spark = deployment.spark()
    lake = deployment.lake
    view = f"silt_load_in_{uuid.uuid4().hex[:8]}"
    parquet_frame(spark, lake, [report["in_key"] for report in reports]).createOrReplaceTempView(view)
    # The view is `in` in the user's query; Spark temp views are session-wide, so ours gets a unique name.
    query = re.sub(r"(?i)\b(from|join)\s+`?in`?\b", lambda m: f"{m.group(1)} {view}", sql)
    try:
        frame = spark.sql(query)
    except Exception as exc:  # an AnalysisException or ParseException: the user's query
        raise ConfigError(f"jobs.{name}.filters (sql): {str(exc).splitlines()[0]}") from None
    definition = table.definition
    known = {c.name for c in definition.columns}
    extra = [c for c in frame.columns if c not in known]
    if extra:
        raise ConfigError(
            f"jobs.{name}.filters (sql): the query returns column {extra[0]}, which "
            f"{table.qualified_name} does not have; leave it out or rename it"
        )
    if definition.time_column not in frame.columns:
        raise ConfigError(
            f"jobs.{name}.filters (sql): the query must return the event-time column {definition.time_column}"
        )
    columns = [Column(name=c.name, type=c.type, nullable=c.nullable, field_id=c.field_id) for c in definition.columns]
    table_json = json.dumps([c.model_dump() for c in columns])
    dt_field_id, partition_by = definition.dt_field_id, definition.partition_by
    settings = deployment.config.stream
    instance_key, time_column, timezone, codec = (
        deployment.instance_key,
        definition.time_column,
        definition.timezone,
        definition.codec,
    )
    staging_run = load_sql_run(run_id, name)
    lake.delete_prefix(temporary_run(instance_key, staging_run))  # a previous attempt of this stage

    def write(batches):  # runs in Spark tasks
        import pyarrow as pa
        import pyarrow.compute as pc

        target = row_table(
            [Column.model_validate(c) for c in json.loads(table_json)],
            time_column,
            timezone,
            codec,
            dt_field_id,
            partition_by,
        )
        schema = target.arrow_schema()
        context = TaskContext.get()
        assert context is not None  # in a Spark task
        index = context.partitionId()
        writer = ObjectWriter(
            target, lake, TableLayout(instance_key, "load", "rows"), staging_run, index, settings.spill_bytes
        )
        rows_in = bad = 0
        for batch in batches:
            rows_in += batch.num_rows
            arrays = []
            for field_ in schema:
                if field_.name in batch.schema.names:
                    arrays.append(pc.cast(batch.column(field_.name), field_.type))
                else:
                    arrays.append(pa.nulls(batch.num_rows, field_.type))
            good = pc.is_valid(arrays[schema.get_field_index(time_column)])
            bad += batch.num_rows - (pc.sum(good).as_py() or 0)
            # Filtered on the event time first: the table schema's time column is not nullable.
            writer.add(pa.Table.from_arrays([pc.filter(a, good) for a in arrays], schema=schema))
        parts = writer.finish()
        report = {
            "index": index,
            "rows_in": rows_in,
            "bad_records": bad,
            "parts": parts,
            "upload_start_time": dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat(),
        }
        yield pa.RecordBatch.from_pylist([{"report": json.dumps(report)}])

    results = frame.mapInArrow(write, "report string").collect()
    return sorted((json.loads(row.report) for row in results), key=lambda r: r["index"])


# --------------------------------------------------------------------------------------------
# The run


def _plan_job(deployment: Deployment, name: str, job: JobConfig) -> tuple[TableRecord | None, list[Column], str]:
    """(target table, columns tasks coerce to, their time column: "" before a sql filter). The table is None for
    a sql filter's job whose table does not exist yet: it is created from the query once the parsed rows exist."""
    produced = output_columns(job)
    if job.sql is not None:
        if produced is None:
            raise ConfigError(f"jobs.{name}.parser.columns: a sql filter needs the parser's columns (the view in)")
        columns = [Column(name=n, type=t) for n, t in produced]
        # Without a table yet, it is created from the query's result schema once the parsed rows exist.
        return _existing_target(deployment, job), columns, ""
    table = _target(deployment, job, produced)
    return table, _table_columns(job, table.definition), table.definition.time_column


def _create_from_sql(deployment: Deployment, name: str, job: JobConfig, reports: list[dict]) -> TableRecord:
    from siltlake.read.objects import parquet_frame

    sql = job.sql
    assert sql is not None  # only a job with a sql filter creates its table from the query
    spark = deployment.spark()
    view = f"silt_load_in_{uuid.uuid4().hex[:8]}"
    parquet_frame(spark, deployment.lake, [report["in_key"] for report in reports]).createOrReplaceTempView(view)
    query = re.sub(r"(?i)\b(from|join)\s+`?in`?\b", lambda m: f"{m.group(1)} {view}", sql)
    try:
        schema = spark.sql(query).schema
    except Exception as exc:
        raise ConfigError(f"jobs.{name}.filters (sql): {str(exc).splitlines()[0]}") from None
    columns = []
    for item in schema.fields:
        kind = SPARK_TYPES.get(item.dataType.simpleString())
        if kind is None:
            raise ConfigError(
                f"jobs.{name}.filters (sql): column {item.name} has type "
                f"{item.dataType.simpleString()}, which a table cannot store; cast it"
            )
        columns.append((item.name, kind))
    return deployment.catalog.tables.create(_create_definition(job, columns))


def load(
    deployment: Deployment,
    config: LoadConfig,
    *,
    state_path: str | None = None,
    commit: bool = True,
    progress: LoadProgress | None = None,
) -> LoadReport:
    """Run (or resume) a load; commit everything in one transaction once every task succeeded."""
    with one_run_per_state(Path(state_path) if state_path else None):
        return _load(deployment, config, state_path=state_path, commit=commit, progress=progress)


def _load(
    deployment: Deployment, config: LoadConfig, *, state_path: str | None, commit: bool, progress: LoadProgress | None
) -> LoadReport:
    deployment.catalog.check_ready()
    deployment.check_instance("load")
    path = Path(state_path) if state_path else None
    state = read_state(path) if path else None
    if state is not None:
        if state["config_hash"] != config.digest():
            raise ConfigError(
                f"{path} was written for a different config (the config changed since); run "
                f"`silt cleanup CONFIG --resume-state {path}` with the old config, or give a new "
                "--resume-state path"
            )
        if state["instance_key"] != deployment.instance_key:
            raise ConfigError(f"{path} belongs to another deployment (instance key {state['instance_key']})")
    else:
        state = new_state(deployment, config)
    if not commit and path is None:
        raise ConfigError("--no-commit keeps the tasks' output for a later commit: give --resume-state FILE")
    run_id = state["run_id"]
    stats = {name: JobStats(name, job.out.table) for name, job in config.jobs.items()}
    if state["committed"]:
        _fill_stats(state, stats)
        return LoadReport(
            run_id, list(stats.values()), committed=True, already_committed=True, state_path=str(path) if path else None
        )

    plans = {name: _plan_job(deployment, name, job) for name, job in config.jobs.items()}
    settings = deployment.config.stream
    tasks: list[LoadTask] = []
    weights: list[int] = []
    for name, job in config.jobs.items():
        table, columns, time_column = plans[name]
        definition = table.definition if table is not None else None
        columns_json = json.dumps([c.model_dump() for c in columns])
        for index, (item, report) in enumerate(
            zip(state["jobs"][name]["tasks"], state["jobs"][name]["reports"], strict=True)
        ):
            if report is not None:
                continue
            tasks.append(
                LoadTask(
                    job=name,
                    index=index,
                    uri=item["uri"],
                    job_json=job.model_dump_json(by_alias=True, exclude_unset=True),
                    columns_json=columns_json,
                    time_column=time_column,
                    timezone=definition.timezone if definition else job.out.timezone,
                    codec=definition.codec if definition else "zstd",
                    run_id=run_id,
                    lake=deployment.lake,
                    instance_key=deployment.instance_key,
                    error_uri=_error_uri(job, run_id, name, index),
                    batch_rows=settings.batch_rows,
                    spill_bytes=settings.spill_bytes,
                    offset=item.get("offset", 0),
                    length=item.get("length"),
                    dt_field_id=definition.dt_field_id if definition and time_column else None,
                    partition_by=definition.partition_by if definition and time_column else (),
                )
            )
            weights.append(item["size"])
    started = time.monotonic()
    progress = progress or LoadProgress()
    progress.start(len(tasks), sum(weights))
    # Spark says how many tasks finished, not which (run_tasks counts the smallest first): bytes likewise.
    smallest, done = sorted(weights), [0]

    results: list[LoadTaskReport] = []
    if tasks:
        # Tasks report their records through an accumulator, which the driver sees as each Spark task ends.
        records_read = deployment.spark().sparkContext.accumulator(0)

        def counted(task: LoadTask) -> LoadTaskReport:
            result = run_load_task(task)
            records_read.add(_records_in(result))
            return result

        def advance(count: int) -> None:
            progress.advance(count, sum(smallest[done[0] : done[0] + count]), records_read.value)
            done[0] += count

        results = run_tasks(
            deployment.spark(),
            counted,
            tasks,
            weights=weights,
            tasks_per_core=settings.tasks_per_core,
            on_progress=advance,
        )
    if results:  # the exact count, whatever the accumulator had merged when the last task was seen ending
        progress.advance(0, 0, sum(_records_in(result) for result in results))
    seconds = time.monotonic() - started
    failed: list[tuple[str, str]] = []
    aborted = [r for r in results if r["status"] == "aborted"]
    for result in results:
        job_state = state["jobs"][result["job"]]
        stats[result["job"]].ran += 1
        if result["status"] == "ok":
            job_state["reports"][result["index"]] = result
        else:
            failed.append((result["uri"], result["reason"]))
    if aborted:
        _discard(deployment, state)
        raise LoadFailed(f"load aborted (error type abort): {aborted[0]['reason']}; nothing was committed")

    # The sql filter's stage runs once every parse task of its job succeeded.
    if not failed:
        for name, job in config.jobs.items():
            job_state = state["jobs"][name]
            if job.sql is None or job_state["sql_reports"] is not None:
                continue
            table = plans[name][0] or _create_from_sql(deployment, name, job, job_state["reports"])
            plans[name] = (table, *plans[name][1:])
            sql_started = time.monotonic()
            job_state["sql_reports"] = _sql_stage(deployment, name, job, table, job_state["reports"], run_id)
            seconds += time.monotonic() - sql_started
    for item in stats.values():
        item.seconds = seconds
    _fill_stats(state, stats)

    if failed:
        event(log, "load.tasks_failed", logging.WARNING, run_id=run_id, failed_tasks=len(failed), reason=failed[0][1])
        succeeded = sum(r is not None for j in state["jobs"].values() for r in j["reports"])
        if path is not None and succeeded:
            write_state(path, state)
            raise LoadFailed(
                f"{len(failed)} task(s) failed, e.g. {failed[0][0]}: {failed[0][1]}; the other tasks' "
                f"output is kept in {path}: fix the cause and run the same command again (only the "
                "failed tasks run), or `silt cleanup` it"
            )
        _discard(deployment, state)
        hint = (
            "run the same command again"
            if path is not None
            else "run again with --resume-state FILE to keep the succeeded tasks' output"
        )
        raise LoadFailed(f"{len(failed)} task(s) failed, e.g. {failed[0][0]}: {failed[0][1]}; nothing was kept: {hint}")
    if not commit:
        assert path is not None  # --no-commit needs --resume-state (refused above without)
        write_state(path, state)
        event(log, "load.prepared", run_id=run_id, jobs=len(stats), state=str(path))
        return LoadReport(run_id, list(stats.values()), committed=False, state_path=str(path))
    commit_run(deployment, config, state, {name: plan[0] for name, plan in plans.items()})
    state["committed"] = True
    state["committed_time"] = utcnow().isoformat()
    if path is not None:
        write_state(path, state)
    deployment.lake.delete_prefix(temporary_run(deployment.instance_key, run_id))
    event(log, "load.committed", run_id=run_id, jobs=len(stats))
    return LoadReport(run_id, list(stats.values()), committed=True, state_path=str(path) if path else None)


def _records_in(report: LoadTaskReport) -> int:
    """The records a task read: none counted for one that failed."""
    return report["records_in"] if report["status"] == "ok" else 0


def _fill_stats(state: dict, stats: dict[str, JobStats]) -> None:
    for name, job_state in state["jobs"].items():
        item = stats[name]
        reports = job_state["reports"]
        item.tasks = len(reports)
        done = [r for r in reports if r is not None]
        item.records_in = sum(r["records_in"] for r in done)
        item.bad = sum(r["bad_records"] for r in done)
        item.bytes_in = sum(r["bytes_in"] for r in done)
        item.bad_samples = [s for r in done for s in r["bad_samples"]][:5]
        item.error_files = [r["error_file"] for r in done if r.get("error_file")]
        if job_state.get("sql_reports") is not None:
            sql = job_state["sql_reports"]
            item.bad += sum(r["bad_records"] for r in sql)
            item.loaded = sum(p["rows"] for r in sql for p in r["parts"])
        else:
            item.loaded = sum(p["rows"] for r in done for p in r.get("parts", []))


def _discard(deployment: Deployment, state: dict, dry_run: bool = False) -> list[str]:
    """Delete a run's temporary objects and error files; returns what was removed (dry_run: what would be)."""
    removed = []
    prefix = temporary_run(deployment.instance_key, state["run_id"])
    keys = [info.key for info in deployment.lake.list(prefix)]
    if not dry_run:
        deployment.lake.delete_prefix(prefix)
    removed += [deployment.lake.uri(key) for key in keys]
    for job_state in state["jobs"].values():
        for report in job_state["reports"]:
            if report and report.get("error_file"):
                filesystem, inner = open_filesystem(report["error_file"])
                if dry_run:
                    from pyarrow.fs import FileType

                    if filesystem.get_file_info(inner).type != FileType.NotFound:
                        removed.append(report["error_file"])
                    continue
                try:
                    filesystem.delete_file(inner)
                    removed.append(report["error_file"])
                except FileNotFoundError:
                    pass
    return removed


def cleanup(deployment: Deployment, config: LoadConfig, state_path: str, dry_run: bool = False) -> list[str]:
    """Remove what an abandoned (never committed) run wrote, and its resume state; the list of what it removed
    (dry_run: would remove, removing nothing)."""
    with one_run_per_state(Path(state_path)):
        return _cleanup(deployment, config, Path(state_path), dry_run)


def _cleanup(deployment: Deployment, config: LoadConfig, path: Path, dry_run: bool) -> list[str]:
    state = read_state(path)
    if state is None:
        raise ConfigError(f"{path} does not exist: there is nothing to clean up")
    if state["config_hash"] != config.digest():
        raise ConfigError(f"{path} was written for a different config; give the config the load ran with")
    if state["committed"]:
        raise ConfigError(
            f"{path} records a committed load ({state['run_id']}): its data is in the tables and "
            "there is nothing to clean up"
        )
    removed = _discard(deployment, state, dry_run)
    if not dry_run:
        path.unlink()
    removed.append(str(path))
    return removed
