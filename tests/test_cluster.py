"""`silt stream` on a Spark standalone master with a separate worker, not only local[*]."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(log: Path, text: str, process: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.3)
    pytest.fail(f"Spark daemon did not report {text!r}:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def standalone_master(tmp_path: Path):
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    env = {**os.environ, "SPARK_HOME": spark_home, "SPARK_LOCAL_IP": "127.0.0.1"}
    spark_class = os.path.join(spark_home, "bin", "spark-class")
    port = _free_port()
    daemons = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{name}.log"
        process = subprocess.Popen([spark_class, *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                   start_new_session=True)
        daemons.append(process)
        return process, log

    try:
        master, master_log = start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(_free_port()))
        _wait_for(master_log, "I have been elected leader", master)
        worker, worker_log = start("worker", "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                                   "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
                                   "--webui-port", str(_free_port()), "--work-dir", str(tmp_path / "work"))
        _wait_for(worker_log, "Successfully registered with master", worker)
        yield f"spark://127.0.0.1:{port}", worker_log
    finally:
        for process in daemons:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in daemons:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def test_stream_runs_on_a_standalone_cluster(tmp_path: Path, standalone_master) -> None:
    master_url, worker_log = standalone_master
    work = tmp_path / "deployment"
    staging = work / ".siltlake" / "staging" / "f.web.access" / "2026" / "11" / "20"
    staging.mkdir(parents=True)
    for n in range(6):
        lines = [json.dumps({"time": f"2026-11-20T{h:02d}:00:00Z", "user_id": n * 100 + h, "action": "v"})
                 for h in range(24)]
        (staging / f"{n}.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    (work / "siltlake.toml").write_text(
        f'[spark]\nmaster = "{master_url}"\nconf = {{ "spark.executor.memory" = "512m", "spark.cores.max" = "2" }}\n'
    )
    (work / "access.toml").write_text(
        'schema = "web"\nname = "access"\ntime_column = "t"\ntimezone = "Asia/Tokyo"\n'
        '[[columns]]\nname = "t"\ntype = "timestamp"\nsource = "time"\n'
        '[[columns]]\nname = "user_id"\ntype = "bigint"\n[[columns]]\nname = "action"\ntype = "string"\n'
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("SILTLAKE_")}

    def silt(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "siltlake.cli", *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    silt("init")
    silt("table", "create", "access.toml")
    report = json.loads(silt("stream", "--once", "--json"))
    assert (report["processed"], report["records_loaded"], report["bad_records"]) == (6, 144, 0)
    counts = silt("sql", "SELECT dt, count(*) AS n FROM web.access GROUP BY dt ORDER BY dt", "--format", "csv")
    # 00:00-14:00Z is the 20th in Tokyo (15 hours), 15:00-23:00Z the 21st (9 hours).
    assert counts.splitlines() == ["dt,n", "2026-11-20,90", "2026-11-21,54"]
    assert "Asked to launch executor" in worker_log.read_text()
