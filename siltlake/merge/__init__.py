"""Merge: a job queue in the catalog and workers that merge small objects into range objects (DESIGN §5)."""

from siltlake.merge.runner import MergeProgress, MergeReport, MergeWorker, merge_once

__all__ = ["MergeProgress", "MergeReport", "MergeWorker", "merge_once"]
