"""Merge: a job queue in the catalog and workers that merge small objects into range objects (docs/design.md)."""

from siltlake.merge.runner import MergeProgress, MergeReport, MergeWorker, merge_once

__all__ = ["MergeProgress", "MergeReport", "MergeWorker", "merge_once"]
