"""Where a stream round's waves decode (this host's worker processes, or a Spark stage where a cluster adds
cores), and in which tasks: a large object alone, small ones of a table together (group_task.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from siltlake.catalog import PendingStagingObject
from siltlake.deployment import Deployment
from siltlake.logs import event
from siltlake.records import ObjectLimits
from siltlake.spark import run_tasks
from siltlake.stream.group_task import StreamGroup, WaveResult, process_wave_item
from siltlake.stream.tails import NotedFile
from siltlake.stream.task import StageFailed, StreamTask
from siltlake.streamconfig import StreamConfig
from siltlake.workers import WorkersLost, run_on_workers, worker_count

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def decode_threads(sizes: list[int], cores: int, threshold: int) -> list[int]:
    """Threads each object of a wave decodes on: one of at least `threshold` bytes gets its share of the cores by
    size (one large object alone in its wave: all of them), any other one. Only speed depends on it: an object
    decodes to the same rows on any number of threads (records.pipeline)."""
    total = sum(sizes) or 1
    return [max(1, min(cores, round(cores * size / total))) if size >= threshold else 1 for size in sizes]


def _task_cores(spark) -> int:
    """The cores one task may use: the stage's (local mode), or one executor's when they are set."""
    context = spark.sparkContext
    cores = getattr(context, "_siltlake_task_cores", None)
    if cores is None:  # fixed for the context's life; getConf copies the whole configuration over py4j (30 ms)
        executor = context.getConf().get("spark.executor.cores")
        cores = min(context.defaultParallelism, int(executor)) if executor else context.defaultParallelism
        context._siltlake_task_cores = cores
    return cores


def stream_task(
    deployment: Deployment, pending: PendingStagingObject, run_id: str, threads: int = 1, table_json: str | None = None
) -> StreamTask:
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
        fragment_final_after=settings.fragment_final_after if settings.settle_time else 0,
        decode_threads=threads,
        noted=NotedFile(pending.noted_identity, pending.noted_head) if pending.noted_identity else None,
    )


def object_limits(settings: StreamConfig) -> ObjectLimits:
    return ObjectLimits(max_bytes=settings.max_object_bytes, max_ratio=settings.max_compression_ratio)


_CRASHED = "Python worker exited unexpectedly"


def _worker_crash(exc: BaseException) -> str | None:
    """Spark's words for a task whose Python process died, if that is why the stage failed."""
    for line in str(exc).splitlines():
        start = line.find(_CRASHED)
        if start >= 0:
            return line[start:].split(". ", 1)[0][:200]
    return None


class _WaveProgress:
    """A wave's progress, never told more than the wave's objects however often its tasks run again."""

    def __init__(self, on_progress: Callable[[int], None], total: int) -> None:
        self.on_progress, self.left = on_progress, total

    def advance(self, count: int) -> None:
        count = min(count, self.left)
        if count:
            self.left -= count
            self.on_progress(count)

    def finish(self) -> None:
        self.advance(self.left)

    def items(self, items: list) -> Callable[[int], None]:
        """A callback told of tasks done, telling objects done: a group counts as its objects' share."""
        scale = self.left / max(1, len(items))
        return lambda done: self.advance(round(done * scale))


def wave_groups(wave: list[PendingStagingObject], settings: StreamConfig, cores: int) -> list[list[int]]:
    """The wave's objects (by index) in the tasks that decode them: a table's small objects together, in groups
    of about stream.group_bytes (fewer bytes when the wave is small, so that every core gets a group), any other
    object alone. Keyed tables' objects stay alone: their rows' order across objects is their commit order."""
    alone: list[list[int]] = []
    by_table: dict[int, list[int]] = {}
    for index, item in enumerate(wave):
        small = (item.size or 0) < min(settings.parallel_decode_bytes, settings.group_bytes)
        if small and not item.failure_count and not item.table.definition.primary_key:
            by_table.setdefault(item.table.id, []).append(index)
        else:
            alone.append([index])
    groups: list[list[int]] = []
    for members in by_table.values():
        total = sum(wave[index].size or 0 for index in members)
        target = max(1, min(settings.group_bytes, -(-total // max(1, cores))))
        current: list[int] = []
        current_bytes = 0
        for index in members:
            current.append(index)
            current_bytes += wave[index].size or 0
            if current_bytes >= target:
                groups.append(current)
                current, current_bytes = [], 0
        if current:
            groups.append(current)
    return sorted(alone + groups)


class WaveStage:
    """Where a round's waves decode: on this host's warm worker processes (siltlake/workers.py), but a wave over
    stream.in_driver_bytes as a Spark stage where Spark adds cores (stream.wave_engine); Spark starts with the
    first wave that needs it. A wave whose worker process died runs again on Spark (its tasks overwrite only their
    own outputs), where an object whose decoding kills its process is found and its attempt counted (_on_spark)."""

    def __init__(self, deployment: Deployment, on_progress: Callable[[int], None]) -> None:
        self.deployment, self.on_progress = deployment, on_progress
        self.settings = deployment.config.stream
        self.local_waves = 0  # waves run on the worker processes
        self.spark_start_seconds = 0.0
        self._spark: SparkSession | None = None

    def run(self, wave: list[PendingStagingObject], run_id: str) -> list[WaveResult]:
        sizes = [item.size or 0 for item in wave]
        progress = _WaveProgress(self.on_progress, len(wave))
        if self._on_host(sum(sizes)):
            items, weights = self._items(wave, run_id, worker_count())
            try:
                results = run_on_workers(process_wave_item, items, weights=weights, on_progress=progress.items(items))
            except WorkersLost as lost:
                event(log, "stream.workers_lost", logging.WARNING, objects=len(wave), reason=str(lost))
            else:
                self.local_waves += 1
                progress.finish()
                return results
        spark = self.spark()
        items, weights = self._items(wave, run_id, _task_cores(spark))
        results = self._on_spark(items, weights, progress.items(items))
        progress.finish()
        return results

    def _on_host(self, wave_bytes: int) -> bool:
        engine = self.settings.wave_engine
        if wave_bytes <= self.settings.in_driver_bytes or engine == "host":
            return True
        if engine == "spark":
            return False
        return self.deployment.config.spark.master.startswith("local")  # Spark on one host adds no cores

    def _on_spark(
        self, items: list[StreamTask | StreamGroup], sizes: list[int], on_progress: Callable[[int], None] | None
    ) -> list[WaveResult]:
        """The tasks as a Spark stage. Should a task's Python process die (a native library's segfault on a
        hostile object: no exception reaches Python, and Spark fails the stage), the tasks run again in halves
        until the task that kills its process is alone: its objects' attempts fail, counted against each
        (one that failed decodes alone next time; at stream.max_failures it becomes unknown), and the others'
        results stand."""
        try:
            return run_tasks(
                self.spark(),
                process_wave_item,
                items,
                weights=sizes,
                tasks_per_core=self.settings.tasks_per_core,
                task_weight=self.settings.task_bytes,
                on_progress=on_progress,
            )
        except Exception as exc:
            crash = _worker_crash(exc)
            if crash is None:
                raise
        if len(items) == 1:
            tasks = items[0].tasks if isinstance(items[0], StreamGroup) else (items[0],)
            event(log, "stream.decoder_crashed", logging.WARNING, uri=tasks[0].uri, reason=crash)
            return [_crashed(task, crash) for task in tasks]
        event(log, "stream.decoder_crashed", logging.WARNING, objects=len(items), reason=crash)
        half = len(items) // 2
        return self._on_spark(items[:half], sizes[:half], on_progress) + self._on_spark(
            items[half:], sizes[half:], on_progress
        )

    def spark(self) -> SparkSession:
        if self._spark is None:
            started = time.monotonic()
            self._spark = self.deployment.spark()
            self.spark_start_seconds = time.monotonic() - started
        return self._spark

    def _items(
        self, wave: list[PendingStagingObject], run_id: str, cores: int
    ) -> tuple[list[StreamTask | StreamGroup], list[int]]:
        """The wave's tasks (an object, or a group of small ones) and their staging bytes."""
        sizes = [item.size or 0 for item in wave]
        threads = decode_threads(sizes, cores, self.settings.parallel_decode_bytes)
        tables = {item.table.id: item.table for item in wave}
        table_json = {table_id: table.definition.to_json() for table_id, table in tables.items()}  # once a table
        tasks = [
            stream_task(self.deployment, item, run_id, count, table_json[item.table.id])
            for item, count in zip(wave, threads, strict=True)
        ]
        items: list[StreamTask | StreamGroup] = []
        weights: list[int] = []
        for members in wave_groups(wave, self.settings, cores):
            items.append(tasks[members[0]] if len(members) == 1 else StreamGroup(tuple(tasks[i] for i in members)))
            weights.append(sum(sizes[i] for i in members))
        return items, weights


def _crashed(task: StreamTask, crash: str) -> StageFailed:
    return {
        "staging_object_id": task.staging_object_id,
        "uri": task.uri,
        "status": "failed",
        "reason": f"the process decoding it died: {crash}",
        "counts": True,
    }
