"""What the benchmark scripts share: the machine, measuring a run, repeated runs, reports, deployments,
Spark sessions and catalogs.

Importing this module puts the repository root on sys.path, so that the scripts run as
``python bench/<name>.py`` from a checkout and import the siltlake beside them.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MB = 1_000_000
MIB = 1024 * 1024
RESULTS = ROOT / "bench" / "results"
PG_ADMIN_URL = os.environ.get("SILTLAKE_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


# --------------------------------------------------------------------------------------------------
# the machine


def machine() -> dict:
    info: dict = {
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram_gb"] = round(int(line.split()[1]) * 1024 / 2**30, 1)
                break
    except OSError:
        pass
    try:
        import pyspark

        info["pyspark"] = pyspark.__version__
    except ImportError:
        info["pyspark"] = None
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        info["java"] = (java.stderr or java.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        info["java"] = None
    return info


def brief_machine() -> dict:
    """The few facts the small benchmarks (reap, CLI start-up) record."""
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def load_avg_1m() -> float:
    return round(os.getloadavg()[0], 2)


def utc_stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------------
# measuring a run: wall, CPU and memory of the process tree (a Spark JVM included)


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        children = parents.get(queue.pop(), [])
        found.extend(children)
        queue.extend(children)
    return found


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process, its reaped children and its live descendants (such
    as a Spark JVM), so a peer's CPU cost shows even when other work shares the machine."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    if not Path("/proc/self/stat").exists():
        return total
    tick = os.sysconf("SC_CLK_TCK")
    for pid in _descendants(os.getpid()):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        rest = fields[fields.rindex(")") + 2 :].split()
        # utime, stime and the times of the children it reaped: a Spark Python worker that exits (reaped by the
        # JVM or PySpark's daemon) keeps counting, where the live sum alone dropped it (a negative peer's CPU).
        total += sum(int(value) for value in rest[11:15]) / tick
    return total


def tree_rss_bytes() -> int:
    """Resident memory of this process and its live descendants (a Spark JVM included)."""
    total = 0
    for pid in [os.getpid(), *_descendants(os.getpid())]:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total


def own_status_bytes(field: str) -> int:
    """A memory field of this process's /proc/self/status (VmRSS, VmHWM, ...), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


class Measure:
    """Wall seconds, CPU seconds and peak resident memory of the process tree, and the machine's
    load, around a peer's run."""

    def __init__(self, sample_seconds: float = 0.25):
        self.sample_seconds = sample_seconds
        self.peak_rss = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.peak_rss = max(self.peak_rss, tree_rss_bytes())
            if self._stop.wait(self.sample_seconds):
                return

    def __enter__(self) -> Measure:
        self.load_before = load_avg_1m()
        self.cpu_before = tree_cpu_seconds()
        if Path("/proc/self/status").exists():
            self._sampler.start()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc_info) -> None:
        self.seconds = time.perf_counter() - self.started
        self.cpu_seconds = tree_cpu_seconds() - self.cpu_before
        self.load_after = load_avg_1m()
        self._stop.set()
        if self._sampler.is_alive():
            self._sampler.join()

    def extra(self) -> dict:
        return {
            "cpu_seconds": round(self.cpu_seconds, 2),
            "cpu_per_wall": round(self.cpu_seconds / self.seconds, 2) if self.seconds else None,
            "peak_tree_rss_mb": round(self.peak_rss / MB, 1) if self.peak_rss else None,
            "load_avg_1m_before": self.load_before,
            "load_avg_1m_after": self.load_after,
        }


# --------------------------------------------------------------------------------------------------
# repeated runs: best and median


def run_record(measured: Measure, details: dict | None) -> dict:
    record = {"seconds": round(measured.seconds, 3), **measured.extra(), **(details or {})}
    if measured.cpu_seconds < 0:  # a Spark Python worker exited mid-run and took its CPU time with it
        record["cpu_seconds"] = record["cpu_per_wall"] = None
    return record


def median_cpu(records: list[dict]) -> float | None:
    known = [r["cpu_seconds"] for r in records if r["cpu_seconds"] is not None]
    return round(statistics.median(known), 2) if known else None


def timed_runs(
    label: str, repeats: int, prepare: Callable[[int], object] | None, run: Callable[[object], dict]
) -> dict:
    """Run `run(prepare(i))` `repeats` times; prepare (untimed) gives each run a fresh start."""
    runs = []
    for attempt in range(repeats):
        state = prepare(attempt) if prepare else None
        with Measure() as measured:
            details = run(state)
        runs.append(run_record(measured, details))
        print(
            f"  {label}: run {attempt + 1}/{repeats}: {measured.seconds:.2f} s "
            f"(cpu {measured.cpu_seconds:.1f} s, load {measured.load_before})",
            flush=True,
        )
    seconds = [r["seconds"] for r in runs]
    return {
        "peer": label,
        "status": "ok",
        "best_seconds": min(seconds),
        "median_seconds": round(statistics.median(seconds), 3),
        "median_cpu_seconds": median_cpu(runs),
        "runs": runs,
    }


def interleaved_runs(
    peers: dict[str, tuple[Callable[[int], object] | None, Callable[[object], dict]]], repeats: int
) -> dict[str, dict]:
    """Like timed_runs(), but one run of every peer per round, so the peers share whatever load the
    machine has (it is shared) instead of one peer getting a quiet minute and another a busy one."""
    runs: dict[str, list[dict]] = {name: [] for name in peers}
    for attempt in range(repeats):
        for name, (prepare, run) in peers.items():
            state = prepare(attempt) if prepare else None
            # The garbage a peer's preparation left is collected before its clock starts, not in its run: a full
            # collection of this process's heap (a SparkSession's objects among them) takes 20-40 ms.
            gc.collect()
            with Measure() as measured:
                details = run(state)
            runs[name].append(run_record(measured, details))
            print(
                f"  round {attempt + 1}/{repeats}: {name}: {measured.seconds:.2f} s "
                f"(cpu {measured.cpu_seconds:.1f} s, load {measured.load_before})",
                flush=True,
            )
    found = {}
    for name, items in runs.items():
        seconds = [r["seconds"] for r in items]
        found[name] = {
            "peer": name,
            "status": "ok",
            "best_seconds": min(seconds),
            "median_seconds": round(statistics.median(seconds), 3),
            "median_cpu_seconds": median_cpu(items),
            "runs": items,
        }
    return found


# --------------------------------------------------------------------------------------------------
# inputs and reports


def warm_page_cache(files: list[Path]) -> None:
    """Read every input once so no peer pays for cold reads that another one does not. This machine's kernel pages
    out memory idle for about a minute (DAMON, docs/benchmarks.md), page cache included: call it again before a
    peer whose inputs may have sat idle that long."""
    for path in files:
        with open(path, "rb") as handle:
            while handle.read(8 << 20):
                pass


def link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def cached_manifest(path: Path, expected: dict) -> dict | None:
    """The manifest of inputs generated earlier, if it exists and was made with these parameters."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return data if all(data.get(k) == v for k, v in expected.items()) else None


def args_record(args, leave_out: tuple[str, ...] = ()) -> dict:  # an argparse.Namespace
    """The command line's options as the report keeps them (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in leave_out}


def save_json(path: Path, data: dict, indent: int = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, default=str) + "\n")


def write_report(path: Path, report: dict) -> None:
    save_json(path, report)
    print(f"wrote {path}")


# --------------------------------------------------------------------------------------------------
# siltlake deployments, Spark sessions and catalogs


def new_deployment(
    instance_key: str,
    root: Path,
    *,
    catalog_url: str | None = None,
    staging_root: Path | None = None,
    stream: dict | None = None,
):
    """A fresh, initialised deployment in root: the lake in root/lake, a SQLite catalog in
    root/catalog.db unless catalog_url names another, staging in root/staging unless staging_root."""
    from siltlake.config import Config
    from siltlake.deployment import Deployment

    config = Config.model_validate(
        {
            "instance_key": instance_key,
            "catalog": {"url": catalog_url or f"sqlite:///{root / 'catalog.db'}"},
            "storage": {"root": str(root / "lake"), "staging_root": str(staging_root or root / "staging")},
            "spark": {"master": "local[2]"},
            # The benchmarks write each staging object whole just before a round: none is being written in place, so
            # none waits stream.settle_time (what that window adds to freshness is freshness_bench's to show).
            "stream": {"settle_time": 0, **(stream or {})},
        }
    )
    deployment = Deployment(config)
    deployment.init()
    return deployment


def start_spark(app_name: str, conf: dict[str, str] | None = None, master: str = "local[2]"):
    """siltlake's own session builder (quiet logs, worker Python = this interpreter) on local[2] or `master`, and
    the seconds it took to start."""
    from siltlake.config import SparkConfig
    from siltlake.spark import spark_session

    started = time.perf_counter()
    session = spark_session(SparkConfig(master=master, app_name=app_name, conf=conf or {}))
    return session, round(time.perf_counter() - started, 2)


@contextmanager
def catalog_url(kind: str, root: Path) -> Iterator[str]:
    """A fresh SQLite file or a PostgreSQL database of its own, dropped afterwards."""
    from siltlake.catalog.provision import create_postgres_database, drop_postgres_database

    if kind == "sqlite":
        yield f"sqlite:///{root / 'catalog.db'}"
        return
    name = f"silt_bench_{uuid.uuid4().hex[:10]}"
    url = create_postgres_database(PG_ADMIN_URL, name)
    try:
        yield url
    finally:
        drop_postgres_database(PG_ADMIN_URL, name)


class StatementCounter:
    """Catalog statements and transactions issued through an engine (SQLite's BEGIN IMMEDIATE is a
    transaction, not a statement; PostgreSQL's BEGIN is implicit in the driver)."""

    def __init__(self, engine) -> None:  # a sqlalchemy Engine
        import sqlalchemy as sa

        self.statements = 0
        self.transactions = 0
        sa.event.listen(engine, "before_cursor_execute", self._statement)
        sa.event.listen(engine, "begin", self._begin)

    def _statement(self, _conn, _cursor, statement: str, *_args) -> None:
        if not statement.startswith("BEGIN"):
            self.statements += 1

    def _begin(self, _conn) -> None:
        self.transactions += 1

    def mark(self) -> tuple[int, int]:
        return self.statements, self.transactions


_staged_names = itertools.count()


def commit_small_objects(deployment, name: str, objects: list) -> None:  # a Deployment
    """(date, Arrow table) pairs as small objects of the table `name`, written (the table's columns, then dt, with
    their Iceberg field ids) and committed in one stream commit as the stream does (a benchmark's setup, not
    timed)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from siltlake.clock import utcnow
    from siltlake.records.writer import object_rows, object_schema

    catalog, lake = deployment.catalog, deployment.lake
    table = catalog.tables.get(name)
    layout = table.layout(deployment.instance_key)
    schema = table.definition.arrow_schema()
    now = utcnow()
    staged = [(f"file:///bench-staging/{next(_staged_names)}.parquet", table.id, 1, None) for _ in objects]
    catalog.staging.register(staged)
    pending = {p.uri: p.id for p in catalog.staging.pending(len(staged) + 10)}
    with catalog.partitions.stream_commit() as tx:
        for (uri, *_), (date, data), object_id in zip(staged, objects, tx.allocate_ids(len(objects)), strict=True):
            data = data.cast(schema)
            partition = tx.partition_for(table.id, date, table.definition.merge_interval, now)
            key = layout.small_object(date, object_id, partition.closed)
            with lake.open_output(key) as sink:
                pq.write_table(object_rows(data, object_schema(table.definition), date), sink, compression="zstd")
            times = data.column("utc_event_time")
            tx.add_small_object(
                object_id=object_id,
                staging_object_id=pending[uri],
                partition_id=partition.id,
                delayed=partition.closed,
                content_length=lake.info(key).size,
                row_count=data.num_rows,
                min_event_time=pc.min(times).as_py(),
                max_event_time=pc.max(times).as_py(),
                upload_start_time=now,
            )
            tx.mark_processed(pending[uri], records_in=data.num_rows, bad_records=0, error_uri=None, now=now)
