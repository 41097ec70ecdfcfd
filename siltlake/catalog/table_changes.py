"""Table properties that change (`silt table set`): the values users may set, how each is read from text, and
the table versions that record each change (docs/design.md "Table properties that change")."""

from __future__ import annotations

import datetime as dt
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore
from siltlake.clock import utcnow
from siltlake.errors import DefinitionError, no_column
from siltlake.tabledef import (
    PARTITION_COLUMN,
    Column,
    TableDef,
    check_identifier,
    format_duration,
    needs_rewrite,
    parse_duration,
    parse_type,
)

# What `silt table set` changes: each is read afresh by the daemon that uses it at its next run.
SETTABLE = ("ttl_days", "merge_mode", "merge_interval", "merged_object_size", "row_group_bytes", "codec",
            "error_policy", "unknown_fields")
_CHOICES = ("merge_mode", "codec", "error_policy", "unknown_fields")
_SIZE = re.compile(r"^(\d+)\s*(b|kib|mib|gib)?$")
_SIZE_UNITS = {None: 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_NO_TTL = ("none", "off")


@dataclass(frozen=True)
class TableChange:
    """One recorded change: the table version it made, when, what (op, detail) and the definition after it."""

    table_version: int
    created_at: dt.datetime
    op: str
    detail: str
    definition: TableDef


def parse_assignments(pairs: Sequence[str]) -> dict[str, str]:
    """{key: value text} from key=value arguments; a key named twice, an unknown key or a pair without `=` is
    refused, naming it."""
    values: dict[str, str] = {}
    if not pairs:
        raise DefinitionError(f"give at least one key=value; the keys are {', '.join(SETTABLE)}")
    for pair in pairs:
        key, equals, value = pair.partition("=")
        key = key.strip()
        if not equals:
            raise DefinitionError(f"{pair!r} is not key=value; for example ttl_days=30")
        if key not in SETTABLE:
            raise DefinitionError(f"{key!r} cannot be set: the keys are {', '.join(SETTABLE)}")
        if key in values:
            raise DefinitionError(f"{key} is given twice")
        values[key] = value.strip()
    return values


def _value(key: str, text: str) -> Any:
    """The definition value of `key` written as `text`; DefinitionError naming the key otherwise."""
    lowered = text.lower()
    if key == "ttl_days":
        if lowered in _NO_TTL:
            return None
        if not lowered.isdigit() or int(lowered) < 1:
            raise DefinitionError(f"ttl_days {text!r} is not a number of days (at least 1) or none")
        return int(lowered)
    if key == "merge_interval":
        return parse_duration(lowered, "merge_interval")
    if key in ("merged_object_size", "row_group_bytes"):
        match = _SIZE.match(lowered)
        if not match or int(match.group(1)) < 1:
            raise DefinitionError(f"{key} {text!r} is not a size: write bytes, or a number with KiB, MiB or GiB")
        return int(match.group(1)) * _SIZE_UNITS[match.group(2)]
    choices = typing.get_args(TableDef.model_fields[key].annotation)
    if lowered not in choices:
        raise DefinitionError(f"{key} {text!r} is not one of {', '.join(choices)}")
    return lowered


def _shown(key: str, value: Any) -> str:
    if value is None:
        return "none"
    return format_duration(value) if key == "merge_interval" else str(value)


def with_properties(definition: TableDef, values: Mapping[str, str]) -> tuple[TableDef, str]:
    """The definition with the properties set, and what changed as `key=value ...` ("" if nothing did)."""
    parsed = {key: _value(key, text) for key, text in values.items()}
    changed = {key: value for key, value in parsed.items() if getattr(definition, key) != value}
    if not changed:
        return definition, ""
    data = definition.model_dump(by_alias=True)
    data.update(changed)
    updated = TableDef.from_mapping(data, source=f"table {definition.qualified_name}")
    return updated, " ".join(f"{key}={_shown(key, value)}" for key, value in changed.items())


def record_change(core: CatalogCore, c: Connection, table_id: int, op: str, detail: str, definition: TableDef,
                  now: dt.datetime | None) -> TableChange:
    """Make the change a table version of its own, in the caller's transaction (which holds the table row's
    lock), stamped `now` (None: the current time; a given time before the newest version's is refused)."""
    version, stamp = core.new_table_versions(c, [table_id], now or utcnow(), given=now is not None)[table_id]
    c.execute(s.table_changes.insert().values(table_id=table_id, table_version=version, created_at=stamp, op=op,
                                              detail=detail, definition=definition.to_json()))
    return TableChange(version, stamp, op, detail, definition)


def changes_of(core: CatalogCore, table_id: int) -> list[TableChange]:
    """The table's recorded changes, oldest first."""
    ch = s.table_changes
    with core.tx() as c:
        rows = c.execute(sa.select(ch).where(ch.c.table_id == table_id).order_by(ch.c.table_version)).all()
    return [TableChange(r.table_version, r.created_at, r.op, r.detail, TableDef.from_json(r.definition))
            for r in rows]


def _changed(definition: TableDef, **updates: Any) -> TableDef:
    data = definition.model_dump(by_alias=True)
    data.update(updates)
    return TableDef.from_mapping(data, source=f"table {definition.qualified_name}")


def _existing(definition: TableDef, name: str) -> Column:
    check_identifier(name, "column name")
    try:
        return definition.column(name)
    except KeyError:
        raise no_column(definition.qualified_name, name, (c.name for c in definition.columns)) from None


def _key_role(definition: TableDef, name: str) -> str | None:
    if name == definition.time_column:
        return "the time column"
    if name in definition.primary_key:
        return "a primary_key column"
    return "the sequence_column" if name == definition.sequence_column else None


def with_column_renamed(definition: TableDef, old: str, new: str) -> TableDef:
    """The definition with column `old` called `new`: same field id, same physical name (its objects are not
    rewritten), same source field (staging records keep mapping to it)."""
    column = _existing(definition, old)
    check_identifier(new, "new column name")
    if new == PARTITION_COLUMN or any(c.name == new for c in definition.columns):
        raise DefinitionError(f"table {definition.qualified_name} already has a column {new}")
    role = _key_role(definition, old)
    if role is not None and role != "the time column":
        raise DefinitionError(f"column {old} is {role} of {definition.qualified_name}: key columns keep their names")
    renamed = column.model_copy(update={"name": new, "source": column.source_field,
                                        "physical": column.physical_name})
    columns = [renamed if c.name == old else c for c in definition.columns]
    return _changed(definition, columns=[c.model_dump() for c in columns],
                    time_column=new if role else definition.time_column)


def without_column(definition: TableDef, name: str) -> TableDef:
    """The definition without column `name`: kept among dropped_columns, so that neither its field id nor its
    physical name is given again (a column added later under its name reads null in its objects)."""
    column = _existing(definition, name)
    role = _key_role(definition, name)
    if role is not None:
        raise DefinitionError(f"column {name} is {role} of {definition.qualified_name} and cannot be dropped")
    if len(definition.columns) == 1:
        raise DefinitionError(f"column {name} is the only column of {definition.qualified_name}")
    return _changed(definition, columns=[c.model_dump() for c in definition.columns if c.name != name],
                    dropped_columns=[c.model_dump() for c in (*definition.dropped_columns, column)])


def with_column_type(definition: TableDef, name: str, type_name: str, rewrite: bool = False) -> TableDef:
    """TableDef.with_column_type; a change that converts values is refused for key and sequence columns (their
    values identify and order rows) and the time column (always a timestamp). Widenings are not."""
    column = _existing(definition, name)
    role = _key_role(definition, name)
    if role is not None and needs_rewrite(column.type, parse_type(type_name)):
        raise DefinitionError(f"column {name} is {role} of {definition.qualified_name}: its type cannot change")
    return definition.with_column_type(name, type_name, rewrite)
