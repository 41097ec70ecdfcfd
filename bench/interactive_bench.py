#!/usr/bin/env python
"""Interactive speed: `silt sql` answered by DuckDB without Spark, side by side in one run with
`silt status`, `silt sql --engine spark`, an unknown table and a parse error; and Table.to_duckdb beside DuckDB's
own read_parquet over the same files.

Setup (not timed): a deployment in a temporary directory (SQLite catalog, local lake) with web.access,
--rows rows (456,800 by default) over --days Tokyo days as small objects of 5,000 rows
(written as the stream writes them: the table's columns, then dt, with Iceberg field ids; before 2026-12-03,
without dt), published once. Timed, interleaved, medians of --repeats (Spark: --spark-repeats), each command a fresh
`python -m siltlake.cli` process (wall time):

  silt status | silt sql 'SELECT count(*) FROM web.access' | the same with --engine spark |
  silt sql on web.nope (unknown table) | silt sql 'SELEC 1' (parse error) | the same parse error with a table
  name in it | a fresh process: Lake.open().table('web.access').to_duckdb(connection) and its count |
  silt delete --where 'user_id = <n>' of one day (a different user each run, so each run rewrites the day:
  in-process, publish.in_process_rewrite_bytes' default) | the same on Spark (the bound set to 0).

Each command runs as an installed siltlake would: with bytecode caches (PYTHONDONTWRITEBYTECODE, which a
development shell may set, is dropped; PYTHONPYCACHEPREFIX puts the caches in the temporary directory).

In process, one day, medians of --duckdb-repeats (120), each sample on a fresh DuckDB connection, the peers' order
turned by one each repeat (none always follows the heaviest), wall time:
  to_duckdb = planning (to_duckdb(connection, dates=[day]).create_view(...): the catalog snapshot, manifests,
  the relation and the view made of it, each bind reading the files' footers) + query (the SQL over that view:
  each column cast to its type, dt from the partition); to_duckdb_view = the same with the view made by
  to_duckdb(connection, dates=[day], view=...) (made unbound: DuckDB binds it in the query);
  read_parquet = the same SQL over DuckDB's read_parquet([Table.files(dates=[day])], hive_partitioning), the
  file list made beforehand (no planning, no union_by_name, no casts); read_parquet_union = the same with
  union_by_name = true (what a reader of files whose schemas differ needs: the like-for-like peer of the query);
  listed_read_parquet = read_parquet with its file list asked of Table.files(dates=[day]) inside the clock (the
  direct peer paying for knowing its files, as a caller without siltlake's reader would).
Each peer's wall and CPU (this process's user + system time, DuckDB's threads included) are recorded. Beside the
ratio of medians, paired_ratio_view is 1 + the median of each repeat's (to_duckdb_view - read_parquet) over
read_parquet's median: the two ran moments apart, so a drift of the machine's speed does not enter it.
Queries: a full-day scan (count, distinct users per action) and a one-hour top-N (users by requests in one hour).

    .venv/bin/python bench/interactive_bench.py                  # --repeats 7 --spark-repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from common import RESULTS, brief_machine, commit_small_objects, load_avg_1m, new_deployment, save_json

TABLE = """schema = "web"
name = "access"
time_column = "utc_event_time"
timezone = "Asia/Tokyo"
merge_interval = "12h"

[[columns]]
name = "utc_event_time"
type = "timestamp"
nullable = false
source = "time"

[[columns]]
name = "user_id"
type = "bigint"

[[columns]]
name = "action"
type = "string"

[[columns]]
name = "status"
type = "int"
"""
FIRST_DAY = dt.date(2026, 11, 20)
OBJECT_ROWS = 5_000
COUNT = "SELECT count(*) FROM web.access"
FULL_DAY = "SELECT action, count(*) AS n, count(DISTINCT user_id) AS users FROM {rel} GROUP BY action"
TOP_N = (
    "SELECT user_id, count(*) AS n FROM {rel} WHERE utc_event_time >= TIMESTAMPTZ '{start}' AND "
    "utc_event_time < TIMESTAMPTZ '{end}' GROUP BY user_id ORDER BY n DESC, user_id LIMIT 10"
)
FRESH_LAKE = (
    "import duckdb\nfrom siltlake.lake import Lake\nconnection = duckdb.connect()\n"
    "print(Lake.open().table('web.access').to_duckdb(connection).aggregate('count(*)').fetchall())"
)


def build(directory: Path, rows: int, days: int) -> None:
    (directory / "access.toml").write_text(TABLE)
    deployment = new_deployment("bench032", directory / ".siltlake")
    (directory / "siltlake.toml").write_text(
        f'instance_key = "bench032"\n[catalog]\nurl = "{deployment.config.catalog.url}"\n'
        f'[storage]\nroot = "{deployment.config.storage.root}"\n'
        f'staging_root = "{deployment.config.storage.staging_root}"\n'
    )
    from siltlake.publish import publish_once
    from siltlake.tabledef import load_table_file

    deployment.catalog.tables.create(load_table_file(directory / "access.toml"))
    per_day = rows // days
    objects = []
    for day_number in range(days):
        day = FIRST_DAY + dt.timedelta(days=day_number)
        start = dt.datetime.combine(day, dt.time(0), tzinfo=dt.UTC) - dt.timedelta(hours=9)
        for first in range(0, per_day, OBJECT_ROWS):
            count = min(OBJECT_ROWS, per_day - first)
            index = range(first, first + count)
            objects.append(
                (
                    day,
                    pa.table(
                        {
                            "utc_event_time": pa.array(
                                [start + dt.timedelta(seconds=i * 86_399 // per_day) for i in index],
                                pa.timestamp("us", tz="UTC"),
                            ),
                            "user_id": pa.array([(i * 7919) % 5_000 for i in index], pa.int64()),
                            "action": pa.array([("view", "login", "logout", "search", "buy")[i % 5] for i in index]),
                            "status": pa.array([(200, 200, 200, 404, 500)[i % 5] for i in index], pa.int32()),
                        }
                    ),
                )
            )
    for chunk in range(0, len(objects), 32):
        commit_small_objects(deployment, "web.access", objects[chunk : chunk + 32])
    publish_once(deployment)
    deployment.close()


def table_arguments(description: str, repeats: int, results: str) -> argparse.ArgumentParser:
    """A benchmark's parser: the table's size (--rows, --days), --repeats, and --out (bench/results/<results>)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=456_800)
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--out", default=str(RESULTS / results))
    return parser


@contextlib.contextmanager
def built_deployment(args: argparse.Namespace, prefix: str) -> Iterator[Path]:
    """A temporary directory holding the built deployment (build), its commands blind to this shell's
    SILTLAKE_* settings: they read its siltlake.toml only."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("SILTLAKE_")}
    os.environ.clear()
    os.environ.update(environment)
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        build(Path(name), args.rows, args.days)
        yield Path(name)


def child_environment(directory: Path, **extra: str) -> dict[str, str]:
    """This environment as an installed siltlake's commands see it: bytecode caches on (kept in `directory`)."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**environment, "PYTHONPYCACHEPREFIX": str(directory / "pycache"), **extra}


def silt_wall(directory: Path, *args: str, expect: int = 0, **extra: str) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "siltlake.cli", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_environment(directory, **extra),
    )
    wall = time.perf_counter() - started
    if result.returncode != expect:
        raise SystemExit(f"silt {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return wall


def python_wall(directory: Path, code: str) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_environment(directory),
    )
    if result.returncode:
        raise SystemExit(result.stderr)
    return time.perf_counter() - started


def delete_command(run: int) -> list[str]:
    """`silt delete` of one user's rows from the third day: another user each run, so each run rewrites it."""
    return [
        "delete",
        "web.access",
        "--where",
        f"user_id = {run + 1}",
        "--date",
        (FIRST_DAY + dt.timedelta(days=2)).isoformat(),
    ]


def median(samples: list[float], digits: int = 3) -> float:
    return round(statistics.median(samples), digits)


def local_paths(lake, uris: list[str]) -> list[str]:  # a siltlake Lake
    return [lake.deployment.lake.path(uri.split(lake.deployment.lake.root + "/", 1)[1]) for uri in uris]


def read_parquet_of(paths: list[str], union: bool = False) -> str:
    """DuckDB's own reader of exactly these files, dt from their directories."""
    listed = ", ".join(f"'{path}'" for path in paths)
    return (
        f"read_parquet([{listed}], {'union_by_name = true, ' if union else ''}hive_partitioning = true, "
        "hive_types = {'dt': DATE})"
    )


def in_process(directory: Path, repeats: int) -> dict:
    import duckdb

    from siltlake.lake import Lake

    os.chdir(directory)
    day = FIRST_DAY + dt.timedelta(days=1)
    start = dt.datetime.combine(day, dt.time(3), tzinfo=dt.UTC)
    window = {"start": start.isoformat(), "end": (start + dt.timedelta(hours=1)).isoformat()}
    results = {}
    with Lake.open() as lake:
        table = lake.table("web.access")
        paths = local_paths(lake, table.files(dates=[day]))
        direct = {"read_parquet": read_parquet_of(paths), "read_parquet_union": read_parquet_of(paths, union=True)}
        for label, query in (("full_day_scan", FULL_DAY), ("one_hour_top_n", TOP_N)):
            peers = ("to_duckdb", "to_duckdb_view", *direct, "listed_read_parquet")
            samples: dict[str, list[float]] = {
                name: []
                for name in ("to_duckdb_planning", "to_duckdb_query", *peers, *(f"cpu_{peer}" for peer in peers))
            }
            answers = {}
            for repeat in range(repeats):
                turn = repeat % len(peers)
                for peer in peers[turn:] + peers[:turn]:
                    with duckdb.connect() as connection:
                        connection.execute("SET TimeZone = 'UTC'")
                        cpu, started = time.process_time(), time.perf_counter()
                        if peer == "to_duckdb":
                            table.to_duckdb(connection, dates=[day]).create_view("day_rows")
                            planned = time.perf_counter()
                            samples["to_duckdb_planning"].append(planned - started)
                            relation = "day_rows"
                        elif peer == "to_duckdb_view":
                            table.to_duckdb(connection, dates=[day], view="day_rows")
                            relation = "day_rows"
                        elif peer == "listed_read_parquet":
                            relation = read_parquet_of(local_paths(lake, table.files(dates=[day])))
                        else:
                            relation = direct[peer]
                        answers[peer] = connection.execute(query.format(rel=relation, **window)).fetchall()
                        samples[peer].append(time.perf_counter() - started)
                        samples[f"cpu_{peer}"].append(time.process_time() - cpu)
                        if peer == "to_duckdb":
                            samples["to_duckdb_query"].append(time.perf_counter() - planned)
            assert len({tuple(sorted(rows)) for rows in answers.values()}) == 1, label
            got = {peer: median(values, 5) for peer, values in samples.items()}  # queries of 5-20 ms
            got["ratio"] = round(got["to_duckdb"] / got["read_parquet"], 2)
            got["ratio_view"] = round(got["to_duckdb_view"] / got["read_parquet"], 2)
            got["cpu_ratio_view"] = round(got["cpu_to_duckdb_view"] / got["cpu_read_parquet"], 2)
            # Paired: each repeat's two samples ran moments apart, so a drift in the machine's speed (a neighbour's
            # load) moves both; the median of their differences is the overhead, put over read_parquet's median.
            overhead = statistics.median(
                view - direct for view, direct in zip(samples["to_duckdb_view"], samples["read_parquet"], strict=True)
            )
            got["paired_ratio_view"] = round(1 + overhead / got["read_parquet"], 3)
            got["paired_overhead_ms_view"] = round(overhead * 1000, 3)
            got["ratio_vs_listed"] = round(got["to_duckdb"] / got["listed_read_parquet"], 2)
            got["cpu_ratio"] = round(got["cpu_to_duckdb"] / got["cpu_read_parquet"], 2)
            got["cpu_ratio_vs_listed"] = round(got["cpu_to_duckdb"] / got["cpu_listed_read_parquet"], 2)
            got["query_ratio_like_for_like"] = round(got["to_duckdb_query"] / got["read_parquet_union"], 2)
            got["files"] = len(paths)
            got["day_bytes"] = sum(os.path.getsize(path) for path in paths)
            results[label] = got
    return results


def main() -> None:
    parser = table_arguments(__doc__, 7, "interactive.json")
    parser.add_argument("--spark-repeats", type=int, default=3)
    parser.add_argument("--duckdb-repeats", type=int, default=120, help="samples of each in-process DuckDB peer")
    args = parser.parse_args()
    with built_deployment(args, "silt-interactive-") as directory:
        silt_wall(directory, "sql", COUNT)  # warm the page cache and the bytecode caches
        load_before = os.getloadavg()
        commands = {
            "silt status": (["status"], 0),
            "silt sql count (DuckDB)": (["sql", COUNT], 0),
            "silt sql unknown table": (["sql", "SELECT count(*) FROM web.nope"], 2),
            "silt sql parse error": (["sql", "SELEC 1"], 2),
            "silt sql parse error naming a table": (["sql", "SELECT count(*) FROM web.access WHER 1"], 2),
        }
        fresh = "fresh process Lake.open + to_duckdb count"
        walls: dict[str, list[float]] = {label: [] for label in [*commands, fresh]}
        small_delete = "silt delete of one day (in-process)"
        walls[small_delete] = []
        for run in range(args.repeats):
            for label, (command, code) in commands.items():
                walls[label].append(silt_wall(directory, *command, expect=code))
            walls[fresh].append(python_wall(directory, FRESH_LAKE))
            walls[small_delete].append(silt_wall(directory, *delete_command(run)))
        walls["silt sql count --engine spark"] = []
        walls["silt delete of one day (Spark)"] = []
        for run in range(args.spark_repeats):
            walls["silt sql count --engine spark"].append(silt_wall(directory, "sql", "--engine", "spark", COUNT))
            walls["silt delete of one day (Spark)"].append(
                silt_wall(
                    directory, *delete_command(args.repeats + run), SILTLAKE_PUBLISH__IN_PROCESS_REWRITE_BYTES="0"
                )
            )
        commands_result = {label: median(values) for label, values in walls.items() if values}
        status = commands_result["silt status"]
        report = {
            "machine": brief_machine(),
            "load_avg_before": [round(x, 2) for x in load_before],
            "rows": args.rows,
            "days": args.days,
            "repeats": args.repeats,
            "spark_repeats": args.spark_repeats,
            "duckdb_repeats": args.duckdb_repeats,
            "median_wall_seconds": commands_result,
            "vs_status": {label: round(value / status, 2) for label, value in commands_result.items()},
            "to_duckdb_vs_read_parquet": in_process(directory, args.duckdb_repeats),
            "load_avg_after": round(load_avg_1m(), 2),
        }
    save_json(Path(args.out), report)
    import json

    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
