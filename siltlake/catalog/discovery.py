"""Discovery cursors: per staging root, how far its completed listings have come (stream/discover.py)."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.records import DiscoveryCursor


class DiscoveryCursors:
    """Reached as catalog.discovery."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def get(self, staging_root: str) -> DiscoveryCursor | None:
        d = s.discovery_cursors
        with self._core.tx() as c:
            row = c.execute(sa.select(d.c.cursor_time, d.c.full_listing_time, d.c.expired_before,
                                      d.c.expired_recorded).where(d.c.staging_root == staging_root)).first()
        return DiscoveryCursor(*row) if row is not None else None

    def advance(self, staging_root: str, cursor_time: dt.datetime, full_listing_time: dt.datetime | None) -> None:
        """Record a completed listing. Both times only move forward: of several processes listing the same root,
        one finishing late with an older start must not take the cursor back (the newer listing saw more)."""
        d = s.discovery_cursors
        with self._core.tx() as c:
            inserted = self._core.insert_once(c, d, "staging_root", dict(
                staging_root=staging_root, cursor_time=cursor_time,
                full_listing_time=full_listing_time or cursor_time))
            if inserted:
                return
            c.execute(d.update().where(d.c.staging_root == staging_root, d.c.cursor_time < cursor_time)
                      .values(cursor_time=cursor_time))
            if full_listing_time is not None:
                c.execute(d.update().where(d.c.staging_root == staging_root,
                                           d.c.full_listing_time < full_listing_time)
                          .values(full_listing_time=full_listing_time))

    def record_expiry(self, staging_root: str, expired_before: dt.datetime, now: dt.datetime,
                      margin: dt.timedelta) -> dt.datetime | None:
        """Move the root's expiry watermark forward to expired_before, never past the start of its last completed
        full listing less `margin` (an object that arrived after it, by a storage clock up to the margin behind
        this host's, may not be registered yet: it must not be skipped). Returns the watermark now recorded; None
        when the root was never listed."""
        d = s.discovery_cursors
        with self._core.tx() as c:
            row = c.execute(sa.select(d.c.full_listing_time, d.c.expired_before)
                            .where(d.c.staging_root == staging_root)).first()
            if row is None:
                return None
            watermark = min(expired_before, row.full_listing_time - margin)
            if row.expired_before is not None and row.expired_before >= watermark:
                return row.expired_before
            c.execute(d.update().where(d.c.staging_root == staging_root)
                      .values(expired_before=watermark, expired_recorded=now))
            return watermark
