"""The progress displays `silt stream --once`, `silt merge --once` and `silt load` draw on a Rich bar.

Each subclasses the progress its runner reports to (the runner's own default shows nothing). This module imports the
runners, and with them the catalog and Spark's helpers: the commands import it when they run, never at `silt`'s
start-up."""

from __future__ import annotations

from rich.progress import Progress, TaskID

from siltlake.load.runner import LoadProgress
from siltlake.merge.runner import MergeProgress
from siltlake.stream.runner import Progress as StreamProgress


class StreamBar(StreamProgress):
    """A stream's staging objects on a bar."""

    def __init__(self, progress: Progress, label: str) -> None:
        self.progress = progress
        self.label = label
        self.task_id: TaskID | None = None

    def start(self, total: int) -> None:
        self.task_id = self.progress.add_task(self.label, total=total)

    def advance(self, count: int) -> None:
        if self.task_id is not None:
            self.progress.advance(self.task_id, count)


class MergeBar(MergeProgress):
    """Merge jobs on a bar whose total grows as jobs are claimed (continuing jobs add to it)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.total = 0
        self.task_id = progress.add_task("merge jobs", total=0)

    def found(self, jobs: int) -> None:
        self.total += jobs
        self.progress.update(self.task_id, total=self.total)

    def done(self, jobs: int) -> None:
        self.progress.advance(self.task_id, jobs)


class LoadBar(LoadProgress):
    """A bar over a load's input bytes, its label counting tasks and records read."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.tasks = self.done = self.records = 0
        self.task_id: TaskID | None = None

    def start(self, tasks: int, total_bytes: int) -> None:
        self.tasks = tasks
        self.task_id = self.bar.add_task(self._label(), total=max(total_bytes, 1))

    def advance(self, tasks: int, input_bytes: int, records: int) -> None:
        self.done += tasks
        self.records = records
        if self.task_id is not None:  # set by start, which the driver calls first
            self.bar.update(self.task_id, advance=input_bytes, description=self._label())

    def _label(self) -> str:
        return f"load tasks {self.done}/{self.tasks}, {self.records:,} records"
