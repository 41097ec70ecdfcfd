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
from siltlake.coltypes import PARTITION_COLUMN, needs_rewrite, parse_type, refuse_reserved_column
from siltlake.defbase import check_identifier, format_duration, parse_duration
from siltlake.errors import DefinitionError, no_column
from siltlake.tabledef import Column, TableDef

# What `silt table set` changes: each is read afresh by the daemon that uses it at its next run.
SETTABLE = (
    "ttl_days",
    "merge_mode",
    "merge_interval",
    "merged_object_size",
    "row_group_bytes",
    "codec",
    "error_policy",
    "unknown_fields",
    "merge_batch_size",
)
_CHOICES = ("merge_mode", "codec", "error_policy", "unknown_fields")
_SIZE = re.compile(r"^(\d+)\s*(b|kib|mib|gib)?$")
_SIZE_UNITS = {None: 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_NO_TTL = ("none", "off")


@dataclass(frozen=True)
class ColumnChange:
    """One column change of a batch (Tables.alter): op "add" (`column`), "rename" (`name` to `new_name`), "drop"
    (`name`) or "type" (`name` to `type_name`, a widening)."""

    op: str
    name: str
    new_name: str | None = None
    type_name: str | None = None
    column: Column | None = None


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


def parse_value(key: str, text: str) -> Any:
    """The definition value of `key` written as `text`; DefinitionError naming the key otherwise."""
    lowered = text.lower()
    if key == "merge_batch_size":
        if not lowered.isdigit() or int(lowered) < 1:
            raise DefinitionError(f"merge_batch_size {text!r} is not a number of small objects (at least 1)")
        return int(lowered)
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


_WHOLE_NUMBERS = ("ttl_days", "merge_interval", "merged_object_size", "row_group_bytes", "merge_batch_size")


def typed_value(key: str, value: Any) -> Any:
    """The definition value of `key` given as a Python value (Table.set_properties, Table.alter): a number is days,
    seconds, bytes or objects as the key counts, a timedelta merge_interval's seconds, None ttl_days' no TTL; a str
    is read as `silt table set` reads it ("64MiB", "12h", "zstd"). DefinitionError naming the key otherwise."""
    if key not in SETTABLE:
        raise DefinitionError(f"{key!r} cannot be set: the keys are {', '.join(SETTABLE)}")
    if isinstance(value, str):
        return parse_value(key, value.strip())
    if value is None and key == "ttl_days":
        return None
    if isinstance(value, dt.timedelta) and key == "merge_interval":
        seconds = value.total_seconds()
        value = int(seconds) if seconds == int(seconds) else value  # a fraction of a second is refused below
    if key in _WHOLE_NUMBERS and isinstance(value, int) and not isinstance(value, bool):
        least = 0 if key == "merge_interval" else 1
        if value < least:
            raise DefinitionError(f"{key} {value} is below {least}")
        return value
    wanted = (
        "a whole number"
        + (" or None" if key == "ttl_days" else " of seconds or a timedelta" if key == "merge_interval" else "")
        if key in _WHOLE_NUMBERS
        else "a str"
    )
    raise DefinitionError(f"{key} takes {wanted}, not {value!r}")


def shown(key: str, value: Any) -> str:
    if value is None:
        return "none"
    return format_duration(value) if key == "merge_interval" else str(value)


def with_properties(definition: TableDef, values: Mapping[str, str]) -> tuple[TableDef, str]:
    """The definition with the properties set, and what changed as `key=value ...` ("" if nothing did)."""
    return with_values(definition, {key: parse_value(key, text) for key, text in values.items()})


def with_values(definition: TableDef, parsed: Mapping[str, Any]) -> tuple[TableDef, str]:
    """with_properties of values already read (parse_value, typed_value)."""
    changed = {key: value for key, value in parsed.items() if getattr(definition, key) != value}
    if not changed:
        return definition, ""
    data = definition.model_dump(by_alias=True)
    data.update(changed)
    updated = TableDef.from_mapping(data, source=f"table {definition.qualified_name}")
    return updated, " ".join(f"{key}={shown(key, value)}" for key, value in changed.items())


def record_change(
    core: CatalogCore,
    c: Connection,
    table_id: int,
    op: str,
    detail: str,
    definition: TableDef,
    now: dt.datetime | None,
    *,
    previous: TableDef,
    version: tuple[int, dt.datetime] | None = None,
) -> TableChange:
    """Make the change a table version of its own, in the caller's transaction (which holds the table row's
    lock), stamped `now` (None: the current time; a given time before the newest version's is refused); or part
    of `version` (its number and time), one the transaction already made (a rewrite's updates). `previous` is
    the definition before the change: the versions before it are read with it (definition_at)."""
    if version is None:
        version = core.new_table_versions(c, [table_id], now or utcnow(), given=now is not None)[table_id]
    number, stamp = version
    c.execute(
        s.table_changes.insert().values(
            table_id=table_id,
            table_version=number,
            created_at=stamp,
            op=op,
            detail=detail,
            definition=definition.to_json(),
            previous_definition=previous.to_json(),
        )
    )
    return TableChange(number, stamp, op, detail, definition)


def definition_at(
    core: CatalogCore, table_id: int, as_of_version: int | None = None, as_of: dt.datetime | None = None
) -> TableDef | None:
    """The definition table version `as_of_version` (or the newest at the naive UTC time `as_of`) was read with:
    the definition before the first change after it, else the one the newest change up to it made; None when no
    change says (the table's definition now is then the version's). Change times order as their versions."""
    ch = s.table_changes
    mine = ch.c.table_id == table_id
    after, upto = (
        (ch.c.table_version > as_of_version, ch.c.table_version <= as_of_version)
        if as_of is None
        else (ch.c.created_at > as_of, ch.c.created_at <= as_of)
    )
    with core.tx() as c:
        following = c.execute(
            sa.select(ch.c.previous_definition).where(mine, after).order_by(ch.c.table_version).limit(1)
        ).scalar_one_or_none()
        if following is None:  # no change after it, or one recorded before revision 0024: the nearest before
            following = c.execute(
                sa.select(ch.c.definition).where(mine, upto).order_by(ch.c.table_version.desc()).limit(1)
            ).scalar_one_or_none()
    return None if following is None else TableDef.from_json(following)


def changes_of(core: CatalogCore, table_id: int) -> list[TableChange]:
    """The table's recorded changes, oldest first."""
    ch = s.table_changes
    with core.tx() as c:
        rows = c.execute(sa.select(ch).where(ch.c.table_id == table_id).order_by(ch.c.table_version)).all()
    return [TableChange(r.table_version, r.created_at, r.op, r.detail, TableDef.from_json(r.definition)) for r in rows]


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
    if any(f.column == name for f in definition.partition_fields):
        return "a partition_by column"
    return "the sequence_column" if name == definition.sequence_column else None


def with_column_renamed(definition: TableDef, old: str, new: str) -> TableDef:
    """The definition with column `old` called `new`: same field id, same physical name (its objects are not
    rewritten), same source field (staging records keep mapping to it)."""
    column = _existing(definition, old)
    check_identifier(new, "new column name")
    refuse_reserved_column(new)
    if new == PARTITION_COLUMN or any(c.name == new for c in definition.columns):
        raise DefinitionError(f"table {definition.qualified_name} already has a column {new}")
    role = _key_role(definition, old)
    if role is not None and role != "the time column":
        raise DefinitionError(f"column {old} is {role} of {definition.qualified_name}: key columns keep their names")
    renamed = column.model_copy(update={"name": new, "source": column.source_field, "physical": column.physical_name})
    columns = [renamed if c.name == old else c for c in definition.columns]
    sequence = new if role and definition.sequence_column == old else definition.sequence_column
    return _changed(
        definition,
        columns=[c.model_dump() for c in columns],
        time_column=new if role else definition.time_column,
        sequence_column=sequence,
    )


def without_column(definition: TableDef, name: str) -> TableDef:
    """The definition without column `name`: kept among dropped_columns, so that neither its field id nor its
    physical name is given again (a column added later under its name reads null in its objects)."""
    column = _existing(definition, name)
    role = _key_role(definition, name)
    if role is not None:
        raise DefinitionError(f"column {name} is {role} of {definition.qualified_name} and cannot be dropped")
    if len(definition.columns) == 1:
        raise DefinitionError(f"column {name} is the only column of {definition.qualified_name}")
    return _changed(
        definition,
        columns=[c.model_dump() for c in definition.columns if c.name != name],
        dropped_columns=[c.model_dump() for c in (*definition.dropped_columns, column)],
    )


def with_column_type(definition: TableDef, name: str, type_name: str, rewrite: bool = False) -> TableDef:
    """TableDef.with_column_type; a change that converts values is refused for key and sequence columns (their
    values identify and order rows) and the time column (always a timestamp). Widenings are not."""
    column = _existing(definition, name)
    role = _key_role(definition, name)
    if role is not None and needs_rewrite(column.type, parse_type(type_name)):
        raise DefinitionError(f"column {name} is {role} of {definition.qualified_name}: its type cannot change")
    return definition.with_column_type(name, type_name, rewrite)
