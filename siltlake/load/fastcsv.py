"""Vectorised CSV loading with pyarrow.csv, for the common case; agrees with the per-record path.

Python's csv module and per-record coercion manage about 10,000 rows a second, which is no bulk load.
Here pyarrow reads blocks of rows as strings, each column is converted with Arrow kernels only where
the value is in a spelling whose result is certain to equal the per-record coercion (plain integers,
decimal numbers, true/false, ISO-like timestamps); any other row goes through the per-record path
(`siltlake.load.task`), which also names its bad records. So both paths give the same rows.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from siltlake import timevalues as tv
from siltlake.coltypes import arrow_type
from siltlake.load.config import DropFilter, JobConfig, RenameFilter
from siltlake.records.coerce import FLOAT32_MAX, INT32_RANGE, ZONE_EDGE_MICROS
from siltlake.records.csv_format import render_csv
from siltlake.records.vectorised import strings_to_micros
from siltlake.tabledef import Column

FAST_TYPES = {"string", "int", "bigint", "double", "float", "boolean", "timestamp"}
_INTEGER = "^" + tv.INTEGER_PATTERN + "$"
_NUMBER = "^" + tv.NUMBER_PATTERN + "$"
# strptime formats with a strict pattern whose matches rewrite to ISO-8601 (then the stream's vectorised
# ISO parser): Python's strptime gives the same instant for every value the pattern matches.
_FORMATS = {
    "%Y-%m-%d %H:%M:%S": r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})$",
    "%Y-%m-%dT%H:%M:%S": r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})$",
    "%Y/%m/%d %H:%M:%S": r"^(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})$",
    "%Y-%m-%d %H:%M:%S.%f": r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(\.\d{1,6})$",
    "%Y-%m-%dT%H:%M:%S.%f": r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,6})$",
}


def usable(job: JobConfig, columns: list[Column]) -> bool:
    """Whether the vectorised path applies: a csv parser, no line filter, renames and drops only."""
    return (
        job.parser.type == "csv"
        and not job.decoder.line_filter
        and all(isinstance(f, (RenameFilter, DropFilter)) for f in job.filters.values() if f.type != "sql")
        and all(c.type in FAST_TYPES for c in columns)
    )


def _renames(job: JobConfig) -> dict[str, str | None]:
    """Parser column -> output column (None: dropped), after the record filters."""
    mapping: dict[str, str | None] = {c.name: c.name for c in job.parser.columns}
    for item in job.filters.values():
        for source, current in list(mapping.items()):
            if current is None:
                continue
            if isinstance(item, RenameFilter) and current in item.columns:
                mapping[source] = item.columns[current]
            elif isinstance(item, DropFilter) and current in item.columns:
                mapping[source] = None
    return mapping


def _convert(values: pa.Array, column: Column, parser_column: Any) -> tuple[pa.Array, pa.Array]:
    """(converted values, mask of rows the per-record path must decide)."""
    present = pc.is_valid(values)
    if column.type == "string":
        return values, pa.array([False] * len(values))
    present = pc.and_(present, pc.not_equal(values, ""))  # empty is null for other types (coercion.md)
    kind = column.type
    try:
        result = _typed(values, kind, parser_column)
    except pa.ArrowInvalid:  # a spelling Arrow's cast does not take: the per-record path decides
        result = pa.nulls(len(values), arrow_type(kind))
    needs_exact = pc.and_(present, pc.is_null(result))
    return result, pc.fill_null(needs_exact, True)


def _typed(values: pa.Array, kind: str, parser_column: Any) -> pa.Array:
    # Arrow's number casts refuse a leading '+', which the coercion takes.
    signless = pc.replace_substring_regex(pc.utf8_trim(values, " \t"), r"^\+", "")
    if kind in ("int", "bigint"):
        plain = pc.and_kleene(
            pc.match_substring_regex(values, _INTEGER), pc.less_equal(pc.utf8_length(pc.utf8_trim(values, " \t")), 18)
        )
        result = pc.cast(pc.if_else(plain, signless, None), pa.int64())
        if kind == "int":
            inside = pc.and_(pc.greater_equal(result, INT32_RANGE[0]), pc.less_equal(result, INT32_RANGE[1]))
            result = pc.cast(pc.if_else(inside, result, None), pa.int32())
    elif kind in ("double", "float"):
        plain = pc.match_substring_regex(values, _NUMBER)
        result = pc.cast(pc.if_else(plain, signless, None), pa.float64())
        limit = FLOAT32_MAX if kind == "float" else float("inf")
        result = pc.if_else(pc.less(pc.abs(result), limit), pc.add(result, 0.0), None)
        if kind == "float":
            result = pc.cast(result, pa.float32())
    elif kind == "boolean":
        word = pc.utf8_lower(pc.utf8_trim(values, " \t"))
        result = pc.if_else(pc.equal(word, "true"), True, pc.if_else(pc.equal(word, "false"), False, None))
    else:
        result = _timestamps(values, parser_column)
    return result


def _timestamps(values: pa.Array, parser_column: Any) -> pa.Array:
    timestamp = pa.timestamp("us", tz="UTC")
    fmt = getattr(parser_column, "format", None)
    zone = getattr(parser_column, "zone", None)
    if fmt is None and zone is None:
        iso = values
    elif fmt in _FORMATS:
        pattern = _FORMATS[fmt]
        matched = pc.match_substring_regex(values, pattern)
        replacement = r"\1-\2-\3T\4:\5:\6\7" if "%f" in fmt else r"\1-\2-\3T\4:\5:\6"
        iso = pc.if_else(matched, pc.replace_substring_regex(values, pattern, replacement), None)
    else:
        return pa.nulls(len(values), timestamp)
    micros = strings_to_micros(pa.chunked_array([iso]))
    if micros is None:
        return pa.nulls(len(values), timestamp)
    micros = micros.combine_chunks()
    if fmt is None or "%z" in fmt:
        return pc.cast(micros, timestamp)
    try:
        # A local wall time in the column's zone; the earliest instant of an ambiguous one, like a Python
        # datetime with fold=0. A time inside a DST gap raises: those rows take the per-record path.
        local = pc.assume_timezone(
            pc.cast(micros, pa.timestamp("us")), zone or "UTC", ambiguous="earliest", nonexistent="raise"
        )
    except pa.ArrowInvalid:
        return pa.nulls(len(values), timestamp)
    return pc.cast(local, timestamp)


def read_fast(
    source: io.BufferedReader,
    job: JobConfig,
    columns: list[Column],
    schema: pa.Schema,
    time_column: str,
    at_start: bool,
    on_bad: Callable[[int, str, str], None],
    slow_row: Callable[[int, dict, str], None],
) -> Iterator[tuple[pa.Table, int]]:
    """Yield (typed table of the fast rows, records read) per block; slow rows and field-count errors go
    to the callbacks with their approximate line number (exact while no field holds a newline)."""
    parser = job.parser
    names = [c.name for c in parser.columns]
    first_line = 1 + (parser.skip_header_lines + parser.header if at_start else 0)
    counts = {"invalid": 0}

    def invalid(row: Any) -> str:
        counts["invalid"] += 1
        line = row.number if row.number and row.number > 0 else 0
        on_bad(line, row.text, f"row has {row.actual_columns} fields, the parser has {row.expected_columns} columns")
        return "skip"

    reader = pacsv.open_csv(
        source,
        read_options=pacsv.ReadOptions(
            use_threads=False,
            block_size=4 << 20,
            column_names=names,
            skip_rows=(parser.skip_header_lines + parser.header) if at_start else 0,
            encoding="utf8",
        ),
        parse_options=pacsv.ParseOptions(
            delimiter=parser.delimiter,
            quote_char=parser.quote or False,
            escape_char=parser.escape or False,
            double_quote=parser.escape is None,
            newlines_in_values=True,
            ignore_empty_lines=True,
            invalid_row_handler=invalid,
        ),
        convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in names},
            null_values=[parser.null_string] if parser.null_string is not None else [],
            strings_can_be_null=parser.null_string is not None,
            quoted_strings_can_be_null=True,
        ),
    )
    renames = _renames(job)
    by_output = {renames[name]: name for name in names if renames[name] is not None}
    parser_columns = {c.name: c for c in parser.columns}
    row_number = 0
    for batch in reader:
        size = batch.num_rows
        arrays, slow = [], pa.array([False] * size)
        for column in columns:
            source_name = by_output.get(column.name)
            if source_name is None:
                values, needs = pa.nulls(size, _arrow(column)), pa.array([False] * size)
            else:
                values, needs = _convert(batch.column(source_name), column, parser_columns[source_name])
            if column.name == time_column or not column.nullable:
                needs = pc.or_(needs, pc.is_null(values))
            if column.name == time_column:
                needs = pc.or_(needs, _near_the_ends(values))
            arrays.append(values)
            slow = pc.or_(slow, needs)
        if pc.any(slow).as_py():
            for index in pc.indices_nonzero(slow).to_pylist():
                record = {name: batch.column(name)[index].as_py() for name in names}
                raw = _render(list(record.values()), parser.delimiter)
                slow_row(first_line + row_number + index + counts["invalid"], record, raw)
            keep = pc.invert(slow)
            arrays = [pc.filter(a, keep) for a in arrays]
        row_number += size
        table = pa.Table.from_arrays(arrays, schema=schema)
        yield table, size


def _near_the_ends(times: pa.Array) -> pa.Array:
    """Times whose partition date may fall outside years 1..9999: the per-record path decides them."""
    micros = pc.cast(times, pa.int64())
    outside = pc.or_(
        pc.less(micros, tv.MIN_MICROS + ZONE_EDGE_MICROS), pc.greater(micros, tv.MAX_MICROS - ZONE_EDGE_MICROS)
    )
    return pc.fill_null(outside, False)


def _render(values: list[str | None], delimiter: str) -> str:
    return render_csv(["" if v is None else v for v in values], delimiter)


def _arrow(column: Column) -> pa.DataType:
    return arrow_type(column.type)
