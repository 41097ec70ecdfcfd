"""History benchmark: what an idle `stream_once` round costs when the staging root holds N objects
that were all processed before.

Setup (not timed): a fresh deployment (SQLite catalog unless --catalog postgresql) with the table web.access,
and a staging root of N hard links to 20-byte files (one original per directory) under keys spread like a
shipper's, 20 hosts x 7 days (`hostNN.web.access/2026/01/DD/obj-<i>.jsonl`). Hard links make a million objects
cheap to create, and each keeps the mtime it is registered with as its send_time, so no idle round sees a re-put.
The objects are registered by siltlake's own discovery (`siltlake.stream.discover.discover`, the path a real
round takes), then marked processed in one UPDATE: a real round would run each through Spark, which only sets
processed_time (and writes the small objects an idle round never reads).

Before registering, the benchmark waits until the newest write is stream.listing_margin old, as a history's
objects are: the registration (the root's first round, a full listing) then leaves its discovery cursor past them.

Timed: `--rounds` idle `stream_once` rounds (each finds nothing new, no redelivery and nothing pending; on a
local root they read what changed since the cursor, here nothing, and a slice of stream.sweep_files_per_round
files of the rolling sweep): the median wall seconds, catalog statements and transactions per round (an engine
event listener), then one more round under tracemalloc for the Python memory it allocates at its peak (not
timed: tracemalloc slows Python code down severalfold). Then the rest of the sweep's pass, round by round until
one completes it: the slowest of those rounds and the pass's length in rounds.

With `--new K` (the target: 100 new objects at N = 1,000,000 within 1.5x of N = 0): rounds that each find K new
objects and process them through Spark (local[2]), K tiny JSON-lines files written beside the newest day's objects
(K / 20 in each host's directory of day 7, the directories a shipper is writing to). Every N's root is held at once:
each N's first such round starts Spark and warms it, then `--new-rounds` turns are timed, each turn a pair of rounds
of every N in turn (so that the machine's drift and Spark's warming fall on every N alike): a round as `silt stream
--once` walks (the record of names the catalog stores for one-off runs, read before the walk and stored back after:
table discovery_names) and one as a `silt stream` daemon's (stream_forever's record in memory, kept current by
inotify where stream.watch_directories allows: a watched directory is not listed again, its new names come from the
kernel's notifications); in both only names not in the record are `stat`ed. Reported: the medians of each, the
statements of the last, the daemon record's names, bytes and watched directories, and the stored record's
compressed bytes at the end.

    .venv/bin/python bench/history_bench.py                               # N = 0, 10,000, 100,000
    .venv/bin/python bench/history_bench.py --sizes 0,10000,100000 --million
    .venv/bin/python bench/history_bench.py --sizes 100000 --profile 25   # cProfile of one idle round
    .venv/bin/python bench/history_bench.py --sizes 0,100000 --new 100    # and rounds of 100 new objects
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import itertools
import os
import pstats
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from common import StatementCounter, brief_machine, catalog_url, load_avg_1m, new_deployment, save_json, utc_stamp

from siltlake.catalog import schema as s
from siltlake.catalog import schema_discovery
from siltlake.clock import utcnow
from siltlake.storage.accounted import AccountedNames
from siltlake.stream import stream_once
from siltlake.stream.discover import discover
from siltlake.stream.names import daemon_names
from siltlake.tabledef import TableDef

TABLE = {
    "schema": "web",
    "name": "access",
    "time_column": "t",
    "timezone": "UTC",
    "columns": [{"name": "t", "type": "timestamp", "nullable": False}],
}
HOSTS, DAYS = 20, 7


# The directories under a host's table directory: a day's (the default key layout) or an hour's
# (stream.key_pattern = "hourly"); new objects go to the newest.
LAYOUTS = {
    "daily": [f"2026/01/{day:02d}" for day in range(1, DAYS + 1)],
    "hourly": [f"2026/01/{day:02d}/{hour:02d}" for day in range(1, DAYS + 1) for hour in range(24)],
}
layout = "daily"


def build_staging(root: Path, objects: int) -> None:
    """N hard links to tiny files, spread over HOSTS x the layout's directories: one original file per directory,
    outside the root, since a file takes at most 65,000 links on ext4."""
    root.mkdir(parents=True)
    targets = []
    for host in range(HOSTS):
        for part in LAYOUTS[layout]:
            directory = root / f"host{host:02d}.web.access" / part
            directory.mkdir(parents=True)
            original = root.parent / f"original-{host:02d}-{part.replace('/', '-')}.jsonl"
            original.write_bytes(b'{"t":"2026-01-01"}\n\n')
            targets.append((original, directory))
    for i in range(objects):
        original, directory = targets[i % len(targets)]
        os.link(original, directory / f"obj-{i:08d}.jsonl")


def register_processed(deployment, objects: int) -> float:  # a Deployment
    """Register every staging object through discovery and mark them all processed; returns the seconds."""
    started = time.perf_counter()
    found = discover(deployment)
    assert found.registered == objects and not found.unknown, found
    with deployment.catalog.engine.begin() as c:
        c.execute(s.staging_objects.update().values(processed_time=utcnow()))
    return time.perf_counter() - started


def idle_round(deployment, counter: StatementCounter) -> dict:  # a Deployment
    statements, transactions = counter.mark()
    started = time.perf_counter()
    report = stream_once(deployment)
    seconds = time.perf_counter() - started
    assert report.registered == 0 and report.processed == 0 and report.redelivered == 0, report
    return {
        "seconds": seconds,
        "listed": report.listed,
        "swept": report.swept,
        "statements": counter.statements - statements,
        "transactions": counter.transactions - transactions,
    }


_new_names = itertools.count()


def put_new(root: Path, objects: int) -> None:
    """K tiny JSON-lines objects, spread over the hosts' directories of the newest day (as shippers put them)."""
    for i in range(objects):
        directory = root / f"host{i % HOSTS:02d}.web.access" / LAYOUTS[layout][-1]
        (directory / f"new-{next(_new_names):08d}.jsonl").write_bytes(b'{"t":"2026-01-07T12:00:00"}\n')


def new_objects_round(
    deployment,
    root: Path,
    objects: int,
    counter: StatementCounter,
    profile: int = 0,
    accounted: AccountedNames | None = None,
) -> dict:
    """One stream_once round that finds K new objects and loads them through Spark (with a daemon's record of
    names, if given)."""
    put_new(root, objects)
    statements, _ = counter.mark()
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    report = (
        profiler.runcall(stream_once, deployment, accounted=accounted)
        if profiler
        else stream_once(deployment, accounted=accounted)
    )
    seconds = time.perf_counter() - started
    assert report.registered == objects and report.processed == objects, report
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(profile)
    return {
        "seconds": seconds,
        "listed": report.listed,
        "remembered": report.remembered,
        "statements": counter.statements - statements,
        "spark_start_seconds": report.spark_start_seconds,
    }


def sweep_pass(deployment) -> dict:  # a Deployment
    """One whole pass of the rolling sweep, after the rounds that end the pass under way: its slowest round and
    its length in rounds (a completed pass is what a full listing was)."""
    while not discover(deployment).sweep_completed:
        pass
    rounds, slowest, completed = 0, 0.0, False
    while not completed:
        started = time.perf_counter()
        completed = discover(deployment).sweep_completed
        slowest = max(slowest, time.perf_counter() - started)
        rounds += 1
    return {"seconds": slowest, "rounds": rounds}


@dataclass
class Prepared:
    """One N's staging root and deployment, set up and measured idle; its rounds of new objects come later, in turn
    with the other N's (so that a drift of the machine's load, or Spark's warming, falls on every N alike)."""

    objects: int
    root: Path
    deployment: object
    counter: StatementCounter
    accounted: AccountedNames
    summary: dict
    fresh: list = field(default_factory=list)
    recorded: list = field(default_factory=list)
    first_once: dict | None = None  # the first --once round: it builds the stored record


@contextlib.contextmanager
def prepared(kind: str, objects: int, rounds: int, workdir: Path, profile: int) -> Iterator[Prepared]:
    root = Path(tempfile.mkdtemp(prefix=f"history-{kind}-{objects}-", dir=workdir))
    try:
        build_started = time.perf_counter()
        build_staging(root / "staging", objects)
        built = time.perf_counter()
        build_seconds = built - build_started
        with catalog_url(kind, root) as url:
            deployment = new_deployment(
                "bench001",
                root,
                catalog_url=url,
                staging_root=root / "staging",
                stream={"key_pattern": "hourly"} if layout == "hourly" else None,
            )
            try:
                deployment.catalog.tables.create(TableDef.from_mapping(TABLE))
                time.sleep(max(0.0, built + deployment.config.stream.listing_margin + 0.5 - time.perf_counter()))
                register_seconds = register_processed(deployment, objects)
                counter = StatementCounter(deployment.catalog.engine)
                idle_round(deployment, counter)  # warm: caches, the page cache of the catalog and the directories
                measured = [idle_round(deployment, counter) for _ in range(rounds)]
                # No file entry of an unchanged directory: only the sweep's slice.
                assert all(m["listed"] == m["swept"] for m in measured), measured
                tracemalloc.start()
                idle_round(deployment, counter)
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                sweep = sweep_pass(deployment)
                if profile:
                    profiler = cProfile.Profile()
                    profiler.runcall(stream_once, deployment)
                    pstats.Stats(profiler).sort_stats("cumulative").print_stats(profile)
                seconds = [m["seconds"] for m in measured]
                summary = {
                    "catalog": kind,
                    "objects": objects,
                    "rounds": rounds,
                    "build_seconds": round(build_seconds, 2),
                    "register_seconds": round(register_seconds, 2),
                    "idle_round_seconds_median": round(statistics.median(seconds), 4),
                    "idle_round_seconds_all": [round(value, 4) for value in seconds],
                    "statements_per_round": measured[-1]["statements"],
                    "transactions_per_round": measured[-1]["transactions"],
                    "python_peak_bytes": peak,
                    "sweep_files_per_round": deployment.config.stream.sweep_files_per_round,
                    "sweep_round_seconds_max": round(sweep["seconds"], 4),
                    "sweep_pass_rounds": sweep["rounds"],
                    "load_avg_1m": load_avg_1m(),
                }
                accounted = daemon_names(deployment)
                try:
                    yield Prepared(objects, root / "staging", deployment, counter, accounted, summary)
                finally:
                    accounted.close()
            finally:
                deployment.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def new_rounds_in_turn(sizes: list[Prepared], new: int, new_rounds: int, profile: int) -> None:
    """Each N's first rounds of new objects, untimed: a daemon's (it starts Spark and warms it; the daemon's record
    starts from its walk) and a `--once` round (a one-off run's stored record starts from its walk: a deployment
    builds it once, on its first one-off run; its seconds are reported apart). Then `new_rounds` turns, each a
    `--once` round and a daemon's round of every N in turn."""
    for size in sizes:
        new_objects_round(size.deployment, size.root, new, size.counter, accounted=size.accounted)
        size.first_once = new_objects_round(size.deployment, size.root, new, size.counter)
    for _ in range(new_rounds):
        for size in sizes:
            size.fresh.append(new_objects_round(size.deployment, size.root, new, size.counter))
            size.recorded.append(
                new_objects_round(size.deployment, size.root, new, size.counter, accounted=size.accounted)
            )
    if profile:
        for size in sizes:
            print(f"N = {size.objects:,}: a --once round, then a daemon's")
            new_objects_round(size.deployment, size.root, new, size.counter, profile)
            new_objects_round(size.deployment, size.root, new, size.counter, profile, size.accounted)


def result_of(size: Prepared, new: int) -> dict:
    if not size.fresh:
        return size.summary
    with size.deployment.catalog.engine.connect() as c:
        stored_bytes = (
            c.execute(sa.select(sa.func.sum(sa.func.length(schema_discovery.discovery_names.c.names)))).scalar() or 0
        )
    fresh, recorded, accounted = size.fresh, size.recorded, size.accounted
    return {
        **size.summary,
        "load_avg_1m_after_new_rounds": load_avg_1m(),
        "new_objects": new,
        "new_round_seconds_median": round(statistics.median(f["seconds"] for f in fresh), 3),
        "new_round_seconds_all": [round(f["seconds"], 3) for f in fresh],
        "first_once_round_seconds": round(size.first_once["seconds"], 3) if size.first_once else None,
        "new_round_listed": fresh[-1]["listed"],
        "new_round_statements": fresh[-1]["statements"],
        "recorded_round_seconds_median": round(statistics.median(r["seconds"] for r in recorded), 3),
        "recorded_round_seconds_all": [round(r["seconds"], 3) for r in recorded],
        "recorded_round_listed": recorded[-1]["listed"],
        "recorded_round_remembered": recorded[-1]["remembered"],
        "recorded_round_statements": recorded[-1]["statements"],
        "record_directories": accounted.directories,
        "record_names": accounted.names,
        "record_watched_directories": getattr(accounted, "watching", 0),
        "record_bytes": accounted.footprint(),
        "stored_record_bytes": stored_bytes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,10000,100000", help="comma-separated N (already-processed objects)")
    parser.add_argument("--million", action="store_true", help="add N = 1,000,000 (a minute or more of setup)")
    parser.add_argument("--rounds", type=int, default=5, help="timed idle rounds per N (the median is reported)")
    parser.add_argument("--catalog", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--profile", type=int, default=0, help="print the top K functions of one more round")
    parser.add_argument(
        "--new",
        type=int,
        default=0,
        help="also time rounds that each find this many new objects and load them through Spark",
    )
    parser.add_argument("--new-rounds", type=int, default=3, help="timed rounds of --new objects per N")
    parser.add_argument("--workdir", default=None, help="where the staging roots go (default: the temp dir)")
    parser.add_argument(
        "--layout",
        choices=sorted(LAYOUTS),
        default="daily",
        help="directories per host: one per day (the default key layout) or per hour",
    )
    parser.add_argument("--out", default="bench/results/history.json")
    args = parser.parse_args()
    global layout
    layout = args.layout
    sizes = [int(size) for size in args.sizes.split(",") if size.strip()] + ([1_000_000] if args.million else [])
    workdir = Path(args.workdir or tempfile.gettempdir())
    print(
        f"{'N':>9} {'idle s (median)':>16} {'statements':>11} {'tx':>4} {'peak MiB':>9} {'register s':>11} "
        f"{'sweep max s':>12} {'pass rounds':>12}"
    )
    with contextlib.ExitStack() as stack:
        ready = []
        for objects in sizes:
            size = stack.enter_context(prepared(args.catalog, objects, args.rounds, workdir, args.profile))
            ready.append(size)
            summary = size.summary
            print(
                f"{objects:>9,} {summary['idle_round_seconds_median']:>16.4f} {summary['statements_per_round']:>11} "
                f"{summary['transactions_per_round']:>4} {summary['python_peak_bytes'] / 2**20:>9.1f} "
                f"{summary['register_seconds']:>11.1f} {summary['sweep_round_seconds_max']:>12.4f} "
                f"{summary['sweep_pass_rounds']:>12}",
                flush=True,
            )
        if args.new:
            new_rounds_in_turn(ready, args.new, args.new_rounds, args.profile)
        results = [result_of(size, args.new) for size in ready]
    for result in results if args.new else []:
        print(
            f"{result['objects']:>9,}  {args.new} new: {result['new_round_seconds_median']:.3f} s, with a daemon's "
            f"record {result['recorded_round_seconds_median']:.3f} s"
        )
    report = {"machine": brief_machine(), "date": utc_stamp(), "args": vars(args), "results": results}
    if args.new and len(results) > 1 and results[0]["objects"] == 0:
        base = results[0]["new_round_seconds_median"]
        report["new_round_ratio_to_n0"] = {
            r["objects"]: round(r["new_round_seconds_median"] / base, 2) for r in results[1:]
        }
        recorded_base = results[0]["recorded_round_seconds_median"]
        report["recorded_round_ratio_to_n0"] = {
            r["objects"]: round(r["recorded_round_seconds_median"] / recorded_base, 2) for r in results[1:]
        }
        print(
            f"{args.new} new objects, ratio to N = 0: {report['new_round_ratio_to_n0']}; with a daemon's "
            f"record: {report['recorded_round_ratio_to_n0']}"
        )
    save_json(Path(args.out), report, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
