"""Files written in place: those of a local staging root still being written (waiting to settle), and per
appendable file how far its deliveries consumed it, like a tailing shipper's position file (stream/appends.py;
docs/design.md, "Files written in place and appended to")."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog import schema_discovery as sd
from siltlake.catalog.core import CatalogCore, rows_values

_PER_STATEMENT = 5000


def new_generation() -> str:
    """A token naming one file's deliveries: two files that had the same name never share a delivery URI."""
    return secrets.token_hex(6)


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
    state: str  # "appending" | "rewritten" (stopped) | "vacated" (its file moved away: the name's next file is new)
    reason: str | None
    change_time: dt.datetime
    id: int = 0
    head_crc: int | None = None
    head_length: int | None = None
    generation: str | None = None
    rotated: bool = False  # its file was renamed away from the name written to: a trailing fragment is final
    compressed: bool = False
    fragment_end: int | None = None  # a trailing fragment taken as final ended here


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
        w = sd.staging_waits
        with self._core.tx() as c:
            rows = c.execute(sa.select(w.c.uri, w.c.key, w.c.size, w.c.change_time, w.c.first_seen)
                             .where(w.c.staging_root == staging_root).order_by(w.c.id)).all()
        return [WaitingFile(uri, key_of(staging_root, uri, key), *rest) for uri, key, *rest in rows_values(rows)]

    def wait(self, staging_root: str, files: Sequence[tuple[str, str, int, dt.datetime]], now: dt.datetime) -> None:
        """Remember these (uri, key, size, mtime) as waiting; a file already waiting keeps its first_seen."""
        w = sd.staging_waits
        with self._core.tx() as c:
            for start in range(0, len(files), 500):
                chunk = files[start:start + 500]
                self._core.insert_once(c, w, "uri", [dict(staging_root=staging_root, uri=uri, key=storable(key),
                                                          size=size, change_time=mtime, first_seen=now)
                                                     for uri, key, size, mtime in chunk])
            for uri, _, size, mtime in files:
                c.execute(w.update().where(w.c.uri == uri, sa.or_(w.c.size != size, w.c.change_time != mtime))
                          .values(size=size, change_time=mtime))

    def stop_waiting(self, uris: Sequence[str]) -> None:
        w = sd.staging_waits
        with self._core.tx() as c:
            for start in range(0, len(uris), _PER_STATEMENT):
                c.execute(w.delete().where(w.c.uri.in_(list(uris[start:start + _PER_STATEMENT]))))

    # --- positions ---------------------------------------------------------------------------------------

    def watched(self, staging_root: str, since: dt.datetime) -> list[Position]:
        """The positions of files seen written in place that changed since `since`: each round looks at them by
        key, as the directory walk does not see a file grow. A vacated name is among them: the file a rotation
        leaves there (logrotate's `create`, a compressed copy) is judged when it grows, or when a delivery it
        waited for is done, not only when the sweep passes."""
        p = sd.staging_positions
        with self._core.tx() as c:
            # And those holding a trailing fragment, however old: it becomes final (stream.fragment_final_after).
            rows = c.execute(sa.select(p).where(p.c.staging_root == staging_root, sa.or_(
                sa.and_(p.c.state.in_(("appending", "vacated")), p.c.watch.is_(True), p.c.change_time >= since),
                sa.and_(p.c.state == "appending", p.c.consumed_end < p.c.read_end, p.c.pending_uri.is_(None))))).all()
        return [_position(row) for row in rows]

    def watch(self, staging_root: str, files: Sequence[tuple[str, str]], now: dt.datetime) -> None:
        """Watch these (uri, key): files seen being written, whose growth the walk would not see."""
        p = sd.staging_positions
        with self._core.tx() as c:
            self._core.insert_once(c, p, "uri", [dict(staging_root=staging_root, uri=uri, key=storable(key),
                                                      watch=True, change_time=now) for uri, key in files])
            for start in range(0, len(files), _PER_STATEMENT):
                uris = [uri for uri, _ in files[start:start + _PER_STATEMENT]]
                c.execute(p.update().where(p.c.uri.in_(uris), p.c.watch.is_(False))
                          .values(watch=True, change_time=now))

    def consumed(self, uris: Sequence[str]) -> set[str]:
        """Of these base URIs, those with a position some delivery consumed (one statement per 5,000)."""
        p = sd.staging_positions
        found: set[str] = set()
        with self._core.tx() as c:
            for start in range(0, len(uris), _PER_STATEMENT):
                found.update(c.execute(sa.select(p.c.uri).where(p.c.uri.in_(list(uris[start:start + _PER_STATEMENT])),
                                                                p.c.consumed_end.is_not(None))).scalars())
        return found

    def states(self, uris: Sequence[str]) -> dict[str, PositionState]:
        """Position and first delivery of each of these base URIs."""
        p, so = sd.staging_positions, s.staging_objects
        found: dict[str, PositionState] = {}
        with self._core.tx() as c:
            for start in range(0, len(uris), _PER_STATEMENT):
                chunk = list(uris[start:start + _PER_STATEMENT])
                positions = {row.uri: _position(row) for row in c.execute(sa.select(p).where(p.c.uri.in_(chunk)))}
                plain = {row.uri: row for row in c.execute(
                    sa.select(so.c.uri, so.c.table_id, so.c.processed_time, so.c.size).where(so.c.uri.in_(chunk)))}
                u = s.unknown_staging_objects
                unknown: set[str] = set(c.execute(sa.select(u.c.uri).where(u.c.uri.in_(chunk))).scalars())
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
        p = sd.staging_positions
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

    # --- files followed by identity (stream/rotation.py) ------------------------------------------------

    def by_identity(self, staging_root: str, identities: Sequence[str]) -> list[Position]:
        """The positions of files with these device:inode identities, attached to a name or not."""
        return self._where(staging_root, sd.staging_positions.c.file_identity, identities)

    def by_head(self, staging_root: str, crcs: Sequence[int], head_length: int) -> list[Position]:
        """The positions of plain files whose first head_length bytes have one of these CRCs."""
        p = sd.staging_positions
        return [position for position in self._where(staging_root, p.c.head_crc, crcs)
                if position.head_length == head_length and not position.compressed]

    def by_short_head(self, staging_root: str, crcs: Sequence[int], shorter_than: int) -> list[Position]:
        """The positions of plain files shorter than `shorter_than` bytes when consumed (their head is all they
        held), whose head has one of these CRCs."""
        p = sd.staging_positions
        return [position for position in self._where(staging_root, p.c.head_crc, crcs)
                if position.head_length is not None and 0 < position.head_length < shorter_than
                and not position.compressed]

    def related(self, staging_root: str, identities: Sequence[str], crcs: Sequence[int]) -> list[Position]:
        """The positions with one of these device:inode identities or first-bytes CRCs (stream/rotation.py's
        known_for sorts them): one statement for a round's fresh files."""
        p = sd.staging_positions
        if len(identities) + len(crcs) > _PER_STATEMENT:
            return self._where(staging_root, p.c.file_identity, identities) + self._where(staging_root, p.c.head_crc,
                                                                                          crcs)
        with self._core.tx() as c:
            return [_position(row) for row in c.execute(sa.select(p).where(
                p.c.staging_root == staging_root,
                sa.or_(p.c.file_identity.in_(list(identities)), p.c.head_crc.in_(list(crcs)))))]

    def _where(self, staging_root: str, column: sa.Column, values: Sequence) -> list[Position]:
        p = sd.staging_positions
        found: list[Position] = []
        with self._core.tx() as c:
            for start in range(0, len(values), _PER_STATEMENT):
                found += [_position(row) for row in c.execute(sa.select(p).where(
                    p.c.staging_root == staging_root, column.in_(list(values[start:start + _PER_STATEMENT]))))]
        return found

    def move(self, position: Position, uri: str, key: str, *, table_id: int, size: int,
             send_time: dt.datetime | None, now: dt.datetime) -> bool:
        """A followed file was renamed to `uri`: its position goes with it (whatever position the new name had is
        detached), its old name is vacated (the next file there is new), and the new name is registered as
        known (a processed row: it is not loaded as a new object). False when another process moved it first."""
        p = sd.staging_positions
        with self._core.tx() as c:
            if position.uri == uri or not c.execute(p.update().where(
                    p.c.id == position.id, p.c.uri == position.uri, p.c.pending_uri.is_(None))
                    .values(uri=_detached(position))).rowcount:
                return False
            _detach_at(c, uri)
            c.execute(p.update().where(p.c.id == position.id).values(uri=uri, key=storable(key), rotated=True,
                                                                    watch=True, change_time=now))
            if "#" not in position.uri:
                self._core.insert_once(c, p, "uri", dict(staging_root=position_root(c, position.id), uri=position.uri,
                                                         key=storable(position.key), state="vacated", watch=True,
                                                         change_time=now, generation=new_generation()))
            _known(self._core, c, uri, table_id, size, send_time, now)
            return True

    def start_file(self, staging_root: str, uri: str, key: str, *, replacing: Position | None, table_id: int,
                   identity: str, head_crc: int, head_length: int, compressed: bool, start: int,
                   fingerprint: int | None, delivery: str | None, size: int, send_time: dt.datetime | None,
                   rotated: bool, now: dt.datetime, advance: tuple[Position, int, int] | None = None) -> bool:
        """Follow a file newly found under `uri` from offset `start` (0: new content; more: the bytes before were
        loaded from the file it copies), registering its delivery (None: nothing to load yet). The position
        `replacing` had at the name (None: none) is detached, kept for the copy it may have (stream/rotation.py).
        `advance` (original, end, fingerprint): the delivery loads a copy's bytes the original's position had not
        consumed, which moves past them (compare-and-set: not if the original loaded more meanwhile). The name is
        registered as known. False when another process judged the name, or the original, first."""
        p = sd.staging_positions
        try:
            with self._core.tx() as c:  # all or nothing: a lost race leaves no row behind
                _clear_at(c, uri, replacing)
                if advance is not None:
                    original, end, crc = advance
                    if not c.execute(p.update().where(
                            p.c.id == original.id, p.c.consumed_end == original.consumed_end,
                            p.c.pending_uri.is_(None), p.c.state == original.state)
                            .values(consumed_end=end, read_end=max(end, original.read_end or 0), fingerprint=crc,
                                    change_time=now)).rowcount:
                        raise _Lost()
                _known(self._core, c, uri, table_id, size, send_time, now)
                if delivery is not None and not self._core.insert_once(c, s.staging_objects, "uri", dict(
                        uri=delivery, table_id=table_id, size=size, send_time=send_time, receive_time=now)):
                    raise _Lost()
                if not self._core.insert_once(c, p, "uri", dict(
                        staging_root=staging_root, uri=uri, key=storable(key), table_id=table_id,
                        consumed_end=start, read_end=start, file_identity=identity, fingerprint=fingerprint,
                        pending_uri=delivery, head_crc=head_crc, head_length=head_length, compressed=compressed,
                        rotated=rotated, generation=_generation_of(delivery), watch=True, change_time=now)):
                    raise _Lost()
        except _Lost:
            return False
        return True

    def skip_copy(self, staging_root: str, uri: str, key: str, *, table_id: int, identity: str, head_crc: int,
                  head_length: int, compressed: bool, size: int, fingerprint: int | None,
                  send_time: dt.datetime | None, reason: str, now: dt.datetime,
                  replacing: Position | None = None) -> bool:
        """A file whose bytes were all loaded from the file it copies: known (a processed row), not loaded; its
        position (state "copy", consumed to its end) says why, and keeps its identity: renamed, it is found again
        and loads nothing."""
        p = sd.staging_positions
        try:
            with self._core.tx() as c:
                _clear_at(c, uri, replacing)
                if not self._core.insert_once(c, p, "uri", dict(
                        staging_root=staging_root, uri=uri, key=storable(key), table_id=table_id, state="copy",
                        reason=reason, consumed_end=size, read_end=size, file_identity=identity,
                        fingerprint=fingerprint, head_crc=head_crc, head_length=head_length, compressed=compressed,
                        rotated=True, generation=new_generation(), watch=False, change_time=now)):
                    raise _Lost()
                _known(self._core, c, uri, table_id, size, send_time, now)
        except _Lost:
            return False
        return True

    def resume(self, uri: str, *, offset: int, identity: str, fingerprint: int, head_crc: int, head_length: int,
               compressed: bool, now: dt.datetime) -> Position | None:
        """`silt staging resume`: follow a stopped file again from `offset` (the bytes before count as loaded);
        None when no position has this URI."""
        p = sd.staging_positions
        with self._core.tx() as c:
            done = c.execute(p.update().where(p.c.uri == uri).values(
                state="appending", reason=None, consumed_end=offset, read_end=offset, file_identity=identity,
                fingerprint=fingerprint, head_crc=head_crc, head_length=head_length, compressed=compressed,
                pending_uri=None, generation=new_generation(), fragment_end=None, watch=True,
                change_time=now)).rowcount
            row = c.execute(sa.select(p).where(p.c.uri == uri)).first() if done else None
        return _position(row) if row is not None else None

    def mark_rewritten(self, staging_root: str, uri: str, key: str, reason: str, *, unknown_uri: str,
                       size: int, table_id: int | None, now: dt.datetime) -> bool:
        """Record that a file changed other than by appending: its position stops (nothing of it is loaded
        again) and `unknown_uri` becomes an unknown object with the reason. True the first time only."""
        p = sd.staging_positions
        with self._core.tx() as c:
            inserted = self._core.insert_once(c, p, "uri", dict(
                staging_root=staging_root, uri=uri, key=storable(key), table_id=table_id, state="rewritten",
                reason=reason, watch=False, change_time=now))
            if not inserted and not c.execute(p.update().where(p.c.uri == uri, p.c.state != "rewritten")
                                              .values(state="rewritten", reason=reason, watch=False,
                                                      change_time=now)).rowcount:
                return False
            self._core.insert_once(c, s.unknown_staging_objects, "uri", dict(
                uri=unknown_uri, reason=reason, size=size, table_id=table_id, detect_time=now))
            return True

    def summary(self, now: dt.datetime) -> list[SettleSummary]:
        """Per staging root, what `silt status` and the metrics show."""
        w, p = sd.staging_waits, sd.staging_positions
        with self._core.tx() as c:
            waits = {row.staging_root: row for row in c.execute(
                # Labels that are no tuple method's name (a Row's `count` is typed as the method).
                sa.select(w.c.staging_root, sa.func.count().label("files"), sa.func.min(w.c.first_seen).label("oldest"))
                .group_by(w.c.staging_root))}
            rewritten = {row.staging_root: row.files for row in c.execute(
                sa.select(p.c.staging_root, sa.func.count().label("files")).where(_stopped())
                .group_by(p.c.staging_root))}
        return [SettleSummary(root, waits[root].files if root in waits else 0,
                              waits[root].oldest if root in waits else None, rewritten.get(root, 0))
                for root in sorted(waits.keys() | rewritten.keys())]

    def rewritten(self) -> list[Position]:
        """The files whose following stopped: changed in a way that cannot be told from a rewrite, or waiting for
        a delivery that went to unknown objects (it failed stream.max_failures times)."""
        p = sd.staging_positions
        with self._core.tx() as c:
            rows = c.execute(sa.select(p).where(_stopped()).order_by(p.c.change_time)).all()
        return [_position(row) for row in rows]

    def prune(self, before: dt.datetime) -> int:
        """Forget the positions of files unchanged since `before` (the staging expiry watermark) with no
        delivery in flight: listings skip such files (their arrival is older), so nothing loads them again."""
        p = sd.staging_positions
        with self._core.tx() as c:
            return c.execute(p.delete().where(p.c.change_time < before, p.c.pending_uri.is_(None))).rowcount


def note_files(core: CatalogCore, c: Connection, staging_root: str, files: Sequence[dict], now: dt.datetime) -> None:
    """In the transaction that registers new files under these (uri, key): note their identity (file_identity,
    head_crc, head_length, compressed). Their first delivery names no identity, and a file renamed while it is in
    flight must not be taken for a new file under its new name (stream/rotation.py). A position a delivery
    consumed is left alone. One statement however many files (a backlog's thousands a round), and one more for
    those that had a position already (waiting to settle, or watched)."""
    p = sd.staging_positions
    inserted = {row.uri for row in core.insert_new(c, p, "uri", [
        dict(staging_root=staging_root, watch=False, change_time=now, generation=new_generation(),
             **{**file, "key": storable(file["key"])}) for file in files], "uri")}
    known = [file for file in files if file["uri"] not in inserted]
    if known:
        c.execute(p.update().where(p.c.uri == sa.bindparam("b_uri"), p.c.consumed_end.is_(None),
                                   p.c.pending_uri.is_(None), p.c.file_identity.is_(None))
                  .values(file_identity=sa.bindparam("b_identity"), head_crc=sa.bindparam("b_crc"),
                          head_length=sa.bindparam("b_length"), compressed=sa.bindparam("b_compressed")),
                  [dict(b_uri=file["uri"], b_identity=file["file_identity"], b_crc=file["head_crc"],
                        b_length=file["head_length"], b_compressed=file["compressed"]) for file in known])


def record_consumed(core: CatalogCore, c: Connection, *, staging_root: str, uri: str, key: str, delivery_uri: str,
                    table_id: int, consumed_end: int, read_end: int, file_identity: str, fingerprint: int,
                    now: dt.datetime, **head: object) -> None:
    """In a stream commit: a delivery of `uri` consumed it up to consumed_end. Only the delivery the position
    waits for (its first, or the pending tail) moves it; a rewritten file's position stays stopped. `head`:
    head_crc, head_length, compressed, fragment_end as the task reported them."""
    record_all_consumed(core, c, [dict(staging_root=staging_root, uri=uri, key=key, delivery_uri=delivery_uri,
                                       table_id=table_id, consumed_end=consumed_end, read_end=read_end,
                                       file_identity=file_identity, fingerprint=fingerprint, now=now, **head)])


def record_all_consumed(core: CatalogCore, c: Connection, deliveries: list[dict]) -> None:
    """record_consumed of several deliveries (those of a batched commit): the files' first deliveries in one
    statement (an upsert), the later ones (files appended to) in one more."""
    p = sd.staging_positions

    def values(delivery: dict) -> dict:
        return dict(table_id=delivery["table_id"], consumed_end=delivery["consumed_end"],
                    read_end=delivery["read_end"], file_identity=delivery["file_identity"],
                    fingerprint=delivery["fingerprint"], pending_uri=None, head_crc=delivery.get("head_crc"),
                    head_length=delivery.get("head_length"), compressed=bool(delivery.get("compressed")))

    def partial(delivery: dict) -> bool:  # a record half written when read: the file is being written to
        return delivery["consumed_end"] < delivery["read_end"]

    first = [d for d in deliveries if "#" not in d["delivery_uri"]]
    if first:
        # A file's first delivery inserts its position, or moves the one its name had waiting (noted when the file
        # was registered: most first deliveries) unless a delivery consumed it already.
        statement = core.insert(p)
        excluded = statement.excluded
        c.execute(statement.on_conflict_do_update(
            index_elements=["uri"], where=sa.and_(p.c.state == "appending", p.c.pending_uri.is_(None),
                                                  p.c.consumed_end.is_(None)),
            set_=dict(change_time=excluded.change_time, watch=sa.or_(p.c.watch, excluded.watch),
                      fragment_end=excluded.fragment_end, **{name: excluded[name] for name in _CONSUMED})),
            [dict(staging_root=d["staging_root"], uri=d["uri"], key=storable(d["key"]), change_time=d["now"],
                  watch=partial(d), generation=new_generation(), fragment_end=d.get("fragment_end"), **values(d))
             for d in first])
    moved = [delivery for delivery in deliveries if "#" in delivery["delivery_uri"]]
    if not moved:
        return
    # A later delivery moves the position that waits for it, under whatever name its file has now (it may have
    # been renamed while the delivery ran). One statement, its rows as parameters (executemany).
    b = sa.bindparam
    c.execute(p.update().where(p.c.state == "appending", p.c.pending_uri == b("b_delivery")).values(
        change_time=b("b_now"), watch=sa.or_(p.c.watch, b("b_partial", type_=sa.Boolean)),
        fragment_end=sa.case((p.c.consumed_end == b("b_consumed_end"), p.c.fragment_end),
                             else_=b("b_fragment_end", type_=sa.BigInteger)),
        **{name: b(f"b_{name}") for name in _CONSUMED}),
        [dict(b_delivery=d["delivery_uri"], b_now=d["now"], b_partial=partial(d), b_fragment_end=d.get("fragment_end"),
              **{f"b_{name}": value for name, value in values(d).items()}) for d in moved])


_CONSUMED = ("table_id", "consumed_end", "read_end", "file_identity", "fingerprint", "pending_uri", "head_crc",
             "head_length", "compressed")


def storable(key: str) -> str:
    """A staging key as a text column holds it: a local name that is not UTF-8 (os.fsdecode keeps its bytes as
    surrogates, which no catalog driver encodes) has U+FFFD for them; key_of reads it back from the URI."""
    try:
        key.encode()
    except UnicodeEncodeError:
        return key.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return key


def key_of(staging_root: str, uri: str, key: str) -> str:
    """A stored key as the file is named: one with U+FFFD (stored by `storable`, or a task's unquote) is read from
    its URI, which percent-encodes the name's raw bytes."""
    base = uri.partition("#")[0]
    if "\ufffd" not in key or not base.startswith(staging_root + "/"):
        return key
    return unquote(base[len(staging_root) + 1:], errors="surrogateescape")


def _position(row: sa.Row) -> Position:
    return Position(row.uri, key_of(row.staging_root, row.uri, row.key), row.table_id, row.consumed_end,
                    row.read_end, row.file_identity, row.fingerprint, row.pending_uri, row.state, row.reason,
                    row.change_time, row.id, row.head_crc, row.head_length, row.generation, bool(row.rotated),
                    bool(row.compressed), row.fragment_end)


def release_pending(c: Connection, delivery_uri: str, moved: bool = False) -> None:
    """In a stream commit: a delivery that read nothing of its file (moved away, gone, unreadable) frees the
    position that waits for it, which is judged again by the next listing. A copy's rest that found its file
    `moved` (renamed, compressed away) moves its original's position back to where the copy's starts, unless
    it moved on since: the copy's bytes were not loaded, and a later copy of them (the compressed one) loads them
    (it was judged all loaded)."""
    p = sd.staging_positions
    advances = _advances_of(delivery_uri) if moved else None
    if advances is not None:
        original, end, read_end = advances
        copy = c.execute(sa.select(p.c.consumed_end, p.c.fingerprint).where(p.c.pending_uri == delivery_uri)).first()
        if copy is not None and copy.consumed_end is not None:
            c.execute(p.update().where(p.c.id == original, p.c.consumed_end == end, p.c.pending_uri.is_(None))
                      .values(consumed_end=copy.consumed_end, read_end=max(read_end, copy.consumed_end),
                              fingerprint=copy.fingerprint))
    c.execute(p.update().where(p.c.pending_uri == delivery_uri).values(pending_uri=None))


def _advances_of(delivery: str) -> tuple[int, int, int] | None:
    """The `a=<position id>:<end>:<read end>` flag of a copy's rest (stream/tails.py, delivery_uri)."""
    for flag in delivery.partition("#offset=")[2].split(";"):
        if flag.startswith("a="):
            try:
                original, end, read_end = (int(value) for value in flag[2:].split(":"))
            except ValueError:
                return None
            return original, end, read_end
    return None


class _Lost(Exception):
    """Another process started following the name first (its position row is there)."""


def _detached(position: Position) -> str:
    """The URI a position no longer attached to a name keeps: unique, never a staging object's."""
    return f"{position.uri.partition('#')[0]}#detached={position.generation or position.id}-{secrets.token_hex(3)}"


def _detach_at(c: Connection, uri: str) -> None:
    """Free the name for another file's position: a followed file's position there is detached (found again by
    its identity), a vacated one or one no delivery consumed is dropped."""
    p = sd.staging_positions
    c.execute(p.delete().where(p.c.uri == uri, sa.or_(p.c.state == "vacated", sa.and_(
        p.c.consumed_end.is_(None), p.c.pending_uri.is_(None), p.c.state == "appending"))))
    for row in c.execute(sa.select(p).where(p.c.uri == uri)).all():
        c.execute(p.update().where(p.c.id == row.id).values(uri=_detached(_position(row)), watch=False))


def _clear_at(c: Connection, uri: str, replacing: Position | None) -> None:
    """Before a new position at `uri`: the one judged there (`replacing`) is detached unless another process
    changed it first (_Lost), and a vacated one or one no delivery consumed is dropped. A live position left
    there makes the insert that follows fail: another process followed the name first."""
    p = sd.staging_positions
    if replacing is not None and not c.execute(
            p.update().where(p.c.id == replacing.id, p.c.uri == uri, p.c.pending_uri.is_(None))
            .values(uri=_detached(replacing), watch=False, rotated=True)).rowcount:
        raise _Lost()
    c.execute(p.delete().where(p.c.uri == uri, sa.or_(p.c.state == "vacated", sa.and_(
        p.c.consumed_end.is_(None), p.c.pending_uri.is_(None), p.c.state == "appending"))))


def _known(core: CatalogCore, c: Connection, uri: str, table_id: int, size: int, send_time: dt.datetime | None,
           now: dt.datetime) -> None:
    """Register a name as a processed staging object that loaded nothing itself (its file's bytes are loaded by
    the deliveries of its position), so listings know it; a name known already keeps its row."""
    core.insert_once(c, s.staging_objects, "uri", dict(uri=uri, table_id=table_id, size=size, send_time=send_time,
                                                       receive_time=now, processed_time=now, records_in=0,
                                                       bad_records=0))


def position_root(c: Connection, position_id: int) -> str:
    p = sd.staging_positions
    return c.execute(sa.select(p.c.staging_root).where(p.c.id == position_id)).scalar_one()


def _generation_of(delivery: str | None) -> str:
    if delivery is not None:
        for flag in delivery.partition("#offset=")[2].split(";"):
            if flag.startswith("g="):
                return flag[2:]
    return new_generation()


def _stopped() -> sa.ColumnElement[bool]:
    p = sd.staging_positions
    return sa.or_(p.c.state == "rewritten",
                  p.c.pending_uri.in_(sa.select(s.unknown_staging_objects.c.uri).scalar_subquery()))
