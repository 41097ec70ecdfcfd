"""`silt stream --once`'s progress display: its staging objects on a Rich bar. Imports the stream's runner
(and with it the catalog): `silt stream` imports it when it runs; `silt merge` and `silt load` never do."""

from __future__ import annotations

from rich.progress import Progress, TaskID

from siltlake.stream.runner import Progress as StreamProgress


class StreamBar(StreamProgress):
    """A stream's staging objects on a bar."""

    def __init__(self, progress: Progress, label: str) -> None:
        self.progress = progress
        self.label = label
        self.task_id: TaskID | None = None

    def start(self, total: int) -> None:
        self.task_id = self.progress.add_task(self.label, total=total)

    def resize(self, total: int) -> None:
        if self.task_id is not None:
            self.progress.update(self.task_id, total=total)

    def advance(self, count: int) -> None:
        if self.task_id is not None:
            self.progress.advance(self.task_id, count)
