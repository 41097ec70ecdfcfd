"""Which partitions a filtered read can leave out, before their manifests are read (docs/design.md "One scan, one
predicate"): a partition is (dt, values below it, siltlake.partspec), and a filter rules one out only when no row
of it can match.

Two ways, both sure:

* a pyarrow expression (a scan's filter as pyarrow applies it to the rows) is simplified against each partition's
  `dt == date` and its identity fields' `column == value` (or `column IS NULL`): pyarrow drops a partition only
  where the filter is then false or null for every row, with pyarrow's own meaning of every comparison;
* a SQL condition (a scan's filter given as text, a `silt sql` query's WHERE) names, through its conjuncts, the
  only values some columns can hold in a matching row (`c = v`, `c IN (...)`, `c IS NULL`, an OR of those on one
  column): a partition whose identity value, or bucket, none of them has is left out. Only literals every engine
  reads the same way count (an integer column's integer or all-digit text, a string column's text, a date
  column's date text); anything else leaves the partitions in.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from siltlake.partspec import PartitionField, parse_values

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlglot import exp

    from siltlake.catalog import TableRecord

__all__ = ["PartitionFilter", "PartitionKey", "arrow_partitions", "column_values", "partitions_of_values"]

PartitionKey = tuple[dt.date, str]  # (date, values path): a partition of a table
PartitionFilter = Callable[[list[PartitionKey]], Collection[PartitionKey]]

_INTEGER_TEXT = re.compile(r"-?\d+")
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
# The values a column is known to hold in every matching row, by column name.
Allowed = dict[str, frozenset[Any]]


def column_types(record: TableRecord) -> dict[str, str]:
    return {c.name: c.type for c in record.definition.columns}


# --- pyarrow expressions -------------------------------------------------------------------------------------------


def arrow_partitions(
    filter: Any,
    present: Sequence[PartitionKey],
    schema: pa.Schema,
    fields: Sequence[PartitionField],
    types: Mapping[str, str],
) -> set[PartitionKey]:
    """The partitions of `present` the pyarrow expression `filter` (over `schema`: the table's columns, then dt) does
    not rule out by dt and the identity fields' values: pyarrow simplifies it against each partition's guarantee (no
    file is opened; the paths are placeholders). A bucket says nothing pyarrow can use: see partitions_of_values."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as fs

    ordered = sorted(set(present))
    if not ordered:
        return set()
    identities = [f for f in fields if f.buckets is None]
    guarantees = []
    for date, values in ordered:
        guarantee = ds.field("dt") == pa.scalar(date, pa.date32())
        typed = parse_values(fields, dict(types), values) if identities else {}
        for field in identities:
            value = typed[field.name]
            column = ds.field(field.column)
            guarantee &= (
                column.is_null() if value is None else column == pa.scalar(value, schema.field(field.column).type)
            )
        guarantees.append(guarantee)
    probe = ds.FileSystemDataset.from_paths(
        [f"/{index}" for index in range(len(ordered))],
        schema=schema,
        format=ds.ParquetFileFormat(),
        filesystem=fs.LocalFileSystem(),
        partitions=guarantees,
    )
    return {ordered[int(fragment.path[1:])] for fragment in probe.get_fragments(filter=filter)}


# --- SQL conditions ------------------------------------------------------------------------------------------------


def column_values(
    conditions: Iterable[exp.Expr], types: Mapping[str, str], qualifiers: set[str] | None = None
) -> Allowed:
    """The values each column can hold in a row all `conditions` (sqlglot trees, joined by AND) hold for: only the
    columns some conjunct pins down. `qualifiers`: the names a column may be qualified by (None: none allowed)."""
    by_lower = {name.lower(): name for name in types}
    allowed: Allowed = {}
    for condition in conditions:
        for column, values in _pinned(condition, types, by_lower, qualifiers or set()).items():
            allowed[column] = allowed[column] & values if column in allowed else values
    return allowed


def _pinned(node: exp.Expr, types: Mapping[str, str], by_lower: Mapping[str, str], qualifiers: set[str]) -> Allowed:
    """What one condition pins down (see column_values)."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _pinned(node.this, types, by_lower, qualifiers)
    if isinstance(node, exp.And):
        return column_values([node.this, node.expression], types, qualifiers)
    if isinstance(node, exp.Or):
        left = _pinned(node.this, types, by_lower, qualifiers)
        right = _pinned(node.expression, types, by_lower, qualifiers)
        # Either side's rows match: only a column both sides pin is pinned, to either's values.
        return {column: left[column] | right[column] for column in left.keys() & right.keys()}

    def column_of(term: exp.Expr) -> str | None:
        if not isinstance(term, exp.Column) or not isinstance(term.this, exp.Identifier) or term.args.get("db"):
            return None
        if term.table and term.table.lower() not in qualifiers:
            return None
        return by_lower.get(term.name.lower())

    if isinstance(node, exp.EQ):
        for subject, other in ((node.this, node.expression), (node.expression, node.this)):
            column = column_of(subject)
            if column is not None:
                value = _literal(other, types[column])
                return {} if value is _UNSURE else {column: frozenset([value])}
        return {}
    if isinstance(node, exp.In) and not node.args.get("query") and node.expressions:
        column = column_of(node.this)
        if column is None:
            return {}
        values = [_literal(value, types[column]) for value in node.expressions]
        return {} if any(value is _UNSURE for value in values) else {column: frozenset(values)}
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        column = column_of(node.this)
        return {} if column is None else {column: frozenset([None])}
    return {}


_UNSURE = object()


def _literal(node: exp.Expr, column_type: str) -> Any:
    """A literal's value as every engine compares it with a column of `column_type`, or _UNSURE. A NULL literal is
    _UNSURE too: `c = NULL` matches nothing, and leaving the partitions in is never wrong."""
    from sqlglot import exp

    negative = False
    if isinstance(node, exp.Neg):
        node, negative = node.this, True
    if isinstance(node, exp.Cast) and node.to.is_type("date") and column_type == "date":
        node = node.this
    if not isinstance(node, (exp.Literal, exp.Boolean)):
        return _UNSURE
    if isinstance(node, exp.Boolean):
        return bool(node.this) if column_type == "boolean" and not negative else _UNSURE
    text = str(node.this)
    if column_type in ("int", "bigint") and _INTEGER_TEXT.fullmatch(text):
        number = -int(text) if negative else int(text)
        # Past a long's range an engine compares as decimals, and no bucket is made of it; a text an engine may
        # compare as a double, which is exact below 2**53 only.
        bound = 2**53 if node.is_string else 2**63
        return number if -bound < number < bound else _UNSURE
    if negative or not node.is_string:
        return _UNSURE
    if column_type == "string":
        return text
    if column_type == "date" and _DATE_TEXT.fullmatch(text):
        try:
            return dt.date.fromisoformat(text)
        except ValueError:
            return _UNSURE
    return _UNSURE


def partitions_of_values(
    allowed: Allowed, present: Sequence[PartitionKey], fields: Sequence[PartitionField], types: Mapping[str, str]
) -> set[PartitionKey]:
    """The partitions of `present` whose values some row holding only `allowed` values can have: a field whose
    column is pinned keeps the partitions of its values' identity value or bucket (a null's: the null partition)."""
    pinned = {f.name: frozenset(f.value(v) for v in allowed[f.column]) for f in fields if f.column in allowed}
    if not pinned:
        return set(present)
    kept = set()
    for date, values in present:
        typed = parse_values(fields, dict(types), values)
        if all(typed[name] in wanted for name, wanted in pinned.items()):
            kept.add((date, values))
    return kept


def pins_partitions(allowed: Allowed, fields: Sequence[PartitionField]) -> bool:
    """Whether `allowed` pins a column some field partitions by (only then is partitions_of_values worth a call)."""
    return any(f.column in allowed for f in fields)
