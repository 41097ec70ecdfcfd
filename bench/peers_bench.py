#!/usr/bin/env python
"""siltlake side by side with the batched writers a user would pick instead: DuckDB's COPY and delta-rs.

Every workload runs its peers round robin (siltlake, peer 1, peer 2, siltlake, ...), --rounds counted rounds
after an uncounted warm-up round (bytecode caches written, page cache filled), and reports medians. "Cold" is
a fresh process's whole wall time; "warm" is the same work in this already-running process, with the library
imported and its connection or deployment made before the clock starts.

  ingest  N gzip JSON-lines objects of the demo table web.access (bench/inputs.py; event times over two Tokyo
          days), 400 x 30 KB and 4,000 x 4 KB, into date-partitioned zstd Parquet:
            siltlake   cold `silt stream --once` on a fresh deployment (SQLite catalog, local dirs); warm
                       stream_once in this process on a fresh deployment whose worker processes are up (an
                       untimed stream of a few other objects first), as a running daemon's round;
            duckdb     COPY (SELECT ... FROM read_json([files], format='newline_delimited', columns={...}))
                       TO out (FORMAT parquet, PARTITION_BY (dt)), dt the Tokyo date of the event time;
            delta-rs   every object read with pyarrow.json, then one write_deltalake(partition_by=["dt"],
                       mode="append") of the whole batch;
            floor      pyarrow per object: read_json, one Parquet file per object and date (2 threads; warm).
  merge   `silt merge --once --now` of 100 small objects against delta-rs optimize.compact() of a table made
          of 100 appends of the same rows, both fresh processes.
  sql     `silt sql "select count(*) from web.access"` against `python -c "import duckdb; duckdb.sql(...)"`
          over read_parquet of the same table's files, both fresh processes.

Every peer writes zstd at level 1 (siltlake's tables default to zstd through pyarrow, whose level is 1), and
every output's rows are counted after its clock stops: a peer that lost or doubled a row fails the run.

Run from the repository root:  .venv/bin/python bench/peers_bench.py [--rounds 5] [--quick]
"""

from __future__ import annotations

import argparse
import base64
import inspect
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from common import ROOT, load_avg_1m, machine, new_deployment, tree_cpu_seconds, utc_stamp, warm_page_cache
from inputs import (
    LOG_TABLE,
    PARTITION_DATE,
    commit_log_objects,
    input_files,
    object_paths,
    prepare_jsonl_objects,
    prepare_log_objects,
)
from peer_report import forked_table, peer_table, runs_lines
from small_objects_bench import WARMUP_PREFIX, put_objects, stream_checked
from stream_bench import TABLE, floor_one, null_times, read_schema

SILT = str(Path(sys.executable).with_name("silt"))
ZSTD_LEVEL = 1  # pyarrow's default zstd level, which siltlake's writers use; DuckDB's default would be 3
DUCKDB_TYPES = {"timestamp": "TIMESTAMPTZ", "string": "VARCHAR", "bigint": "BIGINT", "int": "INTEGER"}
DUCKDB_TYPES |= {"double": "DOUBLE", "boolean": "BOOLEAN"}
COUNT = "select count(*) from web.access"

# --------------------------------------------------------------------------------------------------
# the peers' code: self-contained functions, called here (warm) or sent as source to a fresh `python -c`
# (cold), so that both runs do the same work. Each setup_* is what a warm process has done before the clock.


def setup_duckdb():
    import duckdb

    return duckdb.connect()


def duckdb_copy(con, files: list[str], out: str, columns: dict[str, str], select: str, level: int) -> int:
    listed = ", ".join("'" + name.replace("'", "''") + "'" for name in files)
    return con.execute(
        f"COPY (SELECT {select} FROM read_json([{listed}], format='newline_delimited', columns={columns!r})) "
        f"TO '{out}' (FORMAT parquet, PARTITION_BY (dt), COMPRESSION zstd, COMPRESSION_LEVEL {level})"
    ).fetchone()[0]


def setup_delta():
    import deltalake  # noqa: F401
    import pyarrow.json  # noqa: F401


def delta_append(_state, files: list[str], out: str, schema: str, names: list[str], time: str, tz: str) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj
    from deltalake import WriterProperties, write_deltalake

    explicit = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(schema)))
    parse = pj.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="ignore")
    parts = []
    for path in files:
        with pa.input_stream(path, compression="gzip") as stream:
            parts.append(pj.read_json(stream, parse_options=parse))
    batch = pa.concat_tables(parts).rename_columns(names)
    dates = pc.local_timestamp(batch[time].cast(pa.timestamp("us", tz=tz))).cast(pa.date32())
    batch = batch.append_column("dt", dates)
    properties = WriterProperties(compression="ZSTD", compression_level=1)
    write_deltalake(out, batch, partition_by=["dt"], mode="append", writer_properties=properties)
    return batch.num_rows


def setup_delta_compact():
    import deltalake  # noqa: F401


def delta_compact(_state, path: str) -> int:
    from deltalake import DeltaTable, WriterProperties

    properties = WriterProperties(compression="ZSTD", compression_level=1)
    return DeltaTable(path).optimize.compact(writer_properties=properties)["numFilesAdded"]


def child_code(setup: Callable, run: Callable) -> str:
    """A `python -c` program: the two functions' source, then setup and run on the job file argv[1] names."""
    parts = ["import base64, json, sys", inspect.getsource(setup), inspect.getsource(run)]
    parts.append(f"job = json.load(open(sys.argv[1]))\nprint(json.dumps({run.__name__}({setup.__name__}(), **job)))")
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------------
# running fresh processes


def cold_environment(workdir: Path) -> dict[str, str]:
    """As bench/cold_start_bench.py: no SILTLAKE_ settings; bytecode cached (under workdir), since a cold
    start that compiles every module is not the case measured. The siltlake beside this script, as in this
    process (common.py puts it first on sys.path): a copy of another commit measures that commit's code."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("SILTLAKE_", "SILT_PROFILE"))}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    environment["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    environment["PYTHONPATH"] = str(ROOT)
    return environment


# The CPU seconds of the last timed run: this process's and its descendants' (fresh_process, timed), which
# round_robin reports beside the wall seconds (on a loaded machine a peer's wall time is mostly waiting).
LAST_CPU: list[float] = [0.0]


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def fresh_process(command: list[str], cwd: Path, environment: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of one fresh process, and its stdout; fails loudly if it fails. Its CPU (with the
    processes it waited for) goes to LAST_CPU."""
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    LAST_CPU[0] = children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)[:300]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def cold_peer(setup: Callable, run: Callable, job: dict, scratch: Path, environment: dict[str, str]) -> float:
    """Wall seconds of `python -c` running run(setup(), **job) (the job written to a file before the clock)."""
    scratch.mkdir(parents=True, exist_ok=True)
    job_file = scratch / f"{run.__name__}.json"
    job_file.write_text(json.dumps(job))
    seconds, _ = fresh_process([sys.executable, "-c", child_code(setup, run), str(job_file)], scratch, environment)
    return seconds


def timed(call: Callable[[], object]) -> float:
    """Wall seconds of call(); the CPU of this process and its descendants (worker processes) to LAST_CPU."""
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    call()
    seconds = time.perf_counter() - started
    LAST_CPU[0] = tree_cpu_seconds() - cpu
    return seconds


# --------------------------------------------------------------------------------------------------
# round robin


def round_robin(peers: dict[str, Callable[[], float]], rounds: int, warmup: int, loads: list[float]) -> dict:
    """Each peer's callable prepares (untimed), runs and checks its output (untimed), and returns the timed
    seconds. Unlike common.interleaved_runs, the check follows the clock and no sampling thread runs beside
    the peer (on 2 cores a /proc walk every 0.25 s shows in a 0.1 s run)."""
    samples: dict[str, list[float]] = {name: [] for name in peers}
    samples |= {f"{name} cpu": [] for name in peers}
    for number in range(warmup + rounds):
        counted = number >= warmup
        loads.append(load_avg_1m())
        for name, peer in peers.items():
            seconds = peer()
            if counted:
                samples[name].append(seconds)
                samples[f"{name} cpu"].append(LAST_CPU[0])
            label = f"round {number - warmup + 1}/{rounds}" if counted else "warm-up round"
            print(f"  {label}: {name}: {seconds:.3f} s, cpu {LAST_CPU[0]:.2f} s (load {load_avg_1m()})", flush=True)
    return samples


def expect(what: str, found: object, wanted: object) -> None:
    if found != wanted:
        raise SystemExit(f"{what}: found {found}, expected {wanted}: a peer lost or doubled rows")


def parquet_rows(files: list[Path]) -> int:
    return sum(pq.ParquetFile(path).metadata.num_rows for path in files)


# --------------------------------------------------------------------------------------------------
# siltlake deployments


def fresh_root(root: Path) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


def cli_deployment(root: Path, table) -> Path:
    """A fresh deployment in root for the `silt` commands: initialised, the table created, and the same settings
    as common.new_deployment in root/siltlake.toml (the commands run with root as their directory)."""
    fresh_root(root)
    deployment = new_deployment("bench0001", root, staging_root=root / "staging")
    try:
        deployment.catalog.tables.create(table)
    finally:
        deployment.close()
    (root / "siltlake.toml").write_text(
        'instance_key = "bench0001"\n'
        f'[catalog]\nurl = "sqlite:///{root / "catalog.db"}"\n'
        f'[storage]\nroot = "{root / "lake"}"\nstaging_root = "{root / "staging"}"\n'
        '[spark]\nmaster = "local[2]"\n'
        "[stream]\nsettle_time = 0\n"
    )
    return root


def lake_files(root: Path, folder: str) -> list[Path]:
    return sorted((root / "lake").rglob(f"{folder}/dt=*/*.parquet"))


# --------------------------------------------------------------------------------------------------
# 1. ingest


def ingest_peers(data: dict, warmup: dict, out: Path, environment: dict[str, str], forked: dict | None) -> dict:
    source = Path(data["staging_root"])
    files = input_files(source)
    expect(f"input objects in {source}", len(files), data["objects"])
    records = data["records"]
    names = [str(path) for path in files]
    select = ", ".join(f'"{c.source_field}" AS "{c.name}"' for c in TABLE.columns)
    time_source = next(c.source_field for c in TABLE.columns if c.name == TABLE.time_column)
    select += f", CAST(timezone('{TABLE.timezone}', \"{time_source}\") AS DATE) AS dt"
    columns = {c.source_field: DUCKDB_TYPES[c.type] for c in TABLE.columns}
    duck_job: dict[str, Any] = {"files": names, "columns": columns, "select": select, "level": ZSTD_LEVEL}
    schema = base64.b64encode(read_schema().serialize().to_pybytes()).decode()
    delta_job: dict[str, Any] = {"files": names, "schema": schema, "names": [c.name for c in TABLE.columns]}
    delta_job |= {"time": TABLE.time_column, "tz": TABLE.timezone}
    partitions: set[str] = set()

    def check(peer: str, directory: Path, found: list[Path] | None = None) -> None:
        written = found if found is not None else sorted(directory.rglob("*.parquet"))
        expect(f"{peer}: rows in {directory}", parquet_rows(written), records)
        expect(f"{peer}: null event times", null_times(directory), 0)
        dates = {path.parent.name for path in written}
        if partitions:
            expect(f"{peer}: partitions", dates, partitions)
        partitions.update(dates)

    def silt_cold(folder: str, command_environment: dict[str, str]) -> Callable[[], float]:
        def run() -> float:
            root = cli_deployment(out / folder, TABLE)
            put_objects(files, source, root / "staging")
            warm_page_cache(files)
            seconds, stdout = fresh_process([SILT, "stream", "--once", "--json"], root, command_environment)
            expect("silt stream --once: records loaded", json.loads(stdout)["records_loaded"], records)
            check("silt stream --once", root / "lake", lake_files(root, "live"))
            return seconds

        return run

    def silt_warm() -> float:
        root = fresh_root(out / "silt-warm")
        deployment = new_deployment("bench0001", root, staging_root=root / "staging")
        try:
            deployment.catalog.tables.create(TABLE)
            warm_root = Path(warmup["staging_root"])
            put_objects(input_files(warm_root), warm_root, root / "staging", WARMUP_PREFIX)
            stream_checked(deployment)  # untimed: the worker processes up, the catalog connected
            loaded_before = parquet_rows(lake_files(root, "live"))
            put_objects(files, source, root / "staging")
            warm_page_cache(files)
            reports = []
            seconds = timed(lambda: reports.append(stream_checked(deployment)))
        finally:
            deployment.close()
        expect("stream_once: records loaded", reports[0].records_loaded, records)
        expect("stream_once: rows in the lake", parquet_rows(lake_files(root, "live")) - loaded_before, records)
        return seconds

    def duck(cold: bool) -> Callable[[], float]:
        def run() -> float:
            target = fresh_root(out / "duckdb") / "table"
            job = {**duck_job, "out": str(target)}
            warm_page_cache(files)
            if cold:
                seconds = cold_peer(setup_duckdb, duckdb_copy, job, out / "scratch", environment)
            else:
                con = setup_duckdb()
                seconds = timed(lambda: duckdb_copy(con, **job))
                con.close()
            check("duckdb COPY", target)
            return seconds

        return run

    def delta(cold: bool) -> Callable[[], float]:
        def run() -> float:
            from deltalake import DeltaTable

            target = fresh_root(out / "delta") / "table"
            job = {**delta_job, "out": str(target)}
            warm_page_cache(files)
            if cold:
                seconds = cold_peer(setup_delta, delta_append, job, out / "scratch", environment)
            else:
                setup_delta()
                seconds = timed(lambda: delta_append(None, **job))
            added = DeltaTable(str(target)).get_add_actions(flatten=True)
            expect("delta-rs: rows in the log", sum(added.column("num_records").to_pylist()), records)
            check("delta-rs", target)
            return seconds

        return run

    def floor() -> float:
        target = fresh_root(out / "floor")
        explicit = read_schema()
        warm_page_cache(files)
        rows: list[int] = []
        with ThreadPoolExecutor(2) as pool:
            one = lambda item: floor_one(item[1], item[0], target, explicit, False)  # noqa: E731
            seconds = timed(lambda: rows.extend(pool.map(one, enumerate(files))))
        expect("floor: rows read", sum(rows), records)
        check("pyarrow floor", target)
        return seconds

    return {
        "siltlake cold": silt_cold("silt-cold", environment),
        **({"siltlake-forked cold": silt_cold("silt-forked", forked)} if forked else {}),
        "siltlake warm": silt_warm,
        "duckdb cold": duck(True),
        "duckdb warm": duck(False),
        "delta-rs cold": delta(True),
        "delta-rs warm": delta(False),
        "floor warm": floor,
    }


# --------------------------------------------------------------------------------------------------
# 2. merge, 3. sql


def delta_source(data: dict, directory: Path) -> Path:
    """A Delta table made of one append per small object (the rows the siltlake merge gets), made once."""
    from deltalake import WriterProperties, write_deltalake

    marker = directory / "_made_from.json"
    if marker.exists() and marker.read_text() == data["generated_at"]:
        return directory
    fresh_root(directory)
    properties = WriterProperties(compression="ZSTD", compression_level=ZSTD_LEVEL)
    for path in object_paths(data):
        rows = pq.read_table(path)
        rows = rows.append_column("dt", pa.array([PARTITION_DATE] * rows.num_rows, pa.date32()))
        write_deltalake(str(directory), rows, partition_by=["dt"], mode="append", writer_properties=properties)
    marker.write_text(data["generated_at"])
    return directory


def merge_peers(data: dict, out: Path, environment: dict[str, str], forked: dict | None) -> dict:
    rows = data["total_rows"]
    source = delta_source(data, out.parent / f"delta-appends-{len(data['objects'])}")
    warm_page_cache(object_paths(data))

    def silt(command_environment: dict[str, str]) -> Callable[[], float]:
        def run() -> float:
            root = cli_deployment(out / "silt", LOG_TABLE)
            deployment = new_deployment("bench0001", root, staging_root=root / "staging")
            try:
                table = deployment.catalog.tables.get("bench.http_log")
                commit_log_objects(deployment, table, PARTITION_DATE, data, data["objects"])
            finally:
                deployment.close()
            seconds, _ = fresh_process([SILT, "merge", "--once", "--now", "--json"], root, command_environment)
            expect("silt merge --once --now: rows merged", parquet_rows(lake_files(root, "merged")), rows)
            return seconds

        return run

    def delta() -> float:
        from deltalake import DeltaTable

        target = out / "delta"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        seconds = cold_peer(setup_delta_compact, delta_compact, {"path": str(target)}, out / "scratch", environment)
        added = DeltaTable(str(target)).get_add_actions(flatten=True)
        expect("delta-rs compact: files after", added.num_rows, 1)
        expect("delta-rs compact: rows", sum(added.column("num_records").to_pylist()), rows)
        return seconds

    return {
        "siltlake cold": silt(environment),
        **({"siltlake-forked cold": silt(forked)} if forked else {}),
        "delta-rs cold": delta,
    }


def sql_peers(data: dict, out: Path, environment: dict[str, str], forked: dict | None) -> tuple[dict, int]:
    """A table streamed once (untimed) from the ingest input; both peers count its rows, each round."""
    root = cli_deployment(out / "silt", TABLE)
    source = Path(data["staging_root"])
    put_objects(input_files(source), source, root / "staging")
    fresh_process([SILT, "stream", "--once"], root, environment)
    files = lake_files(root, "live")
    expect("sql table: rows", parquet_rows(files), data["records"])
    pattern = str(root / "lake" / "**" / "*.parquet")
    peer = f"import duckdb; print(duckdb.sql(\"select count(*) from read_parquet('{pattern}')\").fetchall()[0][0])"

    def silt(command_environment: dict[str, str]) -> Callable[[], float]:
        def run() -> float:
            warm_page_cache(files)
            seconds, stdout = fresh_process([SILT, "sql", "--format", "csv", COUNT], root, command_environment)
            expect("silt sql count", int(stdout.split()[-1]), data["records"])
            return seconds

        return run

    def duck() -> float:
        warm_page_cache(files)
        seconds, stdout = fresh_process([sys.executable, "-c", peer], root, environment)
        expect("duckdb count", int(stdout.split()[-1]), data["records"])
        return seconds

    siltlake = {"siltlake cold": silt(environment), **({"siltlake-forked cold": silt(forked)} if forked else {})}
    return {**siltlake, "duckdb cold": duck}, len(files)


LABELS = {
    "siltlake": "siltlake (`silt stream --once` / `stream_once`)",
    "duckdb": "DuckDB `COPY (read_json) TO parquet PARTITION_BY (dt)`",
    "delta-rs": "delta-rs one `write_deltalake` append (pyarrow.json read)",
    "floor": "pyarrow floor, per object (2 threads)",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="counted rounds per workload (default 5)")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="uncounted rounds first (default 1)")
    parser.add_argument("--quick", action="store_true", help="1 round, no warm-up, a tenth of the ingest objects")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "peers")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown report here")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--no-forkserver", action="store_true", help="skip the cold rounds through a `silt forkserver` started first"
    )
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    environment = cold_environment(workdir)
    forked = None if args.no_forkserver else {**environment, "SILT_FORKSERVER": str(workdir / "forkserver.sock")}
    if forked:
        workdir.mkdir(parents=True, exist_ok=True)
        fresh_process([SILT, "forkserver", "start"], workdir, forked)
    try:
        return run_workloads(args, argv, workdir, environment, forked)
    finally:
        if forked:
            subprocess.run([SILT, "forkserver", "stop"], cwd=workdir, env=forked, check=False)


def run_workloads(args: argparse.Namespace, argv: list[str] | None, workdir: Path, environment: dict, forked) -> int:
    scale = 10 if args.quick else 1
    rounds, warmup = (1, 0) if args.quick else (args.rounds, args.warmup_rounds)
    sizes = [(400 // scale, 30_000), (4000 // scale, 4_000)]
    merge_objects = 100 // scale * 2 if args.quick else 100
    load_start = os.getloadavg()
    started = utc_stamp()
    loads: list[float] = []
    report: list[str] = []
    ingest_data = None
    for objects, object_bytes in sizes:
        data = prepare_jsonl_objects(workdir, objects, object_bytes, args.seed, 6)
        warmup_data = prepare_jsonl_objects(workdir, 8, object_bytes, args.seed + 1, 6)
        ingest_data = ingest_data or data
        title = f"Ingest {objects:,} x {object_bytes // 1000} KB gzip JSON lines ({data['records']:,} records)"
        print(f"\n== {title}", flush=True)
        out = workdir / "out" / f"ingest-{objects}x{object_bytes}"
        samples = round_robin(ingest_peers(data, warmup_data, out, environment, forked), rounds, warmup, loads)
        report += [*peer_table(title, samples, LABELS), *forked_table(title, samples, LABELS)]
        report += runs_lines(title, samples)
        shutil.rmtree(out, ignore_errors=True)

    merge_data = prepare_log_objects(workdir, "peers-merge", merge_objects, 500, args.seed, chronological=False)
    title = f"Merge of {merge_objects} small objects ({merge_data['total_rows']:,} rows), fresh processes"
    print(f"\n== {title}", flush=True)
    merge = merge_peers(merge_data, workdir / "out" / "merge", environment, forked)
    samples = round_robin(merge, rounds, warmup, loads)
    labels = {"siltlake": "siltlake `silt merge --once --now`", "delta-rs": "delta-rs `optimize.compact()`"}
    report += [*peer_table(title, samples, labels), *forked_table(title, samples, labels), *runs_lines(title, samples)]

    assert ingest_data is not None
    peers, file_count = sql_peers(ingest_data, workdir / "out" / "sql", environment, forked)
    title = f"`select count(*)` over {file_count} small objects ({ingest_data['records']:,} rows), fresh processes"
    print(f"\n== {title}", flush=True)
    samples = round_robin(peers, rounds, warmup, loads)
    labels = {"siltlake": "siltlake `silt sql`", "duckdb": '`python -c "import duckdb; duckdb.sql(...)"`'}
    report += [*peer_table(title, samples, labels), *forked_table(title, samples, labels), *runs_lines(title, samples)]

    load_end = os.getloadavg()
    about = machine()
    import deltalake
    import duckdb

    head = [
        f"## peers_bench: {started} to {utc_stamp()}",
        "",
        f"Command: `.venv/bin/python bench/peers_bench.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        f"Machine: {about['usable_cpus']} cores ({about.get('cpu_model', '?')}), {about.get('ram_gb', '?')} GB RAM, "
        f"{platform.platform()}, Python {about['python']}, pyarrow {pa.__version__}, DuckDB {duckdb.__version__}, "
        f"deltalake {deltalake.__version__}",
        f"Load average (1, 5, 15 min): start {', '.join(f'{x:.2f}' for x in load_start)}; end "
        f"{', '.join(f'{x:.2f}' for x in load_end)}; 1-min at each round's start {min(loads):.2f}-{max(loads):.2f}",
        f"Rounds: {rounds} counted after {warmup} warm-up, round robin; medians. Ratios are siltlake's median over "
        "the peer's (above 1: siltlake slower); cold against cold, warm against warm. CPU: the timed process and "
        "its descendants (cold: the fresh process and what it waited for; warm: this process and its worker "
        "processes). All outputs zstd level 1.",
        "",
    ]
    text = "\n".join(head + report)
    print("\n" + text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
