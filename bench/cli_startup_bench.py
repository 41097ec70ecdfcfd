"""CLI start-up benchmark: CPU time (user + sys) of `silt --help` and `silt status`, each in fresh processes.

Setup (not timed): a temporary deployment with a SQLite catalog (`silt init`) and one table. Timed: each
command `--runs` times as `python -m siltlake.cli ...`, the CPU time read from the child's own resource
usage (os.wait4), so other processes on the machine do not count. The target is 0.4 s of CPU for each.

    .venv/bin/python bench/cli_startup_bench.py                 # 10 runs each
    .venv/bin/python bench/cli_startup_bench.py --runs 20 --out /tmp/startup.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import brief_machine, save_json

TARGET_CPU_SECONDS = 0.4
COMMANDS = {"silt --help": ["--help"], "silt status": ["status"]}
TABLE = """schema = "web"
name = "access"
time_column = "event_time"
timezone = "UTC"
merge_interval = "1h"

[[columns]]
name = "event_time"
type = "timestamp"
nullable = false
source = "time"
"""


def silt(directory: Path, *args: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one `silt` process run in directory; fails if the command fails."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "siltlake.cli", *args], cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    if status != 0:
        raise SystemExit(f"silt {' '.join(args)} failed: {process.stderr.read().decode(errors='replace')}")
    process.stderr.close()
    process.returncode = 0
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cli_startup.json"))
    args = parser.parse_args()

    environment = {name: value for name, value in os.environ.items() if not name.startswith("SILTLAKE_")}
    os.environ.clear()
    os.environ.update(environment)  # the deployment is the temporary directory's defaults, nothing else
    results = []
    with tempfile.TemporaryDirectory(prefix="silt-startup-") as name:
        directory = Path(name)
        (directory / "access.toml").write_text(TABLE)
        silt(directory, "init")
        silt(directory, "table", "create", "access.toml")
        silt(directory, "status")  # warm the page cache and the bytecode caches
        load_before = os.getloadavg()
        for label, command in COMMANDS.items():
            samples = [silt(directory, *command) for _ in range(args.runs)]
            cpu = sorted(sample[0] for sample in samples)
            results.append(
                {
                    "command": label,
                    "runs": args.runs,
                    "cpu_seconds_min": round(cpu[0], 3),
                    "cpu_seconds_median": round(statistics.median(cpu), 3),
                    "cpu_seconds_max": round(cpu[-1], 3),
                    "wall_seconds_median": round(statistics.median(sample[1] for sample in samples), 3),
                    "target_cpu_seconds": TARGET_CPU_SECONDS,
                    "met": statistics.median(cpu) < TARGET_CPU_SECONDS,
                }
            )
        load_after = os.getloadavg()

    print(f"{'command':<14} {'runs':>4} {'CPU s min':>9} {'median':>7} {'max':>6} {'wall s':>7}  target")
    for row in results:
        print(
            f"{row['command']:<14} {row['runs']:>4} {row['cpu_seconds_min']:>9.3f} "
            f"{row['cpu_seconds_median']:>7.3f} {row['cpu_seconds_max']:>6.3f} {row['wall_seconds_median']:>7.3f}  "
            f"< {TARGET_CPU_SECONDS} s CPU: {'met' if row['met'] else 'NOT met'}"
        )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    report = {
        "machine": brief_machine(),
        "load_average_1m": {"before": load_before[0], "after": load_after[0]},
        "results": results,
    }
    save_json(Path(args.out), report, indent=1)


if __name__ == "__main__":
    main()
