"""Pruning processed staging rows past stream.staging_retention (docs/design.md, "Staging expiry").

A staging row is what keeps its key from being loaded twice. Once a key's arrival is older than the retention,
the root's expiry watermark (discovery_cursors.expired_before) keeps it from being loaded instead: full listings
skip objects that arrived before it (stream/discover.py), so the row itself can go."""

from __future__ import annotations

import datetime as dt

from siltlake.deployment import Deployment


def prune_staging_rows(deployment: Deployment, now: dt.datetime) -> int:
    """Advance the staging root's expiry watermark to now - stream.staging_retention, and delete the rows that
    arrived before the watermark an earlier run recorded; how many rows went.

    Rows are pruned one run behind the watermark, and only once it has been recorded for reap.change_slack: a
    listing that read the catalog before the watermark existed, still looking URIs up, must not find a pruned
    row missing and register its key again. The rows' arrival must also be stream.listing_margin before it, and the
    watermark that much before the last full listing's start (the allowance the discovery cursor makes for a
    storage clock ahead of, or behind, this host's)."""
    config = deployment.config
    catalog = deployment.catalog
    root = deployment.staging.root
    cursor = catalog.discovery.get(root)
    if cursor is None:  # never listed: nothing guards a key but its row
        return 0
    pruned = 0
    margin = dt.timedelta(seconds=config.stream.listing_margin)
    settled = now - dt.timedelta(seconds=config.reap.change_slack)
    if cursor.expired_before is not None and cursor.expired_recorded is not None and cursor.expired_recorded <= settled:
        pruned = catalog.staging.prune(cursor.expired_before - margin)
        # Positions of files with no delivery since: such a file's arrival (its mtime) is older too, so listings
        # skip it; a file still appended to has a recent position and keeps it (docs/design.md, "Files written
        # in place and appended to").
        catalog.positions.prune(cursor.expired_before - margin)
    catalog.discovery.record_expiry(root, now - dt.timedelta(seconds=config.stream.staging_retention), now, margin)
    return pruned
