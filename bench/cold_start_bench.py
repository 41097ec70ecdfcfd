"""Cold start: fresh-process wall time of five `silt` commands, and the DuckDB peer for the SQL count.

Setup (not timed): a temporary deployment (`silt init`, one table). Each round, interleaved: one staging object
is written, then timed as fresh processes: `silt --help`, `silt status`, `silt stream --once` (that one object),
`silt merge --once --now` (the one job it made); `silt publish --once` (not timed); then `silt sql` count and
`python -c "import duckdb; duckdb.sql('select count(*) from read_parquet(...)')"` on the same published files.
The first round warms the page cache and the bytecode caches (written under the temporary directory,
PYTHONPYCACHEPREFIX, even where PYTHONDONTWRITEBYTECODE is set) and is not counted; medians over the others.
--tree runs another checkout's code (PYTHONPATH) with this interpreter, for a before
and after on the same machine:

    .venv/bin/python bench/cold_start_bench.py                       # 5 rounds
    .venv/bin/python bench/cold_start_bench.py --tree /tmp/before --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
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
    "duckdb peer: sql count",
    "silt merge --once",
    "silt stream --once",
)


def run(command: list[str], directory: Path, environment: dict[str, str]) -> float:
    """Wall seconds of one fresh process; fails loudly if it fails."""
    started = time.perf_counter()
    result = subprocess.run(command, cwd=directory, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return seconds


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tree", default=None, help="a checkout whose siltlake to run (default: the installed one)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cold_start.json"))
    args = parser.parse_args()

    environment = {
        name: value for name, value in os.environ.items() if not name.startswith(("SILTLAKE_", "SILT_PROFILE"))
    }
    environment.pop("PYTHONDONTWRITEBYTECODE", None)  # a cold start that compiles every module is not the case
    if args.tree:
        environment["PYTHONPATH"] = str(Path(args.tree).resolve())
    silt = [sys.executable, "-m", "siltlake.cli"]
    samples: dict[str, list[float]] = {label: [] for label in LABELS}
    with tempfile.TemporaryDirectory(prefix="silt-cold-") as name:
        directory = Path(name)
        environment["PYTHONPYCACHEPREFIX"] = str(directory / "pycache")
        (directory / "access.toml").write_text(TABLE)
        run([*silt, "init"], directory, environment)
        run([*silt, "table", "create", "access.toml"], directory, environment)
        load_before = load_avg_1m()
        for round_number in range(args.rounds + 1):
            stage_object(directory, round_number)
            samples["silt --help"].append(run([*silt, "--help"], directory, environment))
            samples["silt status"].append(run([*silt, "status"], directory, environment))
            samples["silt stream --once"].append(run([*silt, "stream", "--once"], directory, environment))
            samples["silt merge --once"].append(run([*silt, "merge", "--once", "--now"], directory, environment))
            run([*silt, "publish", "--once"], directory, environment)
            # The peer reads the table's small objects (what the first publish shows): same size of answer.
            files = sorted(str(path) for path in (directory / ".siltlake" / "lake").rglob("live/*/*.parquet"))
            peer = f"import duckdb; duckdb.sql({f'select count(*) from read_parquet({files!r})'!r}).fetchall()"
            samples["silt sql count"].append(run([*silt, "sql", COUNT], directory, environment))
            samples["duckdb peer: sql count"].append(run([sys.executable, "-c", peer], directory, environment))
            if round_number == 0:  # the warm-up round
                samples = {label: [] for label in LABELS}
        load_after = load_avg_1m()

    rows = [
        {
            "command": label,
            "runs": len(values),
            "wall_seconds_median": round(statistics.median(values), 3),
            "wall_seconds_min": round(min(values), 3),
            "wall_seconds_max": round(max(values), 3),
        }
        for label, values in samples.items()
    ]
    print(f"{'command':<24} {'runs':>4} {'median s':>9} {'min':>7} {'max':>7}")
    for row in rows:
        print(
            f"{row['command']:<24} {row['runs']:>4} {row['wall_seconds_median']:>9.3f} "
            f"{row['wall_seconds_min']:>7.3f} {row['wall_seconds_max']:>7.3f}"
        )
    print(f"tree {args.tree or 'installed'}; load average before {load_before:.2f}, after {load_after:.2f}")
    save_json(
        Path(args.out),
        {
            "machine": brief_machine(),
            "tree": args.tree or "installed",
            "load_average_1m": {"before": load_before, "after": load_after},
            "results": rows,
        },
        indent=1,
    )


if __name__ == "__main__":
    main()
