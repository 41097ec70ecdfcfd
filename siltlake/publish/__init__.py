"""Publish (docs/design.md): close days, switch partitions to merged objects, record versions, write
manifests, and keep the external catalogs (Hive, Glue, Iceberg) in step."""

from siltlake.publish.runner import PublishReport, publish_once

__all__ = ["PublishReport", "publish_once"]
