"""Publish (DESIGN §4): close days, switch partitions to merged objects, record versions, write manifests."""

from siltlake.publish.runner import PublishReport, publish_once

__all__ = ["PublishReport", "publish_once"]
