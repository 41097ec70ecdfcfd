"""The `silt` command line."""

from __future__ import annotations

import functools
import gc
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from siltlake.cli.output import Column, activity, console, emit, format_option, grid, out, write_json
from siltlake.errors import DEBUG_VARIABLE

# Only what `silt --help` needs is imported here; the commands import the rest (pandas, pyarrow, pyspark,
# SQLAlchemy and Alembic cost about a second of CPU at start-up).
if TYPE_CHECKING:
    from siltlake.deployment import Deployment
    from siltlake.merge import MergeReport
    from siltlake.stream import StreamReport


def friendly(command: Callable) -> Callable:
    """End a command's failure in one line on stderr, exit 2 if the user can fix it and 1 if it is a bug;
    with --debug (or SILTLAKE_DEBUG=1) the full trace comes first."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (click.ClickException, click.exceptions.Abort, click.exceptions.Exit):
            raise  # usage errors and Ctrl-C at a prompt: click reports them
        except Exception as exc:
            fail(exc)

    return wrapper


def described(exc: Exception, catalog: str | None = None):  # noqa: ANN201 - a cli.failures.Failure
    """What to say about a failure; with --debug its full trace goes to stderr first."""
    from siltlake.cli.failures import describe, print_trace
    from siltlake.errors import debug_enabled

    if debug_enabled():
        print_trace(exc)
    return describe(exc, catalog)


def fail(exc: Exception) -> None:
    context = click.get_current_context(silent=True)
    state = context.find_root().obj if context is not None else None
    deployment = state.get("deployment") if isinstance(state, dict) else None
    failure = described(exc, repr(deployment.catalog) if deployment is not None else None)
    console.print(f"[bold red]error:[/] {escape(failure.message)}", highlight=False, soft_wrap=True)
    sys.exit(failure.status)


def retrying(what: str, to: Console = console) -> Callable[[Exception, float], None]:
    """A daemon's on_error: each failed round in one line (the trace too with --debug); the loop retries."""

    def on_error(exc: Exception, wait: float) -> None:
        to.print(f"[red]{what}[/] ({escape(described(exc).message)}); retrying in {wait:.0f}s", highlight=False,
                 soft_wrap=True)

    return on_error


@contextmanager
def _importing() -> Iterator[None]:
    """Import the catalog, configuration and SQLAlchemy without the cyclic GC: the first import allocates
    hundreds of thousands of objects that live as long as the process, and the collections it triggers
    (reclaiming nothing) cost a read-only command such as `silt status` about a fifth of its CPU time."""
    if "siltlake.deployment" in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # the modules just imported: later collections need not scan them again
        gc.enable()


@functools.cache
def _command_deployment() -> type[Deployment]:
    """Deployment that says "starting Spark…" on stderr while its session starts (a JVM start takes tens of
    seconds). Built on first use: siltlake.deployment is not imported for `silt --help`."""
    from siltlake.deployment import Deployment

    class CommandDeployment(Deployment):
        def spark(self):  # noqa: ANN201 - a SparkSession
            if self._spark is not None:
                return self._spark
            with activity("starting Spark…"):
                return super().spark()

    return CommandDeployment


def deployment_of(context: click.Context) -> Deployment:
    root = context.find_root()
    state = root.obj
    if "deployment" not in state:
        with _importing():
            from siltlake.config import load_config

            deployment_class = _command_deployment()
        state["deployment"] = deployment_class.open(load_config(state.get("config")))
        # Commands run in-process (the demos) would otherwise keep catalog connections until a gc cycle.
        root.call_on_close(state["deployment"].close)
    return state["deployment"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "-c", type=click.Path(dir_okay=False), default=None,
              help="Configuration file (default: $SILTLAKE_CONFIG or ./siltlake.toml, else built-in defaults).")
@click.option("--debug", is_flag=True, help=f"On failure print the full trace (Python, and Java for Spark errors) "
              f"and Spark's error log; ${DEBUG_VARIABLE}=1 does the same.")
@click.version_option(package_name="siltlake")
@click.pass_context
def main(context: click.Context, config: str | None, debug: bool) -> None:
    """siltlake: small log batches in, date-partitioned Parquet tables out."""
    if debug:
        os.environ[DEBUG_VARIABLE] = "1"  # Spark sessions started later read it too
    context.obj = {"config": config}


@main.command()
@click.option("--claim", is_flag=True, help="Take the instance key over from the catalog its _instance.json names "
              "(after moving the catalog, or once that catalog is gone); refused while it is reachable and still "
              "registers the key.")
@click.pass_context
@friendly
def init(context: click.Context, claim: bool) -> None:
    """Create or upgrade the catalog and storage roots; register this deployment's instance key."""
    deployment = deployment_of(context)
    key = deployment.init(claim=claim)
    # Password masked: init output ends up in terminals' scrollback and in logs.
    catalog = deployment.catalog
    console.print(f"catalog   {catalog.masked_url} at revision {catalog.revision()}", highlight=False)
    console.print(f"lake      {deployment.lake.root}")
    console.print(f"staging   {deployment.staging.root}")
    console.print(f"instance  {key}   (config: {deployment.config.source})")


# --- tables -------------------------------------------------------------------------------------

@main.group("table")
def table_group() -> None:
    """Create, inspect and change tables."""


@table_group.command("create")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.pass_context
@friendly
def table_create(context: click.Context, file: str) -> None:
    """Create a table from a definition file (TOML, or YAML)."""
    from siltlake.tabledef import load_table_file

    record = deployment_of(context).catalog.tables.create(load_table_file(file))
    console.print(f"created table {record.qualified_name} "
                  f"(objects under {record.physical_schema_name}.{record.physical_table_name})")


def format_duration(seconds: int) -> str:
    from siltlake.tabledef import format_duration as as_written  # pydantic: not for `silt --help`

    return as_written(seconds)


TABLE_COLUMNS = (
    Column("table"), Column("time_column", "time column"), Column("timezone", "time zone"),
    Column("merge_interval_seconds", "merge interval", format_duration), Column("columns", right=True),
    Column("created_at", "created (UTC)"),
)


@table_group.command("list")
@format_option()
@click.pass_context
@friendly
def table_list(context: click.Context, fmt: str) -> None:
    """List tables."""
    records = deployment_of(context).catalog.tables.list()
    emit(fmt, TABLE_COLUMNS, [
        (record.definition.qualified_name, record.definition.time_column, record.definition.timezone,
         record.definition.merge_interval, len(record.definition.columns),
         record.create_time.isoformat(sep=" ", timespec="seconds"))
        for record in records], empty="no tables yet; create one with `silt table create FILE`")


@table_group.command("show")
@click.argument("name")
@format_option()
@click.pass_context
@friendly
def table_show(context: click.Context, name: str, fmt: str) -> None:
    """Show a table's definition and its partitions.

    With --format json: one object, the definition as stored (durations in seconds) and the partitions;
    with --format csv: the partitions, a row each."""
    deployment = deployment_of(context)
    record = deployment.catalog.tables.get(name)
    d = record.definition
    partitions = partition_rows(deployment, record.id)
    if fmt == "json":
        write_json({"table": d.qualified_name,
                    "physical": f"{record.physical_schema_name}.{record.physical_table_name}",
                    "definition": d.model_dump(mode="json", by_alias=True), "partitions": partitions})
        return
    if fmt == "csv":
        emit(fmt, PARTITION_COLUMNS, partitions)
        return
    settings = [("physical", f"{record.physical_schema_name}.{record.physical_table_name}"),
                ("time column", d.time_column), ("time zone", d.timezone),
                ("merge interval", format_duration(d.merge_interval)), ("format", d.format), ("codec", d.codec),
                ("error policy", d.error_policy), ("unknown fields", d.unknown_fields), ("epoch unit", d.epoch_unit),
                ("ttl", f"{d.ttl_days} days" if d.ttl_days else "none")]
    out.print(Text(d.qualified_name, style="bold"))
    out.print(Text("  ".join(f"{label}: {value}" for label, value in settings)))
    out.print(grid([Column("column"), Column("type"), Column("nullable"), Column("source field")],
                   [(c.name, c.type, "yes" if c.nullable else "no", c.source_field) for c in d.columns]))
    emit(fmt, PARTITION_COLUMNS, partitions, title="partitions", empty="no partitions yet")


def _size(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return ""


def _count(value: int) -> str:
    return f"{value:,}"


PARTITION_COLUMNS = (
    Column("date", "dt"), Column("state"),
    *(Column(key, header, _count, right=True) for key, header in (
        ("live_objects", "live\nobjects"), ("live_rows", "live\nrows"), ("delayed_objects", "delayed\nobjects"),
        ("delayed_rows", "delayed\nrows"))),
    Column("bytes", "size", _size, right=True),
    *(Column(key, header, _count, right=True) for key, header in (
        ("merged_objects", "merged\nobjects"), ("merged_rows", "merged\nrows"))),
)


def partition_rows(deployment: Deployment, table_id: int) -> list[dict[str, Any]]:
    """A table's partitions with their object and row counts, as `table show` lists them."""
    rows = []
    for row in deployment.catalog.partitions.summary(table_id):
        closed = row.pop("closed")
        rows.append({"date": row.pop("date").isoformat(), "state": "closed" if closed else "open", **row})
    return rows


@table_group.command("add-column")
@click.argument("name")
@click.argument("column")
@click.argument("type_name", metavar="TYPE")
@click.option("--source", default=None, help="Input field name, if it differs from the column name.")
@click.pass_context
@friendly
def table_add_column(context: click.Context, name: str, column: str, type_name: str,
                     source: str | None) -> None:
    """Add a nullable column (older objects read it as null)."""
    from siltlake.tabledef import Column

    new_column = Column.from_mapping({"name": column, "type": type_name, "source": source})
    deployment_of(context).catalog.tables.add_column(name, new_column)
    console.print(f"added column {column} {new_column.type} to {name}")


@table_group.command("alter-column")
@click.argument("name")
@click.argument("column")
@click.argument("type_name", metavar="TYPE")
@click.pass_context
@friendly
def table_alter_column(context: click.Context, name: str, column: str, type_name: str) -> None:
    """Widen a column's type: int to bigint, float to double (older objects read as the new type)."""
    record = deployment_of(context).catalog.tables.alter_column_type(name, column, type_name)
    console.print(f"column {column} of {name} is now {record.definition.column(column).type}")


@table_group.command("rename")
@click.argument("name")
@click.argument("new_name")
@click.pass_context
@friendly
def table_rename(context: click.Context, name: str, new_name: str) -> None:
    """Rename a table (logical name only: objects stay under the physical name)."""
    deployment_of(context).catalog.tables.rename(name, new_name)
    console.print(f"renamed {name} to {new_name}")


@table_group.command("drop")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@friendly
def table_drop(context: click.Context, name: str, yes: bool) -> None:
    """Drop a table; its objects are removed later by reap."""
    if not yes:
        click.confirm(f"drop table {name}?", abort=True)
    deployment_of(context).catalog.tables.drop(name)
    console.print(f"dropped {name}")


# --- stream -------------------------------------------------------------------------------------

class _RichProgress:
    """A stream progress (siltlake.stream.Progress) on a rich bar."""

    def __init__(self, progress: Progress, label: str) -> None:
        self.progress = progress
        self.label = label
        self.task_id = None

    def start(self, total: int) -> None:
        self.task_id = self.progress.add_task(self.label, total=total)

    def advance(self, count: int) -> None:
        if self.task_id is not None:
            self.progress.advance(self.task_id, count)


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


def print_stream_report(report: StreamReport, staging_root: str, verbose: bool = True) -> None:
    def short(uri: str) -> str:
        return uri[len(staging_root) + 1:] if uri.startswith(staging_root + "/") else uri

    working = report.seconds - report.spark_start_seconds
    rate = report.records_loaded / working if working > 0 else 0.0
    startup = f", of which Spark start-up {report.spark_start_seconds:.1f}s" if report.spark_start_seconds > 1 else ""
    console.print(
        f"[bold]stream[/]: {report.registered} new staging objects, {report.processed} processed, "
        f"{report.records_loaded:,} records loaded, {report.bad_records:,} bad records, "
        f"{len(report.unknown)} unknown objects, {report.live_objects} live + {report.delayed_objects} delayed "
        f"small objects, {report.seconds:.1f}s{startup} ({rate:,.0f} records/s)",
        highlight=False,
    )
    if report.skipped_duplicates:
        console.print(f"  {report.skipped_duplicates} objects were already committed by another process")
    if report.redelivered:
        console.print(f"  {report.redelivered} staging objects put again after they were registered: ignored")
    for uri, loaded, size in report.changed_reputs:
        console.print(f"  [yellow]changed re-put[/] {short(uri)} is now {size:,} bytes but was loaded at {loaded:,}: "
                      "a key is loaded once, so the new bytes are NOT loaded; put new data under a new key",
                      highlight=False)
    if not verbose:
        return
    for uri, reason in report.unknown:
        console.print(f"  [yellow]unknown[/] {short(uri)}: {reason}", highlight=False)
    for uri, sample in report.bad_samples[:5]:
        console.print(f"  [yellow]bad record[/] {short(uri)} {sample}", highlight=False)
    if len(report.bad_samples) > 5:
        console.print(f"  ... {report.bad_records - 5} more bad records; with error_policy = \"file\" a "
                      "table keeps them all (`silt errors list`)", highlight=False)
    for uri, reason in report.failed:
        console.print(f"  [red]failed, will retry[/] {short(uri)}: {reason}", highlight=False)


@main.command()
@click.option("--once", is_flag=True, help="Process every pending staging object, then exit.")
@click.option("--interval", type=float, default=None, help="Seconds between polls (default: stream.poll_interval).")
@click.option("--json", "as_json", is_flag=True, help="With --once: print the report as JSON on stdout.")
@click.pass_context
@friendly
def stream(context: click.Context, once: bool, interval: float | None, as_json: bool) -> None:
    """Turn staging objects into live and delayed small objects."""
    from siltlake.stream import stream_forever, stream_once

    deployment = deployment_of(context)
    if once:
        with progress_bar() as bar:
            report = stream_once(deployment, _RichProgress(bar, "staging objects"))
        if as_json:
            out.print_json(json.dumps(report.__dict__, default=str))
        else:
            print_stream_report(report, deployment.staging.root)
        if report.failed:
            sys.exit(1)
        return
    stop = threading.Event()
    console.print("streaming; Ctrl-C stops after the current round")
    try:
        stream_forever(
            deployment, stop, lambda report: print_stream_report(report, deployment.staging.root), interval,
            on_error=retrying("stream round failed"),
        )
    except KeyboardInterrupt:
        stop.set()
        console.print("stopped")


# --- merge and status ------------------------------------------------------------------------------

class _RichMergeProgress:
    """A merge progress (siltlake.merge.MergeProgress) on a bar whose total grows as jobs are claimed
    (continuing jobs add to it)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.total = 0
        self.task_id = progress.add_task("merge jobs", total=0)

    def found(self, jobs: int) -> None:
        self.total += jobs
        self.progress.update(self.task_id, total=self.total)

    def done(self, jobs: int) -> None:
        self.progress.advance(self.task_id, jobs)


def print_merge_report(report: MergeReport) -> None:
    modes = ", ".join(f"{mode} {count}" for mode, count in sorted(report.modes.items())) or "none"
    startup = f", of which Spark start-up {report.spark_start_seconds:.1f}s" if report.spark_start_seconds > 1 else ""
    console.print(
        f"[bold]merge[/]: {report.claimed} jobs in {report.stages} Spark stages: {report.finished} finished, "
        f"{report.continuing} continuing, {report.failed} failed ({report.parked} parked), "
        f"{report.taken_over} taken over from dead workers; {report.objects_in:,} small objects "
        f"({_size(report.bytes_in)}) into {_size(report.bytes_out)}, {report.rows_out:,} rows; "
        f"modes: {modes}; {report.seconds:.1f}s{startup}",
        highlight=False,
    )
    for table, date, error in report.errors:
        console.print(f"  [red]failed[/] {table} {date}: {error}", highlight=False, soft_wrap=True)
    if report.parked:
        console.print("  parked jobs stay in `silt status`; fix the cause, then `silt merge --retry-failed`",
                      highlight=False)


def print_merge_schedule(scheduled: int, next_due, now) -> None:  # noqa: ANN001 - naive UTC datetimes
    """After `merge --once`: the jobs left for later, so "0 jobs" right after a stream is not a riddle."""
    if not scheduled:
        console.print("no merge jobs scheduled for later", highlight=False)
        return
    console.print(f"{scheduled} jobs scheduled for later (merge_interval or retry backoff), next due "
                  f"{next_due:%Y-%m-%d %H:%M:%S} UTC (in {_age((next_due - now).total_seconds())}); "
                  "`silt merge --once --now` merges them now", highlight=False)


@main.command()
@click.option("--once", is_flag=True, help="Run every due job (and the jobs they continue into), then exit.")
@click.option("--now", "now_text", is_flag=False, flag_value="", default=None, metavar="[TIME]",
              help="With --once. Alone: first make every scheduled job due now (jobs wait merge_interval after a "
                   "partition's first object, failed ones their retry backoff), so this run merges them. With an "
                   "ISO-8601 TIME: run as if it were that time, as publish --now (e.g. 2018-08-24T02:00:00Z).")
@click.option("--slots", type=int, default=None, help="Jobs run at once (default: merge.slots).")
@click.option("--table", "table_name", default=None, help="Only this table's jobs (schema.table).")
@click.option("--retry-failed", is_flag=True, help="First put parked (failed) jobs back in the queue.")
@click.option("--json", "as_json", is_flag=True, help="With --once: print the report as JSON on stdout.")
@click.pass_context
@friendly
def merge(context: click.Context, once: bool, now_text: str | None, slots: int | None, table_name: str | None,
          retry_failed: bool, as_json: bool) -> None:
    """Merge each day's small objects into a few large ones: the merge job queue's worker."""
    from siltlake.clock import utcnow
    from siltlake.merge import MergeWorker

    if now_text is not None and not once:
        raise click.UsageError("--now works with --once")
    now = parse_now(now_text) if now_text else None
    clock = (lambda: now) if now is not None else utcnow
    deployment = deployment_of(context)
    deployment.catalog.check_ready()
    table_ids = [deployment.catalog.tables.get(table_name).id] if table_name else None
    if retry_failed:
        count = 0
        for table_id in table_ids or [None]:
            count += deployment.catalog.merge_queue.retry_parked(clock(), table_id)
        console.print(f"{count} parked jobs queued again")
    if slots is not None and slots < 1:
        raise click.BadParameter("must be at least 1", param_hint="--slots")
    if once:
        if now_text == "":
            advanced = deployment.catalog.merge_queue.advance(clock(), table_ids)
            console.print(f"{advanced} scheduled jobs made due now", highlight=False)
        with progress_bar() as bar:
            worker = MergeWorker(deployment, slots=slots, table_ids=table_ids, progress=_RichMergeProgress(bar),
                                 clock=clock)
            report = worker.run(once=True)
        finished_at = clock()
        scheduled, next_due = deployment.catalog.merge_queue.scheduled(finished_at, table_ids)
        if as_json:
            out.print_json(json.dumps({**report.__dict__, "scheduled": scheduled, "next_due": next_due},
                                      default=str))
        else:
            print_merge_report(report)
            print_merge_schedule(scheduled, next_due, finished_at)
        if report.failed:
            sys.exit(1)
        return
    stop = threading.Event()
    # SIGTERM (a service manager stopping us) finishes the running jobs like Ctrl-C, rather than leaving
    # claims to go stale until another worker takes them over.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker = MergeWorker(deployment, slots=slots, table_ids=table_ids)
    console.print(f"merging as {worker.owner} with {worker.slots} slots; Ctrl-C stops after the running jobs")
    last = {"claimed": 0}

    def on_round(report: MergeReport) -> None:
        if report.claimed != last["claimed"]:
            last["claimed"] = report.claimed
            print_merge_report(report)

    try:
        worker.run(stop, on_round=on_round, on_error=retrying("catalog unreachable"))
    except KeyboardInterrupt:
        stop.set()
    on_round(worker.report)  # jobs finished since the last report
    console.print("stopped")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


_PARTITION_STATES = ("new", "live", "closed", "switched")
_JOB_STATES = ("scheduled", "due", "running", "stale", "continuing", "failed")
STATUS_COLUMNS = (
    Column("table"), *(Column(f"partitions_{state}") for state in _PARTITION_STATES),
    Column("unmerged_objects"), Column("unmerged_bytes"), Column("oldest_unmerged_age_seconds"),
    *(Column(f"jobs_{state}") for state in _JOB_STATES),
)


def _status_row(row: dict[str, Any]) -> list[Any]:
    """A status entry flattened to STATUS_COLUMNS (CSV has no nesting; the parked jobs' errors are in the JSON)."""
    return [row["table"], *(row["partitions"][state] for state in _PARTITION_STATES), row["unmerged_objects"],
            row["unmerged_bytes"], row["oldest_unmerged_age_seconds"], *(row["jobs"][state] for state in _JOB_STATES)]


@main.command()
@format_option(json_flag=True)
@click.pass_context
@friendly
def status(context: click.Context, fmt: str) -> None:
    """Per table: partitions by state, unmerged small objects, merge jobs by state, parked failures; then
    staging objects whose processing is failing.

    With --format json: one object, {"tables": [...], "failing_staging_objects": [...]}; with --format csv: a
    row per table (the parked jobs' errors and the failing staging objects only in JSON and the table)."""
    from dataclasses import asdict

    deployment = deployment_of(context)  # first: it imports the catalog with the start-up GC pause
    deployment.catalog.check_ready()
    from siltlake.clock import utcnow
    from siltlake.hosts import local_host

    rows = deployment.catalog.merge_queue.status(utcnow(), deployment.config.merge.job_timeout, local_host())
    failing = deployment.catalog.staging.failing()
    if fmt == "json":
        write_json({"tables": rows, "failing_staging_objects": [asdict(f) for f in failing]})
        return
    if fmt == "csv":
        emit(fmt, STATUS_COLUMNS, [_status_row(row) for row in rows])
        return
    if not rows:
        out.print("no tables; create one with `silt table create`")
        return
    for row in rows:
        parts, jobs = row["partitions"], row["jobs"]
        failed = f"[red]{jobs['failed']} failed[/]" if jobs["failed"] else "0 failed"
        out.print(f"[bold]{row['table']}[/]", highlight=False)
        out.print(f"  partitions  {parts['new']} new, {parts['live']} live, {parts['closed']} closed, "
                  f"{parts['switched']} switched", highlight=False)
        out.print(f"  unmerged    {row['unmerged_objects']:,} small objects ({_size(row['unmerged_bytes'])}), "
                  f"oldest {_age(row['oldest_unmerged_age_seconds'])}", highlight=False)
        out.print(f"  merge jobs  {jobs['scheduled']} scheduled, {jobs['due']} due, {jobs['running']} running, "
                  f"{jobs['stale']} stale, {jobs['continuing']} continuing, {failed}", highlight=False)
        for failed in row["failed_jobs"]:
            out.print(f"  [red]parked[/] {failed['date']} (job {failed['job_id']}, "
                      f"{failed['attempts']} attempts): {failed['error']}", highlight=False, soft_wrap=True)
    if failing:
        limit = deployment.config.stream.max_failures
        out.print(f"[bold]failing staging objects[/] (at {limit} failures, stream.max_failures, an object moves "
                  "to `silt unknown list`)", highlight=False)
        for item in failing:
            out.print(f"  [red]{item.failure_count} of {limit} failures[/] {item.uri} ({item.table_name}, last "
                      f"{item.last_failure_time:%Y-%m-%d %H:%M:%S} UTC): {item.last_failure}",
                      highlight=False, soft_wrap=True)


# --- publish and history -----------------------------------------------------------------------------

def parse_now(value: str | None):  # noqa: ANN201 - a naive UTC datetime or None
    """--now: an ISO-8601 time (Z or an offset; naive means UTC) as naive UTC."""
    if value is None:
        return None
    from siltlake.clock import parse_time

    try:
        return parse_time(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO-8601 time such as 2018-08-24T02:00:00Z",
                                 param_hint="--now") from None


def print_publish_report(report) -> None:  # noqa: ANN001 - a PublishReport
    console.print(
        f"[bold]publish[/]: {len(report.switched)} partitions switched, {len(report.closed)} closed, "
        f"{len(report.live_versions)} live versions, {len(report.merged_versions)} merged versions"
        + (f", {report.skipped_merged} merged versions left for the next run (merged meanwhile)"
           if report.skipped_merged else "")
        + (f", {len(report.external)} external catalog changes" if report.external else "")
        + f"; {report.seconds:.1f}s",
        highlight=False,
    )
    for error in report.target_errors:  # retried by the next run
        console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)


@main.command()
@click.option("--once", is_flag=True, help="One run of the five steps, then exit.")
@click.option("--now", "now_text", default=None, help="Use this time as now (ISO-8601, e.g. 2018-08-24T02:00:00Z).")
@click.option("--interval", type=float, default=None, help="Seconds between runs (default: publish.interval).")
@click.pass_context
@friendly
def publish(context: click.Context, once: bool, now_text: str | None, interval: float | None) -> None:
    """Make new data visible to readers: switch merged days to their merged objects, close ended days,
    publish new live and merged versions (and sync external catalogs)."""
    from siltlake.polling import poll_forever
    from siltlake.publish import publish_once

    deployment = deployment_of(context)
    now = parse_now(now_text)
    if once:
        with activity("publishing: switching merged days, closing ended days, publishing versions…"):
            report = publish_once(deployment, now=now)
        print_publish_report(report)
        if report.target_errors:
            sys.exit(1)
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    wait = deployment.config.publish.interval if interval is None else interval
    console.print(f"publishing every {wait:g}s; Ctrl-C stops")
    try:
        poll_forever(lambda: publish_once(deployment, now=now), stop, wait, print_publish_report,
                     on_error=retrying("publish run failed"))
    except KeyboardInterrupt:
        stop.set()
    console.print("stopped")


@main.command("run")
@click.pass_context
@friendly
def run_command(context: click.Context) -> None:
    """Single host: stream, merge and publish in one process on one SparkSession, with a live status.

    Intervals come from stream.poll_interval, merge.poll_interval and publish.interval. Ctrl-C or
    SIGTERM stops after the current stream wave and the running merge jobs; a second Ctrl-C quits now.
    """
    from siltlake.run.terminal import run_in_terminal

    run_in_terminal(deployment_of(context), console)


HISTORY_COLUMNS = (
    Column("date", "dt"), Column("version", right=True), Column("table_version", "table version", right=True),
    Column("op"), Column("shows"),
    Column("created_at", "created (UTC)"), Column("rows", show=_count, right=True),
    Column("bytes", "size", _size, right=True),
)


@main.command()
@click.argument("name")
@click.option("--date", "date_text", default=None, help="Only this partition (YYYY-MM-DD).")
@format_option()
@click.pass_context
@friendly
def history(context: click.Context, name: str, date_text: str | None, fmt: str) -> None:
    """A table's or one partition's published versions."""
    import datetime as dt

    from siltlake.lake import Lake, NoSuchPartition

    wanted = None
    if date_text is not None:
        try:
            wanted = dt.date.fromisoformat(date_text)
        except ValueError:
            raise click.BadParameter(f"{date_text!r} is not a date such as 2026-11-20", param_hint="--date") from None
    try:
        rows = Lake(deployment_of(context)).table(name).history(date=wanted)
    except NoSuchPartition as exc:
        raise click.BadParameter(str(exc), param_hint="--date") from None
    emit(fmt, HISTORY_COLUMNS, rows, empty=f"{name} has no published versions yet; run `silt publish --once`")


@main.command()
@click.argument("name")
@click.option("--where", "where", required=True, help="Spark SQL predicate over the table's columns, e.g. "
              "\"user_id = 42\"; rows where it is true are deleted.")
@click.option("--date", "dates", multiple=True, help="A partition (YYYY-MM-DD); repeat for several.")
@click.option("--all-dates", is_flag=True, help="Every partition of the table.")
@click.option("--now", "now_text", default=None, help="Stamp the versions with this time (ISO-8601), as publish --now.")
@click.pass_context
@friendly
def delete(context: click.Context, name: str, where: str, dates: tuple[str, ...], all_dates: bool,
           now_text: str | None) -> None:
    """Delete the rows matching --where (e.g. an erasure request): one `update` version per partition."""
    import datetime as dt

    from siltlake.publish import delete_rows

    if bool(dates) == all_dates:
        raise click.UsageError("give the partitions: --date YYYY-MM-DD (repeatable) or --all-dates")
    now = parse_now(now_text)
    deployment = deployment_of(context)
    record = deployment.catalog.tables.get(name)
    if all_dates:
        wanted = [p.partition_date for p in deployment.catalog.partitions.list(record.id)]
    else:
        try:
            wanted = [dt.date.fromisoformat(text) for text in dates]
        except ValueError as exc:
            raise click.BadParameter(f"{exc}; write dates as 2026-11-20", param_hint="--date") from None
    outcome = Table("dt", "rows before", "deleted", "version", box=box.SIMPLE_HEAD)
    with activity(f"deleting from {name}…") as step:
        for done, date in enumerate(wanted):
            step(f"deleting from {name} dt={date} ({done + 1} of {len(wanted)} partitions)…")
            report = delete_rows(deployment, name, date, where, now=now)
            outcome.add_row(date.isoformat(), f"{report.rows_before:,}", f"{report.rows_before - report.rows_after:,}",
                            str(report.version.version) if report.version else "unchanged")
    out.print(outcome)


def _duration(value: str | None, option: str) -> int | None:
    from siltlake.errors import DefinitionError
    from siltlake.tabledef import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(int(value) if value.isdigit() else value, option)
    except DefinitionError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def print_reap_report(report) -> None:  # noqa: ANN001 - a ReapReport
    from siltlake.reap import REASONS

    title = "would delete (dry run)" if report.dry_run else "deleted"
    by_reason = Table("reason", "objects", "size", "catalog rows", box=box.SIMPLE_HEAD,
                      title=f"reap {report.instance_key} at {report.now:%Y-%m-%d %H:%M:%S} UTC: {title}")
    for name, label, rows_of in REASONS:
        totals = report.reasons[name]
        by_reason.add_row(label, f"{totals.objects:,}", _size(totals.bytes),
                          f"{totals.rows:,} {rows_of}" if rows_of else "")
    by_reason.add_row("[bold]total[/]", f"[bold]{report.objects:,}[/]", f"[bold]{_size(report.bytes)}[/]", "")
    out.print(by_reason)
    kept = [f"{count:,} {what}" for count, what in (
        (report.kept_young, "unreferenced objects inside the grace period"),
        (report.kept_running, "merged objects a running merge job may commit"),
        (report.kept_unreadable, "merged objects of a partition whose retained manifest is unreadable")) if count]
    console.print(f"listed {report.listed:,} objects; kept {', '.join(kept) or 'nothing unreferenced'}; catalog "
                  f"{report.catalog_seconds:.2f}s, listing {report.list_seconds:.2f}s, deleting "
                  f"{report.delete_seconds:.2f}s", highlight=False)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    for key, error in report.failed[:20]:
        console.print(f"[bold red]not deleted:[/] {key}: {error} (the next reap retries it)", highlight=False,
                      soft_wrap=True)


@main.command()
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@click.option("--now", "now_text", default=None, help="Use this time as now (ISO-8601, e.g. 2018-08-24T02:00:00Z).")
@click.option("--retention", default=None, help="Keep superseded versions this long (default reap.retention, 7d).")
@click.option("--grace", default=None, help="Unreferenced objects younger than this are kept (default reap.grace, "
              "3d).")
@click.option("--force", is_flag=True, help="Allow a retention below 1d or a grace below 1h.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
@click.pass_context
@friendly
def reap(context: click.Context, dry_run: bool, now_text: str | None, retention: str | None, grace: str | None,
         force: bool, as_json: bool) -> None:
    """Delete covered small objects, superseded merged objects, expired versions, orphans, partitions past
    their TTL and dropped tables: only objects under this deployment's instance key, never another
    deployment's sharing the storage."""
    from siltlake.reap import reap_once

    deployment = deployment_of(context)
    with activity("reaping: reading the catalog, listing the lake, deleting what nothing needs…"):
        report = reap_once(deployment, parse_now(now_text), dry_run=dry_run,
                           retention=_duration(retention, "--retention"), grace=_duration(grace, "--grace"),
                           force=force)
    if as_json:
        out.print_json(json.dumps(report.as_dict()))
    else:
        print_reap_report(report)
    if report.failed:
        sys.exit(1)


# --- unknown objects and bad records ---------------------------------------------------------------

@main.group("unknown")
def unknown_group() -> None:
    """Staging objects that map to no table or cannot be read."""


UNKNOWN_COLUMNS = (
    Column("uri"), Column("bytes", "size", _size, right=True), Column("table", show=lambda name: name or "-"),
    Column("detected_at", "detected (UTC)"), Column("reason"),
)


@unknown_group.command("list")
@format_option()
@click.pass_context
@friendly
def unknown_list(context: click.Context, fmt: str) -> None:
    """List them with the reason (`silt unknown replay` streams them again)."""
    rows = deployment_of(context).catalog.staging.unknown()
    emit(fmt, UNKNOWN_COLUMNS, [
        (row.uri, row.size or 0, row.table_name, row.detect_time.isoformat(sep=" ", timespec="seconds"), row.reason)
        for row in rows], empty="no unknown staging objects")
    if rows and fmt == "table":
        out.print(f"{len(rows)} unknown staging objects")


@unknown_group.command("replay")
@click.argument("uris", nargs=-1)
@click.option("--all", "replay_all", is_flag=True, help="Replay every unknown object.")
@click.pass_context
@friendly
def unknown_replay(context: click.Context, uris: tuple[str, ...], replay_all: bool) -> None:
    """Forget unknown objects so the next stream run looks at them again (after a fix or a new table)."""
    if not uris and not replay_all:
        raise click.UsageError("name the URIs to replay, or pass --all")
    forgotten = deployment_of(context).catalog.staging.forget_unknown(None if replay_all else list(uris))
    console.print(f"{len(forgotten)} objects will be streamed again by the next `silt stream` run")


@main.group("errors")
def errors_group() -> None:
    """Bad records kept by tables whose error_policy is 'file'."""


@errors_group.command("list")
@click.argument("name")
@format_option()
@click.pass_context
@friendly
def errors_list(context: click.Context, name: str, fmt: str) -> None:
    """List a table's error files and their bad record counts."""
    from siltlake.stream.replay import error_files

    deployment = deployment_of(context)
    files = error_files(deployment, name)
    emit(fmt, (Column("error_file", "error file"), Column("bad_records", "bad records", _count, right=True)),
         [(deployment.lake.uri(key), count) for key, count in files], empty=f"no kept bad records for {name}")


@errors_group.command("replay")
@click.argument("name")
@click.pass_context
@friendly
def errors_replay(context: click.Context, name: str) -> None:
    """Stage the (edited) raw records of a table's error files again, one staging object per error file."""
    from siltlake.stream.replay import replay_errors

    result = replay_errors(deployment_of(context), name)
    console.print(f"staged {result.records} records as {len(result.staging_uris)} staging objects; "
                  f"{result.kept} records that are still not JSON objects stay in their error files. "
                  "Run `silt stream --once` to load them.")


# --- sql --------------------------------------------------------------------------------------------

def _sql_value(value: Any) -> str:
    return "NULL" if value is None else str(value)


@main.command("sql")
@click.argument("query")
@format_option()
@click.option("--limit", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Rows to fetch at most; a note on stderr says when the result had more.")
@click.pass_context
@friendly
def sql_command(context: click.Context, query: str, fmt: str, limit: int) -> None:
    """Run Spark SQL over the tables, named schema.table."""
    from siltlake.read import sql

    deployment = deployment_of(context)
    spark = deployment.spark()
    with activity("running the query…"):
        frame = sql(spark, query, deployment)
        rows = frame.limit(limit + 1).collect()  # one more than shown: whether the limit cut the result
    emit(fmt, [Column(name, show=_sql_value) for name in frame.columns], rows[:limit])
    if len(rows) > limit:
        console.print(f"showing the first {limit:,} row{'' if limit == 1 else 's'}: the result has more "
                      "(--limit sets how many)", highlight=False)


from siltlake.cli import load as _load_commands  # noqa: E402,F401 - registers guess, load, cleanup

if __name__ == "__main__":
    main()
