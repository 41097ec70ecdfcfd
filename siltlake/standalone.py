"""A Spark standalone cluster on this host, started from the installed PySpark (tests, `make cluster-demo`).

`standalone_cluster()` starts a master and workers on 127.0.0.1 through `$SPARK_HOME/bin/spark-class`
(SPARK_HOME is the pyspark package directory), waits until every worker has registered, and stops
every process it started when the block ends, however it ends.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from siltlake.errors import SiltError, require_spark

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_READY = "I have been elected leader"
MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
WORKER_READY = "Successfully registered with master"
EXECUTOR_LAUNCHED = "Asked to launch executor"
LOG_TAIL_CHARS = 3000


class ClusterStartError(SiltError):
    """A master or worker did not come up; the message ends with its log."""


@dataclass
class StandaloneCluster:
    master_url: str
    master_log: Path
    worker_logs: list[Path] = field(default_factory=list)
    work_dirs: list[Path] = field(default_factory=list)

    def executors_launched(self) -> list[int]:
        """How many executors each worker was asked to launch, in worker order."""
        return [log.read_text(errors="replace").count(EXECUTOR_LAUNCHED) for log in self.worker_logs]


def spark_home() -> str:
    require_spark("a Spark standalone cluster")
    import pyspark

    return os.path.dirname(pyspark.__file__)


def _log_tail(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return text[-LOG_TAIL_CHARS:] or "(empty)"


@overload
def _wait_for_line(
    name: str, log: Path, process: subprocess.Popen, pattern: re.Pattern, deadline: float
) -> re.Match: ...


@overload
def _wait_for_line(name: str, log: Path, process: subprocess.Popen, pattern: str, deadline: float) -> None: ...


def _wait_for_line(
    name: str, log: Path, process: subprocess.Popen, pattern: re.Pattern | str, deadline: float
) -> re.Match | None:
    """Wait until the daemon's log holds pattern; ClusterStartError if it exits or the deadline passes."""
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = pattern.search(text) if isinstance(pattern, re.Pattern) else (pattern in text or None)
        if found:
            return found if isinstance(found, re.Match) else None
        if process.poll() is not None:
            raise ClusterStartError(
                f"the Spark {name} exited with status {process.returncode} before it was "
                f"ready; the end of {log}:\n{_log_tail(log)}"
            )
        if time.monotonic() > deadline:
            raise ClusterStartError(
                f"the Spark {name} did not report {str(pattern)!r} in time; the end of {log}:\n{_log_tail(log)}"
            )
        time.sleep(0.2)


def _stop(processes: list[subprocess.Popen], grace: float) -> None:
    """SIGTERM each daemon's process group (the daemon with its executors), then SIGKILL what is left."""
    for process in processes:
        if process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        # Executors and Python workers may outlive the daemon in its group: kill the group regardless.
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def standalone_cluster(
    work_dir: str | Path,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    timeout: float = 120,
    stop_grace: float = 20,
) -> Iterator[StandaloneCluster]:
    """A master and `workers` workers (each offering `cores` cores and `memory`) on 127.0.0.1.

    Logs and the workers' work directories go under work_dir. Ports are picked by the daemons (port 0);
    the master's URL is read from its log. Each daemon runs in a process group of its own, which is
    stopped (SIGTERM, then SIGKILL after stop_grace seconds) when the block exits, also on errors and
    KeyboardInterrupt.
    """
    work_dir = Path(work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    home = spark_home()
    spark_class = os.path.join(home, "bin", "spark-class")
    if not os.access(spark_class, os.X_OK):
        raise ClusterStartError(f"no executable {spark_class}: the installed PySpark cannot start a cluster")
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": HOST}
    processes: list[subprocess.Popen] = []
    deadline = time.monotonic() + timeout

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = work_dir / f"{name}.log"
        with log.open("w") as sink:
            process = subprocess.Popen(
                [spark_class, *args],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        processes.append(process)
        return process, log

    try:
        master, master_log = start("master", MASTER_CLASS, "--host", HOST, "--port", "0", "--webui-port", "0")
        found = _wait_for_line("master", master_log, master, MASTER_URL, deadline)
        _wait_for_line("master", master_log, master, MASTER_READY, deadline)
        cluster = StandaloneCluster(found.group(1), master_log)
        started = []
        for number in range(1, workers + 1):
            worker_dir = work_dir / f"worker-{number}"
            worker_dir.mkdir(exist_ok=True)
            process, log = start(
                f"worker-{number}",
                WORKER_CLASS,
                cluster.master_url,
                "--host",
                HOST,
                "--port",
                "0",
                "--webui-port",
                "0",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(worker_dir),
            )
            started.append((f"worker {number}", process, log))
            cluster.worker_logs.append(log)
            cluster.work_dirs.append(worker_dir)
        for name, process, log in started:  # the workers start side by side
            _wait_for_line(name, log, process, WORKER_READY, deadline)
        yield cluster
    finally:
        _stop(list(reversed(processes)), stop_grace)
