"""`make demo`: two simulated days of web access logs through stream, merge and publish.

Everything happens in build/demo (wiped first) with no configuration file, so the defaults apply:
SQLite catalog, local files, Spark local[*]. A simulated clock delivers the sample's staging objects in
the order their shippers wrote them, and publish runs get that clock with --now. Spark work (stream,
merge, queries) runs on one SparkSession through the Python API (shown as `>>>` lines); catalog commands
go through the `silt` command line (shown as `$` lines), in this process too, so no step pays for a
Python or JVM start of its own. Every result is checked against the sample, and the demo exits with
status 1 at the first mismatch.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from rich import box
from rich.table import Table

from siltlake.cli.output import out
from siltlake.demo.sample import SampleSummary, generate_sample, write_table_definition
from siltlake.storage import keys

if TYPE_CHECKING:
    from siltlake.deployment import Deployment

console = out  # the CLI's: piped into a log, its tables keep their width
DEMO_DIR = Path("build/demo")
DEMO_HISTORY_INTERVAL = 1800  # one dashboard sample per half hour of the simulated days
START = dt.date(2026, 11, 19)
TOKYO = ZoneInfo("Asia/Tokyo")
LATE_SERVER = "web03"  # its shipper is down from 23:00 on day 1 until 02:00 on day 2
S3 = os.environ.get("SILTLAKE_DEMO_S3", "") not in ("", "0")  # make demo S3=1: the roots in a local S3 bucket
DERIVED_TOML = """name = "web.daily_methods"
query = "SELECT dt, method, count(*) AS hits, sum(bytes) AS bytes FROM web.access GROUP BY dt, method"
incremental = true
"""
DERIVED_QUERY = "SELECT dt, method, hits, bytes FROM web.daily_methods ORDER BY dt, method"
QUERY = (
    "SELECT dt, count(*) AS records, count(DISTINCT host) AS hosts, count(DISTINCT user_id) AS users, "
    "sum(bytes) AS bytes FROM web.access GROUP BY dt ORDER BY dt"
)


def jst(day: int, hour: int, minute: int = 0) -> dt.datetime:
    """A wall-clock time in Tokyo on simulated day 1 or 2 (or 3: the night after day 2)."""
    return dt.datetime.combine(START + dt.timedelta(days=day - 1), dt.time(hour, minute), tzinfo=TOKYO)


def fail(message: str) -> None:
    console.print(f"[bold red]demo check failed[/]: {message}", highlight=False)
    sys.exit(1)


class Demo:
    def __init__(self, sample: SampleSummary) -> None:
        self.sample = sample
        self.incoming = Path("incoming")  # what the shippers will write, by key, until its time comes
        self.delivered: set[str] = set()
        self._deployment: Deployment | None = None
        self.timeline: list[tuple[str, dict[str, int], dict[str, int]]] = []
        self.sampled_until: dt.datetime | None = None

    # --- showing steps ------------------------------------------------------------------------------

    @staticmethod
    def step(title: str, why: str) -> None:
        console.rule(f"[bold]{title}")
        console.print(why, style="italic", highlight=False)

    @staticmethod
    def silt(*args: str) -> None:
        from siltlake.cli import main as silt_main

        shown = " ".join(f'"{a}"' if " " in a else a for a in args)
        console.print(f"\n[bold cyan]$ silt {shown}[/]")
        try:
            silt_main.main(list(args), prog_name="silt", standalone_mode=False)
        except SystemExit as exc:  # an error the command reported (status 2)
            if exc.code:
                fail(f"`silt {shown}` exited with status {exc.code}")

    @staticmethod
    def python(code: str, call: Callable[[], Any]) -> Any:
        console.print(f"\n[bold cyan]>>> {code}[/]")
        return call()

    # --- the simulated world ------------------------------------------------------------------------

    def deliver(self, until: dt.datetime, hold: Callable[[str, dt.datetime], bool] = lambda key, at: False) -> int:
        """Move every object shipped before `until` (and not held back) from incoming/ into the staging root."""
        staging = Path(".siltlake/staging")
        count = 0
        for key, shipped in sorted(self.sample.shipped.items(), key=lambda item: item[1]):
            if key in self.delivered or shipped >= until or hold(key, shipped):
                continue
            if S3:  # a shipper's PUT into the staging bucket
                with self.deployment.staging.open_output(key) as out:
                    out.write((self.incoming / key).read_bytes())
                (self.incoming / key).unlink()
            else:
                move_shipped(self.incoming / key, staging / key, shipped)
            self.delivered.add(key)
            count += 1
        console.print(
            f"[dim]{count} staging objects arrived (shipped before {until:%m-%d %H:%M} JST); "
            f"{len(self.sample.shipped) - len(self.delivered)} still to come[/]",
            highlight=False,
        )
        return count

    def open_deployment(self) -> None:
        from siltlake.config import load_config
        from siltlake.deployment import Deployment

        self._deployment = Deployment.open(load_config())

    @property
    def deployment(self) -> Deployment:
        """The deployment open_deployment opened: every step after the sample's comes after it."""
        assert self._deployment is not None
        return self._deployment

    def publish(self, at: dt.datetime) -> None:
        """`silt publish --once --now AT`, then the dashboard's sample of the half hour ending at AT (what a
        daemon's sampler would have recorded had the simulated day been lived through)."""
        from siltlake.clock import to_naive_utc
        from siltlake.observe.history import record

        self.silt("publish", "--once", "--now", at.isoformat())
        record(self.deployment, now=to_naive_utc(at), interval=DEMO_HISTORY_INTERVAL)
        self.sampled_until = at

    # --- Spark work in this process -----------------------------------------------------------------

    def stream(self) -> Any:
        from siltlake.cli.reports import print_stream_report
        from siltlake.stream import stream_once

        report = self.python("stream_once(deployment)", lambda: stream_once(self.deployment))
        print_stream_report(report, self.deployment.staging.root, verbose=False)
        if report.failed:
            fail(f"{len(report.failed)} staging objects failed: {report.failed[:3]}")
        return report

    def merge(self, at: dt.datetime) -> None:
        """Merge on the simulated clock: the jobs the stream scheduled (merge_interval 0s) are due at `at`."""
        from siltlake.cli.reports import print_merge_report
        from siltlake.clock import to_naive_utc
        from siltlake.merge import merge_once

        now = to_naive_utc(at)
        self.deployment.catalog.merge_queue.advance(now)
        report = self.python(
            f"merge_once(deployment, clock=lambda: {now!r})", lambda: merge_once(self.deployment, clock=lambda: now)
        )
        print_merge_report(report)
        if report.failed:
            fail(f"{report.failed} merge jobs failed: {report.errors[:3]}")

    def query(self, label: str) -> dict[str, tuple]:
        """Run QUERY through siltlake.read.sql, show it, record it with the file counts; rows by dt."""
        from siltlake.read import sql

        rows = self.python(
            "sql(spark, QUERY, deployment).collect()",
            lambda: sql(self.deployment.spark(), QUERY, self.deployment).collect(),
        )
        result = {str(row["dt"]): tuple(row)[1:] for row in rows}
        grid = Table("dt", "records", "hosts", "users", "bytes", box=box.SIMPLE_HEAD, title=label, title_justify="left")
        for date, values in result.items():
            grid.add_row(date, *(f"{value:,}" for value in values))
        console.print(grid)
        self.timeline.append(
            (label, file_counts(self.deployment), {date: values[0] for date, values in result.items()})
        )
        return result

    def derived_rows(self, label: str, totals: dict[str, tuple]) -> dict[tuple[str, str], tuple]:
        """The derived table's rows, shown, and checked against QUERY's result `totals` of the same moment:
        per day, the hits add up to its records and the bytes to its bytes."""
        from siltlake.read import sql

        rows = self.python(
            f"sql(spark, {DERIVED_QUERY!r}, deployment).collect()",
            lambda: sql(self.deployment.spark(), DERIVED_QUERY, self.deployment).collect(),
        )
        built = {(str(r["dt"]), r["method"]): (r["hits"], r["bytes"]) for r in rows}
        sums = {
            date: (
                sum(v[0] for k, v in built.items() if k[0] == date),
                sum(v[1] for k, v in built.items() if k[0] == date),
            )
            for date in {k[0] for k in built}
        }
        expected = {date: (values[0], values[3]) for date, values in totals.items()}
        if sums != expected:
            fail(f"web.daily_methods adds up to {sums} (hits, bytes per day), web.access holds {expected}")
        grid = Table("dt", "method", "hits", "bytes", box=box.SIMPLE_HEAD, title=label, title_justify="left")
        for (date, method), values in sorted(built.items()):
            grid.add_row(date, method, *(f"{value:,}" for value in values))
        console.print(grid)
        return built

    def read_as_of(self, when: dt.datetime) -> dict[str, int]:
        from siltlake.read import table

        def count() -> dict[str, int]:
            frame = table(self.deployment.spark(), "web.access", self.deployment, as_of=when)
            return {str(row["dt"]): row["count"] for row in frame.groupBy("dt").count().collect()}

        found = self.python(
            f'table(spark, "web.access", deployment, as_of=datetime.fromisoformat('
            f'"{when.isoformat()}")).groupBy("dt").count()',
            count,
        )
        console.print("  " + ", ".join(f"dt={date}: {rows:,} rows" for date, rows in sorted(found.items())))
        return found


def file_counts(deployment: Any) -> dict[str, int]:  # a Deployment
    if S3:  # one listing of each root (a few LIST requests: a thousand keys each)
        from fnmatch import fnmatchcase

        listed = [info.key for info in deployment.lake.list()]
        return {
            "staging": sum(1 for _ in deployment.staging.list()),
            **{
                area: sum(1 for key in listed if fnmatchcase(key, keys.area_glob(area)))
                for area in (keys.LIVE, keys.DELAYED, keys.MERGED, keys.MANIFESTS)
            },
        }
    lake = Path(".siltlake/lake")
    return {
        "staging": sum(1 for path in Path(".siltlake/staging").rglob("*") if path.is_file()),
        **{  # `**`: a table partitioned below dt keeps its objects deeper (keys.area_glob's `*` spans them for fnmatch)
            area: len(list(lake.glob(keys.area_glob(area).replace("/dt=*/", "/dt=*/**/"))))
            for area in (keys.LIVE, keys.DELAYED, keys.MERGED, keys.MANIFESTS)
        },
    }


def engine_counts(deployment: Any) -> dict[str, int]:  # a Deployment
    """The current row count of web.access through Spark, DuckDB (over the newest version's exact file
    list) and PyIceberg (the Iceberg table's current snapshot)."""
    import duckdb

    from siltlake.lake import Lake
    from siltlake.publish.iceberg.catalog import open_catalog
    from siltlake.read import table

    handle = Lake(deployment).table("web.access")
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    counts = {
        "Spark": table(deployment.spark(), "web.access", deployment).count(),
        "Iceberg": iceberg.scan(selected_fields=("user_id",)).to_arrow().num_rows,
    }
    if S3:  # DuckDB would need its httpfs extension (a download): pyarrow reads the bucket instead
        return {**counts, "pyarrow": handle.to_arrow(columns=["user_id"]).num_rows}
    paths = [uri.removeprefix("file://") for uri in handle.files(as_of_version=handle.version)]
    with duckdb.connect() as connection:
        by_duckdb = connection.sql(f"SELECT count(*) FROM read_parquet({paths!r}, union_by_name = true)").fetchall()
    return {**counts, "DuckDB": by_duckdb[0][0]}


def records(result: dict[str, tuple]) -> dict[str, int]:
    return {date: values[0] for date, values in result.items()}


def move_shipped(source: Path, target: Path, shipped: dt.datetime) -> None:
    """Move a sample object into a local staging root with the put time its shipper's write gave it, on the
    simulated clock: freshness (put to visible) is measured on one clock with the publish runs', and a whole
    object shipped long ago is no file still being written (a record cut short in it is final at once)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)
    stamp = int(shipped.timestamp() * 1_000_000) * 1000
    os.utime(target, ns=(stamp, stamp))


def late(key: str, shipped: dt.datetime) -> bool:
    """Objects web03's shipper could not send during its outage (23:00 on day 1 to 02:00 on day 2)."""
    return f"/{LATE_SERVER}-" in key and jst(1, 23) <= shipped < jst(2, 2)


def show_timeline(demo: Demo) -> None:
    grid = Table(title="files per stage and rows readers saw, step by step", box=box.SIMPLE_HEAD, title_justify="left")
    grid.add_column("after")
    for header in ("staging\nobjects", "small objects\nlive", "small objects\ndelayed", "merged\nobjects", "manifests"):
        grid.add_column(header, justify="right")
    grid.add_column("rows readers see")
    for label, counts, rows in demo.timeline:
        grid.add_row(
            label,
            *(f"{counts[key]:,}" for key in ("staging", "live", "delayed", "merged", "manifests")),
            ", ".join(f"{date[5:]}: {count:,}" for date, count in rows.items()),
        )
    console.print(grid)


def parse_arguments(argv: list[str] | None = None) -> list[str]:
    """`--help` says what the demo does and where, before anything runs (it wipes build/demo); the table's
    partition_by fields below dt, if given."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m siltlake.demo",
        description=__doc__.split("\n\n")[0],
        epilog=f"It works in {DEMO_DIR} (wiped first). SILTLAKE_DEMO_S3=1 puts the storage roots in a local S3 "
        "bucket (moto). `make demo` runs it.",
    )
    parser.add_argument(
        "--partition-by",
        action="append",
        default=[],
        metavar="FIELD",
        help="partition web.access below dt too: a column (host) or bucket(N, column); repeat for more levels "
        "(make demo PARTITION_BY=host)",
    )
    return parser.parse_args(argv).partition_by


def main() -> None:
    partition_by = parse_arguments()
    started = time.monotonic()
    root = DEMO_DIR.resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    os.chdir(root)  # the embedded defaults put everything under ./.siltlake
    for key in [key for key in os.environ if key.startswith("SILTLAKE_")]:
        del os.environ[key]  # the demo runs on the defaults, whatever this shell configures
    os.environ["SILTLAKE_PUBLISH__TARGETS"] = "iceberg"  # and publishes Iceberg tables beside its own catalog
    if S3:
        from siltlake.demo.s3 import start_local_s3

        endpoint = start_local_s3()
        console.print(
            f"S3=1: the staging and lake roots are s3://siltlake-demo/staging and s3://siltlake-demo/lake "
            f"on a local S3 endpoint (moto) at {endpoint}",
            highlight=False,
        )
    console.rule("[bold]siltlake demo: two simulated days of web access logs")
    sample = generate_sample("incoming", START, days=2)
    day1, day2 = (START + dt.timedelta(days=n) for n in (0, 1))
    console.print(
        f"Generated {sample.objects} staging objects in {root}/incoming, as four web servers' Fluentd shippers "
        f"write them over two Tokyo days ({day1} and {day2}): gzip JSON lines and MessagePack, "
        f"{sample.good_records:,} good records, {sample.bad_records} bad records, "
        f"{len(sample.malformed_objects)} malformed objects. A simulated clock moves them into the staging "
        f"root when they were shipped; {LATE_SERVER}'s shipper is down from 23:00 to 02:00 on the first night.",
        highlight=False,
    )
    write_table_definition("web_access.toml", partition_by)
    # The dashboard's history is sampled on the simulated clock, a half-hour slot at each publish run (see
    # Demo.publish), so the page the demo points to at its end shows the two days it simulates; `silt dashboard`
    # run here later reads the same file, and its labels name the same interval.
    # Its samples sit on fixed dates in the past, so the retention is long enough that the reap "a week later"
    # (a clock ahead of the real one) keeps them.
    Path("siltlake.toml").write_text(
        f'[observe]\nhistory_interval = "{DEMO_HISTORY_INTERVAL}s"\nhistory_retention = "3650d"\n'
    )
    demo = Demo(sample)

    demo.step(
        "Set up",
        "A catalog (SQLite), the storage roots, and the table web.access, partitioned by the "
        "Tokyo date of each event (merge_interval 0s: a partition's merge is due at once).",
    )
    demo.silt("init")
    demo.silt("table", "create", "web_access.toml")
    demo.open_deployment()
    console.print(
        f"\nThe query every step runs (Spark SQL over web.access):\n[bold]QUERY[/] = {QUERY!r}", highlight=False
    )

    # --- day 1 ----------------------------------------------------------------------------------------
    demo.step(
        f"Day 1, 21:00 JST ({day1})",
        "Stream what has arrived so far into small Parquet objects (one per "
        "staging object and date), merge them, and publish: the open day gets a live version, so "
        "readers see its live small objects. Spark starts once, in this process.",
    )
    demo.deliver(jst(1, 21))
    demo.stream()
    demo.merge(jst(1, 21))
    demo.publish(jst(1, 21))
    demo.silt("unknown", "list")
    evening = demo.query("day 1, 21:00")
    if set(evening) != {str(day1)}:
        fail(f"by 21:00 on day 1 only {day1} can have rows, the query shows {sorted(evening)}")
    Path("web_daily_methods.toml").write_text(DERIVED_TOML)
    demo.step(
        "A derived table",
        "web.daily_methods is defined by a query over web.access (hits and bytes per "
        "day and HTTP method). A build writes it under a new name and publishes all its dates in "
        "one catalog commit; incremental = true: later builds recompute only the dates whose source "
        "partitions got a new version. It is read like any table.",
    )
    console.print("web_daily_methods.toml:", style="dim")
    console.print(DERIVED_TOML, highlight=False, markup=False)
    demo.silt("derived", "create", "web_daily_methods.toml")
    demo.silt("derived", "build", "web.daily_methods")
    first_build = demo.derived_rows("web.daily_methods after its first build", evening)

    # --- just after midnight ----------------------------------------------------------------------------
    demo.step(
        f"Day 2, 00:30 JST ({day2})",
        "The rest of day 1 arrives (except web03's: its shipper is down), "
        "with the first events of day 2. The first publish run after midnight closes day 1: objects "
        "that still arrive for it will be delayed.",
    )
    demo.deliver(jst(2, 0, 30), hold=late)
    demo.stream()
    demo.merge(jst(2, 0, 30))
    demo.publish(jst(2, 0, 30))
    before = demo.query("day 2, 00:30: day 1 closed, still live")

    demo.step(
        "Day 2, 01:30 JST",
        "The next publish run switches day 1 to its merged objects (every live object "
        "is merged) and publishes a merged version: a manifest naming the merged objects. Readers "
        "now read a few large objects instead of many small ones, and see the same rows.",
    )
    demo.publish(jst(2, 1, 30))
    after = demo.query("day 2, 01:30: day 1 switched to merged")
    if after.get(str(day1)) != before.get(str(day1)):
        fail(f"day 1 reads {after.get(str(day1))} after the switch but {before.get(str(day1))} before it")
    console.print(f"[green]same result for {day1} before and after the switch[/]: {after[str(day1)]}", highlight=False)
    demo.silt("history", "web.access", "--date", str(day1))

    demo.step(
        "Day 2, 02:00 JST",
        f"{LATE_SERVER}'s shipper catches up. Its objects for day 1 arrive after the "
        "day was closed: they become delayed small objects, invisible to readers until they are merged "
        "and the next merged version is published.",
    )
    demo.deliver(jst(2, 2))
    report = demo.stream()
    if report.delayed_objects == 0:
        fail("the late objects of day 1 should have become delayed small objects")
    demo.silt("table", "show", "web.access")
    hidden = demo.query("day 2, 02:00: late objects delayed")
    if hidden.get(str(day1)) != after.get(str(day1)):
        fail(f"delayed objects must stay invisible: day 1 reads {hidden.get(str(day1))}, was {after.get(str(day1))}")
    demo.merge(jst(2, 2, 30))
    demo.publish(jst(2, 2, 30))
    caught_up = demo.query("day 2, 02:30: delayed objects merged")
    if records(caught_up).get(str(day1)) != sample.records_by_date[str(day1)]:
        fail(
            f"day 1 shows {records(caught_up).get(str(day1))} rows, the sample has {sample.records_by_date[str(day1)]}"
        )
    console.print(
        f"[green]day 1 holds exactly the sample's {sample.records_by_date[str(day1)]:,} good records[/]",
        highlight=False,
    )
    demo.step(
        "The derived table catches up",
        "Its source changed: `silt derived list` says why it is stale, and "
        "`silt derived build --due` (what `silt run` does every derived.interval) rebuilds only the dates "
        "whose partitions of web.access have a new version since the last build.",
    )
    demo.silt("derived", "list")
    demo.silt("derived", "build", "--due")
    rebuilt = demo.derived_rows("web.daily_methods after the late objects", caught_up)
    record = demo.deployment.catalog.derived.get("web.daily_methods")
    last = demo.deployment.catalog.derived.builds(record.id)[-1]
    if last.kind != "incremental" or last.status != "published":
        fail(f"the second build should be a published incremental build, it is {last.kind} {last.status}")
    moved = sorted({date for key, values in rebuilt.items() if first_build.get(key) != values for date in [key[0]]})
    console.print(
        f"[green]the build rewrote {last.dates_written} dates; the numbers moved on {', '.join(moved)}"
        f"[/] (day 1: {LATE_SERVER}'s late objects; day 2: the hours since 21:00)",
        highlight=False,
    )
    demo.silt("derived", "show", "web.daily_methods")

    # --- the night after day 2 ------------------------------------------------------------------------
    demo.step("Day 3, 00:30 and 01:30 JST", "The rest of day 2 arrives; two publish runs close and switch it.")
    demo.deliver(jst(3, 0, 30))
    demo.stream()
    demo.merge(jst(3, 0, 30))
    demo.publish(jst(3, 0, 30))
    demo.publish(jst(3, 1, 30))
    final = demo.query("day 3, 01:30: both days merged")
    if records(final) != sample.records_by_date:
        fail(f"the table shows {records(final)}, the sample has {sample.records_by_date}")
    demo.silt("status")

    demo.step(
        "Time travel",
        "Every publish recorded a version per partition; a reader can ask for the table "
        "as it was at any time (or as of a version number).",
    )
    if demo.read_as_of(jst(1, 22)) != records(evening):
        fail(f"as of 22:00 on day 1 the table should read {records(evening)}")
    if demo.read_as_of(jst(2, 1, 45)) != records(after):
        fail(f"as of 01:45 on day 2 the table should read {records(after)}")
    console.print("[green]both match what the queries saw at the time[/]")

    demo.step(
        "Reap, a week later",
        "With the clock 8 days ahead (past the 7-day version retention and the 3-day "
        "grace period for unreferenced objects), reap deletes what no retained version needs: small "
        "objects inside the merged versions, merged objects that extended ranges replaced, expired "
        "versions and their manifests. It only ever touches this deployment's instance key. A dry run "
        "lists the same table first.",
    )
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(days=8)).isoformat(timespec="seconds")
    demo.silt("reap", "--dry-run", "--now", later)
    demo.silt("reap", "--now", later)
    reaped = demo.query("a week later: reaped")
    if records(reaped) != sample.records_by_date:
        fail(f"after the reap the table shows {records(reaped)}, the sample has {sample.records_by_date}")
    console.print("[green]the reap freed the files above and changed no result[/]")

    demo.step(
        "Read from anything",
        "The same table through three engines: siltlake's Spark reader, DuckDB over "
        "the exact file list of the newest version (Lake.table(...).files()), and PyIceberg over the Iceberg "
        "table the publish runs kept in step (publish.targets = ['iceberg']; Trino, Spark and DuckDB read it "
        "too, see docs/reading.md).",
    )
    counts = demo.python("count through Spark, DuckDB and Iceberg", lambda: engine_counts(demo.deployment))

    console.rule()
    show_timeline(demo)
    console.print(
        f"[bold green]ok[/]: every good record is in its partition exactly once ({sample.good_records:,} rows over "
        f"{len(sample.records_by_date)} days), the switch to merged objects changed no result, late objects "
        f"appeared only once merged, time travel showed the past as it was, and the reap freed what nothing "
        f"needed. Bad records and malformed objects were reported, not lost. "
        f"{time.monotonic() - started:.0f}s in all.\n"
        f"Look around: cd {DEMO_DIR} && ../../.venv/bin/silt --help",
        highlight=False,
    )
    line = ", ".join(f"{engine} {count:,}" for engine, count in counts.items())
    if len(set(counts.values())) != 1 or sum(sample.records_by_date.values()) not in counts.values():
        fail(f"the engines count different rows: {line} (the sample has {sum(sample.records_by_date.values()):,})")
    console.print(f"[bold green]same count through {', '.join(counts)}[/]: {line} rows", highlight=False)
    show_operations(demo)


def dashboard_query(demo: Demo) -> str:
    """The dashboard's query string for the simulated days: from day 1's first sample to half an hour past the
    last (`at` is the period's end, in UTC)."""
    end = (demo.sampled_until or jst(3, 1, 30)).astimezone(dt.UTC) + dt.timedelta(minutes=30)
    hours = (end - jst(1, 20).astimezone(dt.UTC)).total_seconds() / 3600
    return f"?hours={hours:g}&at={end:%Y-%m-%dT%H:%MZ}"


def show_operations(demo: Demo) -> None:
    """Where the dashboard would be served, and what /metrics says now, in one line."""
    from siltlake.observe.metrics import summary_line

    console.print(
        f"Dashboard: cd {DEMO_DIR} && ../../.venv/bin/silt dashboard serves it on "
        f"http://127.0.0.1:8787/{dashboard_query(demo)} (the simulated days; without ?at= the page "
        "shows the last hours of the real clock; `silt run --metrics-port 9108` serves it and /metrics "
        "beside the loops; docs/operations.md)",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"[bold]metrics[/]: {summary_line(demo.deployment)}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    main()
