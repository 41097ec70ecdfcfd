"""Where a stream round's waves decode: this host's worker processes for a small wave, a Spark stage otherwise."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from siltlake.catalog import PendingStagingObject
from siltlake.config import StreamConfig
from siltlake.deployment import Deployment
from siltlake.logs import event
from siltlake.records import ObjectLimits
from siltlake.spark import run_tasks
from siltlake.stream.task import StreamTask, process_staging_object
from siltlake.workers import WorkersLost, run_on_workers, worker_count

log = logging.getLogger(__name__)


def decode_threads(sizes: list[int], cores: int, threshold: int) -> list[int]:
    """Threads each object of a wave decodes on: one of at least `threshold` bytes gets its share of the cores by
    size (one large object alone in its wave: all of them), any other one. Only speed depends on it: an object
    decodes to the same rows on any number of threads (records.pipeline)."""
    total = sum(sizes) or 1
    return [max(1, min(cores, round(cores * size / total))) if size >= threshold else 1 for size in sizes]


def _task_cores(spark) -> int:  # noqa: ANN001 - a SparkSession
    """The cores one task may use: the stage's (local mode), or one executor's when they are set."""
    context = spark.sparkContext
    cores = getattr(context, "_siltlake_task_cores", None)
    if cores is None:  # fixed for the context's life; getConf copies the whole configuration over py4j (30 ms)
        executor = context.getConf().get("spark.executor.cores")
        cores = min(context.defaultParallelism, int(executor)) if executor else context.defaultParallelism
        context._siltlake_task_cores = cores
    return cores


def stream_task(deployment: Deployment, pending: PendingStagingObject, run_id: str, threads: int = 1,
                table_json: str | None = None) -> StreamTask:
    """The task of one object; `table_json` its table's definition when the caller made it for the wave."""
    settings = deployment.config.stream
    return StreamTask(
        staging_object_id=pending.id,
        uri=pending.uri,
        staging=deployment.staging,
        lake=deployment.lake,
        layout=pending.table.layout(deployment.instance_key),
        table_json=table_json or pending.table.definition.to_json(),
        run_id=run_id,
        batch_rows=settings.batch_rows,
        spill_bytes=settings.spill_bytes,
        limits=object_limits(settings),
        end=pending.size,
        settle_time=settings.settle_time,
        decode_threads=threads,
    )


def object_limits(settings: StreamConfig) -> ObjectLimits:
    return ObjectLimits(max_bytes=settings.max_object_bytes, max_ratio=settings.max_compression_ratio)


class WaveStage:
    """Where a round's waves decode: a wave of at most stream.in_driver_bytes on this host's warm worker
    processes (siltlake/workers.py), any other as a Spark stage; Spark starts with the first wave that needs it.
    A wave whose worker process died runs again on Spark (its tasks overwrite only their own outputs)."""

    def __init__(self, deployment: Deployment, on_progress: Callable[[int], None]) -> None:
        self.deployment, self.on_progress = deployment, on_progress
        self.settings = deployment.config.stream
        self.local_waves = 0  # waves run on the worker processes
        self.spark_start_seconds = 0.0
        self._spark = None

    def run(self, wave: list[PendingStagingObject], run_id: str) -> list[dict]:
        sizes = [item.size or 0 for item in wave]
        if sum(sizes) <= self.settings.in_driver_bytes:
            try:
                results = run_on_workers(process_staging_object, self._tasks(wave, sizes, run_id, worker_count()),
                                         weights=sizes, on_progress=self.on_progress)
            except WorkersLost as lost:
                event(log, "stream.workers_lost", logging.WARNING, objects=len(wave), reason=str(lost))
            else:
                self.local_waves += 1
                return results
        spark = self.spark()
        return run_tasks(spark, process_staging_object, self._tasks(wave, sizes, run_id, _task_cores(spark)),
                         weights=sizes, tasks_per_core=self.settings.tasks_per_core,
                         task_weight=self.settings.task_bytes, on_progress=self.on_progress)

    def spark(self):  # noqa: ANN201 - a SparkSession
        if self._spark is None:
            started = time.monotonic()
            self._spark = self.deployment.spark()
            self.spark_start_seconds = time.monotonic() - started
        return self._spark

    def _tasks(self, wave: list[PendingStagingObject], sizes: list[int], run_id: str, cores: int) -> list[StreamTask]:
        threads = decode_threads(sizes, cores, self.settings.parallel_decode_bytes)
        tables = {item.table.id: item.table for item in wave}
        table_json = {table_id: table.definition.to_json() for table_id, table in tables.items()}  # once a table
        return [stream_task(self.deployment, item, run_id, count, table_json[item.table.id])
                for item, count in zip(wave, threads, strict=True)]
