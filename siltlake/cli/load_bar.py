"""`silt load`'s progress display: a load's input bytes on a Rich bar. Imports the load's runner (and with it
pandas): `silt load` imports it when it runs; `silt merge` and `silt stream` never do."""

from __future__ import annotations

from rich.progress import Progress, TaskID

from siltlake.load.runner import LoadProgress


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
