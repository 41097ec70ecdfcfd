"""What deliveries consumed of the files they read, recorded in the transaction that registers the files or
commits the deliveries (catalog/staging.py, catalog/stream_commit.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema_discovery as sd
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.many_rows import execute_many
from siltlake.catalog.position_rows import new_generation, storable, unconsumed
from siltlake.delivery_names import parse_delivery

# Set alike by a file's first delivery (an upsert) and its later ones (an update): one list keeps the two in step.
_CONSUMED = (
    "table_id",
    "consumed_end",
    "read_end",
    "file_identity",
    "fingerprint",
    "pending_uri",
    "head_crc",
    "head_length",
    "compressed",
)


def note_files(core: CatalogCore, c: Connection, staging_root: str, files: Sequence[dict], now: dt.datetime) -> None:
    """In the transaction that registers new files under these (uri, key): note their identity (file_identity,
    head_crc, head_length, compressed). Their first delivery names no identity, and a file renamed while it is in
    flight must not be taken for a new file under its new name (stream/rotation.py). A position a delivery
    consumed is left alone. One statement however many files (a backlog's thousands a round), and one more for
    those that had a position already (waiting to settle, or watched)."""
    p = sd.staging_positions
    inserted = {
        row.uri
        for row in core.insert_new(
            c,
            p,
            "uri",
            [
                dict(
                    staging_root=staging_root,
                    watch=False,
                    change_time=now,
                    generation=new_generation(),
                    **{**file, "key": storable(file["key"])},
                )
                for file in files
            ],
            "uri",
        )
    }
    known = [file for file in files if file["uri"] not in inserted]
    if known:
        c.execute(
            p.update()
            .where(
                p.c.uri == sa.bindparam("b_uri"),
                unconsumed(),
                # Noted anew: the file registered now is the one the name's first delivery reads (an earlier
                # note, of a file whose registration was forgotten or pruned, is another file's)
                sa.or_(p.c.file_identity.is_(None), p.c.state == "appending"),
            )
            .values(
                file_identity=sa.bindparam("b_identity"),
                head_crc=sa.bindparam("b_crc"),
                head_length=sa.bindparam("b_length"),
                compressed=sa.bindparam("b_compressed"),
            ),
            [
                dict(
                    b_uri=file["uri"],
                    b_identity=file["file_identity"],
                    b_crc=file["head_crc"],
                    b_length=file["head_length"],
                    b_compressed=file["compressed"],
                )
                for file in known
            ],
        )


def record_consumed(
    core: CatalogCore,
    c: Connection,
    *,
    staging_root: str,
    uri: str,
    key: str,
    delivery_uri: str,
    table_id: int,
    consumed_end: int,
    read_end: int,
    file_identity: str,
    fingerprint: int,
    now: dt.datetime,
    **head: object,
) -> None:
    """In a stream commit: a delivery of `uri` consumed it up to consumed_end. Only the delivery the position
    waits for (its first, or the pending tail) moves it; a rewritten file's position stays stopped. `head`:
    head_crc, head_length, compressed, fragment_end as the task reported them."""
    record_all_consumed(
        core,
        c,
        [
            dict(
                staging_root=staging_root,
                uri=uri,
                key=key,
                delivery_uri=delivery_uri,
                table_id=table_id,
                consumed_end=consumed_end,
                read_end=read_end,
                file_identity=file_identity,
                fingerprint=fingerprint,
                now=now,
                **head,
            )
        ],
    )


def record_all_consumed(core: CatalogCore, c: Connection, deliveries: list[dict]) -> None:
    """record_consumed of several deliveries (those of a batched commit): the files' first deliveries in one
    statement (an upsert), the later ones (files appended to) in one more."""
    p = sd.staging_positions

    def values(delivery: dict) -> dict:
        return dict(
            table_id=delivery["table_id"],
            consumed_end=delivery["consumed_end"],
            read_end=delivery["read_end"],
            file_identity=delivery["file_identity"],
            fingerprint=delivery["fingerprint"],
            pending_uri=None,
            head_crc=delivery.get("head_crc"),
            head_length=delivery.get("head_length"),
            compressed=bool(delivery.get("compressed")),
        )

    def partial(delivery: dict) -> bool:  # a record half written when read: the file is being written to
        return delivery["consumed_end"] < delivery["read_end"]

    first = [d for d in deliveries if "#" not in d["delivery_uri"]]
    if first:
        # A file's first delivery inserts its position, or moves the one its name had waiting (noted when the file
        # was registered: most first deliveries) unless a delivery consumed it already.
        statement = core.insert(p)
        excluded = statement.excluded
        execute_many(
            c,
            statement.on_conflict_do_update(
                index_elements=["uri"],
                where=sa.and_(p.c.state == "appending", unconsumed()),
                set_=dict(
                    change_time=excluded.change_time,
                    watch=sa.or_(p.c.watch, excluded.watch),
                    fragment_end=excluded.fragment_end,
                    **{name: excluded[name] for name in _CONSUMED},
                ),
            ),
            [
                dict(
                    staging_root=d["staging_root"],
                    uri=d["uri"],
                    key=storable(d["key"]),
                    change_time=d["now"],
                    watch=partial(d),
                    generation=new_generation(),
                    fragment_end=d.get("fragment_end"),
                    **values(d),
                )
                for d in first
            ],
        )
    moved = [delivery for delivery in deliveries if "#" in delivery["delivery_uri"]]
    if not moved:
        return
    # A later delivery moves the position that waits for it, under whatever name its file has now (it may have
    # been renamed while the delivery ran). One statement, its rows as parameters (executemany). One that read
    # short of the end it was registered to found its file truncated under it: the file's next delivery of that
    # range reads other bytes, so it is named by a new generation (the same name was the registered delivery's,
    # and it was never registered).
    b = sa.bindparam
    execute_many(
        c,
        p.update()
        .where(p.c.state == "appending", p.c.pending_uri == b("b_delivery"))
        .values(
            change_time=b("b_now"),
            watch=sa.or_(p.c.watch, b("b_partial", type_=sa.Boolean)),
            fragment_end=sa.case(
                (p.c.consumed_end == b("b_consumed_end"), p.c.fragment_end),
                else_=b("b_fragment_end", type_=sa.BigInteger),
            ),
            generation=sa.func.coalesce(b("b_generation", type_=p.c.generation.type), p.c.generation),
            **{name: b(f"b_{name}") for name in _CONSUMED},
        ),
        [
            dict(
                b_delivery=d["delivery_uri"],
                b_now=d["now"],
                b_partial=partial(d),
                b_fragment_end=d.get("fragment_end"),
                b_generation=new_generation() if _read_short(d["read_end"], d["delivery_uri"]) else None,
                **{f"b_{name}": value for name, value in values(d).items()},
            )
            for d in moved
        ],
    )


def release_pending(c: Connection, delivery_uri: str, moved: bool = False) -> None:
    """In a stream commit: a delivery that read nothing of its file (moved away, gone, unreadable) frees the
    position that waits for it, which is judged again by the next listing. A copy's rest that found its file
    `moved` (renamed, compressed away) moves its original's position back to where the copy's starts, unless
    it moved on since: the copy's bytes were not loaded, and a later copy of them (the compressed one) loads them
    (it was judged all loaded)."""
    p = sd.staging_positions
    advances = parse_delivery(delivery_uri).advances if moved else None
    if advances is not None:
        original, end, read_end = advances
        copy = c.execute(sa.select(p.c.consumed_end, p.c.fingerprint).where(p.c.pending_uri == delivery_uri)).first()
        if copy is not None and copy.consumed_end is not None:
            c.execute(
                p.update()
                .where(p.c.id == original, p.c.consumed_end == end, p.c.pending_uri.is_(None))
                .values(
                    consumed_end=copy.consumed_end,
                    read_end=max(read_end, copy.consumed_end),
                    fingerprint=copy.fingerprint,
                )
            )
    c.execute(p.update().where(p.c.pending_uri == delivery_uri).values(pending_uri=None))


def _read_short(read_end: int, delivery: str) -> bool:
    """Whether a delivery read less than the end it was registered to: its file was truncated under it, so the
    position's next delivery, which may be registered at the same end, takes a new generation (a new URI)."""
    return read_end < parse_delivery(delivery).registered_end
