"""Files written in place and appended to: per appendable file how far its deliveries consumed it, like a tailing
shipper's position file, and files followed by identity across renames (stream/appends.py, stream/rotation.py;
docs/design.md, "Files written in place and appended to")."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.catalog import schema_discovery as sd
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.many_rows import one_of
from siltlake.catalog.position_rows import (
    URIS_PER_STATEMENT,
    LostRace,
    Position,
    PositionState,
    clear_at,
    detach_at,
    detached,
    generation_of,
    new_generation,
    position_of,
    position_root,
    register_known,
    stopped,
    storable,
)

EMPTY_CRC = 0  # zlib.crc32(b""): the head of a position of which nothing was loaded


class Positions:
    """Reached as catalog.positions."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    # --- files appended to (stream/appends.py) ----------------------------------------------------------

    def watched(self, staging_root: str, since: dt.datetime) -> list[Position]:
        """The positions of files seen written in place that changed since `since`: each round looks at them by
        key, as the directory walk does not see a file grow. A vacated name is among them: the file a rotation
        leaves there (logrotate's `create`, a compressed copy) is judged when it grows, or when a delivery it
        waited for is done, not only when the sweep passes."""
        p = sd.staging_positions
        with self._core.tx() as c:
            # And those holding a trailing fragment, however old: it becomes final (stream.fragment_final_after).
            rows = c.execute(
                sa.select(p).where(
                    p.c.staging_root == staging_root,
                    sa.or_(
                        sa.and_(p.c.state.in_(("appending", "vacated")), p.c.watch.is_(True), p.c.change_time >= since),
                        sa.and_(p.c.state == "appending", p.c.consumed_end < p.c.read_end, p.c.pending_uri.is_(None)),
                    ),
                )
            ).all()
        return [position_of(row) for row in rows]

    def watch(self, staging_root: str, files: Sequence[tuple[str, str]], now: dt.datetime) -> None:
        """Watch these (uri, key): files seen being written, whose growth the walk would not see."""
        p = sd.staging_positions
        with self._core.tx() as c:
            self._core.insert_once(
                c,
                p,
                "uri",
                [
                    dict(staging_root=staging_root, uri=uri, key=storable(key), watch=True, change_time=now)
                    for uri, key in files
                ],
            )
            for start in range(0, len(files), URIS_PER_STATEMENT):
                uris = [uri for uri, _ in files[start : start + URIS_PER_STATEMENT]]
                c.execute(p.update().where(p.c.uri.in_(uris), p.c.watch.is_(False)).values(watch=True, change_time=now))

    def consumed(self, uris: Sequence[str]) -> set[str]:
        """Of these base URIs, those with a position some delivery consumed (one statement per 5,000)."""
        p = sd.staging_positions
        found: set[str] = set()
        with self._core.tx() as c:
            for start in range(0, len(uris), URIS_PER_STATEMENT):
                found.update(
                    c.execute(
                        sa.select(p.c.uri).where(
                            p.c.uri.in_(list(uris[start : start + URIS_PER_STATEMENT])), p.c.consumed_end.is_not(None)
                        )
                    ).scalars()
                )
        return found

    def states(self, uris: Sequence[str]) -> dict[str, PositionState]:
        """Position and first delivery of each of these base URIs."""
        p, so = sd.staging_positions, s.staging_objects
        found: dict[str, PositionState] = {}
        with self._core.tx() as c:
            for start in range(0, len(uris), URIS_PER_STATEMENT):
                chunk = list(uris[start : start + URIS_PER_STATEMENT])
                positions = {row.uri: position_of(row) for row in c.execute(sa.select(p).where(p.c.uri.in_(chunk)))}
                plain = {
                    row.uri: row
                    for row in c.execute(
                        sa.select(so.c.uri, so.c.table_id, so.c.processed_time, so.c.size).where(so.c.uri.in_(chunk))
                    )
                }
                u = s.unknown_staging_objects
                unknown: set[str] = set(c.execute(sa.select(u.c.uri).where(u.c.uri.in_(chunk))).scalars())
                for uri in chunk:
                    row = plain.get(uri)
                    found[uri] = PositionState(
                        positions.get(uri),
                        row.table_id if row else None,
                        (row.processed_time is not None) if row else None,
                        row.size if row else None,
                        uri in unknown,
                    )
        return found

    def register_tail(
        self,
        position: Position,
        delivery_uri: str,
        table_id: int,
        size: int,
        send_time: dt.datetime | None,
        now: dt.datetime,
    ) -> bool:
        """Register the delivery of a file's tail from its consumed end, unless another process did first or a
        delivery of it is still pending: the position's pending_uri is set under a compare-and-set in the
        same transaction, so one delivery at a time is in flight and each byte is delivered once."""
        p = sd.staging_positions
        with self._core.tx() as c:
            # The row first: a delivery URI registered before (it cannot be, each names its end) must never
            # leave the position waiting for a delivery that will not come.
            if not self._core.insert_once(
                c,
                s.staging_objects,
                "uri",
                dict(uri=delivery_uri, table_id=table_id, size=size, send_time=send_time, receive_time=now),
            ):
                return False
            taken = c.execute(
                p.update()
                .where(
                    p.c.uri == position.uri,
                    p.c.state == "appending",
                    p.c.pending_uri.is_(None),
                    p.c.consumed_end == position.consumed_end,
                )
                .values(pending_uri=delivery_uri, watch=True, change_time=now)
            ).rowcount
            if not taken:  # another process registered this growth first: the row goes with this transaction
                c.execute(s.staging_objects.delete().where(s.staging_objects.c.uri == delivery_uri))
            return bool(taken)

    # --- files followed by identity (stream/rotation.py) ------------------------------------------------

    def by_identity(self, staging_root: str, identities: Sequence[str]) -> list[Position]:
        """The positions of files with these device:inode identities, attached to a name or not."""
        return self._where(staging_root, sd.staging_positions.c.file_identity, identities)

    def by_head(self, staging_root: str, crcs: Sequence[int], head_length: int) -> list[Position]:
        """The positions of plain files whose first head_length bytes have one of these CRCs."""
        p = sd.staging_positions
        return [
            position
            for position in self._where(staging_root, p.c.head_crc, crcs)
            if position.head_length == head_length and not position.compressed
        ]

    def by_short_head(self, staging_root: str, crcs: Sequence[int], shorter_than: int) -> list[Position]:
        """The positions of plain files shorter than `shorter_than` bytes when consumed (their head is all they
        held), whose head has one of these CRCs."""
        p = sd.staging_positions
        return [
            position
            for position in self._where(staging_root, p.c.head_crc, crcs)
            if position.head_length is not None and 0 < position.head_length < shorter_than and not position.compressed
        ]

    def related(self, staging_root: str, identities: Sequence[str], crcs: Sequence[int]) -> list[Position]:
        """The positions with one of these device:inode identities or first-bytes CRCs, and those of which nothing
        was loaded whose delivery from their start is in flight (their head is empty; stream/rotation.py's
        known_for sorts them): one statement for a round's fresh files."""
        p = sd.staging_positions
        empty = sa.and_(p.c.head_crc == EMPTY_CRC, p.c.head_length == 0, p.c.pending_uri.is_not(None))
        dialect = self._core.dialect
        with self._core.tx() as c:
            return [
                position_of(row)
                for row in c.execute(
                    sa.select(p).where(
                        p.c.staging_root == staging_root,
                        sa.or_(
                            one_of(dialect, p.c.file_identity, identities), one_of(dialect, p.c.head_crc, crcs), empty
                        ),
                    )
                )
            ]

    def _where(self, staging_root: str, column: sa.Column, values: Sequence) -> list[Position]:
        p = sd.staging_positions
        with self._core.tx() as c:
            query = sa.select(p).where(p.c.staging_root == staging_root, one_of(self._core.dialect, column, values))
            return [position_of(row) for row in c.execute(query)]

    def move(
        self,
        position: Position,
        uri: str,
        key: str,
        *,
        table_id: int,
        size: int,
        send_time: dt.datetime | None,
        now: dt.datetime,
    ) -> bool:
        """A followed file was renamed to `uri`: its position goes with it (whatever position the new name had is
        detached), its old name is vacated (the next file there is new), and the new name is registered as
        known (a processed row: it is not loaded as a new object). False when another process moved it first."""
        p = sd.staging_positions
        with self._core.tx() as c:
            if (
                position.uri == uri
                or not c.execute(
                    p.update()
                    .where(p.c.id == position.id, p.c.uri == position.uri, p.c.pending_uri.is_(None))
                    .values(uri=detached(position))
                ).rowcount
            ):
                return False
            detach_at(c, uri)
            c.execute(
                p.update()
                .where(p.c.id == position.id)
                .values(uri=uri, key=storable(key), rotated=True, watch=True, change_time=now)
            )
            if "#" not in position.uri:
                self._core.insert_once(
                    c,
                    p,
                    "uri",
                    dict(
                        staging_root=position_root(c, position.id),
                        uri=position.uri,
                        key=storable(position.key),
                        state="vacated",
                        watch=True,
                        change_time=now,
                        generation=new_generation(),
                    ),
                )
            register_known(self._core, c, uri, table_id, size, send_time, now)
            return True

    def start_file(
        self,
        staging_root: str,
        uri: str,
        key: str,
        *,
        replacing: Position | None,
        table_id: int,
        identity: str,
        head_crc: int,
        head_length: int,
        compressed: bool,
        start: int,
        fingerprint: int | None,
        delivery: str | None,
        size: int,
        send_time: dt.datetime | None,
        rotated: bool,
        now: dt.datetime,
        advance: tuple[Position, int, int] | None = None,
    ) -> bool:
        """Follow a file newly found under `uri` from offset `start` (0: new content; more: the bytes before were
        loaded from the file it copies), registering its delivery (None: nothing to load yet). The position
        `replacing` had at the name (None: none) is detached, kept for the copy it may have (stream/rotation.py).
        `advance` (original, end, fingerprint): the delivery loads a copy's bytes the original's position had not
        consumed, which moves past them (compare-and-set: not if the original loaded more meanwhile). The name is
        registered as known. False when another process judged the name, or the original, first."""
        p = sd.staging_positions
        try:
            with self._core.tx() as c:  # all or nothing: a lost race leaves no row behind
                clear_at(c, uri, replacing)
                if advance is not None:
                    original, end, crc = advance
                    if not c.execute(
                        p.update()
                        .where(
                            p.c.id == original.id,
                            p.c.consumed_end == original.consumed_end,
                            p.c.pending_uri.is_(None),
                            p.c.state == original.state,
                        )
                        .values(
                            consumed_end=end,
                            read_end=max(end, original.read_end or 0),
                            fingerprint=crc,
                            change_time=now,
                        )
                    ).rowcount:
                        raise LostRace()
                register_known(self._core, c, uri, table_id, size, send_time, now)
                if delivery is not None and not self._core.insert_once(
                    c,
                    s.staging_objects,
                    "uri",
                    dict(uri=delivery, table_id=table_id, size=size, send_time=send_time, receive_time=now),
                ):
                    raise LostRace()
                if not self._core.insert_once(
                    c,
                    p,
                    "uri",
                    dict(
                        staging_root=staging_root,
                        uri=uri,
                        key=storable(key),
                        table_id=table_id,
                        consumed_end=start,
                        read_end=start,
                        file_identity=identity,
                        fingerprint=fingerprint,
                        pending_uri=delivery,
                        head_crc=head_crc,
                        head_length=head_length,
                        compressed=compressed,
                        rotated=rotated,
                        generation=generation_of(delivery),
                        watch=True,
                        change_time=now,
                    ),
                ):
                    raise LostRace()
        except LostRace:
            return False
        return True

    def skip_copy(
        self,
        staging_root: str,
        uri: str,
        key: str,
        *,
        table_id: int,
        identity: str,
        head_crc: int,
        head_length: int,
        compressed: bool,
        size: int,
        fingerprint: int | None,
        send_time: dt.datetime | None,
        reason: str,
        now: dt.datetime,
        replacing: Position | None = None,
    ) -> bool:
        """A file whose bytes were all loaded from the file it copies: known (a processed row), not loaded; its
        position (state "copy", consumed to its end) says why, and keeps its identity: renamed, it is found again
        and loads nothing."""
        p = sd.staging_positions
        try:
            with self._core.tx() as c:
                clear_at(c, uri, replacing)
                if not self._core.insert_once(
                    c,
                    p,
                    "uri",
                    dict(
                        staging_root=staging_root,
                        uri=uri,
                        key=storable(key),
                        table_id=table_id,
                        state="copy",
                        reason=reason,
                        consumed_end=size,
                        read_end=size,
                        file_identity=identity,
                        fingerprint=fingerprint,
                        head_crc=head_crc,
                        head_length=head_length,
                        compressed=compressed,
                        rotated=True,
                        generation=new_generation(),
                        watch=False,
                        change_time=now,
                    ),
                ):
                    raise LostRace()
                register_known(self._core, c, uri, table_id, size, send_time, now)
        except LostRace:
            return False
        return True

    def resume(
        self,
        uri: str,
        *,
        offset: int,
        identity: str,
        fingerprint: int,
        head_crc: int,
        head_length: int,
        compressed: bool,
        now: dt.datetime,
    ) -> Position | None:
        """`silt staging resume`: follow a stopped file again from `offset` (the bytes before count as loaded);
        None when no position has this URI."""
        p = sd.staging_positions
        with self._core.tx() as c:
            done = c.execute(
                p.update()
                .where(p.c.uri == uri)
                .values(
                    state="appending",
                    reason=None,
                    consumed_end=offset,
                    read_end=offset,
                    file_identity=identity,
                    fingerprint=fingerprint,
                    head_crc=head_crc,
                    head_length=head_length,
                    compressed=compressed,
                    pending_uri=None,
                    generation=new_generation(),
                    fragment_end=None,
                    watch=True,
                    change_time=now,
                )
            ).rowcount
            row = c.execute(sa.select(p).where(p.c.uri == uri)).first() if done else None
        return position_of(row) if row is not None else None

    def mark_rewritten(
        self,
        staging_root: str,
        uri: str,
        key: str,
        reason: str,
        *,
        unknown_uri: str,
        size: int,
        table_id: int | None,
        now: dt.datetime,
    ) -> bool:
        """Record that a file changed other than by appending: its position stops (nothing of it is loaded
        again) and `unknown_uri` becomes an unknown object with the reason. True the first time only."""
        p = sd.staging_positions
        with self._core.tx() as c:
            inserted = self._core.insert_once(
                c,
                p,
                "uri",
                dict(
                    staging_root=staging_root,
                    uri=uri,
                    key=storable(key),
                    table_id=table_id,
                    state="rewritten",
                    reason=reason,
                    watch=False,
                    change_time=now,
                ),
            )
            if (
                not inserted
                and not c.execute(
                    p.update()
                    .where(p.c.uri == uri, p.c.state != "rewritten")
                    .values(state="rewritten", reason=reason, watch=False, change_time=now)
                ).rowcount
            ):
                return False
            self._core.insert_once(
                c,
                s.unknown_staging_objects,
                "uri",
                dict(uri=unknown_uri, reason=reason, size=size, table_id=table_id, detect_time=now),
            )
            return True

    def rewritten(self) -> list[Position]:
        """The files whose following stopped: changed in a way that cannot be told from a rewrite, or waiting for
        a delivery that went to unknown objects (it failed stream.max_failures times)."""
        p = sd.staging_positions
        with self._core.tx() as c:
            rows = c.execute(sa.select(p).where(stopped()).order_by(p.c.change_time)).all()
        return [position_of(row) for row in rows]

    def prune(self, before: dt.datetime) -> int:
        """Forget the positions of files unchanged since `before` (the staging expiry watermark) with no
        delivery in flight: listings skip such files (their arrival is older), so nothing loads them again."""
        p = sd.staging_positions
        with self._core.tx() as c:
            return c.execute(p.delete().where(p.c.change_time < before, p.c.pending_uri.is_(None))).rowcount
