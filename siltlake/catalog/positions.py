"""Files written in place: those of a local staging root still being written (waiting to settle), and per
appendable file how far its deliveries consumed it, like a tailing shipper's position file (stream/appends.py;
docs/design.md, "Files written in place and appended to")."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore

_PER_STATEMENT = 5000


@dataclass(frozen=True)
class WaitingFile:
    uri: str
    key: str
    size: int
    change_time: dt.datetime  # the file's mtime when last looked at
    first_seen: dt.datetime


@dataclass(frozen=True)
class Position:
    """How far a staging file's deliveries consumed it. consumed_end is None until its first delivery commits."""

    uri: str
    key: str
    table_id: int | None
    consumed_end: int | None
    read_end: int | None
    file_identity: str | None
    fingerprint: int | None
    pending_uri: str | None
    state: str  # "appending" | "rewritten"
    reason: str | None
    change_time: dt.datetime


@dataclass(frozen=True)
class PositionState:
    """What discovery needs to judge a registered file that changed size: its position (None: none kept) and
    its first delivery's row (None: pruned)."""

    position: Position | None
    table_id: int | None
    processed: bool | None
    size: int | None  # the size the first delivery was registered at
    unknown: bool = False  # set aside as an unknown object: a replay reads it again whole


@dataclass(frozen=True)
class SettleSummary:
    """Per staging root: files waiting to settle, and files rewritten in place (reported, not loaded)."""

    staging_root: str
    waiting: int
    oldest_first_seen: dt.datetime | None
    rewritten: int


class Positions:
    """Reached as catalog.positions."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    # --- files waiting to settle -------------------------------------------------------------------------

    def waiting(self, staging_root: str) -> list[WaitingFile]:
        w = s.staging_waits
        with self._core.tx() as c:
            rows = c.execute(sa.select(w.c.uri, w.c.key, w.c.size, w.c.change_time, w.c.first_seen)
                             .where(w.c.staging_root == staging_root).order_by(w.c.id)).all()
        return [WaitingFile(*row) for row in rows]

    def wait(self, staging_root: str, files: Sequence[tuple[str, str, int, dt.datetime]], now: dt.datetime) -> None:
        """Remember these (uri, key, size, mtime) as waiting; a file already waiting keeps its first_seen."""
        w = s.staging_waits
        with self._core.tx() as c:
            for start in range(0, len(files), 500):
                chunk = files[start:start + 500]
                self._core.insert_once(c, w, "uri", [dict(staging_root=staging_root, uri=uri, key=key, size=size,
                                                          change_time=mtime, first_seen=now)
                                                     for uri, key, size, mtime in chunk])
            for uri, _, size, mtime in files:
                c.execute(w.update().where(w.c.uri == uri, sa.or_(w.c.size != size, w.c.change_time != mtime))
                          .values(size=size, change_time=mtime))

    def stop_waiting(self, uris: Sequence[str]) -> None:
        w = s.staging_waits
        with self._core.tx() as c:
            for start in range(0, len(uris), _PER_STATEMENT):
                c.execute(w.delete().where(w.c.uri.in_(list(uris[start:start + _PER_STATEMENT]))))

    # --- positions ---------------------------------------------------------------------------------------

    def watched(self, staging_root: str, since: dt.datetime) -> list[Position]:
        """The positions of files seen written in place that changed since `since`: each round looks at them by
        key, as the directory walk does not see a file grow."""
        p = s.staging_positions
        with self._core.tx() as c:
            rows = c.execute(sa.select(p).where(p.c.staging_root == staging_root, p.c.watch.is_(True),
                                                p.c.state == "appending", p.c.change_time >= since)).all()
        return [_position(row) for row in rows]

    def watch(self, staging_root: str, files: Sequence[tuple[str, str]], now: dt.datetime) -> None:
        """Watch these (uri, key): files seen being written, whose growth the walk would not see."""
        p = s.staging_positions
        with self._core.tx() as c:
            self._core.insert_once(c, p, "uri", [dict(staging_root=staging_root, uri=uri, key=key, watch=True,
                                                      change_time=now) for uri, key in files])
            for start in range(0, len(files), _PER_STATEMENT):
                uris = [uri for uri, _ in files[start:start + _PER_STATEMENT]]
                c.execute(p.update().where(p.c.uri.in_(uris), p.c.watch.is_(False))
                          .values(watch=True, change_time=now))

    def consumed(self, uris: Sequence[str]) -> set[str]:
        """Of these base URIs, those with a position some delivery consumed (one statement per 5,000)."""
        p = s.staging_positions
        found: set[str] = set()
        with self._core.tx() as c:
            for start in range(0, len(uris), _PER_STATEMENT):
                found.update(c.execute(sa.select(p.c.uri).where(p.c.uri.in_(list(uris[start:start + _PER_STATEMENT])),
                                                                p.c.consumed_end.is_not(None))).scalars())
        return found

    def states(self, uris: Sequence[str]) -> dict[str, PositionState]:
        """Position and first delivery of each of these base URIs."""
        p, so = s.staging_positions, s.staging_objects
        found: dict[str, PositionState] = {}
        with self._core.tx() as c:
            for start in range(0, len(uris), _PER_STATEMENT):
                chunk = list(uris[start:start + _PER_STATEMENT])
                positions = {row.uri: _position(row) for row in c.execute(sa.select(p).where(p.c.uri.in_(chunk)))}
                plain = {row.uri: row for row in c.execute(
                    sa.select(so.c.uri, so.c.table_id, so.c.processed_time, so.c.size).where(so.c.uri.in_(chunk)))}
                u = s.unknown_staging_objects
                unknown = set(c.execute(sa.select(u.c.uri).where(u.c.uri.in_(chunk))).scalars())
                for uri in chunk:
                    row = plain.get(uri)
                    found[uri] = PositionState(positions.get(uri), row.table_id if row else None,
                                               (row.processed_time is not None) if row else None,
                                               row.size if row else None, uri in unknown)
        return found

    def register_tail(self, position: Position, delivery_uri: str, table_id: int, size: int,
                      send_time: dt.datetime | None, now: dt.datetime) -> bool:
        """Register the delivery of a file's tail from its consumed end, unless another process did first or a
        delivery of it is still pending: the position's pending_uri is set under a compare-and-set in the
        same transaction, so one delivery at a time is in flight and each byte is delivered once."""
        p = s.staging_positions
        with self._core.tx() as c:
            # The row first: a delivery URI registered before (it cannot be, each names its end) must never
            # leave the position waiting for a delivery that will not come.
            if not self._core.insert_once(c, s.staging_objects, "uri", dict(
                    uri=delivery_uri, table_id=table_id, size=size, send_time=send_time, receive_time=now)):
                return False
            taken = c.execute(p.update().where(
                p.c.uri == position.uri, p.c.state == "appending", p.c.pending_uri.is_(None),
                p.c.consumed_end == position.consumed_end,
            ).values(pending_uri=delivery_uri, watch=True, change_time=now)).rowcount
            if not taken:  # another process registered this growth first: the row goes with this transaction
                c.execute(s.staging_objects.delete().where(s.staging_objects.c.uri == delivery_uri))
            return bool(taken)

    def mark_rewritten(self, staging_root: str, uri: str, key: str, reason: str, *, unknown_uri: str,
                       size: int, table_id: int | None, now: dt.datetime) -> bool:
        """Record that a file changed other than by appending: its position stops (nothing of it is loaded
        again) and `unknown_uri` becomes an unknown object with the reason. True the first time only."""
        p = s.staging_positions
        with self._core.tx() as c:
            inserted = self._core.insert_once(c, p, "uri", dict(
                staging_root=staging_root, uri=uri, key=key, table_id=table_id, state="rewritten", reason=reason,
                watch=False, change_time=now))
            if not inserted and not c.execute(p.update().where(p.c.uri == uri, p.c.state != "rewritten")
                                              .values(state="rewritten", reason=reason, watch=False,
                                                      change_time=now)).rowcount:
                return False
            self._core.insert_once(c, s.unknown_staging_objects, "uri", dict(
                uri=unknown_uri, reason=reason, size=size, table_id=table_id, detect_time=now))
            return True

    def summary(self, now: dt.datetime) -> list[SettleSummary]:
        """Per staging root, what `silt status` and the metrics show."""
        w, p = s.staging_waits, s.staging_positions
        with self._core.tx() as c:
            waits = {row.staging_root: row for row in c.execute(
                sa.select(w.c.staging_root, sa.func.count().label("count"), sa.func.min(w.c.first_seen).label("oldest"))
                .group_by(w.c.staging_root))}
            rewritten = {row.staging_root: row.count for row in c.execute(
                sa.select(p.c.staging_root, sa.func.count().label("count")).where(p.c.state == "rewritten")
                .group_by(p.c.staging_root))}
        return [SettleSummary(root, waits[root].count if root in waits else 0,
                              waits[root].oldest if root in waits else None, rewritten.get(root, 0))
                for root in sorted(waits.keys() | rewritten.keys())]

    def rewritten(self) -> list[Position]:
        p = s.staging_positions
        with self._core.tx() as c:
            rows = c.execute(sa.select(p).where(p.c.state == "rewritten").order_by(p.c.change_time)).all()
        return [_position(row) for row in rows]

    def prune(self, before: dt.datetime) -> int:
        """Forget the positions of files unchanged since `before` (the staging expiry watermark) with no
        delivery in flight: listings skip such files (their arrival is older), so nothing loads them again."""
        p = s.staging_positions
        with self._core.tx() as c:
            return c.execute(p.delete().where(p.c.change_time < before, p.c.pending_uri.is_(None))).rowcount


def record_consumed(core: CatalogCore, c: Connection, *, staging_root: str, uri: str, key: str, delivery_uri: str,
                    table_id: int, consumed_end: int, read_end: int, file_identity: str, fingerprint: int,
                    now: dt.datetime) -> None:
    """In a stream commit: a delivery of `uri` consumed it up to consumed_end. Only the delivery the position
    waits for (its first, or the pending tail) moves it; a rewritten file's position stays stopped."""
    record_all_consumed(core, c, [dict(staging_root=staging_root, uri=uri, key=key, delivery_uri=delivery_uri,
                                       table_id=table_id, consumed_end=consumed_end, read_end=read_end,
                                       file_identity=file_identity, fingerprint=fingerprint, now=now)])


def record_all_consumed(core: CatalogCore, c: Connection, deliveries: list[dict]) -> None:
    """record_consumed of several deliveries (those of a batched commit): the files' first positions in one
    statement, then one update per position that existed (files appended to: few)."""
    p = s.staging_positions

    def values(delivery: dict) -> dict:
        return dict(table_id=delivery["table_id"], consumed_end=delivery["consumed_end"],
                    read_end=delivery["read_end"], file_identity=delivery["file_identity"],
                    fingerprint=delivery["fingerprint"], pending_uri=None)

    def partial(delivery: dict) -> bool:  # a record half written when read: the file is being written to
        return delivery["consumed_end"] < delivery["read_end"]

    inserted = {row.uri for row in core.insert_new(c, p, "uri", [
        dict(staging_root=d["staging_root"], uri=d["uri"], key=d["key"], change_time=d["now"], watch=partial(d),
             **values(d)) for d in deliveries], "uri")}
    for delivery in deliveries:
        if delivery["uri"] in inserted:
            continue
        c.execute(p.update().where(p.c.uri == delivery["uri"], p.c.state == "appending", sa.or_(
            p.c.pending_uri == delivery["delivery_uri"],
            sa.and_(p.c.pending_uri.is_(None), p.c.consumed_end.is_(None)),
        )).values(change_time=delivery["now"], watch=sa.or_(p.c.watch, sa.literal(partial(delivery))),
                  **values(delivery)))


def _position(row: sa.Row) -> Position:
    return Position(row.uri, row.key, row.table_id, row.consumed_end, row.read_end, row.file_identity,
                    row.fingerprint, row.pending_uri, row.state, row.reason, row.change_time)
