"""Discovery cursors: per staging root, how far its completed listings have come (stream/discover.py)."""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from siltlake.catalog import schema_discovery as s
from siltlake.catalog.core import CatalogCore, row_values
from siltlake.catalog.rows import DiscoveryCursor, PrefixCursor
from siltlake.storage.accounted import DirectoryNames


class DiscoveryCursors:
    """Reached as catalog.discovery."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def get(self, staging_root: str) -> DiscoveryCursor | None:
        d = s.discovery_cursors
        with self._core.tx() as c:
            row = c.execute(
                sa.select(
                    d.c.cursor_time,
                    d.c.full_listing_time,
                    d.c.expired_before,
                    d.c.expired_recorded,
                    d.c.sweep_after,
                    d.c.sweep_started,
                    d.c.checked_time,
                ).where(d.c.staging_root == staging_root)
            ).first()
        return DiscoveryCursor(*row_values(row)) if row is not None else None

    def advance(self, staging_root: str, cursor_time: dt.datetime, full_listing_time: dt.datetime | None) -> None:
        """Record a completed listing. Both times only move forward: of several processes listing the same root,
        one finishing late with an older start must not take the cursor back (the newer listing saw more)."""
        d = s.discovery_cursors
        with self._core.tx() as c:
            inserted = self._core.insert_once(
                c,
                d,
                "staging_root",
                dict(
                    staging_root=staging_root,
                    cursor_time=cursor_time,
                    full_listing_time=full_listing_time or cursor_time,
                    checked_time=full_listing_time,
                ),
            )
            if inserted:
                return
            c.execute(
                d.update()
                .where(d.c.staging_root == staging_root, d.c.cursor_time < cursor_time)
                .values(cursor_time=cursor_time)
            )
            if full_listing_time is not None:
                c.execute(
                    d.update()
                    .where(d.c.staging_root == staging_root, d.c.full_listing_time < full_listing_time)
                    .values(full_listing_time=full_listing_time)
                )
                self._checked(c, staging_root, full_listing_time)

    def record_expiry(
        self, staging_root: str, expired_before: dt.datetime, now: dt.datetime, margin: dt.timedelta
    ) -> dt.datetime | None:
        """Move the root's expiry watermark forward to expired_before, never past the start of its last completed
        full listing less `margin` (an object that arrived after it, by a storage clock up to the margin behind
        this host's, may not be registered yet: it must not be skipped). Returns the watermark now recorded; None
        when the root was never listed."""
        d = s.discovery_cursors
        with self._core.tx() as c:
            row = c.execute(
                sa.select(d.c.full_listing_time, d.c.expired_before).where(d.c.staging_root == staging_root)
            ).first()
            if row is None:
                return None
            watermark = min(expired_before, row.full_listing_time - margin)
            if row.expired_before is not None and row.expired_before >= watermark:
                return row.expired_before
            c.execute(
                d.update()
                .where(d.c.staging_root == staging_root)
                .values(expired_before=watermark, expired_recorded=now)
            )
            return watermark

    # --- an object store's cursors (stream/discover_s3.py) ---------------------------------------------------

    def prefixes(self, staging_root: str) -> list[PrefixCursor]:
        """The root's listing cursors: its stream prefixes and recent directories."""
        p = s.prefix_cursors
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(p.c.prefix, p.c.kind, p.c.start_after, p.c.newest_put).where(p.c.staging_root == staging_root)
            ).all()
        return [PrefixCursor(*row_values(row)) for row in rows]

    def advance_prefixes(
        self, staging_root: str, cursors: list[PrefixCursor], forget: dict[str, dt.datetime | None]
    ) -> None:
        """Record listing cursors after the objects they pass are registered. A cursor's key and newest put
        only move forward (a slower process listing the same prefix cannot take them back). The cursors of
        `forget` go: each unless its newest put is at or after the time given with it (a put recorded meanwhile
        by another process keeps it), or at all (None)."""
        p = s.prefix_cursors
        mine = p.c.staging_root == staging_root
        with self._core.tx() as c:
            self._core.insert_once(
                c,
                p,
                ("staging_root", "prefix"),
                [
                    dict(
                        staging_root=staging_root,
                        prefix=cursor.prefix,
                        kind=cursor.kind,
                        start_after=cursor.start_after,
                        newest_put=cursor.newest_put,
                    )
                    for cursor in cursors
                ],
            )
            for cursor in cursors:
                row = sa.and_(mine, p.c.prefix == cursor.prefix)
                c.execute(
                    p.update().where(row, p.c.start_after < cursor.start_after).values(start_after=cursor.start_after)
                )
                if cursor.newest_put is not None:
                    c.execute(
                        p.update()
                        .where(row, sa.or_(p.c.newest_put.is_(None), p.c.newest_put < cursor.newest_put))
                        .values(newest_put=cursor.newest_put)
                    )
            for prefix, before in forget.items():
                row = sa.and_(mine, p.c.prefix == prefix)
                if before is not None:
                    row = sa.and_(row, sa.or_(p.c.newest_put.is_(None), p.c.newest_put < before))
                c.execute(p.delete().where(row))

    def advance_sweep(
        self,
        staging_root: str,
        pass_started: dt.datetime | None,
        position: str | None,
        now: dt.datetime,
        checked: bool = True,
    ) -> None:
        """Record how far the rolling sweep's pass that started at pass_started (None: none had) has listed:
        up to `position`, or (None) to the end of the root. A completed pass is a completed full listing: the
        root's full_listing_time moves (forward) to its start, and the next pass starts at `now`; a pass that
        looked every file up (`checked`) moves checked_time too. Only the pass still recorded moves: a process
        finishing a pass another has completed changes nothing."""
        d = s.discovery_cursors
        same_pass = d.c.sweep_started.is_(None) if pass_started is None else d.c.sweep_started == pass_started
        row = sa.and_(d.c.staging_root == staging_root, same_pass)
        with self._core.tx() as c:
            if position is not None:
                c.execute(
                    d.update()
                    .where(row, sa.or_(d.c.sweep_after.is_(None), d.c.sweep_after < position))
                    .values(sweep_after=position, sweep_started=pass_started or now)
                )
                return
            completed = pass_started or now
            if c.execute(d.update().where(row).values(sweep_after=None, sweep_started=now)).rowcount:
                c.execute(
                    d.update()
                    .where(d.c.staging_root == staging_root, d.c.full_listing_time < completed)
                    .values(full_listing_time=completed)
                )
                if checked:
                    self._checked(c, staging_root, completed)

    @staticmethod
    def _checked(c: sa.Connection, staging_root: str, listing_started: dt.datetime) -> None:
        """A listing that looked every object up completed: checked_time moves (forward) to its start."""
        d = s.discovery_cursors
        c.execute(
            d.update()
            .where(
                d.c.staging_root == staging_root, sa.or_(d.c.checked_time.is_(None), d.c.checked_time < listing_started)
            )
            .values(checked_time=listing_started)
        )

    def recorded_names(self, staging_root: str) -> dict[str, DirectoryNames]:
        """The record of names a one-off run stored for the root's directories, by path (empty: none)."""
        n = s.discovery_names
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(n.c.directory, n.c.identity, n.c.newest_ns, n.c.names).where(n.c.staging_root == staging_root)
            ).all()
        return {
            row.directory: DirectoryNames(_identity(row.identity), row.newest_ns, _unpacked(row.names)) for row in rows
        }

    def record_names(self, staging_root: str, changed: Mapping[str, DirectoryNames], forgotten: Iterable[str]) -> None:
        """Store the directories whose record changed (each replaced whole) and drop the forgotten ones. Of two
        runs storing at once the later stands: each stores only what its completed round accounted for."""
        n = s.discovery_names
        # A directory whose name is not UTF-8 has no record (a text column cannot hold it): it is read whole.
        rows = [
            dict(
                staging_root=staging_root,
                directory=path,
                identity=":".join(map(str, known.identity)),
                newest_ns=known.newest_ns,
                names=_packed(known.files or ""),
            )
            for path, known in changed.items()
            if _is_text(path)
        ]
        gone = [path for path in forgotten if _is_text(path)]
        with self._core.tx() as c:
            if gone:
                c.execute(n.delete().where(n.c.staging_root == staging_root, n.c.directory.in_(gone)))
            if rows:
                self._core.upsert(c, n, ("staging_root", "directory"), rows, ("identity", "newest_ns", "names"))


def _is_text(path: str) -> bool:
    """Whether a path holds no byte that is not UTF-8 (which os.fsdecode keeps as a surrogate)."""
    try:
        path.encode()
    except UnicodeEncodeError:
        return False
    return True


# A record's names are stored as a zstd frame (Arrow's codec, level 1) behind a marker and the text's length: a
# third less time than zlib at level 1 to write and read back (bench/dir_listing_bench.py), and a fifth smaller.
# Records stored before are zlib streams (they start with 0x78), read as such.
_ZSTD_MARKER = b"\x00zst"


def _packed(text: str) -> bytes:
    import pyarrow as pa

    raw = text.encode("utf-8", "surrogateescape")  # a name that is not UTF-8 keeps its bytes (os.fsdecode's)
    return _ZSTD_MARKER + len(raw).to_bytes(8, "little") + pa.compress(raw, codec="zstd", asbytes=True)


def _unpacked(blob: bytes) -> str:
    if not blob.startswith(_ZSTD_MARKER):
        return zlib.decompress(blob).decode("utf-8", "surrogateescape")
    import pyarrow as pa

    size = int.from_bytes(blob[len(_ZSTD_MARKER) : len(_ZSTD_MARKER) + 8], "little")
    raw = pa.decompress(blob[len(_ZSTD_MARKER) + 8 :], decompressed_size=size, codec="zstd", asbytes=True)
    return raw.decode("utf-8", "surrogateescape")


def _identity(text: str) -> tuple[int, int, int]:
    """A directory's identity as stored: device, inode and link count joined by ':'."""
    device, inode, links = text.split(":")
    return int(device), int(inode), int(links)
