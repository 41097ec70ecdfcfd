"""Files of a local staging root still being written, waiting to settle before they are registered
(stream/appends.py), and per staging root what `silt status` and the metrics show of them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from siltlake.catalog import schema_discovery as sd
from siltlake.catalog.core import CatalogCore, rows_values
from siltlake.catalog.position_rows import URIS_PER_STATEMENT, key_of, stopped, storable


@dataclass(frozen=True)
class WaitingFile:
    uri: str
    key: str
    size: int
    change_time: dt.datetime  # the file's mtime when last looked at
    first_seen: dt.datetime


@dataclass(frozen=True)
class SettleSummary:
    """Per staging root: files waiting to settle, and files rewritten in place (reported, not loaded)."""

    staging_root: str
    waiting: int
    oldest_first_seen: dt.datetime | None
    rewritten: int


class Waits:
    """Reached as catalog.waits."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def waiting(self, staging_root: str) -> list[WaitingFile]:
        """The files of this staging root waiting to settle, in the order first seen."""
        w = sd.staging_waits
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(w.c.uri, w.c.key, w.c.size, w.c.change_time, w.c.first_seen)
                .where(w.c.staging_root == staging_root)
                .order_by(w.c.id)
            ).all()
        return [WaitingFile(uri, key_of(staging_root, uri, key), *rest) for uri, key, *rest in rows_values(rows)]

    def wait(self, staging_root: str, files: Sequence[tuple[str, str, int, dt.datetime]], now: dt.datetime) -> None:
        """Remember these (uri, key, size, mtime) as waiting; a file already waiting keeps its first_seen."""
        w = sd.staging_waits
        with self._core.tx() as c:
            for start in range(0, len(files), 500):
                chunk = files[start : start + 500]
                self._core.insert_once(
                    c,
                    w,
                    "uri",
                    [
                        dict(
                            staging_root=staging_root,
                            uri=uri,
                            key=storable(key),
                            size=size,
                            change_time=mtime,
                            first_seen=now,
                        )
                        for uri, key, size, mtime in chunk
                    ],
                )
            for uri, _, size, mtime in files:
                c.execute(
                    w.update()
                    .where(w.c.uri == uri, sa.or_(w.c.size != size, w.c.change_time != mtime))
                    .values(size=size, change_time=mtime)
                )

    def stop_waiting(self, uris: Sequence[str]) -> None:
        """Forget these files as waiting: settled (registered) or gone."""
        w = sd.staging_waits
        with self._core.tx() as c:
            for start in range(0, len(uris), URIS_PER_STATEMENT):
                c.execute(w.delete().where(w.c.uri.in_(list(uris[start : start + URIS_PER_STATEMENT]))))

    def summary(self, now: dt.datetime) -> list[SettleSummary]:
        """Per staging root, what `silt status` and the metrics show."""
        w, p = sd.staging_waits, sd.staging_positions
        with self._core.tx() as c:
            waits = {
                row.staging_root: row
                for row in c.execute(
                    # Labels that are no tuple method's name (a Row's `count` is typed as the method).
                    sa.select(
                        w.c.staging_root, sa.func.count().label("files"), sa.func.min(w.c.first_seen).label("oldest")
                    ).group_by(w.c.staging_root)
                )
            }
            rewritten = {
                row.staging_root: row.files
                for row in c.execute(
                    sa.select(p.c.staging_root, sa.func.count().label("files"))
                    .where(stopped())
                    .group_by(p.c.staging_root)
                )
            }
        return [
            SettleSummary(
                root,
                waits[root].files if root in waits else 0,
                waits[root].oldest if root in waits else None,
                rewritten.get(root, 0),
            )
            for root in sorted(waits.keys() | rewritten.keys())
        ]
