"""Cold start: fresh-process wall (and CPU) time of `silt` commands, and the DuckDB peer for the SQL count.

Setup (not timed): a temporary deployment per tree (`silt init`, one table). Each round, interleaved: one staging
object is written, then timed as fresh processes: `silt --help`, `silt status`, `silt stream --once` (that one
object), `silt merge --once --now` (the one job it made); `silt publish --once` (not timed); then `silt sql` count
(the same query every round, as cron runs it: from the second run its DuckDB translation is kept), `silt sql` of a
query new each round (parsed and translated), and `python -c "import duckdb; duckdb.sql('select count(*) from
read_parquet(...)')"` on the same published files. The first round warms the page cache, the bytecode caches
(written under the temporary directory, PYTHONPYCACHEPREFIX, even where PYTHONDONTWRITEBYTECODE is set) and the
kept translations (SILT_SQL_CACHE, under it too), and is not counted; medians over the others.
--tree runs another checkout's code (PYTHONPATH) with this interpreter; given more than once, the trees take
turns within each round (each its own deployment, the order alternating), so that a before and an after see the
same load on a shared machine:

    .venv/bin/python bench/cold_start_bench.py                       # 5 rounds
    .venv/bin/python bench/cold_start_bench.py --tree /tmp/before --tree . --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import brief_machine, load_avg_1m, save_json

TABLE = """schema = "web"
name = "access"
time_column = "utc_event_time"
timezone = "UTC"
merge_interval = "1h"
[[columns]]
name = "utc_event_time"
type = "timestamp"
source = "time"
nullable = false
[[columns]]
name = "user_id"
type = "bigint"
"""
COUNT = "select count(*) from web.access"
LABELS = (
    "silt --help",
    "silt status",
    "silt sql count",
    "silt sql count, new query",
    "duckdb peer: sql count",
    "silt merge --once",
    "silt stream --once",
)


def run(command: list[str], directory: Path, environment: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one fresh process; fails loudly if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, cwd=directory, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def stage_object(directory: Path, round_number: int) -> None:
    folder = directory / ".siltlake" / "staging" / "bench01.web.access" / "2026" / "11" / "20"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"time": f"2026-11-20T{round_number % 24:02d}:{minute:02d}:00Z", "user_id": minute})
        for minute in range(60)
    ]
    path = folder / f"batch-{round_number:04d}.json"
    path.write_text("\n".join(lines) + "\n")
    # Written a minute ago: `stream --once` takes it at once instead of waiting for a fresh file to settle.
    past = time.time() - 60
    os.utime(path, (past, past))


def one_round(directory: Path, environment: dict[str, str], round_number: int) -> dict[str, tuple[float, float]]:
    silt = [sys.executable, "-m", "siltlake.cli"]
    times = {}
    stage_object(directory, round_number)
    times["silt --help"] = run([*silt, "--help"], directory, environment)
    times["silt status"] = run([*silt, "status"], directory, environment)
    times["silt stream --once"] = run([*silt, "stream", "--once"], directory, environment)
    times["silt merge --once"] = run([*silt, "merge", "--once", "--now"], directory, environment)
    run([*silt, "publish", "--once"], directory, environment)
    # The peer reads the table's small objects (what the first publish shows): same size of answer.
    files = sorted(str(path) for path in (directory / ".siltlake" / "lake").rglob("live/*/*.parquet"))
    peer = f"import duckdb; duckdb.sql({f'select count(*) from read_parquet({files!r})'!r}).fetchall()"
    times["silt sql count"] = run([*silt, "sql", COUNT], directory, environment)
    new_query = f"select count(*) as n{round_number} from web.access"  # new text, the same answer from DuckDB
    times["silt sql count, new query"] = run([*silt, "sql", new_query], directory, environment)
    times["duckdb peer: sql count"] = run([sys.executable, "-c", peer], directory, environment)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--tree",
        action="append",
        default=None,
        help="a checkout whose siltlake to run (default: the installed one); more than once: they take turns",
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cold_start.json"))
    args = parser.parse_args()
    trees = args.tree or ["installed"]

    base = {name: value for name, value in os.environ.items() if not name.startswith(("SILTLAKE_", "SILT_"))}
    base.pop("PYTHONDONTWRITEBYTECODE", None)  # a cold start that compiles every module is not the case
    silt = [sys.executable, "-m", "siltlake.cli"]
    samples = {tree: {label: [] for label in LABELS} for tree in trees}
    with tempfile.TemporaryDirectory(prefix="silt-cold-") as name:
        places: dict[str, tuple[Path, dict[str, str]]] = {}
        for number, tree in enumerate(trees):
            directory = Path(name) / f"tree{number}"
            directory.mkdir()
            environment = dict(base, PYTHONPYCACHEPREFIX=str(Path(name) / "pycache"))
            environment["SILT_SQL_CACHE"] = str(directory / "sqlcache")
            if tree != "installed":
                environment["PYTHONPATH"] = str(Path(tree).resolve())
            (directory / "access.toml").write_text(TABLE)
            run([*silt, "init"], directory, environment)
            run([*silt, "table", "create", "access.toml"], directory, environment)
            places[tree] = (directory, environment)
        load_before = load_avg_1m()
        for round_number in range(args.rounds + 1):
            order = trees if round_number % 2 == 0 else trees[::-1]
            for tree in order:
                times = one_round(*places[tree], round_number)
                if round_number > 0:  # the first round warms up
                    for label, measured in times.items():
                        samples[tree][label].append(measured)
        load_after = load_avg_1m()

    results = {
        tree: [
            {
                "command": label,
                "runs": len(values),
                "wall_seconds_median": round(statistics.median(wall for wall, _ in values), 3),
                "wall_seconds_min": round(min(wall for wall, _ in values), 3),
                "wall_seconds_max": round(max(wall for wall, _ in values), 3),
                "cpu_seconds_median": round(statistics.median(cpu for _, cpu in values), 3),
            }
            for label, values in by_label.items()
        ]
        for tree, by_label in samples.items()
    }
    for tree, rows in results.items():
        print(f"tree {tree}")
        print(f"{'command':<28} {'runs':>4} {'median s':>9} {'min':>7} {'max':>7} {'CPU s':>7}")
        for row in rows:
            print(
                f"{row['command']:<28} {row['runs']:>4} {row['wall_seconds_median']:>9.3f} "
                f"{row['wall_seconds_min']:>7.3f} {row['wall_seconds_max']:>7.3f} {row['cpu_seconds_median']:>7.3f}"
            )
    print(f"load average before {load_before:.2f}, after {load_after:.2f}")
    save_json(
        Path(args.out),
        {
            "machine": brief_machine(),
            "trees": trees,
            "load_average_1m": {"before": load_before, "after": load_after},
            "results": results,
        },
        indent=1,
    )


if __name__ == "__main__":
    main()
