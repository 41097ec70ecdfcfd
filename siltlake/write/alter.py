"""Table.alter(): several column changes and property changes gathered and committed as ONE table version."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from types import TracebackType
from typing import Any

from siltlake.catalog import ColumnChange, TableChange, TableRecord
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.tabledef import Column


class TableAlter:
    """Changes to a table's definition, made together at commit() (or at the end of a `with` block that raised
    nothing) as one table version: readers of any version see all of them or none. Column changes apply in the
    order given (a column added, then renamed, is one step); properties take typed values (ttl_days=30,
    merge_interval=timedelta(hours=6), codec="zstd", ttl_days=None for no TTL; "inherit" hands an inherited setting
    back to the schema). An exception in the block, or a refused change at commit, changes nothing."""

    def __init__(
        self,
        deployment: Deployment,
        name: str,
        *,
        now: dt.datetime | None = None,
        dry_run: bool = False,
        on_commit: Callable[[TableRecord], None] | None = None,
    ) -> None:
        self._deployment = deployment
        self.name = name
        self.now = now
        self.dry_run = dry_run
        self._on_commit = on_commit
        self._columns: list[ColumnChange] = []
        self._properties: dict[str, Any] = {}
        self.committed = False
        # After commit: the table version made (None: nothing changed) and the table as stored.
        self.change: TableChange | None = None
        self.record: TableRecord | None = None

    def _add(self, change: ColumnChange) -> TableAlter:
        self._open()
        self._columns.append(change)
        return self

    def _open(self) -> None:
        if self.committed:
            raise SiltError(f"this alter of {self.name} was committed already; start another with table.alter()")

    def add_column(self, name: str, type_name: str, source: str | None = None) -> TableAlter:
        """Add a nullable column; objects written before it read it as null."""
        column = Column.from_mapping({"name": name, "type": type_name, "source": source})
        return self._add(ColumnChange("add", name, column=column))

    def rename_column(self, old: str, new: str) -> TableAlter:
        """Rename a column; no object is rewritten."""
        return self._add(ColumnChange("rename", old, new_name=new))

    def drop_column(self, name: str) -> TableAlter:
        """Drop a column; no object is rewritten, its data never shows again."""
        return self._add(ColumnChange("drop", name))

    def alter_column(self, name: str, type_name: str) -> TableAlter:
        """Widen a column's type (int to bigint, float to double); a change that converts stored values rewrites
        partitions and is Table.alter_column(name, type, rewrite=True), a version of its own."""
        return self._add(ColumnChange("type", name, type_name=type_name))

    def set_properties(self, **values: Any) -> TableAlter:
        """Set table properties (ttl_days, merge_mode, merge_interval, merged_object_size, row_group_bytes, codec,
        error_policy, unknown_fields, merge_batch_size) to typed values; a key given again takes the later value."""
        self._open()
        self._properties.update(values)
        return self

    def commit(self) -> TableChange | None:
        """Make the changes as one table version (stamped `now`); the version made, None if nothing changed.
        With dry_run every check runs and nothing is changed."""
        self._open()
        self.committed = True
        if not self._columns and not self._properties:
            return None
        record, self.change = self._deployment.catalog.tables.alter(
            self.name, self._columns, self._properties, self.now, dry_run=self.dry_run
        )
        self.record = record
        if self._on_commit is not None and not self.dry_run:
            self._on_commit(record)
        if self.change is not None and not self.dry_run:
            from siltlake.publish.iceberg.follow import follow

            follow(self._deployment, record)  # its Iceberg snapshot, at once, as every write's
        return self.change

    def __enter__(self) -> TableAlter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        if exc_type is None and not self.committed:
            self.commit()
        else:
            self.committed = True  # an exception in the block: nothing is made, and nothing more may be added
