#!/usr/bin/env python
"""JSON-lines parsers on one core, on the blocks a stream worker reads: would another parser than pyarrow's make the
workers faster? The decompressed lines of the 400 x 30 KB objects, cut into blocks of whole objects of about
records.joined.JOIN_BLOCK_BYTES (what a group's joined read parses in one call), each parsed by:

  pyarrow     pyarrow.json.read_json with the explicit schema, one thread (the reader of the vectorised path)
  siltlake    records.json_fast.JsonFastPath.convert_joined: that read plus its checks and conversions to the table
  duckdb      DuckDB's read_json with the columns' types, one thread, from a file in a tmpfs, to Arrow
  duckdb-all  the same on all the blocks in one file and one call (no per-call cost: DuckDB's floor)
  polars      polars.read_ndjson with the schema, one thread (POLARS_MAX_THREADS=1), to Arrow (the bench extra)
  polars, strings checked  the same, and strings_only: whether each string column held JSON strings only, from
              counts of its keys in the raw lines (polars writes a number or an object given to one as text)
  duckdb, one-pass check  DuckDB per block, and one_pass_check: one RE2 pass over the block for a key of a column
              followed by a value of another JSON type, a search for \\u escapes (a key spelt with them escapes the
              pass) and a count of control bytes (which DuckDB takes inside a string): a lower bound on a strict check
  duckdb-all, one-pass check  the same over the whole file in one call: DuckDB's floor with that check

Then what each parser does with a value of another type than its column's: the vectorised path may only take a
parser's rows where they equal the per-record decoder's (records.coerce), so a parser that converts silently where
pyarrow refuses (and the path falls back) needs checks of its own before it can replace pyarrow's.

Interleaved rounds, medians of CPU seconds. Run from the repository root:  .venv/bin/python bench/json_parsers_bench.py
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from common import ROOT, load_avg_1m, machine
from inputs import input_files, prepare_jsonl_objects
from stream_bench import TABLE, read_schema

from siltlake.records.joined import JOIN_BLOCK_BYTES
from siltlake.records.json_fast import JsonFastPath, as_binary_array
from siltlake.records.jsonl import JsonLinesReader
from siltlake.tabledef import TableDef

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # read when polars is imported: one core, as a worker has

DUCKDB_TYPES = {"string": "VARCHAR", "int64": "BIGINT", "int32": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN"}
# A string column s and an integer column n, each given values of another JSON type (the time field t is the probe
# table's time column, for siltlake's own decoder).
PROBE_TABLE = TableDef.from_mapping(
    {
        "schema": "bench",
        "name": "probe",
        "time_column": "t",
        "columns": [
            {"name": "t", "type": "timestamp", "nullable": False},
            {"name": "s", "type": "string"},
            {"name": "n", "type": "bigint"},
        ],
    },
    source="json_parsers_bench",
)
PROBES = [
    '{"s": "a", "n": 1}',
    '{"s": 12, "n": 1}',
    '{"s": 1.50, "n": 1}',
    '{"s": true, "n": 1}',
    '{"s": {"a": 1}, "n": 1}',
    '{"s": "a", "n": "12"}',
    '{"s": "a", "n": 1.5}',
    '{"s": "a", "n": 2.0}',
    '{"s": "a", "n": true}',
]


def blocks_of(pieces: list[bytes]) -> list[list[bytes]]:
    """Whole objects' lines, JOIN_BLOCK_BYTES or a little more a block, as a group's joined read takes them."""
    blocks: list[list[bytes]] = [[]]
    size = 0
    for piece in pieces:
        blocks[-1].append(piece)
        size += len(piece)
        if size >= JOIN_BLOCK_BYTES:
            blocks.append([])
            size = 0
    return [block for block in blocks if block]


def parsers(blocks: list[list[bytes]], scratch: Path) -> dict[str, Callable[[], int]]:
    import duckdb

    # The time field is read as the fast path first reads it (a string), so every parser does the same work.
    schema = pa.schema([(f.name, pa.string() if f.name == "time" else f.type) for f in read_schema()])
    joined = [b"".join(block) for block in blocks]
    read_options = pa_json.ReadOptions(use_threads=False, block_size=JOIN_BLOCK_BYTES)
    parse_options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    fast = JsonFastPath(TABLE)
    connection = duckdb.connect()
    connection.execute("SET threads = 1")
    columns = {field.name: DUCKDB_TYPES[str(field.type)] for field in schema}
    block_file, whole_file = scratch / "block.jsonl", scratch / "all.jsonl"
    whole_file.write_bytes(b"".join(joined))

    def duckdb_read(path: Path) -> int:
        query = f"SELECT * FROM read_json('{path}', format = 'newline_delimited', columns = {columns!r})"
        return connection.sql(query).to_arrow_table().num_rows

    def with_pyarrow() -> int:
        return sum(pa_json.read_json(pa.BufferReader(block), read_options, parse_options).num_rows for block in joined)

    def with_siltlake() -> int:
        rows = 0
        for block in blocks:
            converted = fast.convert_joined(block)
            if converted is None:
                raise RuntimeError("the fast path declined a block of the bench's lines")
            rows += sum(table.num_rows for table, _ in converted)
        return rows

    def with_duckdb() -> int:
        rows = 0
        for block in joined:
            block_file.write_bytes(block)
            rows += duckdb_read(block_file)
        return rows

    whole = b"".join(joined)
    violation = other_type_pattern(schema)

    def duckdb_checked() -> int:
        rows = 0
        for block in joined:
            if not one_pass_check(block, violation):
                raise RuntimeError("the one-pass check declined a block of the bench's lines")
            block_file.write_bytes(block)
            rows += duckdb_read(block_file)
        return rows

    def duckdb_all_checked() -> int:
        if not one_pass_check(whole, violation):
            raise RuntimeError("the one-pass check declined the bench's lines")
        return duckdb_read(whole_file)

    runs = {
        "pyarrow": with_pyarrow,
        "siltlake": with_siltlake,
        "duckdb": with_duckdb,
        "duckdb-all": lambda: duckdb_read(whole_file),
        "duckdb, one-pass check": duckdb_checked,
        "duckdb-all, one-pass check": duckdb_all_checked,
    }
    polars = _polars()
    if polars is not None:
        polars_schema = {field.name: polars.from_arrow(pa.array([], field.type)).dtype for field in schema}
        runs["polars"] = lambda: sum(
            polars.read_ndjson(io.BytesIO(block), schema=polars_schema).to_arrow().num_rows for block in joined
        )
        # The time field's texts are checked as timestamps anyway (a number written as text is no ISO time)
        strings = [field.name for field in schema if pa.types.is_string(field.type) and field.name != "time"]

        def polars_checked() -> int:
            rows = 0
            for block in joined:
                table = polars.read_ndjson(io.BytesIO(block), schema=polars_schema).to_arrow()
                if not strings_only(block, table, strings):
                    raise RuntimeError("the string check declined a block of the bench's lines")
                rows += table.num_rows
            return rows

        runs["polars, strings checked"] = polars_checked
    return runs


def strings_only(block: bytes, table: pa.Table, names: list[str]) -> bool:
    """Whether each of these string columns was given JSON strings and nulls only, judged on the raw lines: in valid
    JSON the bytes `"name":` only ever begin a key of that name (a quote inside a string is escaped), so counting
    them, and those followed by a string or null, tells whether any key of the name held another value. A key at
    another depth, twice in an object or spelt with escapes makes the counts differ from the column's non-null
    values: the check declines (the per-record decoder would decide), never accepts wrongly. Cost: three bytes.count
    passes over the block per string column when every key is spelt compactly, more otherwise."""
    for name in names:
        key = b'"' + name.encode() + b'"'
        keyed = block.count(key + b":")
        given = block.count(key + b':"')
        nulls = 0
        if given != keyed:  # spaced or null values: counted only where the compact spelling left keys over
            given += block.count(key + b': "')
            nulls = block.count(key + b":null") + block.count(key + b": null")
        column = table.column(name)
        if keyed != given + nulls or given != len(column) - column.null_count or block.count(key + b" :"):
            return False
    return True


def other_type_pattern(schema: pa.Schema) -> str:
    """An RE2 pattern for a key of one of the schema's columns followed by a value of another JSON type than the
    column's: a string column given anything but a string or null, an integer column a fraction, an exponent or
    anything not a number, a float column anything not a number (`n` only begins null in valid JSON)."""

    def keys(fields: list[str]) -> str:
        return '"(?:' + "|".join(fields) + ')"[ \\t]*:[ \\t]*'

    strings = [f.name for f in schema if pa.types.is_string(f.type)]
    integers = [f.name for f in schema if pa.types.is_integer(f.type)]
    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    parts = []
    if strings:
        parts.append(keys(strings) + '[^"n \\t]')
    if integers:
        parts.append(keys(integers) + "(?:[^-0-9n \\t]|-?[0-9]+[.eE])")
    if floats:
        parts.append(keys(floats) + "[^-0-9n \\t]")
    return "|".join(parts)


def one_pass_check(block: bytes, pattern: str) -> bool:
    """Whether no key of a column holds a value of another type, judged in one RE2 pass over the raw lines, with no
    escaped key spelling and no control byte but newlines. Not exact: a key twice in an object and fields that are
    no column (which the stream counts) are left unchecked, so an exact check costs more than this."""
    if b"\\u" in block:
        return False
    data = np.frombuffer(block, np.uint8)
    if int(np.count_nonzero(data < 0x20)) != block.count(b"\n"):
        return False
    return pc.count_substring_regex(as_binary_array(block), pattern)[0].as_py() == 0


def _polars():
    try:
        import polars
    except ImportError:
        print("polars is not installed (pip install -e '.[bench]'): its line is left out")
        return None
    return polars


def probe(scratch: Path) -> list[str]:
    """A table row per probe line: what siltlake's per-record decoder and each parser make of it (its values, or
    "refused": a bad record for siltlake, an error for a parser)."""
    import duckdb

    connection = duckdb.connect()
    polars = _polars()
    schema = pa.schema([("s", pa.string()), ("n", pa.int64())])
    read_options = pa_json.ReadOptions(use_threads=False)
    parse_options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    path = scratch / "probe.jsonl"

    def shown(read: Callable[[], tuple]) -> str:
        try:
            return "`" + repr(read()) + "`"
        except Exception:  # each parser's own error: what matters is that it refused
            return "refused"

    def siltlake(data: bytes) -> tuple:
        (batch,) = JsonLinesReader(PROBE_TABLE, 1024).read([b'{"t": "2026-01-01T00:00:00Z", ' + data[1:]])
        if batch.bad:
            raise ValueError(batch.bad[0].reason)
        return tuple(batch.table.select(["s", "n"]).to_pylist()[0].values())

    rows = []
    for line in PROBES:
        data = line.encode() + b"\n"
        path.write_bytes(data)
        found = [
            shown(lambda data=data: siltlake(data)),
            shown(
                lambda data=data: tuple(
                    pa_json.read_json(pa.BufferReader(data), read_options, parse_options).to_pylist()[0].values()
                )
            ),
            shown(
                lambda: connection.sql(
                    f"SELECT * FROM read_json('{path}', format = 'newline_delimited', "
                    "columns = {'s': 'VARCHAR', 'n': 'BIGINT'})"
                ).fetchall()[0]
            ),
        ]
        if polars is not None:
            found.append(
                shown(
                    lambda data=data: polars.read_ndjson(
                        io.BytesIO(data), schema={"s": polars.String, "n": polars.Int64}
                    ).row(0)
                )
            )
        rows.append(f"| `{line}` | " + " | ".join(found) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=400)
    parser.add_argument("--bytes", type=int, default=30 * 1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "json-parsers")
    args = parser.parse_args()
    data = prepare_jsonl_objects(args.workdir, args.objects, args.bytes, seed=7, level=6)
    pieces = [gzip.decompress(path.read_bytes()) for path in input_files(data["staging_root"])]
    blocks = blocks_of(pieces)
    tmpfs = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=tmpfs) as scratch:
        runs = parsers(blocks, Path(scratch))
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        loads = []
        for number in range(args.rounds + 1):  # the first round is uncounted
            loads.append(load_avg_1m())
            for name, run in runs.items():
                started = time.process_time()
                rows = run()
                if rows != data["records"]:
                    raise RuntimeError(f"{name} parsed {rows} rows, not {data['records']}")
                if number:
                    seconds[name].append(time.process_time() - started)
    megabytes = sum(map(len, pieces)) / 1e6
    print(f"{args.objects:,} x {args.bytes:,} B objects: {data['records']:,} records, {megabytes:,.1f} MB of lines in")
    print(f"{len(blocks)} blocks; {machine()}; 1-minute load {min(loads):.2f}-{max(loads):.2f}")
    print("| parser | CPU s, median (range) | MB/s of lines | against pyarrow |")
    print("|---|---:|---:|---:|")
    base = statistics.median(seconds["pyarrow"])
    for name, measured in seconds.items():
        middle = statistics.median(measured)
        spread = f"{min(measured):.3f}-{max(measured):.3f}"
        print(f"| {name} | {middle:.3f} ({spread}) | {megabytes / middle:,.0f} | {middle / base:.2f}x |")
    with tempfile.TemporaryDirectory() as scratch:
        print()
        print("| line (s: string, n: bigint) | siltlake's per-record decoder | pyarrow | DuckDB | polars |")
        print("|---|---|---|---|---|")
        print("\n".join(probe(Path(scratch))))


if __name__ == "__main__":
    main()
