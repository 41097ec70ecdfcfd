"""The catalog's tables: create, find, list, change (columns, name) and drop them."""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import inherited
from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, derived_column_readers, derived_readers, insert_table, table_record
from siltlake.catalog.rows import TableRecord, UpdateWrite
from siltlake.catalog.table_changes import (
    SETTABLE,
    ColumnChange,
    TableChange,
    changes_of,
    definition_at,
    parse_assignments,
    record_change,
    shown,
    typed_value,
    with_column_renamed,
    with_column_type,
    with_values,
    without_column,
)
from siltlake.catalog.update_commits import commit_updates_in
from siltlake.clock import utcnow
from siltlake.coltypes import refuse_reserved_column
from siltlake.defbase import check_identifier
from siltlake.errors import CatalogError, DefinitionError, NotFoundError, did_you_mean
from siltlake.tabledef import INHERITED_SETTINGS, Column, TableDef


class _DryRun(Exception):
    """Raised at the end of a dry run's transaction: it rolls the change back."""


class Tables:
    """Reached as catalog.tables. A change given dry_run=True makes every check and write of the real one in a
    transaction it then rolls back, and returns what the real one would have."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core
        # The deployment's values of the inherited settings ([tables] in the config; Deployment sets them).
        self.deployment_settings: dict[str, object] = {}

    @contextmanager
    def _change(self, dry_run: bool) -> Iterator[Connection]:
        try:
            with self._core.tx() as c:
                yield c
                if dry_run:
                    raise _DryRun
        except _DryRun:
            pass

    @staticmethod
    def _stored(c: Connection, table_id: int) -> TableRecord:
        return table_record(c.execute(sa.select(s.tables).where(s.tables.c.id == table_id)).one())

    def create(self, definition: TableDef) -> TableRecord:
        """Add a table; the settings it does not set come from its schema, the deployment or their defaults."""
        with self._core.tx() as c:
            definition = inherited.resolved(
                definition, inherited.schema_settings(c, definition.schema_name), self.deployment_settings
            )
            return insert_table(c, definition, utcnow())

    @staticmethod
    def _find_table(c: Connection, schema_name: str, table_name: str):
        return c.execute(
            sa.select(s.tables).where(
                s.tables.c.schema_name == schema_name,
                s.tables.c.table_name == table_name,
                s.tables.c.dropped_time.is_(None),
            )
        ).first()

    @staticmethod
    def split_name(qualified: str) -> tuple[str, str]:
        parts = qualified.split(".")
        if len(parts) != 2:
            raise CatalogError(f"table name {qualified!r} must be written schema.table")
        return check_identifier(parts[0], "schema name"), check_identifier(parts[1], "table name")

    def get(self, qualified: str) -> TableRecord:
        schema_name, table_name = self.split_name(qualified)
        with self._core.tx() as c:
            row = self._find_table(c, schema_name, table_name)
            if row is None:
                raise self._not_found(c, qualified)
        return table_record(row)

    @staticmethod
    def _not_found(c: Connection, qualified: str) -> NotFoundError:
        """The error for a table name no live table has, naming the closest live table's."""
        names = [
            f"{row.schema_name}.{row.table_name}"
            for row in c.execute(
                sa.select(s.tables.c.schema_name, s.tables.c.table_name).where(s.tables.c.dropped_time.is_(None))
            )
        ]
        return NotFoundError(
            f"no table {qualified}{did_you_mean(qualified, names)}; `silt table list` shows the tables"
        )

    def list(self) -> list[TableRecord]:
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(s.tables)
                .where(s.tables.c.dropped_time.is_(None))
                .order_by(s.tables.c.schema_name, s.tables.c.table_name)
            ).all()
        return [table_record(r) for r in rows]

    def by_key_names(self) -> dict[tuple[str, str], TableRecord]:
        """Live tables by logical and by physical (schema, table): staging keys may use either."""
        records = self.list()
        found = {(r.physical_schema_name, r.physical_table_name): r for r in records}
        found.update({(r.definition.schema_name, r.definition.name): r for r in records})
        return found

    def _update_definition(self, c: Connection, table_id: int, definition: TableDef) -> None:
        c.execute(
            s.tables.update()
            .where(s.tables.c.id == table_id)
            .values(
                schema_name=definition.schema_name,
                table_name=definition.name,
                merge_interval=definition.merge_interval,
                time_column=definition.time_column,
                timezone=definition.timezone,
                ttl_days=definition.ttl_days,
                definition=definition.to_json(),
            )
        )

    def add_column(self, qualified: str, column: Column, now: dt.datetime | None = None) -> TableRecord:
        """Add a nullable column (older objects read it as null); a table version of its own."""
        if not column.nullable:
            raise CatalogError(f"new column {column.name} must be nullable: objects written before it have no values")
        refuse_reserved_column(column.name)
        with self._core.tx() as c:
            record = self._changeable(c, qualified, "adding a column")
            if column.name in {existing.name for existing in record.definition.columns}:
                raise CatalogError(f"table {qualified} already has a column {column.name}")
            definition = record.definition.with_column(column)
            self._update_definition(c, record.id, definition)
            record_change(
                self._core,
                c,
                record.id,
                "add-column",
                f"{column.name} {column.type}",
                definition,
                now,
                previous=record.definition,
            )
        return self.get(qualified)

    def assign_field_ids(self, table_id: int, ids: dict[str, int] | None = None) -> TableRecord:
        """Give a table stored before field ids existed its ids (`ids` by name, dt included: an Iceberg table's;
        None: numbered in column order); a table that has ids keeps them. The table as stored after."""
        with self._core.tx() as c:
            query = sa.select(s.tables).where(s.tables.c.id == table_id)
            if self._core.dialect == "postgresql":
                query = query.with_for_update()
            record = table_record(c.execute(query).one())
            if record.definition.field_ids is None:
                self._update_definition(c, table_id, record.definition.with_field_ids(ids))
                record = table_record(c.execute(sa.select(s.tables).where(s.tables.c.id == table_id)).one())
        return record

    def alter_column_type(
        self, qualified: str, column: str, type_name: str, now: dt.datetime | None = None, dry_run: bool = False
    ) -> TableRecord:
        """Widen a column (int -> bigint, float -> double; older objects read as the new type), a table version of
        its own. Other changes convert stored values: refused here, naming --rewrite (write.retype does them)."""
        return self._change_column(
            qualified,
            "alter-column",
            f"{column} {type_name.strip().lower()}",
            lambda d: with_column_type(d, column, type_name),
            column,
            now,
            dry_run,
        )

    def retype_plan(self, qualified: str, column: str, type_name: str) -> tuple[TableRecord, TableDef]:
        """The table and its definition after a type change that rewrites the column (checked as the change will
        be at commit_retype; nothing is changed)."""
        with self._core.tx() as c:
            record = self._changeable(c, qualified, "changing a column")
            self._check_derived(c, record, column)
            return record, with_column_type(record.definition, column, type_name, rewrite=True)

    def commit_retype(
        self,
        record: TableRecord,
        definition: TableDef,
        writes: Sequence[UpdateWrite],
        detail: str,
        errors: tuple[str, int, int] | None,
        now: dt.datetime | None = None,
    ) -> TableChange:
        """Commit a rewritten column in one transaction: the partitions' update versions (UpdateConflict if one
        changed meanwhile) and the new definition, one table version (a version before it reads the old
        column, the version itself the rewritten one), refused if the table's definition is no longer
        `record`'s; `errors` (error file key, its bytes, rows in it) is registered as a processed staging row,
        so that `silt errors` lists and replays it and reap keeps it."""
        stamp = now or utcnow()
        with self._core.tx() as c:
            version = None
            if writes:  # first: the update commit's ordering lock comes before the table row's, as elsewhere
                published = commit_updates_in(self._core, c, writes, stamp, given=now is not None)
                # One version: the rewritten objects are read with the definition that names their column.
                version = (published[0].table_version, published[0].created_at)
            current = self._changeable(c, record.qualified_name, "changing a column")
            if current.definition != record.definition:
                raise CatalogError(
                    f"{record.qualified_name} changed while its column was rewritten; nothing was changed: run it again"
                )
            self._update_definition(c, record.id, definition)
            change = record_change(
                self._core,
                c,
                record.id,
                "alter-column",
                detail,
                definition,
                now,
                previous=record.definition,
                version=version,
            )
            if errors is not None:
                key, size, rows = errors
                self._core.insert_once(
                    c,
                    s.staging_objects,
                    "uri",
                    dict(
                        uri=key,
                        table_id=record.id,
                        size=size,
                        receive_time=stamp,
                        processed_time=stamp,
                        records_in=rows,
                        bad_records=rows,
                        error_uri=key,
                    ),
                )
                self._core.add_staging_totals(c, {record.id: (1, rows, rows)})
        return change

    def definition_at(
        self, record: TableRecord, as_of_version: int | None = None, as_of: dt.datetime | None = None
    ) -> TableRecord:
        """`record` as table version `as_of_version` (or the newest at the naive UTC time `as_of`) is read: with
        the definition it had (docs/design.md "What time travel shows"); unpinned, `record` itself."""
        if as_of_version is None and as_of is None:
            return record
        definition = definition_at(self._core, record.id, as_of_version, as_of)
        if definition is None:
            return record
        # Under the table's name now: a table rename is not a version of its data.
        definition = definition.model_copy(
            update={"schema_name": record.definition.schema_name, "name": record.definition.name}
        )
        return record if definition == record.definition else dataclasses.replace(record, definition=definition)

    def set_properties(
        self, qualified: str, assignments: Sequence[str], now: dt.datetime | None = None, dry_run: bool = False
    ) -> tuple[TableRecord, TableChange | None]:
        """Set properties from `key=value` texts (table_changes.SETTABLE); a change is a table version of its
        own, stamped `now` (default: the current time). The table as stored after, and the change (None if the
        values were the table's already)."""
        return self.alter(qualified, (), parse_assignments(assignments), now, dry_run)

    def alter(
        self,
        qualified: str,
        columns: Sequence[ColumnChange],
        properties: Mapping[str, Any],
        now: dt.datetime | None = None,
        dry_run: bool = False,
    ) -> tuple[TableRecord, TableChange | None]:
        """Make the column changes in order, then set the properties (values typed or text, typed_value), as ONE
        table version: all of them or none. Its op is the one change's (add-column, set, ...) or "alter" for
        several; the detail lists them. The table as stored after, and the change (None if nothing changed)."""
        refused = [key for key in properties if key not in SETTABLE]
        if refused:
            raise DefinitionError(f"{', '.join(refused)} cannot be set: the keys are {', '.join(SETTABLE)}")
        with self._change(dry_run) as c:
            if columns:
                record = self._changeable(c, qualified, "changing a column")
            else:
                record = self._locked_table(c, qualified)
                if record.definition.kind == "derived":
                    raise CatalogError(
                        f"{qualified} is a derived table: its properties come from its derived "
                        "definition; `silt derived drop` it and create it again with the new values"
                    )
            definition, details = record.definition, []
            for column in columns:
                if column.op != "add":
                    self._check_derived(c, record, column.name)
                definition, op, detail = _column_changed(definition, column)
                details.append((op, detail))
            own = {key: typed_value(key, value) for key, value in properties.items() if key not in INHERITED_SETTINGS}
            definition, detail = with_values(definition, own)
            inheritable = {key: value for key, value in properties.items() if key in INHERITED_SETTINGS}
            if inheritable:
                before = definition
                definition = inherited.with_table_settings(
                    definition,
                    inheritable,
                    inherited.schema_settings(c, definition.schema_name),
                    self.deployment_settings,
                )
                detail = " ".join(filter(None, [detail, _settings_detail(before, definition, inheritable)]))
            if detail:
                details.append(("set", detail))
            change: TableChange | None = None
            if details:
                op = details[0][0] if len(details) == 1 else "alter"
                text = details[0][1] if len(details) == 1 else "; ".join(f"{o} {d}" for o, d in details)
                self._update_definition(c, record.id, definition)
                change = record_change(self._core, c, record.id, op, text, definition, now, previous=record.definition)
            record = self._stored(c, record.id)
        return record, change

    def rename_column(
        self, qualified: str, old: str, new: str, now: dt.datetime | None = None, dry_run: bool = False
    ) -> TableRecord:
        """Rename a column: its id and its objects stay (readers show their data under the new name)."""
        return self._change_column(
            qualified, "rename-column", f"{old} -> {new}", lambda d: with_column_renamed(d, old, new), old, now, dry_run
        )

    def drop_column(
        self, qualified: str, name: str, now: dt.datetime | None = None, dry_run: bool = False
    ) -> TableRecord:
        """Drop a column: its objects stay (reap removes them with their partitions); readers never show it."""
        return self._change_column(
            qualified, "drop-column", name, lambda d: without_column(d, name), name, now, dry_run
        )

    def _change_column(
        self,
        qualified: str,
        op: str,
        detail: str,
        change: Callable[[TableDef], TableDef],
        column: str,
        now: dt.datetime | None,
        dry_run: bool,
    ) -> TableRecord:
        with self._change(dry_run) as c:
            record = self._changeable(c, qualified, "changing a column")
            self._check_derived(c, record, column)
            definition = change(record.definition)
            self._update_definition(c, record.id, definition)
            record_change(self._core, c, record.id, op, detail, definition, now, previous=record.definition)
            record = self._stored(c, record.id)
        return record

    @staticmethod
    def _check_derived(c: Connection, record: TableRecord, column: str) -> None:
        """Refuse a change of `column` that a derived table's query may read (a query siltlake cannot analyse
        counts as reading every column)."""
        readers = derived_column_readers(c, record.id, column)
        if readers:
            # Refused rather than followed: the derived query names columns in text siltlake does not rewrite.
            raise CatalogError(
                f"{record.qualified_name} is read by derived table {', '.join(readers)}, whose query "
                f"names column {column}, selects * or cannot be analysed; `silt derived drop` it, "
                "change the column, then create it again"
            )

    def changes(self, table_id: int) -> builtins.list[TableChange]:
        """The table's recorded definition changes (table versions that publish no data), oldest first."""
        return changes_of(self._core, table_id)

    def rename(self, qualified: str, new_qualified: str, dry_run: bool = False) -> TableRecord:
        """Rename a table; moved to another schema, it inherits that schema's settings (a table version if a
        value changes)."""
        new_schema, new_name = self.split_name(new_qualified)
        with self._change(dry_run) as c:
            record = self._changeable(c, qualified, "renaming it")
            if self._find_table(c, new_schema, new_name) is not None:
                raise CatalogError(f"table {new_qualified} already exists")
            renamed = record.definition.renamed(new_schema, new_name)
            definition = inherited.resolved(renamed, inherited.schema_settings(c, new_schema), self.deployment_settings)
            self._update_definition(c, record.id, definition)
            detail = inherited.difference(renamed, definition, f" (inherited from schema {new_schema})")
            if detail:
                record_change(self._core, c, record.id, "set", detail, definition, None, previous=record.definition)
            record = self._stored(c, record.id)
        return record

    # --- inherited settings (docs/design.md "Settings inherited") --------------------------------------

    def schema_settings(self, schema_name: str) -> dict[str, object]:
        """The settings schema `schema_name` gives the tables in it that do not set them."""
        with self._core.tx() as c:
            return inherited.schema_settings(c, schema_name)

    def setting_sources(self, record: TableRecord) -> dict[str, str]:
        """Where each of the table's inheritable settings comes from: table, schema, deployment or default."""
        return inherited.sources(
            record.definition, self.schema_settings(record.definition.schema_name), self.deployment_settings
        )

    def set_schema(
        self, schema_name: str, assignments: Sequence[str], now: dt.datetime | None = None, dry_run: bool = False
    ) -> tuple[dict[str, str], builtins.list[tuple[str, TableChange]]]:
        """`silt schema set`: store the schema's settings (`inherit` removes one) and bring each live table of
        the schema that inherits a changed one up to date, each such table's change a table version of its own.
        What changed (key: value shown), and the tables changed with their changes."""
        values = inherited.parse_settings_keys(assignments)
        changed_tables: list[tuple[str, TableChange]] = []
        with self._change(dry_run) as c:
            changed = inherited.store_schema_settings(c, schema_name, values)
            if changed:
                changed_tables = self._reinherit(c, schema_name, now, f" (inherited from schema {schema_name})")
        return changed, changed_tables

    def apply_deployment_settings(self, now: dt.datetime | None = None) -> builtins.list[tuple[str, TableChange]]:
        """Bring every live table's inherited values up to the deployment's settings (`silt init`)."""
        with self._core.tx() as c:
            return self._reinherit(c, None, now, " (inherited from the deployment)")

    def _reinherit(
        self, c: Connection, schema_name: str | None, now: dt.datetime | None, suffix: str
    ) -> builtins.list[tuple[str, TableChange]]:
        t = s.tables
        query = sa.select(t.c.schema_name, t.c.table_name, t.c.definition).where(t.c.dropped_time.is_(None))
        if schema_name is not None:
            query = query.where(t.c.schema_name == schema_name)
        changes = []
        settings: dict[str, dict] = {}
        for row in c.execute(query.order_by(t.c.id)).all():
            if row.schema_name not in settings:
                settings[row.schema_name] = inherited.schema_settings(c, row.schema_name)
            unlocked = TableDef.from_json(row.definition)
            if inherited.resolved(unlocked, settings[row.schema_name], self.deployment_settings) is unlocked:
                continue  # up to date: `silt init` locks no table it leaves as it is
            record = self._locked_table(c, f"{row.schema_name}.{row.table_name}")
            definition = inherited.resolved(record.definition, settings[row.schema_name], self.deployment_settings)
            detail = inherited.difference(record.definition, definition, suffix)
            if detail:
                self._update_definition(c, record.id, definition)
                changes.append(
                    (
                        definition.qualified_name,
                        record_change(
                            self._core, c, record.id, "set", detail, definition, now, previous=record.definition
                        ),
                    )
                )
        return changes

    def drop(self, qualified: str, dry_run: bool = False) -> TableRecord:
        """Mark a table dropped; its objects stay until reap removes them."""
        with self._change(dry_run) as c:
            record = self._changeable(c, qualified, "dropping it")
            c.execute(s.tables.update().where(s.tables.c.id == record.id).values(dropped_time=utcnow()))
        return record

    def _changeable(self, c: Connection, qualified: str, change: str) -> TableRecord:
        """The table, locked, if it is not derived (a derived table's columns and name come from its
        definition) and, for a drop or a rename, no derived table reads it."""
        record = self._locked_table(c, qualified)
        if record.definition.kind == "derived":
            raise CatalogError(
                f"{qualified} is a derived table: its columns and name come from its query; "
                f"`silt derived drop` it and create it again instead of {change}"
            )
        readers = derived_readers(c, record.id) if change in ("dropping it", "renaming it") else []
        if readers and change == "dropping it":
            raise CatalogError(f"{qualified} is read by derived table {', '.join(readers)}; drop that first")
        if readers:
            # Refused rather than followed: a rewritten query would be a new definition (a full rebuild) whose
            # text the user never wrote; the user rewrites it, knowing the new name.
            raise CatalogError(
                f"{qualified} is read by derived table {', '.join(readers)}, whose query names it; "
                "`silt derived drop` it, rename, then create it again with the new name in its query"
            )
        return record

    def _locked_table(self, c: Connection, qualified: str) -> TableRecord:
        schema_name, table_name = self.split_name(qualified)
        query = sa.select(s.tables).where(
            s.tables.c.schema_name == schema_name,
            s.tables.c.table_name == table_name,
            s.tables.c.dropped_time.is_(None),
        )
        if self._core.dialect == "postgresql":
            query = query.with_for_update()
        row = c.execute(query).first()
        if row is None:
            raise self._not_found(c, qualified)
        return table_record(row)


def _column_changed(definition: TableDef, change: ColumnChange) -> tuple[TableDef, str, str]:
    """The definition after one column change of a batch, its op and detail as the single changes record them."""
    if change.op == "add":
        column = change.column
        assert column is not None
        if not column.nullable:
            raise CatalogError(f"new column {column.name} must be nullable: objects written before it have no values")
        refuse_reserved_column(column.name)
        if column.name in {existing.name for existing in definition.columns}:
            raise CatalogError(f"table {definition.qualified_name} already has a column {column.name}")
        return definition.with_column(column), "add-column", f"{column.name} {column.type}"
    if change.op == "rename":
        assert change.new_name is not None
        return (
            with_column_renamed(definition, change.name, change.new_name),
            "rename-column",
            f"{change.name} -> {change.new_name}",
        )
    if change.op == "drop":
        return without_column(definition, change.name), "drop-column", change.name
    if change.op == "type":
        assert change.type_name is not None
        type_name = change.type_name.strip().lower()
        return with_column_type(definition, change.name, type_name), "alter-column", f"{change.name} {type_name}"
    raise DefinitionError(f"unknown column change {change.op!r}: add, rename, drop or type")


def _settings_detail(before: TableDef, after: TableDef, given: Mapping[str, Any]) -> str:
    """`silt table set`'s record of inheritable keys: key=value for a value now set on the table, key=inherit
    (value) for one handed back to the schema, when its value or where it comes from changed."""
    parts = []
    for key in INHERITED_SETTINGS:
        if key not in given:
            continue
        now_inherited = key in after.inherited
        if getattr(before, key) == getattr(after, key) and (key in before.inherited) == now_inherited:
            continue
        value = shown(key, getattr(after, key))
        parts.append(f"{key}=inherit ({value})" if now_inherited else f"{key}={value}")
    return " ".join(parts)
