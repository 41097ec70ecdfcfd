"""`silt merge --once`'s progress display: merge jobs on a Rich bar. Imports the merge runner only, not the
stream's or the load's (the load's runner imports pandas): `silt merge` imports it when it runs."""

from __future__ import annotations

from rich.progress import Progress

from siltlake.merge.runner import MergeProgress


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
