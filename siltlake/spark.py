"""The SparkSession siltlake runs its jobs on."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siltlake.config import SparkConfig

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

QUIET = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


def _package_zip() -> str:
    """Zip the siltlake package so executors on other hosts can import the task code."""
    target = Path(tempfile.mkdtemp(prefix="siltlake-pyfiles-")) / "siltlake.zip"
    package = Path(__file__).parent
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in package.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, Path("siltlake") / path.relative_to(package))
    return str(target)


def spark_session(config: SparkConfig, extra: dict[str, str] | None = None) -> SparkSession:
    """Get or create the session for the configured master, with quiet logs and no UI."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(config.master).appName(config.app_name)
    for key, value in {**QUIET, **config.conf, **(extra or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if not config.master.startswith("local"):
        session.sparkContext.addPyFile(_package_zip())
    return session


def run_tasks(spark: SparkSession, function: Callable[[Any], Any], items: list[Any],
              on_progress: Callable[[int], None] | None = None) -> list[Any]:
    """Run function over items as one Spark stage, one task per item; report completed task counts."""
    if not items:
        return []
    context = spark.sparkContext
    rdd: RDD = context.parallelize(items, len(items)).map(function)
    group = f"siltlake-{uuid.uuid4().hex}"
    outcome: dict[str, Any] = {}

    def collect() -> None:
        context.setJobGroup(group, "siltlake tasks", interruptOnCancel=True)
        try:
            outcome["results"] = rdd.collect()
        except BaseException as exc:  # re-raised in the calling thread
            outcome["error"] = exc

    worker = threading.Thread(target=collect, daemon=True)
    worker.start()
    tracker = context.statusTracker()
    reported = 0
    try:
        while worker.is_alive():
            worker.join(0.2)
            if on_progress is None:
                continue
            completed = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else []:
                    stage = tracker.getStageInfo(stage_id)
                    completed += stage.numCompletedTasks if stage else 0
            if completed > reported:
                on_progress(completed - reported)
                reported = completed
    except KeyboardInterrupt:
        context.cancelJobGroup(group)
        raise
    if "error" in outcome:
        raise outcome["error"]
    if on_progress is not None and len(items) > reported:
        on_progress(len(items) - reported)
    return outcome["results"]
