#!/usr/bin/env python
"""A warm Spark session: `silt sql --engine spark` answered through the Spark Connect server `silt run`
holds (spark.connect) beside the same command starting Spark itself, side by side in one run with `silt status`.

Setup (not timed): interactive_bench's deployment (web.access, --rows rows over --days Tokyo days, published), and
`silt run` there with SILTLAKE_SPARK__CONNECT=127.0.0.1:<a free port>, waited for until a query answers through it.
Timed, interleaved, medians of --repeats, each command a fresh `python -m siltlake.cli` process (wall time):

  silt status | silt sql --engine spark 'SELECT count(*) FROM web.access' through the server (warm) |
  the same without spark.connect (cold: a JVM and a SparkSession of its own)

The answers of the two Spark paths are compared. `silt run` is stopped (SIGTERM) at the end.

    .venv/bin/python bench/connect_bench.py                  # --repeats 5
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from common import brief_machine, load_avg_1m, save_json
from interactive_bench import COUNT, built_deployment, child_environment, median, silt_wall, table_arguments


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answer(directory: Path, **extra: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "siltlake.cli", "sql", "--engine", "spark", COUNT, "--format", "csv"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_environment(directory, **extra),
    )
    if result.returncode:
        raise SystemExit(result.stderr)
    return result.stdout


def wait_for_server(directory: Path, address: str, server: subprocess.Popen, timeout: float = 300) -> None:
    """Until a query answers through the server (`silt sql` says so on stderr while it does not)."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"silt run exited {server.returncode}")
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            time.sleep(1)
            continue
        answer(directory, SILTLAKE_SPARK__CONNECT=address)
        return
    raise SystemExit(f"no Spark Connect server at {address} after {timeout:.0f} s")


def main() -> None:
    args = table_arguments(__doc__, 5, "connect.json").parse_args()
    with built_deployment(args, "silt-connect-") as directory:
        address = f"127.0.0.1:{free_port()}"
        server = subprocess.Popen(
            [sys.executable, "-m", "siltlake.cli", "run"],
            cwd=directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=child_environment(directory, SILTLAKE_SPARK__CONNECT=address),
        )
        try:
            wait_for_server(directory, address, server)
            warm_answer, cold_answer = answer(directory, SILTLAKE_SPARK__CONNECT=address), answer(directory)
            assert warm_answer == cold_answer, (warm_answer, cold_answer)
            load_before = os.getloadavg()
            walls: dict[str, list[float]] = {
                "silt status": [],
                "silt sql --engine spark, warm (Spark Connect)": [],
                "silt sql --engine spark, cold (own SparkSession)": [],
            }
            loads: list[float] = []
            for _ in range(args.repeats):
                walls["silt status"].append(silt_wall(directory, "status"))
                walls["silt sql --engine spark, warm (Spark Connect)"].append(
                    silt_wall(directory, "sql", "--engine", "spark", COUNT, SILTLAKE_SPARK__CONNECT=address)
                )
                walls["silt sql --engine spark, cold (own SparkSession)"].append(
                    silt_wall(directory, "sql", "--engine", "spark", COUNT)
                )
                loads.append(load_avg_1m())
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=120)
        medians = {label: median(values) for label, values in walls.items()}
        warm = medians["silt sql --engine spark, warm (Spark Connect)"]
        report = {
            "machine": brief_machine(),
            "load_avg_before": [round(x, 2) for x in load_before],
            "load_avg_1m_per_round": loads,
            "rows": args.rows,
            "days": args.days,
            "repeats": args.repeats,
            "answer": warm_answer.strip().splitlines()[-1],
            "median_wall_seconds": medians,
            "samples": {label: [round(value, 3) for value in values] for label, values in walls.items()},
            "cold_over_warm": round(medians["silt sql --engine spark, cold (own SparkSession)"] / warm, 2),
            "warm_over_status": round(warm / medians["silt status"], 2),
            "load_avg_after": round(load_avg_1m(), 2),
        }
    save_json(Path(args.out), report)
    import json

    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
