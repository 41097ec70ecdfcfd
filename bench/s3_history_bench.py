"""S3 history benchmark: what an idle discovery round costs when an S3 staging root holds N objects that
were all processed before, listed whole every round (before) and from cursors plus a slice of the sweep (after).

The endpoint is moto's S3 server in a child process (so this process's CPU time is siltlake's own), on
127.0.0.1, reached directly for the timed rounds and through the tests' counting proxy for one more round that
counts LIST requests. moto answers each LIST by filtering and sorting every key of the bucket, so its time per
request grows with N (AWS's does not): the wall time of a round at large N is mostly moto's, which is why the
table also shows this process's CPU seconds and the LIST requests. No network latency either: on AWS each LIST
is a round trip of tens of milliseconds (a round's requests run 16 at a time).

Setup (not timed): N objects put straight into the child's moto state (an HTTP PUT each would take minutes at
100,000), 20 hosts x 7 days (`hostNN.web.access/2026/01/DD/obj-<i>.jsonl`), with LastModified spread over the
last 7 days as a history's are (the newest day's 1 hour old: settled past stream.reorder_window, and each host's
newest directory within stream.late_window). A fresh SQLite catalog; the objects registered by discovery's first
round (a full listing), then marked processed in one UPDATE.

Timed: `--rounds` idle rounds of each path (median wall seconds and this process's CPU seconds, catalog
statements of the last), after a warm round: `before` is the discovery of 741b266 for an object store (the whole
root listed by pyarrow, every key asked of the catalog); `after` is `siltlake.stream.discover.discover`; and
one idle `stream_once` round (after) as the daemons run it. Then `notified` and `notified_stream_once`: the same
rounds with `stream.notifications` naming an empty SQS queue on the same moto server (its
`notified_listing_interval` 600 s): the warm round lists, the timed ones fall between listings and read the
queue only; their LIST and SQS requests are counted through the proxy too.

    .venv/bin/python bench/s3_history_bench.py                        # N = 0, 10,000, 100,000
    .venv/bin/python bench/s3_history_bench.py --sizes 100000 --million
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import StatementCounter, brief_machine, load_avg_1m, save_json, utc_stamp

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.s3_server (the counting proxy)

HOSTS, DAYS = 20, 7
TABLE = {
    "schema": "web",
    "name": "access",
    "time_column": "t",
    "timezone": "UTC",
    "columns": [{"name": "t", "type": "timestamp", "nullable": False}],
}


# --- the endpoint: moto's server in a child process, filled through its stdin --------------------------------


def serve(port: int) -> None:
    """The child: moto's server on 127.0.0.1:port; each line on stdin is a JSON command, answered on stdout."""
    import logging

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer
    from moto.sqs.models import sqs_backends

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    print("ready", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        started = time.perf_counter()
        if command["op"] == "bucket":
            backend.create_bucket(command["bucket"], "us-east-1")
        elif command["op"] == "queue":
            sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].create_queue(command["queue"])
        elif command["op"] == "populate":
            now = dt.datetime.fromisoformat(command["now"])
            for i in range(command["objects"]):
                host, day = i % HOSTS, (i // HOSTS) % DAYS + 1
                key = backend.put_object(
                    command["bucket"],
                    f"{command['prefix']}host{host:02d}.web.access/2026/01/{day:02d}/obj-{i:08d}.jsonl",
                    b'{"t":"2026-01-01"}\n',
                )
                key.last_modified = now - dt.timedelta(days=DAYS - day, hours=1)
        print(json.dumps({"seconds": time.perf_counter() - started}), flush=True)


class Endpoint:
    def __init__(self) -> None:
        from tests.processes import free_port

        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "ready"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self, **command: object) -> float:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.terminate()
        self.process.wait(timeout=30)


# --- the two paths ---------------------------------------------------------------------------------------------


def before_round(deployment) -> object:  # a Deployment
    """Discovery of an object store as of 741b266: the whole root listed every round, every key asked."""
    from siltlake.clock import from_nanoseconds
    from siltlake.stream.discover import _register, _unexpired, is_in_flight

    started = time.time_ns()
    cursor = deployment.catalog.discovery.get(deployment.staging.root)
    listed = [info for info in deployment.staging.list() if not is_in_flight(info.key)]
    fresh = _unexpired(deployment, listed, cursor.expired_before if cursor is not None else None)
    report = _register(deployment, fresh)
    margin = deployment.config.stream.listing_margin * 1_000_000_000
    deployment.catalog.discovery.advance(
        deployment.staging.root, from_nanoseconds(started - margin), from_nanoseconds(started)
    )
    return report


def after_round(deployment) -> object:  # a Deployment
    from siltlake.stream.discover import discover

    return discover(deployment)


def stream_round(deployment) -> object:  # a Deployment
    from siltlake.stream import stream_once

    return stream_once(deployment)


def deployment_for(bucket: str, endpoint: str, catalog: str, queue: str | None = None):  # a Deployment
    """A deployment on the bucket; with `queue`, its stream reads that SQS queue's S3 event notifications."""
    from siltlake.config import Config
    from siltlake.deployment import Deployment

    # The listing between notifications: longer than the default 60 s, which moto's own listing of a million keys
    # (23 requests, each sorting the bucket) can outlast, so that the timed rounds after the warm one fall within it.
    stream = {"notifications": f"sqs://{queue}", "notified_listing_interval": 600} if queue else {}
    config = Config.model_validate(
        {
            "instance_key": "bench001",
            "catalog": {"url": catalog},
            "spark": {"master": "local[2]"},
            "storage": {
                "root": f"s3://{bucket}/lake",
                "staging_root": f"s3://{bucket}/staging",
                "s3": {"endpoint_override": endpoint, "scheme": "http"},
            },
            "stream": stream,
        }
    )
    deployment = Deployment(config)
    deployment.init()
    return deployment


def timed(path, deployment, counter: StatementCounter, rounds: int) -> dict:
    path(deployment)  # warm: clients, caches
    walls, cpus = [], []
    for _ in range(rounds):
        statements, _ = counter.mark()
        wall, cpu = time.perf_counter(), time.process_time()
        report = path(deployment)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        assert report.registered == 0, report
    return {
        "wall_median": round(statistics.median(walls), 4),
        "wall_all": [round(w, 4) for w in walls],
        "cpu_median": round(statistics.median(cpus), 4),
        "statements": counter.statements - statements,
    }


def run(objects: int, rounds: int, endpoint: Endpoint, proxy, workdir: Path) -> dict:
    from siltlake.catalog import schema as s
    from siltlake.clock import utcnow
    from siltlake.tabledef import TableDef

    bucket = f"silt-{uuid.uuid4().hex[:12]}"
    endpoint.command(op="bucket", bucket=bucket)
    populate = endpoint.command(
        op="populate", bucket=bucket, prefix="staging/", objects=objects, now=dt.datetime.now(dt.UTC).isoformat()
    )
    catalog = f"sqlite:///{workdir / f'{bucket}.db'}"
    direct = deployment_for(bucket, endpoint.endpoint, catalog)
    counted = deployment_for(bucket, proxy.endpoint, catalog)
    try:
        direct.catalog.tables.create(TableDef.from_mapping(TABLE))
        started = time.perf_counter()
        first = after_round(direct)
        assert first.registered == objects and first.full_listing, first
        with direct.catalog.engine.begin() as c:
            c.execute(s.staging_objects.update().values(processed_time=utcnow()))
        register = time.perf_counter() - started
        counter = StatementCounter(direct.catalog.engine)
        from siltlake.storage.s3listing import list_after

        probe = time.perf_counter()
        list_after(direct.staging, "nothing-here/")  # moto filters and sorts the whole bucket for any LIST
        result = {
            "objects": objects,
            "populate_seconds": round(populate, 1),
            "register_seconds": round(register, 1),
            "moto_seconds_per_list": round(time.perf_counter() - probe, 4),
        }
        # The whole listing at a million keys would take moto an hour (a thousand requests, each sorting the
        # bucket): its requests are N / 1000 + 1 by construction.
        paths = [("before", before_round, rounds)] if objects <= 100_000 else []
        for name, path, repeats in [*paths, ("after", after_round, rounds), ("stream_once", stream_round, rounds)]:
            result[name] = timed(path, direct, counter, repeats)
            proxy.reset()
            path(counted)
            result[name]["list_requests"] = proxy.reset()["LIST"]
        # The same idle rounds with stream.notifications: the warm round lists (the last listing was long ago),
        # the timed ones read the empty queue only.
        queue = f"staging-{uuid.uuid4().hex[:10]}"
        endpoint.command(op="queue", queue=queue)
        notified = deployment_for(bucket, endpoint.endpoint, catalog, queue)
        notified_counted = deployment_for(bucket, proxy.endpoint, catalog, queue)
        try:
            notified_counter = StatementCounter(notified.catalog.engine)
            for name, path in (("notified", after_round), ("notified_stream_once", stream_round)):
                result[name] = timed(path, notified, notified_counter, rounds)
                path(notified_counted)  # its process's first SQS call asks the queue's URL: not an idle round's
                proxy.reset()
                report = path(notified_counted)
                requests = proxy.reset()
                result[name].update(
                    list_requests=requests["LIST"],
                    sqs_requests=requests["POST"],
                    listing_waits=round(report.listing_waits or 0, 1),
                )
        finally:
            notified.close()
            notified_counted.close()
        result["load_avg_1m"] = load_avg_1m()
        return result
    finally:
        direct.close()
        counted.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,10000,100000", help="comma-separated N (already-processed objects)")
    parser.add_argument("--million", action="store_true", help="add N = 1,000,000 (minutes of setup, GBs of moto)")
    parser.add_argument("--rounds", type=int, default=5, help="timed idle rounds per path and N (the median)")
    parser.add_argument("--out", default="bench/results/s3_history.json")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    from tests.s3_server import CountingProxy

    sizes = [int(size) for size in args.sizes.split(",") if size.strip()] + ([1_000_000] if args.million else [])
    results = []
    print(
        f"{'N':>9} | {'before: wall s':>14} {'cpu s':>7} {'LIST':>5} {'stmts':>6} | {'after: wall s':>13} "
        f"{'cpu s':>7} {'LIST':>5} {'stmts':>6} | {'stream_once s':>13} {'populate s':>10} {'moto s/LIST':>10}"
    )
    with tempfile.TemporaryDirectory(prefix="s3-history-") as workdir:
        for objects in sizes:
            endpoint = Endpoint()  # one per N: moto's memory of the last N goes with it
            proxy = CountingProxy(endpoint.port)
            try:
                result = run(objects, args.rounds, endpoint, proxy, Path(workdir))
            finally:
                proxy.close()
                endpoint.close()
            results.append(result)
            empty = {
                "wall_median": float("nan"),
                "cpu_median": float("nan"),
                "list_requests": objects // 1000 + 1,
                "statements": -1,
            }
            before, after, stream = result.get("before", empty), result["after"], result["stream_once"]
            print(
                f"{objects:>9,} | {before['wall_median']:>14.4f} {before['cpu_median']:>7.4f} "
                f"{before['list_requests']:>5} {before['statements']:>6} | {after['wall_median']:>13.4f} "
                f"{after['cpu_median']:>7.4f} {after['list_requests']:>5} {after['statements']:>6} | "
                f"{stream['wall_median']:>13.4f} {result['populate_seconds']:>10.1f} "
                f"{result['moto_seconds_per_list']:>10.4f}",
                flush=True,
            )
            notified, notified_stream = result["notified"], result["notified_stream_once"]
            print(
                f"{'':>9}   with notifications: idle round {notified['wall_median']:.4f} s wall, "
                f"{notified['cpu_median']:.4f} s CPU, {notified['list_requests']} LIST, {notified['sqs_requests']} "
                f"SQS, {notified['statements']} statements; stream_once {notified_stream['wall_median']:.4f} s",
                flush=True,
            )
    save_json(
        Path(args.out),
        {"machine": brief_machine(), "date": utc_stamp(), "args": vars(args), "results": results},
        indent=1,
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
