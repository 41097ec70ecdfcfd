"""Committing rewritten partitions (updates, deletes, upserts, a column's rewrite): the conflict checks against
what was published or appended since the rewrite read its base, and the new partition and table versions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import requests as applied_requests
from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.rows import PublishedVersion, UpdateConflict, UpdateWrite, WriteRequest


def commit_updates_in(
    core: CatalogCore,
    c: Connection,
    writes: Sequence[UpdateWrite],
    now: dt.datetime,
    *,
    given: bool,
    request: tuple[WriteRequest, str] | None = None,
) -> list[PublishedVersion]:
    """Versions.commit_updates in the caller's transaction (a column's rewrite commits its definition with it)."""
    p, so, v, r = s.partitions, s.small_objects, s.partition_versions, s.merge_ranges
    published: list[PublishedVersion] = []
    core.ordering_lock(c)  # no small object can be committed to the partitions meanwhile
    if request is not None:
        applied_requests.check_not_applied(c, request[0])
    # In id order: two writers locking overlapping partitions never wait on each other crosswise.
    lock = (
        sa.select(p.c.id, p.c.switched, p.c.table_id)
        .where(p.c.id.in_(sorted(w.base.partition_id for w in writes)))
        .order_by(p.c.id)
    )
    rows = {row.id: row for row in c.execute(lock.with_for_update() if core.dialect == "postgresql" else lock)}
    (table_id,) = {row.table_id for row in rows.values()}
    next_versions = {}
    for base in (w.base for w in writes):
        since = c.execute(
            sa.select(v.c.version, v.c.commit_op)
            .where(v.c.partition_id == base.partition_id, v.c.version > (base.version or 0))
            .order_by(v.c.version)
        ).all()
        blocking = [row for row in since if row.commit_op != "compaction"]
        if blocking:
            raise UpdateConflict(
                f"partition {base.partition_date} changed while the update ran: version "
                f"{blocking[0].version} ({blocking[0].commit_op}) was published after version "
                f"{base.version or 0}, which the update read; run the update again"
            )
        appended: int | None = c.execute(
            sa.select(sa.func.min(so.c.id)).where(so.c.partition_id == base.partition_id, so.c.id > base.upper)
        ).scalar_one()
        if appended is not None:
            raise UpdateConflict(
                f"partition {base.partition_date} changed while the update ran: small object {appended} "
                "was appended after the update read it; run the update again"
            )
        next_versions[base.partition_id] = (since[-1].version if since else (base.version or 0)) + 1
    table_version, stamp = core.new_table_versions(c, [table_id], now, given=given)[table_id]
    for w in writes:
        base = w.base
        c.execute(r.delete().where(r.c.partition_id == base.partition_id, r.c.lower_bound.is_not(None)))
        if c.execute(sa.select(r.c.id).where(r.c.partition_id == base.partition_id)).first() is None:
            c.execute(
                r.insert().values(
                    partition_id=base.partition_id,
                    lower_bound=None,
                    upper_bound=0,
                    content_length=0,
                    row_count=0,
                    create_time=now,
                    update_time=now,
                )
            )
        c.execute(
            r.insert().values(
                partition_id=base.partition_id,
                lower_bound=0,
                upper_bound=base.upper,
                content_length=w.byte_count,
                row_count=w.row_count,
                object_key=w.object_key,
                create_time=now,
                update_time=now,
            )
        )
        c.execute(
            p.update()
            .where(p.c.id == base.partition_id)
            .values(
                desired_manifest_version=base.upper,
                current_manifest_version=base.upper if rows[base.partition_id].switched else 0,
            )
        )
        published.append(
            PublishedVersion(
                partition_id=base.partition_id,
                version=next_versions[base.partition_id],
                commit_op="update",
                live_watermark=base.upper,
                manifest_key=w.manifest_key,
                created_at=stamp,
                row_count=w.row_count,
                byte_count=w.byte_count,
                covered_upper=base.upper,
                table_version=table_version,
                file_list_key=w.manifest_key,
            )
        )
    c.execute(
        v.insert(),
        [
            dict(
                partition_id=x.partition_id,
                table_id=table_id,
                version=x.version,
                commit_op="update",
                live_watermark=x.live_watermark,
                manifest_key=x.manifest_key,
                covered_upper=x.covered_upper,
                created_at=stamp,
                row_count=x.row_count,
                byte_count=x.byte_count,
                table_version=table_version,
                file_list_key=x.file_list_key,
            )
            for x in published
        ],
    )
    if request is not None:
        applied_requests.record_applied(core, c, request[0], table_version, request[1], stamp)
    return published
