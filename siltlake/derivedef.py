"""Derived table definitions (docs/design.md): a query over tables and when to rebuild it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator, model_validator

from siltlake.defbase import StrictModel, check_identifier, definition_file, exact_bool, parse_duration, validated
from siltlake.errors import DefinitionError


class DerivedDef(StrictModel):
    """A derived table (docs/design.md): a Spark SQL query over tables, and when to rebuild it.

    One rule keeps it fresh: persist_for (rebuild when the build is older), trigger = "sources" (when a
    source table's published version changes; the default) or trigger_sql (when the query's value
    changes, as Looker's sql_trigger_value). incremental: the query keeps each source dt's rows in that
    dt, so a build recomputes only the dates whose source partitions changed.
    """

    name: str
    query: str
    incremental: bool = False
    persist_for: int | None = None
    trigger: Literal["sources"] | None = None
    trigger_sql: str | None = None
    codec: Literal["zstd", "snappy", "gzip", "none"] = "zstd"

    _incremental = field_validator("incremental", mode="before")(exact_bool)

    @field_validator("name")
    @classmethod
    def _qualified(cls, value: str) -> str:
        parts = value.split(".") if isinstance(value, str) else []
        if len(parts) != 2:
            raise DefinitionError(f"name {value!r} must be schema.table")
        check_identifier(parts[0], "schema name")
        check_identifier(parts[1], "table name")
        return value

    @field_validator("persist_for", mode="before")
    @classmethod
    def _persist(cls, value: Any) -> int | None:
        if value is None:
            return None
        seconds = parse_duration(value, "persist_for")
        if seconds < 1:
            raise DefinitionError("persist_for must be at least 1s")
        return seconds

    @field_validator("query", "trigger_sql")
    @classmethod
    def _text(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not value.strip():
            raise DefinitionError(f"{info.field_name} is empty")
        return value.strip().rstrip(";").strip() if value is not None else None

    @model_validator(mode="after")
    def _one_rule(self) -> DerivedDef:
        rules = [key for key in ("persist_for", "trigger", "trigger_sql") if getattr(self, key) is not None]
        if len(rules) > 1:
            raise DefinitionError(f"give one of persist_for, trigger and trigger_sql, not {' and '.join(rules)}")
        return self

    @property
    def schema_name(self) -> str:
        return self.name.split(".")[0]

    @property
    def table_name(self) -> str:
        return self.name.split(".")[1]

    @property
    def rule(self) -> str:
        """How the table is kept: "persist_for", "sql" or "sources"."""
        if self.persist_for is not None:
            return "persist_for"
        return "sql" if self.trigger_sql is not None else "sources"

    def may_read_column(self, column: str) -> bool:
        """Whether the query may read a column named `column` of a table it reads: it names the column anywhere
        (under any qualifier, or as any identifier: a false match only refuses a change) or selects *, or
        sqlglot cannot parse it (then every column counts as read)."""
        import sqlglot
        from sqlglot import expressions as exp

        try:
            statements = sqlglot.parse(self.query, read="spark")
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
            return True
        wanted = column.lower()
        for statement in statements:
            if statement is None:
                return True
            for node in statement.walk():
                if isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count):  # count(*) reads none
                    return True
                if isinstance(node, exp.Identifier) and node.name.lower() == wanted:
                    return True
        return False

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> DerivedDef:
        return cls.model_validate_json(text)

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str = "derived table definition") -> DerivedDef:
        return validated(cls, data, source)


def load_derived_file(path: str | Path) -> DerivedDef:
    """Read a derived table definition from a .toml (or .yaml/.yml) file."""
    path = Path(path)
    return DerivedDef.from_mapping(definition_file(path, "derived table definition"), source=str(path))
