"""Settings a table inherits (docs/design.md "Settings inherited"): of tabledef.INHERITED_SETTINGS, what a log
table does not set itself comes from its schema (`silt schema set`, the schema_settings rows), else from the
deployment ([tables] in the config), else the setting's default. The values a table inherits are kept in its
definition, so every reader of a definition sees them; they are brought up to date, each change a table version,
when the table is created or renamed, when its schema's settings change, and when `silt init` applies the config."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.table_changes import parse_assignments, parse_value, shown, typed_value
from siltlake.defbase import check_identifier
from siltlake.errors import DefinitionError
from siltlake.tabledef import INHERITED_SETTINGS, TableDef

INHERIT = "inherit"  # the value that hands a setting back to the level above


def parse_settings(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """{key: definition value} of settings written as text (or numbers, from a config file); a key that cannot be
    inherited is refused, naming `where`."""
    parsed = {}
    for key, value in values.items():
        if key not in INHERITED_SETTINGS:
            raise DefinitionError(
                f"{where}: {key!r} is not a setting tables inherit; those are {', '.join(INHERITED_SETTINGS)}"
            )
        try:
            parsed[key] = parse_value(key, str(value).strip())
        except DefinitionError as exc:
            raise DefinitionError(f"{where}: {exc}") from None
    return parsed


def parse_settings_keys(pairs: Sequence[str]) -> dict[str, str]:
    """`silt schema set`'s key=value arguments, each key one a table inherits."""
    values = parse_assignments(pairs)
    refused = [key for key in values if key not in INHERITED_SETTINGS]
    if refused:
        raise DefinitionError(
            f"{', '.join(refused)}: a schema sets only the settings its tables inherit: {', '.join(INHERITED_SETTINGS)}"
        )
    return values


def schema_settings(c: Connection, schema_name: str) -> dict[str, Any]:
    ss = s.schema_settings
    rows = c.execute(sa.select(ss.c.key, ss.c.value).where(ss.c.schema_name == schema_name)).all()
    return {row.key: json.loads(row.value) for row in rows}


def inherited_value(key: str, schema: Mapping[str, Any], deployment: Mapping[str, Any]) -> tuple[Any, str]:
    """What a table that does not set `key` takes, and from where: schema, deployment or default."""
    if key in schema:
        return schema[key], "schema"
    if key in deployment:
        return deployment[key], "deployment"
    return TableDef.model_fields[key].default, "default"


def resolved(definition: TableDef, schema: Mapping[str, Any], deployment: Mapping[str, Any]) -> TableDef:
    """The definition with the values it inherits brought up to date."""
    if definition.kind != "log" or not definition.inherited:
        return definition
    updates = {key: inherited_value(key, schema, deployment)[0] for key in definition.inherited}
    if all(getattr(definition, key) == value for key, value in updates.items()):
        return definition
    return TableDef.from_mapping(
        {**definition.model_dump(by_alias=True), **updates}, source=f"table {definition.qualified_name}"
    )


def sources(definition: TableDef, schema: Mapping[str, Any], deployment: Mapping[str, Any]) -> dict[str, str]:
    """Where each inheritable setting's value comes from: table, schema, deployment or default."""
    return {
        key: inherited_value(key, schema, deployment)[1] if key in definition.inherited else "table"
        for key in INHERITED_SETTINGS
    }


def difference(old: TableDef, new: TableDef, suffix: str = "") -> str:
    """`key=value ...` of the inheritable settings whose value changed ("" if none did)."""
    changed = [
        f"{key}={shown(key, getattr(new, key))}" for key in INHERITED_SETTINGS if getattr(old, key) != getattr(new, key)
    ]
    return " ".join(changed) + suffix if changed else ""


def with_table_settings(
    definition: TableDef, values: Mapping[str, Any], schema: Mapping[str, Any], deployment: Mapping[str, Any]
) -> TableDef:
    """The definition after `silt table set` (or Table.set_properties) of inheritable keys: a value (text or typed,
    table_changes.typed_value) sets the key on the table, `inherit` hands it back to the schema (and the levels
    above)."""
    inherited = set(definition.inherited)
    data = definition.model_dump(by_alias=True)
    for key, value in values.items():
        if isinstance(value, str) and value.strip().lower() == INHERIT:
            inherited.add(key)
        else:
            inherited.discard(key)
            data[key] = typed_value(key, value)
    data["inherited"] = [key for key in INHERITED_SETTINGS if key in inherited]
    return resolved(TableDef.from_mapping(data, source=f"table {definition.qualified_name}"), schema, deployment)


def store_schema_settings(c: Connection, schema_name: str, values: Mapping[str, str]) -> dict[str, str]:
    """Write `silt schema set`'s values (`inherit` removes the schema's own); what changed, as key=value."""
    check_identifier(schema_name, "schema name")
    ss = s.schema_settings
    before = schema_settings(c, schema_name)
    changed = {}
    for key, text in values.items():
        if text.lower() == INHERIT:
            if key in before:
                c.execute(ss.delete().where(ss.c.schema_name == schema_name, ss.c.key == key))
                changed[key] = INHERIT
            continue
        value = parse_value(key, text)
        if before.get(key, INHERIT) == value and key in before:
            continue
        if key in before:
            c.execute(
                ss.update().where(ss.c.schema_name == schema_name, ss.c.key == key).values(value=json.dumps(value))
            )
        else:
            c.execute(ss.insert().values(schema_name=schema_name, key=key, value=json.dumps(value)))
        changed[key] = shown(key, value)
    return changed
