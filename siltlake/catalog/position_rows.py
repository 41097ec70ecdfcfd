"""A file's position (how far its deliveries consumed it) and the row helpers that catalog.positions,
catalog.waits and the stream commit's consumption share."""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from urllib.parse import unquote

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog import schema_discovery as sd
from siltlake.catalog.core import CatalogCore
from siltlake.delivery_names import parse_delivery

URIS_PER_STATEMENT = 5000


def new_generation() -> str:
    """A token naming one file's deliveries: two files that had the same name never share a delivery URI."""
    return secrets.token_hex(6)


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
    return unquote(base[len(staging_root) + 1 :], errors="surrogateescape")


def position_of(row: sa.Row) -> Position:
    """The Position a staging_positions row holds."""
    return Position(
        row.uri,
        key_of(row.staging_root, row.uri, row.key),
        row.table_id,
        row.consumed_end,
        row.read_end,
        row.file_identity,
        row.fingerprint,
        row.pending_uri,
        row.state,
        row.reason,
        row.change_time,
        row.id,
        row.head_crc,
        row.head_length,
        row.generation,
        bool(row.rotated),
        bool(row.compressed),
        row.fragment_end,
    )


class LostRace(Exception):
    """Another process started following the name first (its position row is there)."""


def detached(position: Position) -> str:
    """The URI a position no longer attached to a name keeps: unique, never a staging object's."""
    return f"{position.uri.partition('#')[0]}#detached={position.generation or position.id}-{secrets.token_hex(3)}"


def detach_at(c: Connection, uri: str) -> None:
    """Free the name for another file's position: a followed file's position there is detached (found again by
    its identity), a vacated one or one no delivery consumed is dropped."""
    p = sd.staging_positions
    c.execute(
        p.delete().where(
            p.c.uri == uri,
            sa.or_(
                p.c.state == "vacated",
                sa.and_(unconsumed(), p.c.state == "appending"),
            ),
        )
    )
    for row in c.execute(sa.select(p).where(p.c.uri == uri)).all():
        c.execute(p.update().where(p.c.id == row.id).values(uri=detached(position_of(row)), watch=False))


def clear_at(c: Connection, uri: str, replacing: Position | None) -> None:
    """Before a new position at `uri`: the one judged there (`replacing`) is detached unless another process
    changed it first (LostRace), and a vacated one or one no delivery consumed is dropped. A live position left
    there makes the insert that follows fail: another process followed the name first."""
    p = sd.staging_positions
    if (
        replacing is not None
        and not c.execute(
            p.update()
            .where(p.c.id == replacing.id, p.c.uri == uri, p.c.pending_uri.is_(None))
            .values(uri=detached(replacing), watch=False, rotated=True)
        ).rowcount
    ):
        raise LostRace()
    c.execute(
        p.delete().where(
            p.c.uri == uri,
            sa.or_(
                p.c.state == "vacated",
                sa.and_(unconsumed(), p.c.state == "appending"),
            ),
        )
    )


def register_known(
    core: CatalogCore,
    c: Connection,
    uri: str,
    table_id: int,
    size: int,
    send_time: dt.datetime | None,
    now: dt.datetime,
) -> None:
    """Register a name as a processed staging object that loaded nothing itself (its file's bytes are loaded by
    the deliveries of its position), so listings know it; a name known already keeps its row."""
    core.insert_once(
        c,
        s.staging_objects,
        "uri",
        dict(
            uri=uri,
            table_id=table_id,
            size=size,
            send_time=send_time,
            receive_time=now,
            processed_time=now,
            records_in=0,
            bad_records=0,
        ),
    )


def position_root(c: Connection, position_id: int) -> str:
    """The staging root of the position with this id."""
    p = sd.staging_positions
    return c.execute(sa.select(p.c.staging_root).where(p.c.id == position_id)).scalar_one()


def generation_of(delivery: str | None) -> str:
    """The generation a delivery URI's `g=` flag names; a new one when it names none."""
    generation = parse_delivery(delivery).generation if delivery is not None else None
    return generation or new_generation()


def unconsumed() -> sa.ColumnElement[bool]:
    """The positions no delivery has consumed and none is reading: a name's file as noted when it was registered,
    waiting for its first delivery."""
    p = sd.staging_positions
    return sa.and_(p.c.consumed_end.is_(None), p.c.pending_uri.is_(None))


def stopped() -> sa.ColumnElement[bool]:
    """The positions whose following stopped: rewritten, or waiting for a delivery set aside as unknown."""
    p = sd.staging_positions
    return sa.or_(
        p.c.state == "rewritten", p.c.pending_uri.in_(sa.select(s.unknown_staging_objects.c.uri).scalar_subquery())
    )
