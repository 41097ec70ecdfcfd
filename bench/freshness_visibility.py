"""When each put became visible: the catalog's rows read after a freshness run, and the figures of those times."""

from __future__ import annotations

import datetime as dt


def epoch(naive_utc: object) -> float | None:
    """Epoch seconds of a naive UTC catalog time (a datetime, or SQLite's text); None for anything else."""
    if isinstance(naive_utc, str):
        naive_utc = dt.datetime.fromisoformat(naive_utc)
    return naive_utc.replace(tzinfo=dt.UTC).timestamp() if isinstance(naive_utc, dt.datetime) else None


def catalog_rows(url: str) -> tuple[list, list]:
    """Every staging object with its small objects, and every partition version (read-only)."""
    import sqlalchemy as sa

    from siltlake.catalog import schema as s

    so, sm, pv = s.staging_objects, s.small_objects, s.partition_versions
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            # processed_time as stored: the batched stream commit writes it through CAST(... AS DATETIME),
            # which SQLite's numeric affinity turns into the year (2026); such a value is left out.
            objects = c.execute(
                sa.select(
                    so.c.uri,
                    so.c.receive_time,
                    sa.type_coerce(so.c.processed_time, sa.Text).label("processed"),
                    sm.c.id.label("small_id"),
                    sm.c.partition_id,
                    sm.c.delayed,
                    sm.c.upload_start_time,
                ).select_from(so.outerjoin(sm, sm.c.staging_object_id == so.c.id))
            ).all()
            versions = c.execute(
                sa.select(
                    pv.c.partition_id,
                    pv.c.version,
                    pv.c.table_version,
                    pv.c.commit_op,
                    pv.c.live_watermark,
                    pv.c.covered_upper,
                    pv.c.created_at,
                ).order_by(pv.c.created_at, pv.c.id)
            ).all()
    finally:
        engine.dispose()
    return objects, versions


def first_version(versions: list, partition_id: int, object_id: int):  # a Row or None
    """The earliest version of the partition that shows the object: its watermark or merged bound reaches it
    (reader_snapshot: manifest objects up to covered_upper, live ones above it up to live_watermark)."""
    for version in versions:  # in created_at order
        if (
            version.partition_id == partition_id
            and max(version.live_watermark or 0, version.covered_upper or 0) >= object_id
        ):
            return version
    return None


def visibility(puts: list[dict], objects: list, versions: list, seen: dict[int, tuple[float, float]]) -> list[dict]:
    """Per put object: put, registered, task started, committed, seen by the observer and published (epoch
    seconds; None when unknown), from its staging row and its small objects (the latest of them, if several)."""
    by_name: dict[str, list] = {}
    for row in objects:
        by_name.setdefault(row.uri.rsplit("/", 1)[-1], []).append(row)
    found = []
    for put in puts:
        rows = by_name.get(put["name"], [])
        item = {
            "name": put["name"],
            "put": put["put"],
            "registered": None,
            "started": None,
            "committed": None,
            "seen": None,
            "seen_after": None,
            "published": None,
            "published_at": None,
            "small_ids": [],
            "delayed": False,
            "table_version": None,
        }
        if rows:
            item["registered"] = epoch(rows[0].receive_time)
            item["committed"] = epoch(rows[0].processed)
            smalls = [r for r in rows if r.small_id is not None]
            if smalls:
                item["started"] = max(epoch(r.upload_start_time) for r in smalls)
            item["small_ids"] = [r.small_id for r in smalls]
            item["delayed"] = any(r.delayed for r in smalls)
            if smalls and all(r.small_id in seen for r in smalls):
                item["seen_after"] = max(seen[r.small_id][0] for r in smalls)
                item["seen"] = max(seen[r.small_id][1] for r in smalls)
            shown = [first_version(versions, r.partition_id, r.small_id) for r in smalls]
            if smalls and all(shown):
                last = max(shown, key=lambda v: v.created_at)
                item["published"] = epoch(last.created_at)
                item["published_at"] = last.created_at.isoformat(sep=" ", timespec="seconds")
                item["table_version"] = max(v.table_version for v in shown)
        found.append(item)
    return found


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: list[float]) -> dict:
    figures = {f"p{q}": percentile(values, q) for q in (50, 90, 99)}
    figures.update(
        {
            "max": max(values) if values else None,
            "min": min(values) if values else None,
            "mean": sum(values) / len(values) if values else None,
        }
    )
    return {"count": len(values), **{k: None if v is None else round(v, 3) for k, v in figures.items()}}


def spans(items: list[dict], start: str, end: str) -> list[float]:
    return [item[end] - item[start] for item in items if item[start] is not None and item[end] is not None]


def stream_rounds(items: list[dict]) -> list[dict]:
    """Stream rounds seen from the catalog: the objects registered together (one receive_time each round),
    with the span to the last of them seen by the observer."""
    rounds: dict[float, list[dict]] = {}
    for item in items:
        if item["registered"] is not None:
            rounds.setdefault(item["registered"], []).append(item)
    out = []
    for registered, members in sorted(rounds.items()):
        seen = [m["seen"] for m in members if m["seen"] is not None]
        out.append(
            {"objects": len(members), "registered_to_last_seen_s": round(max(seen) - registered, 2) if seen else None}
        )
    return out
