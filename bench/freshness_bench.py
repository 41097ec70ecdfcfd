"""Freshness of `silt run` at its default settings: the time from a staging object's put to its rows
being visible to readers, while a shipper puts small gzip JSON-lines objects at a steady rate.

Visible means two things, measured separately:

* current readers (`Table.files()`, `to_arrow()`, `read.table` without a pin) see a partition that is not
  switched up to the largest small object id at the start of the read (`reader_snapshot`): an object is
  visible once the stream's commit of it ends. The catalog's `staging_objects.processed_time` (the
  commit's time, taken as its transaction starts) is a lower bound; an observer thread that reads
  `Table.files()` through the Python API every `--observe-interval` and notes when each object first
  appears gives an upper bound (late by at most the interval and one read).
* published versions (`as_of_version`, `history()`, manifests, external catalogs): the earliest
  `partition_versions.created_at` of the object's partition whose `live_watermark` or `covered_upper`
  reaches the object's small object id; a few objects are checked through `Table.files(as_of_version=)`.

    PYTHONPATH=$PWD .venv/bin/python bench/freshness_bench.py [--seconds 120] [--rate 20] [--catalog pg]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import (
    RESULTS,
    ROOT,
    Measure,
    args_record,
    catalog_url,
    load_avg_1m,
    machine,
    utc_stamp,
    write_report,
)
from freshness_visibility import (
    catalog_rows,
    spans,
    stream_rounds,
    summary,
    visibility,
)

TABLE = "web.access"
TAG = "bench"  # keys are <tag>.<schema>.<table>/YYYY/MM/DD/<name>, the default key pattern
POOL_RECORDS = 4000  # rendered record bodies the shipper draws its lines from
QUANTILES = ("p50", "p90", "p99", "max")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120, help="how long the shipper puts objects")
    parser.add_argument("--rate", type=float, default=20, help="objects put per second")
    parser.add_argument("--object-kb", type=str, default="10-30", help="gzip size range of an object, KB")
    parser.add_argument(
        "--catalog",
        choices=("sqlite", "pg"),
        default="sqlite",
        help="a SQLite file, or a fresh PostgreSQL database at 127.0.0.1:5432",
    )
    parser.add_argument(
        "--observe-interval", type=float, default=0.5, help="seconds between the observer's Table.files() reads"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300,
        help="seconds to wait, after the shipper stops, for every object to be published",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="deployment directory (default: a new temp dir)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--out", type=Path, default=RESULTS / "freshness.json")
    return parser.parse_args()


# --------------------------------------------------------------------------------------------------
# the deployment and `silt run`


def write_config(root: Path, url: str) -> Path:
    """siltlake.toml with the catalog, local roots and Spark on local[2]; every stream, merge, publish and
    reap setting left at its default."""
    path = root / "siltlake.toml"
    path.write_text(
        "\n".join(
            [
                'instance_key = "fresh001"',
                "[catalog]",
                f"url = {json.dumps(url)}",
                "[storage]",
                f"root = {json.dumps(str(root / 'lake'))}",
                f"staging_root = {json.dumps(str(root / 'staging'))}",
                "[spark]",
                'master = "local[2]"',
            ]
        )
        + "\n"
    )
    return path


def silt_env(config_path: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **os.environ,
        "SILTLAKE_CONFIG": str(config_path),
        "PYTHONPATH": path,
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
    }


def silt(env: dict[str, str], *args: str) -> str:
    """A one-shot `silt` command, run to its end."""
    done = subprocess.run(
        [sys.executable, "-m", "siltlake.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode:
        raise SystemExit(f"silt {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def settings_in_effect(config_path: Path) -> dict:
    """The loop settings `silt run` reads from this configuration (all defaults but the Spark master)."""
    from siltlake.config import load_config

    config = load_config(config_path)
    return {
        "stream.poll_interval": config.stream.poll_interval,
        "stream.objects_per_wave": config.stream.objects_per_wave,
        "merge.poll_interval": config.merge.poll_interval,
        "publish.interval": config.publish.interval,
        "reap.interval": config.reap.interval,
        "spark.master": config.spark.master,
    }


def start_silt_run(root: Path, env: dict[str, str]) -> subprocess.Popen:
    """`silt run` in a session of its own (its Spark JVM and workers with it), logging to files."""
    with (root / "run.out").open("ab") as out, (root / "run.err").open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "siltlake.cli", "run"], env=env, stdout=out, stderr=err, start_new_session=True
        )


def stop_silt_run(proc: subprocess.Popen, timeout: float = 120) -> dict:
    """SIGINT, as Ctrl-C; SIGKILL of its session if it has not stopped within timeout."""
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=timeout)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code, killed = proc.wait(timeout=30), True
    return {"exit_code": code, "killed": killed, "stop_seconds": round(time.monotonic() - started, 2)}


def run_log_tail(root: Path, chars: int = 3000) -> str:
    return (root / "run.err").read_text(errors="replace")[-chars:]


# --------------------------------------------------------------------------------------------------
# the shipper


def record_pool(seed: int) -> list[str]:
    """Rendered JSON bodies of demo access records, without the leading '{' and the time field."""
    from siltlake.demo.traffic import RecordMaker

    maker = RecordMaker(random.Random(seed))
    return [json.dumps(maker.record(f"web{i % 8:02d}"), ensure_ascii=False)[1:] for i in range(POOL_RECORDS)]


class Shipper(threading.Thread):
    """Puts gzip JSON-lines objects of events of the current time at a steady rate: written under a hidden
    temporary name, then renamed, so each appears whole; notes every object's put time after the rename."""

    def __init__(self, staging: Path, rate: float, seconds: float, kb: tuple[int, int], seed: int) -> None:
        super().__init__(name="shipper", daemon=True)
        self.staging, self.rate, self.seconds, self.kb = staging, rate, seconds, kb
        self.rng = random.Random(seed)
        self.pool = record_pool(seed)
        self.bytes_per_record = self._bytes_per_record()
        self.puts: list[dict] = []  # name, put (epoch seconds), bytes, records, lag (s behind schedule)
        self.error: BaseException | None = None

    def _bytes_per_record(self) -> float:
        lines = self._lines(2000, time.time())
        return len(gzip.compress(lines, compresslevel=6)) / 2000

    def _lines(self, count: int, now: float) -> bytes:
        start = self.rng.randrange(len(self.pool))
        stamp = dt.datetime.fromtimestamp(now, dt.UTC)
        out = []
        for i in range(count):
            when = stamp - dt.timedelta(microseconds=self.rng.randrange(1_000_000))  # the last second's events
            body = self.pool[(start + i) % len(self.pool)]
            out.append(f'{{"time": "{when:%Y-%m-%dT%H:%M:%S.%f}Z", {body}\n')
        return "".join(out).encode()

    def put(self, name: str) -> dict:
        """One object put now; its put time is taken once the rename has made it visible."""
        now = time.time()
        target_bytes = self.rng.uniform(*self.kb) * 1000
        count = max(1, round(target_bytes / self.bytes_per_record))
        data = gzip.compress(self._lines(count, now), compresslevel=6)
        final = self.staging / f"{TAG}.{TABLE}" / time.strftime("%Y/%m/%d", time.gmtime(now)) / name
        final.parent.mkdir(parents=True, exist_ok=True)
        partial = final.with_name(f".{name}.tmp")  # a hidden, temporary name: discovery skips it
        partial.write_bytes(data)
        os.replace(partial, final)
        return {"name": name, "put": time.time(), "bytes": len(data), "records": count}

    def run(self) -> None:
        try:
            started = time.monotonic()
            total = round(self.rate * self.seconds)
            for index in range(total):
                due = started + index / self.rate
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                put = self.put(f"ship-{index:06d}.jsonl.gz")
                put["lag"] = max(0.0, -wait)
                self.puts.append(put)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


# --------------------------------------------------------------------------------------------------
# the observer: what a reader of the current state sees, through the Python table API


class Observer(threading.Thread):
    """Reads `Table.files()` every interval and notes, per small object id, the end of the first read that
    listed it (an upper bound of when it became visible) and the start of the read before (a lower bound)."""

    def __init__(self, config_path: Path, interval: float) -> None:
        super().__init__(name="observer", daemon=True)
        from siltlake import Lake

        self.lake = Lake.open(config_path)
        self.table = self.lake.table(TABLE)
        self.interval = interval
        self.stop = threading.Event()
        self.first_seen: dict[int, tuple[float, float]] = {}  # id -> (previous read's start, this read's end)
        self.reads = 0
        self.read_seconds: list[float] = []
        self.errors: list[str] = []

    def read_once(self) -> None:
        from siltlake.storage.keys import merge_range_of, small_object_id

        started = time.time()
        uris = self.table.files()
        ended = time.time()
        previous = getattr(self, "_previous_start", started)
        self._previous_start = started
        self.reads += 1
        self.read_seconds.append(ended - started)
        for uri in uris:
            name = uri.rsplit("/", 1)[-1]
            ids = [small_object_id(name)]
            if ids[0] is None:
                bounds = merge_range_of(name)
                ids = list(range(bounds[0] + 1, bounds[1] + 1)) if bounds else []
            for object_id in ids:
                self.first_seen.setdefault(object_id, (previous, ended))

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.read_once()
            except Exception as exc:  # a busy catalog: noted, the next read goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.stop.wait(self.interval)


def wait_for(condition, timeout: float, proc: subprocess.Popen, root: Path, what: str, every: float = 0.5) -> float:
    """Poll condition() every `every` s; the seconds it took. Fails if `silt run` died or the timeout passed."""
    started = time.monotonic()
    while not condition():
        if proc.poll() is not None:
            raise SystemExit(f"silt run exited ({proc.returncode}) while waiting for {what}\n{run_log_tail(root)}")
        if time.monotonic() - started > timeout:
            raise SystemExit(f"no {what} within {timeout:.0f} s\n{run_log_tail(root)}")
        time.sleep(every)
    return round(time.monotonic() - started, 1)


# --------------------------------------------------------------------------------------------------
# figures


def cross_check(config_path: Path, items: list[dict], samples: int) -> list[dict]:
    """Through the Python table API: each sampled object is in its first showing table version's files and
    not in the one before; that table version is in history() with its time."""
    from siltlake import Lake
    from siltlake.storage.keys import small_object_id

    chosen = [i for i in items if i["table_version"] is not None]
    chosen = [chosen[round(k * (len(chosen) - 1) / max(samples - 1, 1))] for k in range(samples)] if chosen else []
    checks = []
    with Lake.open(config_path) as lake:
        table = lake.table(TABLE)
        history = table.history()

        def ids(version: int) -> set[int]:
            if not version:
                return set()
            return {small_object_id(u.rsplit("/", 1)[-1]) for u in table.files(as_of_version=version)}

        for item in chosen:
            version = item["table_version"]
            wanted = set(item["small_ids"])
            stamps = {row["created_at"] for row in history if row["table_version"] == version}
            checks.append(
                {
                    "name": item["name"],
                    "table_version": version,
                    "in_version": wanted <= ids(version),
                    "not_in_previous": not (wanted & ids(version - 1)),
                    "history_time": sorted(stamps)[0] if stamps else None,
                    "catalog_time": item["published_at"],
                }
            )
    return checks


def print_table(figures: dict, settings: dict, report: dict) -> None:
    rows = [
        ("put -> visible to current readers (observer, upper)", "put_to_seen"),
        ("put -> visible to current readers (observer, lower)", "put_to_seen_lower_bound"),
        ("put -> committed (catalog processed_time)", "put_to_committed"),
        ("put -> in a published version", "put_to_published"),
        ("  put -> registered (stream round starts)", "put_to_registered"),
        ("  registered -> task started (Spark stage)", "registered_to_started"),
        ("  task started -> seen (task, ordered commit)", "started_to_seen"),
        ("  committed -> seen by observer", "committed_to_seen"),
        ("  seen -> in a published version", "seen_to_published"),
    ]
    print(
        f"\nfreshness of `silt run`, {report['objects_put']} objects at {report['args']['rate']:g}/s for "
        f"{report['args']['seconds']:g} s, catalog {report['args']['catalog']}, load avg 1m "
        f"{report['load_avg_1m_before']} -> {report['load_avg_1m_after']} (max {report['load_avg_1m_max']}) "
        f"on {report['machine']['nproc']} cpus"
    )
    print(f"settings: {', '.join(f'{k} = {v}' for k, v in settings.items())}")
    print(f"{'seconds':<54}{'count':>7}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}")
    for label, key in rows:
        cells = "".join(f"{v:8.2f}" if v is not None else f"{'-':>8}" for v in map(figures[key].get, QUANTILES))
        print(f"{label:<54}{figures[key]['count']:>7}{cells}")
    target = report["target"]
    print(
        f"target p99 < 2 x stream.poll_interval = {target['limit_seconds']} s: current readers "
        f"{'met' if target['current_readers_met'] else 'NOT met'} (p99 {target['current_readers_p99']} s); "
        f"published versions {'met' if target['published_met'] else 'NOT met'} "
        f"(p99 {target['published_p99']} s)"
    )


# --------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, root: Path, url: str) -> dict:
    config_path = write_config(root, url)
    env = silt_env(config_path)
    settings = settings_in_effect(config_path)
    from siltlake.demo.sample import TABLE_TOML

    (table_file := root / "web.access.toml").write_text(TABLE_TOML)
    silt(env, "init")
    silt(env, "table", "create", str(table_file))
    low, high = (float(x) for x in args.object_kb.split("-"))
    shipper = Shipper(root / "staging", args.rate, args.seconds, (low, high), args.seed)
    observer = Observer(config_path, args.observe_interval)

    load_before = load_avg_1m()
    loads = [load_before]
    proc = start_silt_run(root, env)
    started = time.monotonic()
    try:
        warm = shipper.put("warmup.jsonl.gz")  # Spark starts with the first round that has work
        observer.start()
        warmup_seconds = wait_for(lambda: bool(observer.first_seen), 600, proc, root, "warm-up object visible")
        warm_visible = min(end for _, end in observer.first_seen.values()) - warm["put"]
        print(
            f"silt run up: warm-up object visible {warm_visible:.1f} s after its put "
            f"({time.monotonic() - started:.1f} s after the start)",
            flush=True,
        )
        with Measure(sample_seconds=1.0) as measured:
            shipper.start()
            while shipper.is_alive():
                shipper.join(5)
                loads.append(load_avg_1m())
                print(
                    f"  shipped {len(shipper.puts)} objects, {len(observer.first_seen) - 1} visible, load {loads[-1]}",
                    flush=True,
                )
            if shipper.error:
                raise shipper.error
            shipped_at = time.monotonic()
            wanted = len(shipper.puts) + 1  # with the warm-up object

            def all_seen() -> bool:
                loads.append(load_avg_1m())
                return len(observer.first_seen) >= wanted

            seen_wait = wait_for(all_seen, args.timeout, proc, root, "every object visible to current readers")

            def all_published() -> bool:
                objects, versions = catalog_rows(url)
                items = visibility(shipper.puts, objects, versions, observer.first_seen)
                return all(i["published"] is not None for i in items)

            published_wait = wait_for(
                all_published, args.timeout, proc, root, "every object in a published version", every=2
            )
            print(
                f"all visible {seen_wait} s and published {published_wait} s after the shipper stopped "
                f"({time.monotonic() - shipped_at:.1f} s)",
                flush=True,
            )
        observer.stop.set()
        observer.join(30)
        stopped = stop_silt_run(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        observer.stop.set()
    load_after = load_avg_1m()

    objects, versions = catalog_rows(url)
    items = visibility(shipper.puts, objects, versions, observer.first_seen)
    figures = {
        "put_to_seen": summary(spans(items, "put", "seen")),
        "put_to_committed": summary(spans(items, "put", "committed")),
        "put_to_published": summary(spans(items, "put", "published")),
        "put_to_registered": summary(spans(items, "put", "registered")),
        "registered_to_started": summary(spans(items, "registered", "started")),
        "started_to_seen": summary(spans(items, "started", "seen")),
        "registered_to_committed": summary(spans(items, "registered", "committed")),
        "committed_to_seen": summary(spans(items, "committed", "seen")),
        "seen_to_published": summary(spans(items, "seen", "published")),
        "put_to_seen_lower_bound": summary(spans(items, "put", "seen_after")),
    }
    limit = 2 * settings["stream.poll_interval"]
    current_p99, published_p99 = figures["put_to_seen"]["p99"], figures["put_to_published"]["p99"]
    rounds = stream_rounds(items)
    puts = shipper.puts
    rate = round((len(puts) - 1) / (puts[-1]["put"] - puts[0]["put"]), 2) if len(puts) > 1 else None
    report = {
        "benchmark": "freshness",
        "time": utc_stamp(),
        "machine": machine(),
        "args": args_record(args),
        "settings": settings,
        "objects_put": len(puts),
        "put_rate_achieved": rate,
        "object_bytes": summary([p["bytes"] for p in puts]),
        "records_per_object": summary([p["records"] for p in puts]),
        "shipper_lag_max_s": round(max((p["lag"] for p in puts), default=0), 3),
        "warmup_seconds": warmup_seconds,
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": load_after,
        "load_avg_1m_max": max(loads),
        "run": {**stopped, **measured.extra(), "measured_seconds": round(measured.seconds, 1)},
        "latency_seconds": figures,
        "target": {
            "limit_seconds": limit,
            "current_readers_p99": current_p99,
            "current_readers_met": current_p99 is not None and current_p99 < limit,
            "published_p99": published_p99,
            "published_met": published_p99 is not None and published_p99 < limit,
        },
        "never_visible": sum(1 for i in items if i["seen"] is None),
        "never_published": sum(1 for i in items if i["published"] is None),
        "delayed_objects": sum(1 for i in items if i["delayed"]),
        "partitions": len({r.partition_id for r in objects if r.small_id is not None}),  # 2: Tokyo midnight passed
        "commit_time_unreadable": sum(1 for i in items if i["small_ids"] and i["committed"] is None),
        "seen_before_commit": sum(
            1 for i in items if i["seen"] is not None and i["committed"] is not None and i["seen"] < i["committed"]
        ),
        "observer": {
            "reads": observer.reads,
            "read_seconds": summary(observer.read_seconds),
            "errors": len(observer.errors),
            "first_errors": observer.errors[:3],
        },
        "stream_rounds": {
            "count": len(rounds),
            "objects": summary([r["objects"] for r in rounds]),
            "registered_to_last_seen_s": summary(
                [r["registered_to_last_seen_s"] for r in rounds if r["registered_to_last_seen_s"] is not None]
            ),
        },
        "publish_versions": sum(1 for v in versions),
        "cross_check": cross_check(config_path, items, 5),
    }
    observer.lake.close()
    return report


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="silt-freshness-") as temp:
        root = args.workdir or Path(temp)
        root.mkdir(parents=True, exist_ok=True)
        with catalog_url("sqlite" if args.catalog == "sqlite" else "postgresql", root) as url:
            report = run(args, root, url)
    print_table(report["latency_seconds"], report["settings"], report)
    for check in report["cross_check"]:
        ok = check["in_version"] and check["not_in_previous"] and check["history_time"] == check["catalog_time"]
        print(
            f"  API check {check['name']}: table version {check['table_version']} "
            f"({check['history_time']}): {'ok' if ok else 'MISMATCH ' + json.dumps(check)}"
        )
    rounds = report["stream_rounds"]
    print(
        f"stream rounds with shipped objects: {rounds['count']}, objects per round p50 {rounds['objects']['p50']}, "
        f"registered -> last of them seen p50 {rounds['registered_to_last_seen_s']['p50']} s"
    )
    for key in ("never_visible", "never_published", "delayed_objects", "seen_before_commit", "commit_time_unreadable"):
        if report[key]:
            print(f"warning: {key} = {report[key]}")
    if report["commit_time_unreadable"]:
        print(
            "  (staging_objects.processed_time is not a time in this catalog: the batched stream commit writes "
            "CAST(... AS DATETIME), which SQLite stores as the year)"
        )
    write_report(args.out, report)


if __name__ == "__main__":
    main()
