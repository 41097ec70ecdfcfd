#!/usr/bin/env python
"""One big gzip JSON-lines staging object to Parquet on every core: siltlake's decode against a pyarrow floor
and DuckDB, and the gzip inflaters on their own.

One object of about ``--size-mb`` MB compressed (100 or 1000; generated once and cached under ``--workdir`` by
bench/inputs.py's prepare_big_object, the demo table web.access, gzip level 6) becomes one zstd Parquet file by

  siltlake       records.read_staging_object(workers=all cores), as the stream decodes an object of
                 stream.parallel_decode_bytes or more alone in its wave (stream/stage.py decode_threads), with
                 the stream's default limits and batch_rows; its batches go to a pyarrow ParquetWriter;
  siltlake-zlib  the same with records.inflate.backend = "zlib" (no ISA-L), the fallback's cost;
  pyarrow        the floor: pyarrow.json.read_json (threads, the table's explicit schema) of a gzip input
                 stream, pyarrow.parquet.write_table; it holds the whole table in memory;
  duckdb         COPY (SELECT ... FROM read_json(path, the columns' types)) TO the file (zstd), all threads.

Each run is a fresh process (spawned) so that its peak RSS (VmHWM) is its own; the wall time is measured in it,
around the work only. Runs are interleaved, one of each peer per round, ``--repeat`` rounds (default 3): the
table gives medians. ``--inflate`` first times the inflaters alone on the same file (zlib, ISA-L, rapidgzip
when importable), decompressed bytes thrown away.

Run from the repository root:  .venv/bin/python bench/big_object_bench.py --size-mb 100
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import sys
import time
import tomllib
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from common import MB, RESULTS, ROOT, args_record, load_avg_1m, machine, utc_stamp, warm_page_cache, write_report
from inputs import prepare_big_object

PEERS = ("siltlake", "siltlake-zlib", "pyarrow", "duckdb")
DUCKDB_TYPES = {"timestamp": "TIMESTAMPTZ", "string": "VARCHAR", "bigint": "BIGINT", "int": "INTEGER"}
DUCKDB_TYPES |= {"double": "DOUBLE", "boolean": "BOOLEAN", "date": "DATE", "json": "VARCHAR"}
READ_BYTES = 1 << 20


def _table():
    from siltlake.demo.sample import TABLE_TOML
    from siltlake.tabledef import TableDef

    return TableDef.from_mapping(tomllib.loads(TABLE_TOML), source="demo table")


def _peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --------------------------------------------------------------------------------------------------
# the peers, each run in a process of its own


def run_siltlake(path: Path, out: Path, threads: int, backend: str) -> int:
    import pyarrow.parquet as pq

    from siltlake.records import inflate, read_staging_object
    from siltlake.stream.stage import object_limits
    from siltlake.streamconfig import StreamConfig

    inflate.backend = backend
    settings = StreamConfig()
    table = _table()
    rows = 0
    with open(path, "rb") as stream, pq.ParquetWriter(out, table.arrow_schema(), compression="zstd") as writer:
        batches = read_staging_object(
            stream, path.name, table, batch_rows=settings.batch_rows, limits=object_limits(settings), workers=threads
        )
        for batch in batches:
            if batch.bad:
                raise RuntimeError(f"siltlake found bad records: {batch.bad[:3]}")
            writer.write_table(batch.table)
            rows += batch.table.num_rows
    return rows


def run_pyarrow(path: Path, out: Path, threads: int) -> int:
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    pa.set_cpu_count(threads)
    table_def = _table()
    schema = pa.schema([pa.field(c.source_field, c.arrow_field().type) for c in table_def.columns])
    with pa.input_stream(str(path), compression="gzip") as stream:
        table = pj.read_json(
            stream,
            read_options=pj.ReadOptions(use_threads=True, block_size=4 << 20),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    table = table.rename_columns([c.name for c in table_def.columns])
    pq.write_table(table, out, compression="zstd")
    return table.num_rows


def run_duckdb(path: Path, out: Path, threads: int) -> int:
    import duckdb

    table_def = _table()
    columns = ", ".join(f"'{c.source_field}': '{DUCKDB_TYPES[c.type]}'" for c in table_def.columns)
    select = ", ".join(f'"{c.source_field}" AS "{c.name}"' for c in table_def.columns)
    with duckdb.connect() as connection:
        connection.execute(f"SET threads = {threads}")
        connection.execute("SET TimeZone = 'UTC'")
        connection.execute(
            f"COPY (SELECT {select} FROM read_json('{path}', format = 'newline_delimited', "
            f"compression = 'gzip', columns = {{{columns}}})) TO '{out}' (FORMAT parquet, COMPRESSION zstd)"
        )
        return connection.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()[0]


def one_run(peer: str, path: str, out: str, threads: int) -> dict:
    """One peer's run, in a fresh process: wall and CPU seconds around the work, this process's peak RSS."""
    source, target = Path(path), Path(out)
    target.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    if peer == "siltlake":
        rows = run_siltlake(source, target, threads, "isal")
    elif peer == "siltlake-zlib":
        rows = run_siltlake(source, target, threads, "zlib")
    elif peer == "pyarrow":
        rows = run_pyarrow(source, target, threads)
    elif peer == "duckdb":
        rows = run_duckdb(source, target, threads)
    else:
        raise ValueError(peer)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(_peak_rss_bytes() / MB, 1),
        "rows": rows,
        "output_bytes": target.stat().st_size,
    }


# --------------------------------------------------------------------------------------------------
# the inflaters alone


def _inflate(path: Path, make) -> int:
    out = 0
    with open(path, "rb") as handle:
        inflater = make()
        data = b""
        while True:
            if not data:
                data = handle.read(READ_BYTES)
                if not data:
                    return out
            out += len(inflater.decompress(data, 4 << 20))
            if inflater.eof:
                data = inflater.unused_data.lstrip(b"\0")
                inflater = make() if data else inflater
            else:
                data = inflater.unconsumed_tail


def _rapidgzip(path: Path, parallelization: int) -> int:
    import rapidgzip

    out = 0
    with rapidgzip.open(str(path), parallelization=parallelization) as stream:
        while chunk := stream.read(4 << 20):
            out += len(chunk)
    return out


def time_inflaters(path: Path, repeat: int, threads: int) -> list[dict]:
    inflaters = {"zlib": lambda: _inflate(path, lambda: zlib.decompressobj(wbits=31))}
    try:
        from isal import isal_zlib

        inflaters["isal (ISA-L)"] = lambda: _inflate(path, lambda: isal_zlib.decompressobj(wbits=31))
    except ImportError:
        print("inflate: no isal", flush=True)
    try:
        import rapidgzip  # noqa: F401

        inflaters["rapidgzip, 1 thread"] = lambda: _rapidgzip(path, 1)
        inflaters[f"rapidgzip, {threads} threads"] = lambda: _rapidgzip(path, threads)
    except ImportError:
        print("inflate: no rapidgzip", flush=True)
    size = path.stat().st_size
    found = []
    for name, inflate in inflaters.items():
        walls, cpus, out = [], [], 0
        for _ in range(repeat):
            cpu, started = time.process_time(), time.perf_counter()
            out = inflate()
            walls.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        row = {
            "inflater": name,
            "median_seconds": round(wall, 3),
            "median_cpu_seconds": round(cpu, 2),
            "compressed_mb_per_s": round(size / MB / wall, 1),
            "decompressed_mb_per_s": round(out / MB / wall, 1),
            "decompressed_bytes": out,
        }
        found.append(row)
        print(
            f"  inflate {name}: {wall:.2f} s (cpu {cpu:.2f} s), {row['compressed_mb_per_s']} MB/s in, "
            f"{row['decompressed_mb_per_s']} MB/s out",
            flush=True,
        )
    return found


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=100, help="compressed size of the object, about (100, 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of runs, one of each peer (default 3)")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {','.join(PEERS)}")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="cores each peer may use")
    parser.add_argument("--inflate", action="store_true", help="first time the gzip inflaters alone")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data", help="cached input and outputs")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON report (default bench/results/big_decode_<n>mb.json)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--compresslevel", type=int, default=6)
    args = parser.parse_args(argv)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(peers) - set(PEERS)
    if unknown:
        parser.error(f"unknown peers: {', '.join(sorted(unknown))}")
    data = prepare_big_object(args.workdir, args.size_mb, args.seed, args.compresslevel)
    path = Path(data["path"])
    outputs = args.workdir / "big-decode-out"
    outputs.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "bench": "big_object_decode",
        "started": utc_stamp(),
        "args": args_record(args),
        "machine": machine(),
        "input": {k: data[k] for k in ("path", "bytes", "records", "compresslevel")},
    }
    if args.inflate:
        warm_page_cache([path])
        report["inflate"] = time_inflaters(path, args.repeat, args.threads)
    runs: dict[str, list[dict]] = {peer: [] for peer in peers}
    context = multiprocessing.get_context("spawn")
    for attempt in range(args.repeat):
        for peer in peers:
            warm_page_cache([path])
            load = load_avg_1m()
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                run = pool.submit(one_run, peer, str(path), str(outputs / f"{peer}.parquet"), args.threads).result()
            run["load_avg_1m_before"] = load
            runs[peer].append(run)
            print(
                f"  round {attempt + 1}/{args.repeat}: {peer}: {run['seconds']:.2f} s (cpu {run['cpu_seconds']} s, "
                f"peak RSS {run['peak_rss_mb']} MB, load {load})",
                flush=True,
            )
    table = []
    for peer, items in runs.items():
        seconds = statistics.median(r["seconds"] for r in items)
        rows = {r["rows"] for r in items}
        if rows != {data["records"]}:
            print(f"WARNING: {peer} wrote {rows} rows of {data['records']}", file=sys.stderr)
        table.append(
            {
                "peer": peer,
                "median_seconds": round(seconds, 3),
                "median_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in items), 2),
                "compressed_mb_per_s": round(data["bytes"] / MB / seconds, 1),
                "records_per_s": round(data["records"] / seconds),
                "median_peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in items), 1),
                "runs": items,
            }
        )
    report["peers"] = table
    print(f"\n{'peer':15s} {'median s':>9s} {'cpu s':>7s} {'MB/s in':>8s} {'records/s':>11s} {'peak RSS MB':>12s}")
    for row in table:
        print(
            f"{row['peer']:15s} {row['median_seconds']:9.2f} {row['median_cpu_seconds']:7.1f} "
            f"{row['compressed_mb_per_s']:8.1f} {row['records_per_s']:11,d} {row['median_peak_rss_mb']:12.0f}"
        )
    write_report(args.out or RESULTS / f"big_decode_{args.size_mb}mb.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
