"""Instance keys the catalog registers (its own and other deployments'), and the catalog's id."""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore
from siltlake.clock import utcnow
from siltlake.errors import CatalogError, CatalogUnreachable


class Instances:
    """Reached as catalog.instances."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def register(self, instance_key: str, storage_root: str, *, is_self: bool, description: str = "") -> None:
        with self._core.tx() as c:
            if is_self:
                existing = c.execute(
                    sa.select(s.instances.c.instance_key).where(s.instances.c.is_self)
                ).scalar_one_or_none()
                if existing is not None and existing != instance_key:
                    raise CatalogError(
                        f"this catalog already belongs to instance {existing!r}, not {instance_key!r}; "
                        "remove instance_key from the configuration or set it to the registered key"
                    )
            found = c.execute(
                sa.select(s.instances.c.instance_key).where(s.instances.c.instance_key == instance_key)
            ).first()
            if found is None:
                c.execute(
                    s.instances.insert().values(
                        instance_key=instance_key,
                        is_self=is_self,
                        storage_root=storage_root,
                        description=description,
                        registered_time=utcnow(),
                    )
                )

    def self_key(self) -> str:
        with self._core.tx() as c:
            key = c.execute(sa.select(s.instances.c.instance_key).where(s.instances.c.is_self)).scalar()
        if key is None:
            raise CatalogError("this catalog has no instance key registered; run `silt init`")
        return key

    # The is_self row's description holds the catalog id: random, given once by `silt init`, named by the
    # instance key's _instance.json. It tells this catalog apart from others whatever URL reaches it.

    def catalog_id(self) -> str | None:
        """This catalog's id; None before `silt init` registered an instance key (or gave it an id)."""
        with self._core.tx() as c:
            found = c.execute(sa.select(s.instances.c.description).where(s.instances.c.is_self)).scalar()
        return found or None

    def ensure_catalog_id(self) -> str:
        """Give this catalog its id unless it has one (catalogs initialised before ids had none); return it."""
        i = s.instances
        with self._core.tx() as c:
            c.execute(i.update().where(i.c.is_self, i.c.description == "").values(description=secrets.token_hex(16)))
            found = c.execute(sa.select(i.c.description).where(i.c.is_self)).scalar()
        if not found:
            raise CatalogError("this catalog has no instance key registered; run `silt init`")
        return found

    def registered_self(self) -> tuple[str | None, str | None]:
        """(instance key, catalog id) this catalog registers as its own, (None, None) when it has none;
        CatalogUnreachable when it cannot be read (down, gone, not a catalog)."""
        try:
            with self._core.tx() as c:
                row = c.execute(
                    sa.select(s.instances.c.instance_key, s.instances.c.description).where(s.instances.c.is_self)
                ).first()
        except CatalogError as exc:  # not initialised: it registers nothing
            if isinstance(exc, CatalogUnreachable):
                raise
            return None, None
        except SQLAlchemyError as exc:
            raise CatalogUnreachable(str(getattr(exc, "orig", exc)).strip().splitlines()[0]) from None
        return (row.instance_key, row.description or None) if row is not None else (None, None)

    def foreign(self) -> set[str]:
        """Instance keys registered to other deployments."""
        i = s.instances
        with self._core.tx() as c:
            return set(c.execute(sa.select(i.c.instance_key).where(i.c.is_self.is_(False))).scalars())
