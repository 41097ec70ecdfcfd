"""PostgreSQL databases for catalogs: create one from an administrative connection, drop it again."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from siltlake.defbase import IDENTIFIER
from siltlake.errors import CatalogError


def _database_url(admin_url: str, name: str) -> str:
    if not IDENTIFIER.match(name):  # the same rule as siltlake's own names: safe to quote
        raise CatalogError(f"{name!r} is not a database name siltlake creates (a-z, 0-9, _; at most 63)")
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def _admin(admin_url: str) -> sa.Engine:
    return sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")


def create_postgres_database(admin_url: str, name: str, *, replace: bool = False, template: str | None = None) -> str:
    """Create database `name` on the server of admin_url (dropping it first if replace; a copy of database
    `template` if given, which must have no open connections); returns its URL.

    Raises CatalogError naming the server when it cannot be reached or refuses.
    """
    url = _database_url(admin_url, name)
    copied = f' TEMPLATE "{make_url(_database_url(admin_url, template)).database}"' if template else ""
    engine = _admin(admin_url)
    try:
        with engine.connect() as connection:
            if replace:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"{copied}')
    except sa.exc.SQLAlchemyError as exc:
        shown = make_url(admin_url).render_as_string(hide_password=True)
        raise CatalogError(
            f"cannot create database {name} through {shown}: "
            f"{str(getattr(exc, 'orig', None) or exc).strip().splitlines()[0]}"
        ) from None
    finally:
        engine.dispose()
    return url


def drop_postgres_database(admin_url: str, name: str) -> None:
    """Drop database `name` (closing its connections) if it exists."""
    _database_url(admin_url, name)
    engine = _admin(admin_url)
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        engine.dispose()
