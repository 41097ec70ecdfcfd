"""Year benchmark: a simulated month at a production rate, day by day, to show that what a round, the
catalog and the dashboard's history sample cost stops growing once staging retention (7 days) is reached.

The clock: siltlake reads the time through `siltlake.clock.utcnow` (every module binds it by name) and discovery's
cursor through `time.time_ns` (the file system's clock). The benchmark replaces both with a simulated clock that
runs at the real rate from a time it sets (day d starts at 00:00 of the d-th day after the start), as `--now`
moves the clock of `silt merge --once`, `silt reap` and `publish`; and it writes the staging files with that
clock's times (os.utime of each new file or directory and of the directory it was put in), so that the
staging root looks to discovery as a shipper writing at the simulated time would leave it. The simulated start
is after the real time, so a file's real ctime (set by the kernel, not by utime) is always older than its
simulated mtime and the arrival discovery computes, max(mtime, ctime), is the simulated one.

Each simulated day d (timed steps marked *):
  00:00        the lifecycle rule of the staging bucket deletes the objects 7 days old or older (whole day
               directories: 20 hosts' `hostNN.web.access/YYYY/MM/DD`), then the day's `--per-day` objects arrive:
               hard links to one tiny JSON-lines file per host and day (outside the root; ext4 allows 65,000
               links a file), `--per-day` / 20 in each host's directory of the day.
  00:00:06   * the registration rounds: siltlake's `discover` until the rolling sweep completes a pass (what
               the rounds of a day do; before the sweep, the hourly full listing), then the day's objects are
               marked processed with
               processed_time spread over the day (one UPDATE per minute of it), as a day of real rounds would
               leave them (what Spark adds to a round is measured by bench/history_bench.py --new).
  00:10      * the day's maintenance: `reap_once(now=...)` (incremental reap of the lake, the history prune and
               the staging rows' expiry: reap/staging_rows.py), which prunes the rows of objects that arrived
               before the expiry watermark recorded by the previous day's run; with --vacuum (PostgreSQL), a
               VACUUM of the catalog's database after it, as autovacuum would.
  00:20      * an idle `stream_once` round (median of --rounds after one warm-up; it must list no file entry),
             * a discovery round that finds 100 new objects put in the day's directories (5 per host), which
               are then marked processed; it and the registration rounds read and store the catalog's record
               of listed names, as `silt stream --once` does (so only the new names are `stat`ed),
             * the history sample (`siltlake.observe.history.sample` for the minute ending at 12:00 of the day,
               which holds a minute of the day's processed objects; median of 5 after one warm call),
               the catalog's size on disk (SQLite: the file and its WAL; PostgreSQL: the database and
               staging_objects with its indexes) and the staging_objects rows.

    .venv/bin/python bench/year_bench.py                                  # 30 days of 100,000 objects
    .venv/bin/python bench/year_bench.py --per-day 1000000 --days 30      # the issue's full rate
    .venv/bin/python bench/year_bench.py --per-day 1000000 --days 30 --sweep-check-interval 604800  # weekly check pass
    .venv/bin/python bench/year_bench.py --per-day 1000000 --state /var/tmp/year-1m --out $PWD/bench/results/y.json
    .venv/bin/python bench/year_bench.py --per-day 1000000 --state /var/tmp/year-1m --out $PWD/bench/results/y.json \
        --resume     # a later session carries the same run on from the day after the report's last (SQLite)
    .venv/bin/python bench/year_bench.py --per-day 10000 --catalog postgresql --vacuum
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from common import brief_machine, catalog_url, load_avg_1m, new_deployment, save_json, utc_stamp
from year_figures import COLUMNS, flatness, svg_plot, table_line

from siltlake import clock as clock_module
from siltlake.catalog import schema as s
from siltlake.observe.history import sample
from siltlake.reap import reap_once
from siltlake.stream import stream_once
from siltlake.stream.names import stored_names
from siltlake.tabledef import TableDef

discover_module = importlib.import_module("siltlake.stream.discover")
# The modules that read the file system's clock: discovery's cursor, and the walk's judgement that a directory has
# settled (storage/localwalk.py keeps a large settled directory's sorted entries for the next slice). Left on the
# real clock, the simulated times in the future kept every directory unsettled, and each slice of a check pass
# sorted its 50,000-entry directory again (bench runs before 2026-11-29).
FILE_CLOCK_MODULES = (discover_module, importlib.import_module("siltlake.storage.localwalk"))
TABLE = {
    "schema": "web",
    "name": "access",
    "time_column": "t",
    "timezone": "UTC",
    "columns": [{"name": "t", "type": "timestamp", "nullable": False}],
}
HOSTS = 20
DAY = dt.timedelta(days=1)
REAL_UTCNOW = clock_module.utcnow


class SimulatedClock:
    """The real clock plus an offset the benchmark moves: put in place of every siltlake module's `utcnow` and of
    the `time.time_ns` of the modules that read the file system's clock (FILE_CLOCK_MODULES)."""

    def __init__(self, start: dt.datetime) -> None:
        self.offset = start - REAL_UTCNOW()
        self.patched: list[tuple[object, str, object]] = []

    def now(self) -> dt.datetime:
        return REAL_UTCNOW() + self.offset

    def ns(self) -> int:
        return clock_module.to_nanoseconds(self.now())

    def set(self, when: dt.datetime) -> None:
        self.offset = when - REAL_UTCNOW()
        self._patch()

    def advance(self, seconds: float) -> None:
        self.offset += dt.timedelta(seconds=seconds)

    def _patch(self) -> None:
        # Each module took utcnow by name at import; modules imported since the last call are patched too.
        for name, module in list(sys.modules.items()):
            if name.startswith("siltlake") and getattr(module, "utcnow", None) is REAL_UTCNOW:
                self.patched.append((module, "utcnow", REAL_UTCNOW))
                module.utcnow = self.now
        for module in FILE_CLOCK_MODULES:
            if not isinstance(module.time, SimulatedTime):
                self.patched.append((module, "time", time))
                module.time = SimulatedTime(self)

    def restore(self) -> None:
        for module, name, original in reversed(self.patched):
            setattr(module, name, original)
        self.patched.clear()


class SimulatedTime:
    """The time module as discovery sees it: time_ns from the simulated clock, the rest the real module's."""

    def __init__(self, clock: SimulatedClock) -> None:
        self.clock = clock

    def __getattr__(self, name: str):  # whatever the time module holds
        return getattr(time, name)

    def time_ns(self) -> int:
        return self.clock.ns()


class Shipper:
    """Writes the staging root at the simulated clock's times and deletes what the lifecycle rule expires."""

    def __init__(self, root: Path, originals: Path, clock: SimulatedClock, state: dict | None = None) -> None:
        self.root, self.originals, self.clock = root, originals, clock
        root.mkdir(parents=True, exist_ok=True)  # the deployment's init may have made it
        originals.mkdir(parents=True, exist_ok=state is not None)
        # Objects in the root per key date, and the names put_new has used: a resumed run's from its report.
        self.days: dict[dt.date, int] = {
            dt.date.fromisoformat(day): count for day, count in (state or {}).get("days", {}).items()
        }
        self.new_names: int = (state or {}).get("new_names", 0)

    def state(self) -> dict:
        """What a resumed run needs to carry on writing this root (the report keeps it)."""
        return {"days": {day.isoformat(): count for day, count in self.days.items()}, "new_names": self.new_names}

    def directories(self, date: dt.date) -> list[Path]:
        return [self.root / f"host{host:02d}.web.access/{date:%Y/%m/%d}" for host in range(HOSTS)]

    def _touch(self, paths: list[Path]) -> None:
        """Give files and directories the simulated time, as writing them at that time would: each path and the
        directory holding it (whose entries changed; the directories above keep their times)."""
        when = self.clock.ns()
        for path in {*paths, *(path.parent for path in paths)}:
            os.utime(path, ns=(when, when))

    def _make_directory(self, directory: Path) -> list[Path]:
        """mkdir -p; the directories it made."""
        made = []
        while not directory.exists():
            made.append(directory)
            directory = directory.parent
        for path in reversed(made):
            path.mkdir()
        return made

    def put_day(self, date: dt.date, objects: int) -> None:
        directories = self.directories(date)
        originals, made = [], []
        for host, directory in enumerate(directories):
            made += self._make_directory(directory)
            original = self.originals / f"{date:%Y%m%d}-{host:02d}.jsonl"
            original.write_bytes(b'{"t":"2026-01-01T00:00:00"}\n')
            originals.append(original)
        for i in range(objects):
            os.link(originals[i % HOSTS], directories[i % HOSTS] / f"obj-{i:08d}.jsonl")
        self._touch(originals + made)  # a hard link's times are its original's
        self._touch(directories)
        self.days[date] = objects

    def put_new(self, date: dt.date, objects: int) -> None:
        directories = self.directories(date)
        files = []
        for i in range(objects):
            path = directories[i % HOSTS] / f"new-{self.new_names:08d}.jsonl"
            self.new_names += 1
            path.write_bytes(b'{"t":"2026-01-01T00:00:00"}\n')
            files.append(path)
        self._touch(files)
        self.days[date] += objects

    def expire(self, before: dt.date) -> int:
        """Delete the objects of key dates before `before` (whole day directories); how many went."""
        deleted = 0
        for date in sorted(date for date in self.days if date < before):
            for directory in self.directories(date):
                shutil.rmtree(directory)
            for host in range(HOSTS):
                (self.originals / f"{date:%Y%m%d}-{host:02d}.jsonl").unlink()
            deleted += self.days.pop(date)
        return deleted

    @property
    def objects(self) -> int:
        return sum(self.days.values())


def mark_processed(deployment, day_start: dt.datetime) -> int:  # a Deployment
    """Mark the pending staging rows processed, their processed_time spread over the day (one UPDATE per minute,
    ids in order), as the day's rounds would have left them."""
    so = s.staging_objects
    with deployment.catalog.engine.begin() as c:
        low, high, count = c.execute(
            sa.select(sa.func.min(so.c.id), sa.func.max(so.c.id), sa.func.count()).where(so.c.processed_time.is_(None))
        ).one()
        if not count:
            return 0
        minutes = 1440 if count >= 1440 else 1
        step = (high - low + 1) / minutes
        c.execute(
            so.update()
            .where(so.c.id >= sa.bindparam("lo"), so.c.id < sa.bindparam("hi"), so.c.processed_time.is_(None))
            .values(processed_time=sa.bindparam("at")),
            [
                {
                    "lo": low + int(step * m),
                    "hi": low + int(step * (m + 1)) if m < minutes - 1 else high + 1,
                    "at": day_start + dt.timedelta(minutes=m),
                }
                for m in range(minutes)
            ],
        )
    return count


def vacuum(deployment) -> None:  # a Deployment
    """What autovacuum does, on a PostgreSQL server that has it off: make the space of the day's pruned and updated
    rows (the prune, the cursor's update each round) reusable, in every table of the catalog's database (VACUUM
    cannot run inside a transaction block)."""
    with deployment.catalog.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(sa.text("VACUUM"))


def catalog_sizes(deployment, kind: str, root: Path) -> dict:  # a Deployment
    so = s.staging_objects
    with deployment.catalog.engine.connect() as c:
        rows = c.execute(sa.select(sa.func.count()).select_from(so)).scalar_one()
        if kind == "postgresql":
            database, staging = c.execute(
                sa.text("SELECT pg_database_size(current_database()), pg_total_relation_size('staging_objects')")
            ).one()
            return {"staging_rows": rows, "catalog_bytes": database, "staging_objects_bytes": staging}
    wal = root / "catalog.db-wal"
    return {
        "staging_rows": rows,
        "catalog_bytes": (root / "catalog.db").stat().st_size,
        "wal_bytes": wal.stat().st_size if wal.exists() else 0,
    }


def timed(action):  # a callable and what it returns
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def sweep_pass(deployment):  # a Deployment; its Discovery
    """The rounds that complete the local root's rolling sweep pass under way (the root's first round is a full
    listing): what replaced the hourly full listing, so the expiry watermark can move. Their reports, summed.
    Each keeps the catalog's record of listed names, as `silt stream --once` does (stream/names.py)."""
    found = once_discover(deployment, sweep=True)
    while not (found.full_listing or found.sweep_completed):
        more = once_discover(deployment, sweep=True)
        more.fold(found)
        found = more
    return found


def once_discover(deployment, sweep: bool = False):  # a Deployment; its Discovery
    """What `silt stream --once` discovers with: the stored record of names read, kept and stored back."""
    record = stored_names(deployment)
    found = discover_module.discover(deployment, record, sweep=sweep)
    record.store()
    return found


def simulate_day(
    deployment,
    shipper: Shipper,
    clock: SimulatedClock,
    day: int,
    start: dt.datetime,
    args: argparse.Namespace,
    root: Path,
) -> dict:
    config = deployment.config
    day_start = start + DAY * day
    date = day_start.date()
    clock.set(day_start)
    # The lifecycle rule: objects put 7 days ago or earlier are gone by midnight.
    expired_files = shipper.expire(date - dt.timedelta(seconds=config.stream.staging_retention) + DAY)
    _, put_seconds = timed(lambda: shipper.put_day(date, args.per_day))
    clock.advance(config.stream.listing_margin + 1)
    found, register_seconds = timed(lambda: sweep_pass(deployment))
    assert found.registered == args.per_day and not found.unknown, found
    _, mark_seconds = timed(lambda: mark_processed(deployment, day_start))

    clock.set(day_start + dt.timedelta(minutes=10))
    reaped, reap_seconds = timed(lambda: reap_once(deployment, now=clock.now()))
    vacuum_seconds = timed(lambda: vacuum(deployment))[1] if args.vacuum else None

    clock.set(day_start + dt.timedelta(minutes=20))
    stream_once(deployment)  # warm
    idle = []
    for _ in range(args.rounds):
        report, seconds = timed(lambda: stream_once(deployment))
        assert report.listed == report.swept and report.registered == 0 and report.processed == 0, report
        idle.append(seconds)
    shipper.put_new(date, args.new)
    fresh, new_seconds = timed(lambda: once_discover(deployment))
    assert not fresh.full_listing and fresh.registered == args.new, fresh
    mark_processed(deployment, day_start + dt.timedelta(minutes=20))
    clock.advance(config.stream.listing_margin + 1)

    noon = day_start + dt.timedelta(hours=12)
    sample(deployment, now=noon)
    samples = []
    for _ in range(5):
        _, seconds = timed(lambda: sample(deployment, now=noon))
        samples.append(seconds)
    return {
        "day": day,
        "date": date.isoformat(),
        "objects_in_staging": shipper.objects,
        "lifecycle_deleted": expired_files,
        "put_seconds": round(put_seconds, 2),
        "full_listing_round_seconds": round(register_seconds, 3),
        "full_listing_listed": found.listed,
        "full_listing_looked_up": found.looked_up,
        "full_listing_expired": found.expired,
        "mark_processed_seconds": round(mark_seconds, 2),
        "reap_seconds": round(reap_seconds, 3),
        "reap_full_sweep": reaped.full_sweep,
        "vacuum_seconds": round(vacuum_seconds, 3) if vacuum_seconds is not None else None,
        "staging_rows_pruned": reaped.staging_rows,
        "idle_round_seconds": round(statistics.median(idle), 4),
        "idle_round_seconds_all": [round(v, 4) for v in idle],
        "new_round_seconds": round(new_seconds, 4),
        "new_round_listed": fresh.listed,
        "new_round_looked_up": fresh.looked_up,
        "new_round_remembered": fresh.remembered,
        "history_sample_ms": round(statistics.median(samples) * 1000, 2),
        **catalog_sizes(deployment, args.catalog, root),
        "load_avg_1m": load_avg_1m(),
    }


def report_of(args: argparse.Namespace, start: dt.datetime, days: list[dict], root: Path, shipper: Shipper) -> dict:
    return {
        "machine": brief_machine(),
        "date": utc_stamp(),
        "args": vars(args),
        "simulated_start": start.isoformat(),
        "days": days,
        "flat_from_day_8": flatness(days, 8),
        **({"state": str(root), "shipper": shipper.state()} if args.state else {}),
    }


# The settings a resumed run must share with the days it carries on.
RESUMED_SETTINGS = ("per_day", "new", "rounds", "catalog", "sweep_check_interval")


def resumed_report(parser: argparse.ArgumentParser, args: argparse.Namespace, out: Path) -> dict:
    """The report of the run --resume carries on, checked against this invocation."""
    if not out.exists():
        parser.error(f"--resume: no report at {out} (--out names the run's report)")
    previous = json.loads(out.read_text())
    if previous.get("state") != str(Path(args.state)):
        parser.error(f"--resume: the report at {out} is of the state {previous.get('state')}, not {args.state}")
    if previous.get("unfinished_day"):
        parser.error(
            f"--resume: day {previous['unfinished_day']} of the run was cut short and left part of itself in "
            f"{args.state}; it cannot be carried on: start a new run (--until ends a session between days)"
        )
    differing = [name for name in RESUMED_SETTINGS if previous["args"].get(name) != getattr(args, name)]
    if differing:
        parser.error(
            "--resume: the run was made with other "
            + ", ".join(f"--{name.replace('_', '-')} ({previous['args'].get(name)})" for name in differing)
        )
    return previous


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument(
        "--per-day",
        type=int,
        default=100_000,
        help="objects a simulated day (the issue's rate is 1,000,000: 3.5 minutes or more a day here)",
    )
    parser.add_argument("--new", type=int, default=100, help="new objects of the daily discovery round")
    parser.add_argument("--rounds", type=int, default=3, help="timed idle rounds a day (the median is reported)")
    parser.add_argument("--catalog", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="PostgreSQL: VACUUM the catalog's database after each day's reap (for a server whose "
        "autovacuum is off, as this machine's is)",
    )
    parser.add_argument(
        "--sweep-check-interval",
        type=int,
        default=None,
        help="stream.sweep_check_interval in seconds (default: siltlake's, one day): how often a "
        "sweep pass looks every file up again, not only those changed since the last pass",
    )
    parser.add_argument("--workdir", default=None, help="where the staging root goes (default: the temp dir)")
    parser.add_argument(
        "--state",
        default=None,
        help="keep the run's deployment and staging root in this new directory (SQLite), so that "
        "--resume can carry the run on in a later session",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="carry on the run whose report is --out and whose state is --state from the day after "
        "its last, with the same settings",
    )
    parser.add_argument(
        "--until",
        default=None,
        help="with --state: start no simulated day after this UTC time (ISO, e.g. 2026-11-29T09:20), "
        "so that a session that must end leaves the state between two days for --resume",
    )
    parser.add_argument("--out", default="bench/results/year.json")
    args = parser.parse_args()
    if args.vacuum and args.catalog != "postgresql":
        parser.error("--vacuum is for --catalog postgresql")
    if args.state and args.catalog != "sqlite":
        parser.error("--state keeps a SQLite catalog in its directory: use --catalog sqlite")
    if args.resume and not args.state:
        parser.error("--resume needs the --state directory of the run it carries on")
    until = clock_module.to_naive_utc(dt.datetime.fromisoformat(args.until)) if args.until else None
    assert args.per_day // HOSTS < 65_000, "ext4 takes 65,000 links a file: at most 1,300,000 objects a day"
    out = Path(args.out)
    session_start = utc_stamp()  # each day's row names the invocation that ran it (a resumed run has several)
    previous = resumed_report(parser, args, out) if args.resume else None
    if args.state:
        root = Path(args.state)
        if not args.resume and root.exists() and any(root.iterdir()):
            parser.error(f"--state {root} is not empty: --resume carries its run on, or name a new directory")
        root.mkdir(parents=True, exist_ok=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="year-", dir=args.workdir))
    # Midnight two days after the real time (a resumed run's, its first session's): a real ctime is always before
    # the simulated times.
    start = (
        dt.datetime.fromisoformat(previous["simulated_start"])
        if previous
        else dt.datetime.combine(REAL_UTCNOW().date() + dt.timedelta(days=2), dt.time())
    )
    clock = SimulatedClock(start)
    days: list[dict] = previous["days"] if previous else []
    try:
        with catalog_url(args.catalog, root) as url:
            check = {} if args.sweep_check_interval is None else {"sweep_check_interval": args.sweep_check_interval}
            deployment = new_deployment("bench001", root, catalog_url=url, staging_root=root / "staging", stream=check)
            try:
                if previous is None:
                    deployment.catalog.tables.create(TableDef.from_mapping(TABLE))
                shipper = Shipper(
                    root / "staging", root / "originals", clock, previous["shipper"] if previous else None
                )
                print(
                    " ".join(header.rjust(int(re.search(r">(\d+)", form)[1])) for header, _, form in COLUMNS),
                    flush=True,
                )
                for row in days:
                    print(table_line(row), flush=True)
                for day in range(len(days) + 1, args.days + 1):
                    if until is not None and REAL_UTCNOW() >= until:
                        print(f"--until {args.until}: stopping before day {day}; --resume carries the run on")
                        break
                    if args.state:  # a day cut short leaves part of itself in the state: --resume refuses it
                        save_json(out, {**report_of(args, start, days, root, shipper), "unfinished_day": day}, indent=1)
                    row = simulate_day(deployment, shipper, clock, day, start, args, root)
                    row["catalog_mb"] = round((row["catalog_bytes"] + row.get("wal_bytes", 0)) / 1e6, 1)
                    row["session_start"] = session_start
                    days.append(row)
                    print(table_line(row), flush=True)
                    save_json(out, report_of(args, start, days, root, shipper), indent=1)
            finally:
                deployment.close()
    finally:
        clock.restore()
        if not args.state:
            shutil.rmtree(root, ignore_errors=True)
    if not days:
        return
    svg_plot(
        days,
        out.with_suffix(".svg"),
        f"siltlake, {args.per_day:,} staging objects a simulated day, {args.catalog} catalog (dashed: day 8)",
    )
    for key, numbers in flatness(days, 8).items():
        print(f"days 8-{len(days)} {key}: {numbers}")
    print(f"wrote {out} and {out.with_suffix('.svg')}")


if __name__ == "__main__":
    main()
