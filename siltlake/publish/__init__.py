"""Publish (docs/design.md): close days, switch partitions to merged objects, record versions, write
manifests; updates rewrite partitions as one table version."""

from siltlake.catalog import UpdateConflict
from siltlake.publish.runner import PublishReport, publish_once
from siltlake.publish.update import UpdateReport, delete_rows, delete_where, overwrite_partition

__all__ = ["PublishReport", "UpdateConflict", "UpdateReport", "delete_rows", "delete_where", "overwrite_partition",
           "publish_once"]
