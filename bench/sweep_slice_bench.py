"""What one slice of a local staging root's rolling sweep costs per file (docs/design.md, "Discovery reads what is
new"): `Storage.sweep` (reading directories, `stat` of each file) and `_register` (settle, the catalog lookups),
in this process's CPU, on history_bench.py's root of N processed objects; then whole `discover` rounds. Each slice
looks every file up, as a daily check pass does, past an expiry watermark a week back (as reap leaves it).

    .venv/bin/python bench/sweep_slice_bench.py --catalog sqlite --objects 100000 --slice 20000
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import history_bench
from common import catalog_url, load_avg_1m, new_deployment

from siltlake.clock import utcnow
from siltlake.stream.discover import _register, _unexpired, discover
from siltlake.tabledef import TableDef


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--slice", type=int, default=20_000, help="files a slice reads")
    parser.add_argument("--slices", type=int, default=6, help="slices timed (the median is reported)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sweep-slice-"))
    try:
        history_bench.build_staging(root / "staging", args.objects)
        with catalog_url(args.catalog, root) as url:
            deployment = new_deployment(
                "bench001",
                root,
                catalog_url=url,
                staging_root=root / "staging",
                stream={"sweep_files_per_round": args.slice},
            )
            try:
                deployment.catalog.tables.create(TableDef.from_mapping(history_bench.TABLE))
                time.sleep(deployment.config.stream.listing_margin + 1)
                history_bench.register_processed(deployment, args.objects)
                reading, registering, after = [], [], None
                watermark = utcnow() - dt.timedelta(days=7)
                for _ in range(args.slices):
                    started = time.process_time()
                    part = deployment.staging.sweep(after, args.slice)
                    read = time.process_time()
                    _register(deployment, _unexpired(deployment, part.objects, watermark), watched=False)
                    reading.append(read - started)
                    registering.append(time.process_time() - read)
                    after = None if part.complete else part.last_key
                rounds = []
                for _ in range(4):
                    started = time.process_time()
                    discover(deployment)
                    rounds.append(time.process_time() - started)
            finally:
                deployment.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    read, register = statistics.median(reading), statistics.median(registering)
    print(
        f"{args.catalog} {args.objects:,} files, slices of {args.slice:,}: sweep {read:.3f} s CPU, register "
        f"{register:.3f} s CPU, {(read + register) / args.slice * 1e6:.1f} us a file; a discover round "
        f"{statistics.median(rounds):.3f} s CPU; load {load_avg_1m()}"
    )


if __name__ == "__main__":
    main()
