"""`silt guess`: read a sample of the inputs and fill in decoder and parser (as Embulk's guess).

Everything here is a heuristic over the first SAMPLE_BYTES of the first input; the user reviews the
result. Once written, the config is fixed: a load never guesses.
"""

from __future__ import annotations

import copy
import csv
import datetime as dt
import io
import json
import re
from collections import Counter
from typing import Any

from siltlake.errors import ConfigError
from siltlake.load.config import _merge
from siltlake.load.task import detected_compression, open_source
from siltlake.records.msgpack_format import msgpack_entries, new_unpacker
from siltlake.storage.filesystem import open_filesystem

SAMPLE_BYTES = 256 << 10
COMPRESSION_CHECKS = 1000  # files whose first bytes guess reads to pin one compression for all
DELIMITERS = (",", "\t", ";", "|")
NULL_STRINGS = ("\\N", "NULL", "null", "NA")
# Tried in order: the first format every value of a column parses with wins.
TIMESTAMP_FORMATS = (
    "%Y-%m-%dT%H:%M:%S.%f%z",
    "%Y-%m-%dT%H:%M:%S%z",
    "%Y-%m-%d %H:%M:%S.%f%z",
    "%Y-%m-%d %H:%M:%S%z",
    "%Y-%m-%d %H:%M:%S %z",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y/%m/%d %H:%M:%S",
    "%d/%b/%Y:%H:%M:%S %z",
    "%m/%d/%Y %H:%M:%S",
    "%d.%m.%Y %H:%M:%S",
)
TIME_NAMES = ("time", "timestamp", "event_time", "utc_event_time", "datetime", "created_at", "date_time", "ts")
_INTEGER = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan|Infinity|NaN)$")


def _sample(uri: str, compression: str) -> bytes:
    with open_source(uri, compression) as source:
        data = source.read(SAMPLE_BYTES + 1)
    if len(data) > SAMPLE_BYTES:  # cut at the last complete line
        data = data[: data.rfind(b"\n", 0, SAMPLE_BYTES) + 1]
    return data


def _compression(uri: str) -> str:
    filesystem, path = open_filesystem(uri)
    with filesystem.open_input_stream(path, compression=None) as stream:  # the bytes as stored
        return detected_compression(stream.read(4))


def _shared_compression(uris: list[str]) -> str:
    """The compression to pin: the one every file has, else auto (each file's own, by its first bytes: a
    directory of .gz and plain files). Past COMPRESSION_CHECKS files, auto without looking further."""
    if len(uris) > COMPRESSION_CHECKS:
        return "auto"
    found = {_compression(uri) for uri in uris}
    return found.pop() if len(found) == 1 else "auto"


def _parser_type(uri: str, sample: bytes) -> str:
    name = uri.lower()
    for suffix in (".gz", ".bz2", ".zst", ".zstd"):
        name = name.removesuffix(suffix)
    if name.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    if name.endswith((".json", ".jsonl", ".ndjson", ".log")):
        return "jsonl"
    if name.endswith((".msgpack", ".mpk", ".mp")):
        return "msgpack"
    text = sample.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return "jsonl"
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(sample) - 3:
            return "msgpack"
    return "csv"


def identifier(name: str, index: int, taken: set[str]) -> str:
    """A column name usable in a table: lower case, [a-z0-9_], not starting with a digit, unique."""
    base = re.sub(r"[^a-z0-9_]+", "_", name.strip().lower()).strip("_") or f"c{index}"
    if base[0].isdigit():
        base = "_" + base
    base = base[:63]
    if base == "dt":
        base = "dt_"
    candidate, counter = base, 2
    while candidate in taken:
        candidate, counter = f"{base[:60]}_{counter}", counter + 1
    taken.add(candidate)
    return candidate


def _timestamp_format(values: list[str]) -> str | None:
    for fmt in TIMESTAMP_FORMATS:
        try:
            for value in values:
                dt.datetime.strptime(value, fmt)
        except ValueError:
            continue
        return fmt
    return None


def column_type(values: list[Any]) -> dict[str, Any]:
    """{type, format?} for a column's sample values (None and "" are left out by the caller)."""
    if not values:
        return {"type": "string"}
    if all(isinstance(v, bool) for v in values):
        return {"type": "boolean"}
    if all(isinstance(v, (dict, list)) for v in values):
        return {"type": "json"}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return {"type": "long"}
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return {"type": "double"}
    if not all(isinstance(v, str) for v in values):
        return {"type": "string"}
    if all(_INTEGER.match(v) and -(1 << 63) <= int(v) < (1 << 63) for v in values):
        return {"type": "long"}
    if all(_NUMBER.match(v) for v in values):
        return {"type": "double"}
    if all(v.lower() in ("true", "false") for v in values):
        return {"type": "boolean"}
    fmt = _timestamp_format(values)
    if fmt is not None:
        return {"type": "timestamp", "format": fmt}
    try:  # ISO-8601 in mixed precisions and offsets: no single strptime format, but one parser
        if all(len(v) >= 10 and dt.datetime.fromisoformat(v.replace("Z", "+00:00")) for v in values):
            return {"type": "timestamp"}
    except ValueError:
        pass
    return {"type": "string"}


def _rows(text: str, delimiter: str, quote: str | None, escape: str | None) -> list[tuple[int, list[str]]]:
    """(first physical line, fields) of each non-empty row; stops quietly at a parse error."""
    lines = io.StringIO(text, newline="")
    reader = csv.reader(
        lines,
        delimiter=delimiter,
        quotechar=quote or '"',
        quoting=csv.QUOTE_NONE if quote is None else csv.QUOTE_MINIMAL,
        escapechar=escape,
        doublequote=escape is None,
    )
    rows, previous = [], 0
    try:
        for row in reader:
            start, previous = previous + 1, reader.line_num
            if row and row != [""]:
                rows.append((start, row))
    except csv.Error:
        pass
    return rows


def _delimiter(text: str) -> tuple[str, list[tuple[int, list[str]]], int]:
    """(delimiter, rows, field count) whose rows agree best on one field count of at least 2."""
    best: tuple[float, int, str, list, int] | None = None
    for delimiter in DELIMITERS:
        rows = _rows(text, delimiter, '"', None)
        counts = Counter(len(row) for _, row in rows if len(row) >= 2)
        if not counts:
            continue
        width, agreeing = counts.most_common(1)[0]
        score = (agreeing / len(rows), width)
        if best is None or score > best[:2]:
            best = (*score, delimiter, rows, width)
    if best is None:
        return ",", _rows(text, ",", '"', None), 1
    return best[2], best[3], best[4]


def guess_csv(text: str, timezone: str) -> dict[str, Any]:
    delimiter, numbered, width = _delimiter(text)
    quote: str | None = '"'
    escape = None
    if re.search(r'\\"', text) and not re.search(r'""', text):
        escape = "\\"
    elif '"' not in text and "'" in text and re.search(rf"(^|{re.escape(delimiter)})'", text, re.M):
        quote = "'"
    if escape or quote != '"':
        numbered = _rows(text, delimiter, quote, escape)
    # Lines above the first row of the common width are a preamble (titles, comments): skipped.
    first = next((index for index, (_, row) in enumerate(numbered) if len(row) == width), 0)
    skip = numbered[first][0] - 1 if numbered else 0
    rows = [row for _, row in numbered[first:] if len(row) == width]
    if not rows:
        raise ConfigError("guess: the sample has no CSV rows")
    null_string = None
    cells = Counter(value for row in rows[1:] for value in row)
    for candidate in NULL_STRINGS:
        if cells[candidate]:
            null_string = candidate
            break

    def values(index: int, body: list[list[str]]) -> list[str]:
        return [row[index] for row in body if row[index] != "" and row[index] != null_string]

    body_types = [column_type(values(i, rows[1:])) for i in range(width)]
    head = rows[0]
    head_types = [column_type([v]) if v else {"type": "string"} for v in head]
    # A header: its cells are distinct non-empty strings where the data has other types, or names that
    # never recur in their column.
    header = (
        len(set(head)) == width
        and all(head)
        and all(t["type"] == "string" for t in head_types)
        and (
            any(t["type"] != "string" for t in body_types)
            or all(head[i] not in {row[i] for row in rows[1:]} for i in range(width))
        )
        and len(rows) > 1
    )
    body = rows[1:] if header else rows
    types = [column_type(values(i, body)) for i in range(width)]
    taken: set[str] = set()
    names = [identifier(head[i] if header else f"c{i}", i, taken) for i in range(width)]
    columns = []
    for name, kind in zip(names, types, strict=True):
        column = {"name": name, **kind}
        if kind["type"] == "timestamp" and "%z" not in kind.get("format", ""):
            column["zone"] = timezone
        columns.append(column)
    parser: dict[str, Any] = {
        "type": "csv",
        "delimiter": delimiter,
        "quote": quote,
        "escape": escape,
        "header": header,
        "null_string": null_string,
        "skip_header_lines": skip,
        "columns": columns,
    }
    return parser


def _records_columns(records: list[dict], timezone: str) -> list[dict[str, Any]]:
    order: dict[str, list[Any]] = {}
    for record in records:
        for key, value in record.items():
            order.setdefault(str(key), [])
            if value is not None and value != "":
                order[str(key)].append(value)
    taken: set[str] = set()
    columns = []
    for index, (key, values) in enumerate(order.items()):
        name = identifier(key, index, taken)
        kind = column_type(values)
        column = {"name": name, **kind}
        if kind["type"] == "timestamp" and "%z" not in kind.get("format", ""):
            column["zone"] = timezone
        columns.append(column)
    return columns


def guess_job(job: dict[str, Any]) -> dict[str, Any]:
    """The seed job with decoder and parser filled in and out.time_column chosen."""
    from siltlake.load.inputs import list_inputs

    path = (job.get("in") or {}).get("path")
    if not path:
        raise ConfigError("guess: in.path is required")
    inputs = list_inputs(path)
    if not inputs:
        raise ConfigError(f"guess: in.path: no files match {path}")
    uri = inputs[0][0]
    out = dict(job.get("out") or {})
    if not out.get("table"):
        raise ConfigError("guess: out.table is required (schema.table)")
    timezone = out.get("timezone", "UTC")
    decoder = dict(job.get("decoder") or {})
    decoder["compression"] = decoder.get("compression") or _shared_compression([found for found, _ in inputs])
    sample = _sample(uri, decoder["compression"])
    parser = dict(job.get("parser") or {})
    kind = parser.get("type") or _parser_type(uri, sample)
    if kind == "csv":
        guessed = guess_csv(sample.decode("utf-8-sig", errors="replace"), timezone)
    elif kind == "jsonl":
        records = []
        for line in sample.decode("utf-8-sig", errors="replace").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                records.append(value)
        guessed = {"type": "jsonl", "columns": _records_columns(records, timezone)}
    else:
        unpacker = new_unpacker()
        unpacker.feed(sample)
        records = []
        try:
            for item in unpacker:
                records += [entry.record for entry in msgpack_entries(item) if entry.record is not None]
        except ValueError:
            pass
        guessed = {"type": "msgpack", "columns": _records_columns(records, timezone)}
    guessed.update({k: v for k, v in parser.items() if k != "columns" or v})
    result = copy.deepcopy(job)
    result["decoder"] = decoder
    result["parser"] = guessed
    if not out.get("time_column"):
        stamps = [c["name"] for c in guessed["columns"] if c["type"] == "timestamp"]
        named = [n for n in TIME_NAMES if n in stamps]
        if named or stamps:
            out["time_column"] = (named or stamps)[0]
    result["out"] = out
    order = ["in", "decoder", "parser", "filters", "out", "error"]
    return {key: result[key] for key in sorted(result, key=lambda k: order.index(k) if k in order else len(order))}


def guess(seed: Any) -> dict[str, Any]:
    """A full config from a seed (one job, or default + jobs)."""
    if not isinstance(seed, dict):
        raise ConfigError("guess: the seed must be a mapping with in and out (or default and jobs)")
    if "jobs" in seed:
        default = seed.get("default") or {}
        result = copy.deepcopy(seed)
        for name, job in (seed.get("jobs") or {}).items():
            full = guess_job(_merge(default, job or {}))
            result["jobs"][name] = {
                **(job or {}),
                "decoder": full["decoder"],
                "parser": full["parser"],
                "out": {**(job or {}).get("out", {}), **{k: v for k, v in full["out"].items() if k == "time_column"}},
            }
        return result
    return guess_job(seed)
