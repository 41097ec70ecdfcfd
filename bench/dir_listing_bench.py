"""Reading changed staging directories: what a local root's walk costs per entry with and without a
stream daemon's record of the names its earlier rounds listed, what the ways of reading a directory cost, and
what the record takes in memory per million names.

Setup (not timed): `--directories` (20) directories of `--names` (7,150) hard links each, as history_bench's
newest day holds at N = 1,000,000 (143,000 entries), then each directory changed (a file put and removed) after
a moment taken as the cursor, so every directory is changed and no file is new.

Timed (median of `--repeats` after one warm run; wall and this process's CPU): over all directories,
`os.scandir` with `is_file()` (entries, no stat), `os.scandir` with `stat()` of each, `os.listdir`, `os.listdir`
with the set difference against a full record, `os.listdir` with the ordered comparison against a record in
listing order (`names_added`); then `Storage.list_changed` without a record (today's
`silt stream --once` walk) and with one (a daemon's); a one-off run's stored record of those directories in a
SQLite catalog, stored whole and read back (`record_names`, `recorded_names`: zstd frames), beside zlib at level 1
(the form before) and the stored zstd form on the same names, the codec alone. Memory: the record's sets and names
(`AccountedNames.footprint`) and tracemalloc's count of what keeping them holds, per million names.

    .venv/bin/python bench/dir_listing_bench.py --out bench/results/dir_listing.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

from common import brief_machine, load_avg_1m, save_json, utc_stamp

from siltlake.catalog import Catalog
from siltlake.storage.accounted import AccountedNames, names_added
from siltlake.storage.filesystem import Storage


def build(root: Path, directories: int, names: int) -> list[str]:
    paths = []
    for index in range(directories):
        directory = root / f"host{index:02d}.web.access" / "2026" / "01" / "07"
        directory.mkdir(parents=True)
        original = root.parent / f"original-{index:02d}.jsonl"
        original.write_bytes(b'{"t":"2026-01-07"}\n')
        for name in range(names):
            os.link(original, directory / f"obj-{index * names + name:08d}.jsonl")
        paths.append(str(directory))
    return paths


def touch_directories(paths: list[str]) -> None:
    """Change each directory (an entry added and removed): the walk must read it, though no file is new."""
    for path in paths:
        marker = os.path.join(path, ".marker")
        Path(marker).write_bytes(b"")
        os.unlink(marker)


def timed(action: Callable[[], object], repeats: int) -> dict:
    action()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall_s": round(statistics.median(walls), 4), "cpu_s": round(statistics.median(cpus), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directories", type=int, default=20)
    parser.add_argument("--names", type=int, default=7150, help="entries per directory")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default="bench/results/dir_listing.json")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dir-listing-", dir=args.workdir))
    try:
        root = workdir / "staging"
        paths = build(root, args.directories, args.names)
        entries = args.directories * args.names
        time.sleep(0.05)
        cursor = time.time_ns()
        time.sleep(0.05)
        touch_directories(paths)
        staging = Storage(str(root))

        def scandir_is_file() -> int:
            return sum(entry.is_file() for path in paths for entry in os.scandir(path))

        def scandir_stat() -> int:
            return sum(entry.stat().st_size for path in paths for entry in os.scandir(path))

        def listdir() -> int:
            return sum(len(os.listdir(path)) for path in paths)

        records = {path: "/".join(os.listdir(path)) for path in paths}  # as AccountedNames keeps them

        def listdir_difference() -> int:
            return sum(len(set(os.listdir(path)).difference(records[path].split("/"))) for path in paths)

        def listdir_ordered_difference() -> int:  # the record in listing order: storage/accounted.names_added
            return sum(len(names_added("/".join(os.listdir(path)), records[path], most=128)) for path in paths)

        def walk_without_record() -> None:
            listing = staging.list_changed(cursor)
            assert listing.entries == entries and not listing.objects, listing.entries

        accounted = AccountedNames()
        accounted.keep(staging.list_changed(cursor, accounted).directories, time.time_ns(), 86400 * 10**9)

        def walk_with_record() -> None:
            listing = staging.list_changed(cursor, accounted)
            assert listing.remembered == entries and not listing.objects, listing.remembered

        catalog = Catalog(f"sqlite:///{workdir / 'catalog.db'}")
        catalog.upgrade()
        stored = accounted.recorded()

        def store_record() -> None:
            catalog.discovery.record_names(str(root), stored, [])

        def read_record() -> None:
            assert len(catalog.discovery.recorded_names(str(root))) == len(stored)

        names = [known.files for known in stored.values()]
        zlibbed = [zlib.compress(text.encode(), 1) for text in names]

        def zlib_both() -> None:  # the stored form before: the names' UTF-8, zlib at level 1
            for text, packed in zip(names, zlibbed, strict=True):
                zlib.compress(text.encode(), 1)
                zlib.decompress(packed).decode()

        from siltlake.catalog.discovery import _packed, _unpacked  # the stored form now: marker, length, zstd frame

        zstds = [_packed(text) for text in names]

        def zstd_both() -> None:
            for text, packed in zip(names, zstds, strict=True):
                _packed(text)
                _unpacked(packed)

        load_before = load_avg_1m()
        results = {
            name: timed(action, args.repeats)
            for name, action in (
                ("scandir_is_file", scandir_is_file),
                ("scandir_stat", scandir_stat),
                ("listdir", listdir),
                ("listdir_set_difference", listdir_difference),
                ("listdir_ordered_difference", listdir_ordered_difference),
                ("list_changed_without_record", walk_without_record),
                ("list_changed_with_record", walk_with_record),
                ("stored_record_store", store_record),
                ("stored_record_read", read_record),
                ("zlib_level1_compress_and_decompress", zlib_both),
                ("zstd_compress_and_decompress", zstd_both),
            )
        }
        catalog.close()
        load_after = load_avg_1m()
        tracemalloc.start()
        kept = AccountedNames()
        kept.keep(staging.list_changed(cursor, kept).directories, time.time_ns(), 86400 * 10**9)
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        memory = {
            "names": kept.names,
            "footprint_bytes": kept.footprint(),
            "traced_bytes": held,
            "footprint_mb_per_million_names": round(kept.footprint() / kept.names, 1),
            "traced_mb_per_million_names": round(held / kept.names, 1),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{entries:,} entries in {args.directories} directories; load {load_before} -> {load_after}")
    for name, figures in results.items():
        print(
            f"{name:>30}: {figures['wall_s']:.4f} s wall, {figures['cpu_s']:.4f} s CPU, "
            f"{figures['cpu_s'] / entries * 1e9:.0f} ns CPU per entry"
        )
    print(
        f"record: {memory['names']:,} names, {memory['footprint_mb_per_million_names']} MB per million names "
        f"(tracemalloc: {memory['traced_mb_per_million_names']})"
    )
    save_json(
        Path(args.out),
        {
            "machine": brief_machine(),
            "date": utc_stamp(),
            "args": vars(args),
            "entries": entries,
            "load_avg_1m": [load_before, load_after],
            "results": results,
            "memory": memory,
        },
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
