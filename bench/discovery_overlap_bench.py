#!/usr/bin/env python
"""A round over a backlog of new objects, with its discovery beside its first waves (new objects registered
stream/discover.py's REGISTER_CHUNK at a time) and without (all registered in one chunk, the first wave after
them), interleaved, in one warm process (the worker processes started by an untimed round first). Reports each
round's wall seconds, when its first wave's reads were done, and when discovery registered its last chunk.

Run from the repository root:  .venv/bin/python bench/discovery_overlap_bench.py [--objects 4000 --bytes 4000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

from common import ROOT, load_avg_1m, machine, new_deployment
from inputs import input_files, prepare_jsonl_objects
from small_objects_bench import put_objects
from stream_bench import TABLE

from siltlake.stream import discover as discovering
from siltlake.stream import stream_once
from siltlake.stream.runner import Progress


class FirstRead(Progress):
    """When the round's first wave had read its objects."""

    def __init__(self, started: float) -> None:
        self.started, self.first = started, None

    def advance(self, count: int) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.started


def one_round(workdir: Path, files: list[Path], source: Path, chunk: int, rows: int) -> tuple[float, float, float]:
    """(wall, first wave read, last chunk registered) seconds of one round over fresh copies of the objects."""
    discovering.REGISTER_CHUNK = chunk
    root = workdir / "round"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    deployment = new_deployment("bench0001", root, staging_root=root / "staging")
    register_fresh = discovering._register_fresh
    registered: list[float] = []
    try:
        deployment.catalog.tables.create(TABLE)
        put_objects(files, source, root / "staging")
        started = time.perf_counter()

        def timed(*args, **kwargs) -> int:
            count = register_fresh(*args, **kwargs)
            registered.append(time.perf_counter() - started)
            return count

        discovering._register_fresh = timed
        progress = FirstRead(started)
        report = stream_once(deployment, progress)
        wall = time.perf_counter() - started
    finally:
        discovering._register_fresh = register_fresh
        deployment.close()
    if report.records_loaded != rows or report.failed:
        raise SystemExit(f"round loaded {report.records_loaded:,} of {rows:,} records: {report.failed}")
    return wall, progress.first or wall, registered[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=4000)
    parser.add_argument("--bytes", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--chunks", default="", help="comma-separated chunk sizes to compare (default: stream/discover.py's own)"
    )
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "discovery-overlap")
    args = parser.parse_args()
    data = prepare_jsonl_objects(args.workdir, args.objects, args.bytes, 7, 6)
    source = Path(data["staging_root"])
    files = input_files(source)
    sizes = [int(size) for size in args.chunks.split(",") if size] or [discovering.REGISTER_CHUNK]
    variants = {f"beside the waves (chunks of {size})": size for size in sizes}
    variants["before the waves (one chunk)"] = 10**9
    warm_root = args.workdir / "warm"
    shutil.rmtree(warm_root, ignore_errors=True)
    warm = new_deployment("bench0001", warm_root, staging_root=warm_root / "staging")
    warm.catalog.tables.create(TABLE)
    put_objects(files[:8], source, warm_root / "staging")
    stream_once(warm)  # untimed: the worker processes up
    warm.close()
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    loads = []
    for number in range(args.rounds):
        for name, chunk in variants.items():
            loads.append(load_avg_1m())
            samples[name].append(one_round(args.workdir, files, source, chunk, data["records"]))
            wall, first, last = samples[name][-1]
            print(f"round {number + 1}: {name}: {wall:.3f} s, first wave read {first:.3f} s, discovery {last:.3f} s")
    about = machine()
    print(f"\n{args.objects:,} x {args.bytes // 1000} KB ({data['records']:,} records); {about}; 1-minute load {loads}")
    print("| discovery | wall s, median (range) | first wave read, s | last chunk registered, s |")
    print("|---|---:|---:|---:|")
    for name, rounds in samples.items():
        walls = [wall for wall, _, _ in rounds]
        print(
            f"| {name} | {statistics.median(walls):.3f} ({min(walls):.3f}-{max(walls):.3f}) "
            f"| {statistics.median(first for _, first, _ in rounds):.3f} "
            f"| {statistics.median(last for _, _, last in rounds):.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
