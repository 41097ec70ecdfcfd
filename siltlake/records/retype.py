"""A column's stored values converted to a new type (docs/design.md "Type changes"): each value is converted as the
stream converts a JSON-lines record's value of the column, so the table holds what streaming its records under
the new type would have stored. A row whose value does not convert is set apart with the reason and the record as
it would be staged, for an error file that `silt errors replay` stages again once fixed."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

from siltlake.coltypes import arrow_type
from siltlake.records.coerce import unexpected_reason, value_coercer
from siltlake.tabledef import TableDef

# The two columns a conversion adds to the table's: why a row's value does not convert, and the row as a record.
REASON, RECORD = "_retype_reason", "_retype_record"


def record_value(value: Any, type_name: str, timezone: str, target: str) -> Any:
    """A stored value of type `type_name` as a JSON-lines record holds it, for a conversion to `target`."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):  # a timestamp: to a date, its calendar date in the table's zone (as dt)
        return value.astimezone(ZoneInfo(timezone)).date().isoformat() if target == "date" else value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        integral = value == value.to_integral_value()
        return int(value) if integral and target != "string" else str(value)
    if type_name == "json" and target != "string":
        return json.loads(value)
    return value


def staged_record(table: TableDef, row: dict[str, Any]) -> str:
    """A row (by column name) as the JSON-lines record, by input field, that would stream it again."""
    record = {c.source_field: record_value(row.get(c.name), c.type, table.timezone, c.type) for c in table.columns}
    return json.dumps(record, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class ColumnConverter:
    """Runs in Spark tasks (mapInArrow) over rows with `before`'s columns: gives them with `after`'s (column
    `column` converted) and the REASON and RECORD columns, set for the rows whose value does not convert."""

    before_json: str
    after_json: str
    column: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        before, after = TableDef.from_json(self.before_json), TableDef.from_json(self.after_json)
        old, new = before.column(self.column), after.column(self.column)
        coerce = value_coercer(new, after)
        for batch in batches:
            values: list[Any] = []
            reasons: list[str | None] = []
            records: list[str | None] = []
            rows: list[dict[str, Any]] | None = None
            for index, value in enumerate(batch.column(self.column).to_pylist()):
                reason = None
                try:
                    values.append(
                        None if value is None else coerce(record_value(value, old.type, before.timezone, new.type))
                    )
                except ValueError as exc:
                    reason = str(exc)
                except Exception as exc:  # one value never fails the rewrite: the row is set apart
                    reason = unexpected_reason(exc)
                if reason is not None:
                    rows = rows if rows is not None else batch.to_pylist()
                    values.append(None)
                    reasons.append(f"column {self.column}: {reason}")
                    records.append(staged_record(before, rows[index]))
                else:
                    reasons.append(None)
                    records.append(None)
            arrays = [
                pa.array(values, arrow_type(new.type)) if name == self.column else batch.column(name)
                for name in batch.schema.names
            ]
            yield pa.RecordBatch.from_arrays(
                [*arrays, pa.array(reasons, pa.string()), pa.array(records, pa.string())],
                names=[*batch.schema.names, REASON, RECORD],
            )
