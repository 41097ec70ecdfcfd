"""A table's metadata as plain frozen values (Table.metadata): what it is called, its version and definition."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from siltlake.catalog import TableRecord

# Definition fields that are not settings: the table's identity, columns and key are TableMetadata's own fields.
_NOT_SETTINGS = ("schema_name", "name", "columns", "primary_key", "dropped_columns", "dt_field_id", "inherited")


class ColumnSpec(NamedTuple):
    """One column of the definition: its name, siltlake type (as `silt table show` writes it), nullability and the
    input field it is read from."""

    name: str
    type: str
    nullable: bool
    source_field: str = ""


@dataclass(frozen=True)
class TableMetadata:
    """What a table is, as of the Table's definition: `name` (schema.table), catalog `id`, newest table `version`
    (0: nothing published), `created_at` (UTC), the definition's `columns` (without dt), `partitioning` (in words)
    by `partition_column`, for a keyed table its `primary_key` (empty: not keyed), its `kind` ("log" or "derived"),
    the `physical_name` its objects are stored under, and where each inherited setting of a log table comes from
    (`settings_from`: key to "table", "schema", "deployment" or "default")."""

    name: str
    id: int
    version: int
    created_at: dt.datetime
    columns: tuple[ColumnSpec, ...]
    partition_column: str
    partitioning: str
    primary_key: tuple[str, ...]
    kind: str = "log"
    physical_name: str = ""
    settings_from: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def keyed(self) -> bool:
        """Whether readers see one row per (dt, primary key)."""
        return bool(self.primary_key)


def table_metadata(record: TableRecord, version: int, settings_from: Mapping[str, str] | None = None) -> TableMetadata:
    definition = record.definition
    if definition.time_column:
        partitioning = f"daily: dt is the day of {definition.time_column} in {definition.timezone}"
    else:
        partitioning = "daily: dt is the day each row was built for"
    created = record.create_time
    created = created.replace(tzinfo=dt.UTC) if created.tzinfo is None else created.astimezone(dt.UTC)
    return TableMetadata(
        name=record.qualified_name,
        id=record.id,
        version=version,
        created_at=created,
        columns=tuple(ColumnSpec(c.name, c.type, c.nullable, c.source_field) for c in definition.columns),
        partition_column="dt",
        partitioning=partitioning,
        primary_key=tuple(definition.primary_key),
        kind=definition.kind,
        physical_name=f"{record.physical_schema_name}.{record.physical_table_name}",
        settings_from=MappingProxyType(dict(settings_from or {})),
    )


def table_properties(record: TableRecord) -> dict[str, Any]:
    """The table's settings (those `silt table set` and set_properties change, and the input's: time column,
    zone, format, ...) as a new dict: changing it changes nothing; Table.set_properties does."""
    values = record.definition.model_dump(by_alias=False)
    return {key: value for key, value in values.items() if key not in _NOT_SETTINGS}
