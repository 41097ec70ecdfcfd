"""`make cluster-demo`: the end-to-end pipeline on a Spark standalone cluster, checked against local[*].

It starts a master and two workers from the installed PySpark on 127.0.0.1 (siltlake.standalone),
creates two PostgreSQL catalogs, and runs the same two simulated days of sample logs through stream,
merge, publish, read and reap twice: once with `spark.master` set to the cluster, once on local[*].
Each run is a driver process of its own that runs the `silt` commands in-process on one SparkSession
(`python -m siltlake.demo.cluster pipeline ...`, which tests/test_cluster.py uses too). The demo then
prints the results and exits with status 1 unless both runs agree and both workers ran executors.
Everything it started is stopped at the end, on Ctrl-C and on SIGTERM too.

A warm Spark session on such a cluster is Spark's own Connect server run against the master from the siltlake
installation (`spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer --master <url>`),
with `spark.connect` pointing `silt sql` at it: docs/operations.md, "A warm Spark session (Spark Connect)".
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import click

from siltlake.demo.__main__ import START, jst, late, move_shipped
from siltlake.demo.sample import generate_sample, write_table_definition

DEMO_DIR = Path("build/cluster-demo")
PG_ADMIN_ENV = "CLUSTER_DEMO_PG"
DEFAULT_PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DATABASES = {"cluster": "silt_cluster_demo", "local": "silt_cluster_demo_local"}
INSTANCE_KEY = "clusterdemo"


# Three servers (the demo's late one, web03, among them), six objects each per day: about 40 staging
# objects, 1,800 good records, 10 bad records and 5 malformed objects over two days.
class SampleSize(TypedDict):
    """generate_sample's sizes."""

    days: int
    servers: int
    objects_per_server_day: int
    records_per_object: int


SAMPLE: SampleSize = {"days": 2, "servers": 3, "objects_per_server_day": 6, "records_per_object": 50}
# Two executors of one core each: one per worker (the master spreads them out).
CLUSTER_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.sql.shuffle.partitions": "4",
}
PARTITION_COUNTS = "SELECT CAST(dt AS STRING) AS dt, count(*) AS rows FROM web.access GROUP BY dt ORDER BY dt"


class PipelineError(Exception):
    """A step of the pipeline failed; the message names the step."""


def _toml_table(values: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{json.dumps(key)} = {json.dumps(value)}" for key, value in values.items()) + " }"


def write_config(root: Path, catalog_url: str, master: str, conf: dict[str, str]) -> Path:
    """The deployment's siltlake.toml: absolute storage paths, so nothing depends on the working directory."""
    path = root / "siltlake.toml"
    path.write_text(
        f'instance_key = "{INSTANCE_KEY}"\n'
        f"[catalog]\nurl = {json.dumps(catalog_url)}\n"
        f"[storage]\nroot = {json.dumps(str(root / 'lake'))}\nstaging_root = {json.dumps(str(root / 'staging'))}\n"
        f"[spark]\nmaster = {json.dumps(master)}\nconf = {_toml_table(conf)}\n",
        encoding="utf-8",
    )
    return path


def deliver(
    shipped: dict[str, dt.datetime],
    incoming: Path,
    staging: Path,
    until: dt.datetime,
    hold: Callable[[str, dt.datetime], bool] = lambda key, at: False,
) -> int:
    """Move the objects shipped before `until` (and not held back) from incoming/ to the staging root."""
    count = 0
    for key, at in sorted(shipped.items(), key=lambda item: item[1]):
        source = incoming / key
        if at >= until or hold(key, at) or not source.exists():
            continue
        move_shipped(source, staging / key, at)
        count += 1
    return count


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date | dt.datetime) else value


class Pipeline:
    """One deployment driven through the `silt` commands, in this process (one SparkSession for all)."""

    def __init__(self, root: Path, config: Path, say: Callable[[str], None]) -> None:
        self.root = root
        self.config = config
        self.say = say

    def silt(self, *args: str) -> str:
        """Run `silt --config <ours> args...` in this process; its stdout, or PipelineError on a non-zero exit."""
        from siltlake.cli import main as silt_main

        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(captured):
                silt_main.main(["--config", str(self.config), *args], prog_name="silt", standalone_mode=False)
        except SystemExit as exc:
            if exc.code:
                raise PipelineError(
                    f"`silt {' '.join(args)}` exited with status {exc.code}: {captured.getvalue()[-2000:]}"
                ) from None
        return captured.getvalue()

    def silt_json(self, *args: str) -> Any:
        return json.loads(self.silt(*args))

    def stream(self) -> dict[str, int]:
        report = self.silt_json("stream", "--once", "--json")
        if report["failed"]:
            raise PipelineError(f"stream: {len(report['failed'])} staging objects failed: {report['failed'][:3]}")
        counts = {
            key: report[key]
            for key in ("processed", "records_loaded", "bad_records", "live_objects", "delayed_objects")
        }
        counts["unreadable"] = len(report["unknown"])
        self.say(
            f"stream: {counts['processed']} staging objects, {counts['records_loaded']:,} records, "
            f"{counts['bad_records']} bad records, {counts['unreadable']} unreadable objects, "
            f"{counts['live_objects']} live and {counts['delayed_objects']} delayed small objects"
        )
        return counts

    def merge(self) -> dict[str, int]:
        report = self.silt_json("merge", "--once", "--json")
        counts = {key: report[key] for key in ("claimed", "finished", "continuing", "failed", "objects_in", "rows_out")}
        self.say(
            f"merge: {counts['finished']} jobs finished, {counts['failed']} failed; "
            f"{counts['objects_in']} small objects into merged objects of {counts['rows_out']:,} rows"
        )
        return counts

    def publish(self, now: dt.datetime) -> None:
        self.silt("publish", "--once", "--now", now.isoformat())
        self.say(f"publish at {now:%m-%d %H:%M} JST")

    def partition_counts(self) -> dict[str, int]:
        return {row["dt"]: row["rows"] for row in self.silt_json("sql", PARTITION_COUNTS, "--format", "json")}

    def current_state(self) -> tuple[list[list[Any]], int]:
        """Every row of web.access as readers see it now, read through siltlake.read on this driver and
        sorted (the header first); and how many unknown staging objects the catalog lists."""
        from siltlake.config import load_config
        from siltlake.deployment import Deployment
        from siltlake.read import table

        deployment = Deployment.open(load_config(self.config))
        try:
            frame = table(deployment.spark(), "web.access", deployment)
            rows = [[_jsonable(value) for value in row] for row in frame.collect()]
            # Objects of no table are listed when found, not in the stream report: ask the catalog.
            return [frame.columns, *sorted(rows, key=json.dumps)], len(deployment.catalog.staging.unknown())
        finally:
            deployment.close()


def run_pipeline(
    root: str | Path,
    catalog_url: str,
    master: str,
    conf: dict[str, str] | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Two simulated days of sample logs through stream, merge, publish, read and reap; the results.

    `root` (created, must be empty) holds the configuration, the sample, the staging root and the lake;
    the catalog at catalog_url must be empty. The results are JSON-able and hold nothing that depends on
    where or when the run happened, so two runs on the same input compare equal.
    """
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    incoming, staging = root / "incoming", root / "staging"
    sample = generate_sample(incoming, START, **SAMPLE)
    write_table_definition(root / "web_access.toml")
    pipeline = Pipeline(root, write_config(root, catalog_url, master, conf or {}), say)
    results: dict[str, Any] = {
        "sample": {
            "objects": sample.objects,
            "good_records": sample.good_records,
            "bad_records": sample.bad_records,
            "malformed_objects": len(sample.malformed_objects),
            "records_by_date": sample.records_by_date,
        }
    }

    pipeline.silt("init")
    pipeline.silt("table", "create", str(root / "web_access.toml"))
    say(
        f"{sample.objects} staging objects over two Tokyo days ({sample.good_records:,} good records, "
        f"{sample.bad_records} bad, {len(sample.malformed_objects)} malformed objects)"
    )

    # Day 1 and the first half hour of day 2, without web03's night (its shipper is down): two publish
    # runs close day 1 and switch it to its merged objects.
    arrived = deliver(sample.shipped, incoming, staging, jst(2, 0, 30), hold=late)
    say(f"{arrived} staging objects arrive by day 2, 00:30 JST (web03's night is held back)")
    results["stream"] = [pipeline.stream()]
    results["merge"] = [pipeline.merge()]
    pipeline.publish(jst(2, 0, 30))
    pipeline.publish(jst(2, 1, 30))

    # The rest: web03's late objects for the closed day 1 become delayed small objects, merged and published
    # with day 2's.
    arrived = deliver(sample.shipped, incoming, staging, jst(3, 0, 30))
    say(f"{arrived} staging objects arrive by day 3, 00:30 JST, web03's late ones among them")
    results["stream"].append(pipeline.stream())
    results["merge"].append(pipeline.merge())
    pipeline.publish(jst(3, 0, 30))
    pipeline.publish(jst(3, 1, 30))

    results["rows"], results["unknown_objects"] = pipeline.current_state()
    say(
        f"read: {len(results['rows']) - 1:,} rows through siltlake.read; {results['unknown_objects']} unknown "
        f"staging objects listed"
    )
    results["counts"] = pipeline.partition_counts()
    say("silt sql: " + ", ".join(f"dt={date}: {count:,} rows" for date, count in results["counts"].items()))
    results["versions"] = [
        {key: version[key] for key in ("date", "version", "op", "rows", "bytes")}
        for version in pipeline.silt_json("history", "web.access", "--format", "json")
    ]
    say(f"history: {len(results['versions'])} published versions")

    later = (dt.datetime.now(dt.UTC) + dt.timedelta(days=8)).isoformat(timespec="seconds")
    reap = pipeline.silt_json("reap", "--now", later, "--json")
    if reap["failed"]:
        raise PipelineError(f"reap could not delete {len(reap['failed'])} objects: {reap['failed'][:3]}")
    # Counts, not bytes: manifests name objects by URI, and the two runs' roots differ in length.
    results["reap"] = {
        "reasons": {
            name: {"objects": totals["objects"], "catalog_rows": totals["catalog_rows"]}
            for name, totals in reap["reasons"].items()
        },
        **{key: reap[key] for key in ("objects", "kept_young", "kept_running")},
    }
    say(
        f"reap a week later: {reap['objects']} objects deleted, "
        + ", ".join(f"{name} {totals['objects']}" for name, totals in reap["reasons"].items() if totals["objects"])
    )
    results["counts_after_reap"] = pipeline.partition_counts()
    say(
        "silt sql after reap: "
        + ", ".join(f"dt={date}: {count:,} rows" for date, count in results["counts_after_reap"].items())
    )
    return results


# --- the demo ---------------------------------------------------------------------------------------


class PipelineProcess:
    """run_pipeline in a driver process of its own (a process's SparkSession talks to one master)."""

    def __init__(self, label: str, root: Path, catalog_url: str, master: str, conf: dict[str, str]) -> None:
        self.label = label
        self.results_file = root.with_suffix(".json")
        command = [
            sys.executable,
            "-m",
            "siltlake.demo.cluster",
            "pipeline",
            "--root",
            str(root),
            "--catalog-url",
            catalog_url,
            "--master",
            master,
            "--label",
            label,
            "--results",
            str(self.results_file),
        ]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        # The deployment is configured by its file alone, whatever this shell's SILTLAKE_* variables say.
        env = {key: value for key, value in os.environ.items() if not key.startswith("SILTLAKE_")}
        env.setdefault("COLUMNS", "160")  # the commands' report lines stay whole when not on a terminal
        self.process = subprocess.Popen(command, env={**env, "PYTHONUNBUFFERED": "1"}, stdin=subprocess.DEVNULL)

    def __enter__(self) -> PipelineProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill the driver if it still runs (its SparkContext dies with it)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def results(self) -> dict:
        """Wait for the run; its results, or PipelineError if it failed (its output says why)."""
        try:
            status = self.process.wait()
        finally:
            self.stop()  # interrupted while waiting: the driver goes too
        if status != 0:
            raise PipelineError(f"the {self.label} run failed (status {status}); its output is above")
        return json.loads(self.results_file.read_text())


def differences(left: object, right: object, path: str = "") -> list[str]:
    """Where two results differ, as readable lines (the first few per list)."""
    if isinstance(left, dict) and isinstance(right, dict):
        return [
            line
            for key in sorted(set(left) | set(right), key=str)
            for line in differences(left.get(key), right.get(key), f"{path}.{key}" if path else str(key))
        ]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            line
            for index, (a, b) in enumerate(zip(left, right, strict=True))
            for line in differences(a, b, f"{path}[{index}]")
        ][:5]
    return [] if left == right else [f"{path}: {left!r} != {right!r}"]


def _stop_on_sigterm() -> None:
    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def run_demo(pg_admin_url: str, directory: Path) -> int:
    from siltlake.catalog.provision import create_postgres_database
    from siltlake.errors import CatalogError
    from siltlake.standalone import standalone_cluster

    started = time.monotonic()
    _stop_on_sigterm()
    root = directory.resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    try:
        urls = {label: create_postgres_database(pg_admin_url, name, replace=True) for label, name in DATABASES.items()}
    except CatalogError as exc:
        print(
            f"error: {exc}\nThe cluster demo keeps its catalogs in PostgreSQL. Start a server (e.g. "
            f"`service postgresql start`) or point {PG_ADMIN_ENV} (or --pg-url) at one where this user may "
            f"create databases, e.g. {PG_ADMIN_ENV}=postgresql+psycopg://me:secret@db:5432/postgres",
            file=sys.stderr,
        )
        return 2
    print(
        f"catalogs: PostgreSQL databases {DATABASES['cluster']} (cluster run) and {DATABASES['local']} "
        f"(local[*] run) on {pg_admin_url.rsplit('/', 1)[0]}; files under {root}",
        flush=True,
    )
    try:
        print("starting a Spark standalone master and two workers (1 core, 1 GiB each) on 127.0.0.1 ...", flush=True)
        with standalone_cluster(root / "spark", workers=2, cores=1, memory="1g") as cluster:
            print(
                f"cluster up at {cluster.master_url} ({time.monotonic() - started:.0f}s); the pipeline runs "
                f"with spark.master={cluster.master_url}",
                flush=True,
            )
            on_cluster = PipelineProcess(
                "cluster", root / "cluster", urls["cluster"], cluster.master_url, CLUSTER_CONF
            ).results()
            executors = cluster.executors_launched()
        print(f"cluster stopped; executors launched per worker: {executors}", flush=True)
        print("the same input on local[*] ...", flush=True)
        on_local = PipelineProcess("local", root / "local", urls["local"], "local[*]", {}).results()
    except KeyboardInterrupt:
        print("interrupted: everything the demo started is stopped", file=sys.stderr)
        return 130
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    print(f"\n{'dt':<12}{'rows':>8}{'expected':>10}")
    for date, count in on_cluster["counts"].items():
        print(f"{date:<12}{count:>8,}{on_cluster['sample']['records_by_date'].get(date, 0):>10,}")
    bad = sum(round_["bad_records"] for round_ in on_cluster["stream"])
    delayed = sum(round_["delayed_objects"] for round_ in on_cluster["stream"])
    print(
        f"bad records {bad} (sample: {on_cluster['sample']['bad_records']}); delayed small objects {delayed}; "
        f"published versions {len(on_cluster['versions'])}; reaped objects {on_cluster['reap']['objects']}"
    )
    problems = [f"cluster vs local[*]: {line}" for line in differences(on_cluster, on_local)]
    if on_cluster["counts"] != on_cluster["sample"]["records_by_date"]:
        problems.append(f"the table holds {on_cluster['counts']}, the sample {on_cluster['sample']['records_by_date']}")
    if min(executors) < 1:
        problems.append(f"a worker launched no executor: {executors}")
    if problems:
        print("\n  ".join(["cluster demo check failed:", *problems]), file=sys.stderr)
        return 1
    print(
        f"ok: the cluster run equals the local[*] run (all {len(on_cluster['rows']) - 1:,} rows, partition "
        f"counts, versions, bad records, reap), and both workers ran executors. {time.monotonic() - started:.0f}s "
        f"in all.\nLook around (the cluster is stopped, so Spark commands take a local master):\n"
        f"  SILTLAKE_SPARK__MASTER='local[*]' {Path(sys.executable).parent / 'silt'} --config "
        f'{root / "cluster" / "siltlake.toml"} sql "SELECT dt, count(*) FROM web.access GROUP BY dt"'
    )
    return 0


@click.group(invoke_without_command=True)
@click.option(
    "--pg-url",
    envvar=PG_ADMIN_ENV,
    default=DEFAULT_PG_ADMIN,
    show_default=True,
    help=f"A PostgreSQL database to connect to for creating the catalogs (or ${PG_ADMIN_ENV}).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEMO_DIR,
    show_default=True,
    help="Working directory (wiped first).",
)
@click.pass_context
def main(context: click.Context, pg_url: str, directory: Path) -> None:
    """Run the pipeline on a Spark standalone cluster and on local[*], and compare."""
    if context.invoked_subcommand is None:
        sys.exit(run_demo(pg_url, directory))


@main.command("pipeline")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--catalog-url", required=True)
@click.option("--master", required=True)
@click.option("--conf", "conf", multiple=True, help="A Spark setting, key=value; repeatable.")
@click.option("--label", default="run", help="Prefix of the progress lines.")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), required=True)
def pipeline_command(
    root: Path, catalog_url: str, master: str, conf: tuple[str, ...], label: str, results: Path
) -> None:
    """One run of the pipeline in this process; its results as JSON in --results."""
    settings = dict(item.split("=", 1) for item in conf)
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"[{label} {time.monotonic() - started:5.1f}s] {line}", flush=True)

    try:
        outcome = run_pipeline(root, catalog_url, master, settings, say=say)
    except KeyboardInterrupt:
        say("interrupted")
        sys.exit(130)
    except PipelineError as exc:
        say(f"error: {exc}")
        sys.exit(1)
    results.write_text(json.dumps(outcome))


if __name__ == "__main__":
    main()
