"""Tags: names given to table versions (Table.tag, `silt table tag`). A tag is read wherever a version number is
(as_of_version="name", VERSION AS OF 'name'), and reap keeps every partition version a tagged version shows, so a
tagged version stays readable past the retention window."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.version_reads import VersionReads
from siltlake.clock import utcnow
from siltlake.errors import CatalogError, DefinitionError, NotFoundError, VersionOutOfRange, did_you_mean

# A letter or _ first: a tag is never read as a version number ('3' is version 3 to SQL users).
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$")


@dataclass(frozen=True)
class Tag:
    name: str
    table_version: int
    created_at: dt.datetime


def check_tag_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise DefinitionError(
            f"tag {name!r} is not a tag name: a letter or _ first, then letters, digits, _ . or -, "
            "at most 100 characters"
        )
    return name


class Tags:
    """Reached as catalog.tags."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def add(
        self,
        table_id: int,
        name: str,
        version: int,
        table_name: str,
        now: dt.datetime | None = None,
        move: bool = False,
    ) -> Tag:
        """Name table version `version`, one the table can be read at; a name given to another version is
        refused unless `move` (it then names this one). The tag as stored."""
        check_tag_name(name)
        t = s.version_tags
        with self._core.tx() as c:
            oldest, newest, _ = VersionReads(self._core).table_range(c, table_id)
            existing = c.execute(sa.select(t).where(t.c.table_id == table_id, t.c.name == name)).first()
            if existing is not None and existing.table_version == version:
                return Tag(name, version, existing.created_at)
            if newest == 0:
                raise VersionOutOfRange(
                    f"{table_name} has no published versions yet, so none to tag; run `silt publish --once` first"
                )
            if not oldest <= version <= newest:
                raise VersionOutOfRange(
                    f"{table_name} has no version {version} to tag: its readable versions are {oldest} to {newest}"
                )
            if existing is not None and not move:
                raise CatalogError(
                    f"tag {name} of {table_name} names version {existing.table_version}; give move=True "
                    "(--move) to make it name another, or choose another name"
                )
            stamp = now or utcnow()
            if existing is not None:
                c.execute(t.update().where(t.c.id == existing.id).values(table_version=version, created_at=stamp))
            else:
                c.execute(t.insert().values(table_id=table_id, name=name, table_version=version, created_at=stamp))
        return Tag(name, version, stamp)

    def remove(self, table_id: int, name: str, table_name: str) -> Tag:
        """Forget a tag (the version it named is reaped as any other once outside the retention window)."""
        t = s.version_tags
        with self._core.tx() as c:
            row = c.execute(sa.select(t).where(t.c.table_id == table_id, t.c.name == name)).first()
            if row is None:
                raise self._no_tag(c, table_id, name, table_name)
            c.execute(t.delete().where(t.c.id == row.id))
        return Tag(row.name, row.table_version, row.created_at)

    def list(self, table_id: int) -> list[Tag]:
        """The table's tags by version, then name."""
        t = s.version_tags
        with self._core.tx() as c:
            rows = c.execute(sa.select(t).where(t.c.table_id == table_id).order_by(t.c.table_version, t.c.name)).all()
        return [Tag(r.name, r.table_version, r.created_at) for r in rows]

    def version_of(self, table_id: int, name: str, table_name: str) -> int:
        """The table version the tag names; NotFoundError naming the closest tag otherwise."""
        t = s.version_tags
        with self._core.tx() as c:
            version = c.execute(
                sa.select(t.c.table_version).where(t.c.table_id == table_id, t.c.name == name)
            ).scalar_one_or_none()
            if version is None:
                raise self._no_tag(c, table_id, name, table_name)
        return version

    @staticmethod
    def _no_tag(c: sa.Connection, table_id: int, name: str, table_name: str) -> NotFoundError:
        t = s.version_tags
        names: list[str] = list(c.execute(sa.select(t.c.name).where(t.c.table_id == table_id)).scalars())
        listed = f"its tags are {', '.join(sorted(names))}" if names else "it has no tags"
        return NotFoundError(f"{table_name} has no tag {name!r}{did_you_mean(name, names)}; {listed}")
