"""Columns as objects store them (docs/design.md "Schemas that change"): a renamed column keeps the name its
objects hold it under (Column.physical), a column added under a dropped one's name gets a name of its own. Code
that reads and writes objects works on the physical definition; readers show the logical names."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from siltlake.tabledef import TableDef

if TYPE_CHECKING:
    import pyarrow as pa


def renamed(table: TableDef) -> bool:
    """Whether some column's objects hold it under another name."""
    return any(c.physical_name != c.name for c in table.columns)


@functools.lru_cache(maxsize=64)
def physical_definition(table: TableDef) -> TableDef:
    """The definition with each column called by its physical name (time column and keys too): what the
    objects hold, for code that reads and writes them by name (merges)."""
    if not renamed(table):
        return table
    names = {c.name: c.physical_name for c in table.columns}
    data = table.model_dump(by_alias=True)
    data["columns"] = [{**c, "name": names[c["name"]], "physical": None} for c in data["columns"]]
    data["time_column"] = names.get(table.time_column, table.time_column)
    data["primary_key"] = [names[n] for n in table.primary_key]
    data["sequence_column"] = names.get(table.sequence_column, table.sequence_column)
    return TableDef.from_mapping(data)


def physical_rows(rows: pa.Table, table: TableDef) -> pa.Table:
    """Rows named by the table's column names, named as its objects hold them (other columns as they are)."""
    if not renamed(table):
        return rows
    names = {c.name: c.physical_name for c in table.columns}
    return rows.rename_columns([names.get(n, n) for n in rows.column_names])


def logical_names(table: TableDef, names: list[str]) -> list[str]:
    """Physical column names (of the physical definition's schema) as the table's column names."""
    if not renamed(table):
        return names
    logical = {c.physical_name: c.name for c in table.columns}
    return [logical.get(n, n) for n in names]
