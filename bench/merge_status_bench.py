#!/usr/bin/env python
"""`merge_queue.status` (the dashboard's history sample runs it every minute) on the SQLite catalogs
publish_partitions_bench.py left in its --workdir (one table of N days, N - 1 switched): median of --repeats
calls per size, after one warm call.

Run from the repository root, after publish_partitions_bench.py:
  .venv/bin/python bench/merge_status_bench.py --workdir bench/data/publish_partitions
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from common import ROOT, brief_machine, load_avg_1m, save_json, utc_stamp

from siltlake.catalog import Catalog
from siltlake.clock import utcnow


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[10, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "publish_partitions")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "merge_status.json")
    args = parser.parse_args(argv)
    runs = []
    for size in args.sizes:
        catalog = Catalog(f"sqlite:///{args.workdir / f'sqlite-{size}' / 'catalog.db'}")
        catalog.merge_queue.status(utcnow(), 600)
        seconds = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            catalog.merge_queue.status(utcnow(), 600)
            seconds.append(time.perf_counter() - started)
        runs.append(
            {
                "partitions": size,
                "median_s": round(statistics.median(seconds), 5),
                "best_s": round(min(seconds), 5),
                "load_avg_1m": load_avg_1m(),
            }
        )
        print(
            f"  {size:>6} partitions: merge status {runs[-1]['median_s'] * 1000:.1f} ms (load "
            f"{runs[-1]['load_avg_1m']})",
            flush=True,
        )
        catalog.close()
    save_json(
        args.out,
        {
            "benchmark": "merge_status",
            "started": utc_stamp(),
            "machine": brief_machine(),
            "args": {k: str(v) for k, v in vars(args).items()},
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
