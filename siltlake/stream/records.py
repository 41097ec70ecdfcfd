"""Decoding staging objects (JSON lines, MessagePack, CSV; plain or gzip) into typed Arrow batches.

The coercion rules are documented in docs/coercion.md. JSON lines have two decoders that must
agree: a vectorised one built on pyarrow.json (used for a block of lines when every line in it
converts cleanly) and an exact per-record one that also names the bad records.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import re
import struct
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, BinaryIO, NamedTuple

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from siltlake import timevalues as tv
from siltlake.errors import Refusal
from siltlake.tabledef import Column, TableDef, arrow_type, decimal_parts

__all__ = [
    "BadRecord",
    "ParsedBatch",
    "UnreadableObject",
    "detect_format",
    "read_staging_object",
]

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
READ_SIZE = 1 << 20
# Caps the output of one inflate call so that a highly compressed object cannot balloon.
MAX_INFLATE_CHUNK = 4 << 20
SNIFF_BYTES = 4096
MAX_LINE_BYTES = 64 << 20
# csv's default field limit (128 KiB) would make one long field (a user agent, a stack trace) fail the
# whole object; a CSV field may be as long as a JSON line. The limit is process-wide: only ever raised.
csv.field_size_limit(max(csv.field_size_limit(), MAX_LINE_BYTES))
MIN_BLOCK_BYTES = 64 << 10
MAX_BLOCK_BYTES = 32 << 20
FIRST_BLOCK_BYTES = 4 << 20
# Below this size a failing JSON block goes straight to the per-record decoder.
MIN_SPLIT_BYTES = 64 << 10
SPLIT_FANOUT = 8
MAX_MSGPACK_ITEM = 128 << 20

JSONL_EXTENSIONS = ("json", "jsonl", "ndjson", "log")
MSGPACK_EXTENSIONS = ("msgpack", "mpk", "mp")
CSV_EXTENSIONS = ("csv",)
FORMATS = ("jsonl", "msgpack", "csv")

INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)
FLOAT32_MAX = 3.4028234663852886e38  # larger magnitudes would round to infinity


class UnreadableObject(Refusal):
    """The object as a whole cannot be decoded (bad gzip/truncated, invalid UTF-8, not JSON lines at all, not MessagePack, CSV without header...)."""  # noqa: E501


@dataclass(frozen=True)
class BadRecord:
    """One input record that could not become a row, and why."""

    line: int
    reason: str
    raw: str


@dataclass
class ParsedBatch:
    """Good rows as a table in the TableDef's schema, plus the bad records of the same stretch."""

    table: pa.Table
    bad: list[BadRecord]
    records_in: int


def detect_format(key: str, head: bytes, configured: str) -> str:
    """'jsonl' | 'msgpack' | 'csv'. configured is TableDef.format; 'auto' means: by the key's extension after stripping .gz/.gzip (.json/.jsonl/.ndjson/.log -> jsonl, .msgpack/.mpk/.mp -> msgpack, .csv -> csv), else sniff the first decompressed bytes."""  # noqa: E501
    if configured in FORMATS:
        return configured
    if configured != "auto":
        raise ValueError(f"format {configured!r} is not one of auto, {', '.join(FORMATS)}")
    name = key.rsplit("/", 1)[-1].lower()
    for suffix in (".gz", ".gzip"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    extension = name.rsplit(".", 1)[-1] if "." in name else ""
    if extension in JSONL_EXTENSIONS:
        return "jsonl"
    if extension in MSGPACK_EXTENSIONS:
        return "msgpack"
    if extension in CSV_EXTENSIONS:
        return "csv"
    return _sniff_format(head)


def _sniff_format(head: bytes) -> str:
    text = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    text = text.lstrip(b" \t\r\n")
    if not text:
        return "jsonl"
    first = text[0]
    if first in b"{[":
        return "jsonl"
    # fixmap, fixarray, array16/32, map16/32: what a stream of records or Fluentd entries starts with.
    if 0x80 <= first <= 0x9F or 0xDC <= first <= 0xDF:
        return "msgpack"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not merely a character cut by the sniff window
            return "msgpack"
    if b"," in text.split(b"\n", 1)[0]:
        return "csv"
    return "jsonl"


def read_staging_object(stream: BinaryIO, key: str, table: TableDef, batch_rows: int = 65536) -> Iterator[ParsedBatch]:
    """Decode a staging object (raw bytes as stored; gzip detected by magic bytes 1f 8b, never by name alone) into batches of typed rows. Memory must stay bounded by the batch size, whatever the object size (a 500 MB gzip object must stream: never read it whole). Raises UnreadableObject (possibly after some batches were already yielded — the caller discards them)."""  # noqa: E501
    if batch_rows < 1:
        raise ValueError("batch_rows must be at least 1")
    source = _ObjectBytes(stream)
    object_format = detect_format(key, source.head(SNIFF_BYTES), table.format)
    if object_format == "jsonl":
        yield from _JsonLinesReader(table, batch_rows).read(source.chunks())
    elif object_format == "msgpack":
        yield from _read_msgpack(source.chunks(), table, batch_rows)
    else:
        yield from _read_csv(source.chunks(), table, batch_rows)


# --------------------------------------------------------------------------------------------
# Bytes: plain or gzip, streamed in bounded chunks


class _ObjectBytes:
    """The object's content as decompressed chunks, with its first bytes available for sniffing."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        first = b""
        while len(first) < len(GZIP_MAGIC):
            more = stream.read(READ_SIZE)
            if not more:
                break
            first += bytes(more)
        self._rest = self._gunzip(first) if first.startswith(GZIP_MAGIC) else self._plain(first)
        self._peeked: list[bytes] = []

    def head(self, size: int) -> bytes:
        have = sum(len(chunk) for chunk in self._peeked)
        while have < size:
            chunk = next(self._rest, None)
            if chunk is None:
                break
            self._peeked.append(chunk)
            have += len(chunk)
        return b"".join(self._peeked)[:size]

    def chunks(self) -> Iterator[bytes]:
        while self._peeked:
            yield self._peeked.pop(0)
        yield from self._rest

    def _read(self) -> bytes:
        return bytes(self._stream.read(READ_SIZE))

    def _plain(self, first: bytes) -> Iterator[bytes]:
        if first:
            yield first
        while chunk := self._read():
            yield chunk

    def _gunzip(self, first: bytes) -> Iterator[bytes]:
        data = first
        compressed = len(first)
        inflater = zlib.decompressobj(wbits=31)
        in_member = True
        while True:
            if in_member:
                try:
                    out = inflater.decompress(data, MAX_INFLATE_CHUNK)
                except zlib.error as exc:
                    raise UnreadableObject(
                        f"corrupt gzip stream within the first {compressed} compressed bytes: {exc}"
                    ) from None
                if out:
                    yield out
                if inflater.eof:
                    data = inflater.unused_data
                    in_member = False
                    continue
                data = inflater.unconsumed_tail
                if data or len(out) == MAX_INFLATE_CHUNK:
                    continue
            else:
                # gzip(1) accepts zero padding after a member; anything else must be another member.
                data = data.lstrip(b"\0")
                if data:
                    inflater = zlib.decompressobj(wbits=31)
                    in_member = True
                    continue
            chunk = self._read()
            if not chunk:
                if in_member:
                    raise UnreadableObject(f"truncated gzip stream after {compressed} compressed bytes")
                return
            compressed += len(chunk)
            data = chunk


# --------------------------------------------------------------------------------------------
# Per-record coercion (the reference rules; every format goes through it)


class _Reject(Exception):
    """A record is bad; the message is the BadRecord reason."""


def _unexpected(exc: Exception) -> str:
    """The bad-record reason for an exception no coercion rule foresaw: one record never fails its object."""
    return f"{type(exc).__name__}: {exc}"


class JsonFloat(float):
    """A JSON number with a fraction or exponent, remembering the text it was written as."""

    __slots__ = ("text",)


def _json_float(text: str) -> JsonFloat:
    value = JsonFloat(text)
    value.text = text
    return value


_JSON_DECODER = json.JSONDecoder(parse_float=_json_float)


def _show(value: object) -> str:
    if isinstance(value, JsonFloat):
        text = value.text
    elif isinstance(value, (dict, list)):
        text = _render_json(value)
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"


def _valid_text(text: str) -> str:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            reason = "is not valid Unicode (lone surrogate or undecodable bytes)"
            raise _Reject(f"{_show(text)} {reason}") from None
    return text


def _compact_json(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        raise _Reject(f"{_show(value)} contains NaN or Infinity, which JSON cannot represent") from None
    return _valid_text(text)


def _jsonable(value: object) -> object:
    """MessagePack-only values rendered for JSON: bytes as base64, ext types as {"$ext", "data"}."""
    if isinstance(value, dict):
        return {_key_text(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, tv.EventTime):
        return _ext_json(tv.FLUENTD_EVENT_TIME_EXT, struct.pack(">II", value.seconds, value.nanoseconds))
    if isinstance(value, (msgpack.ExtType, tv.RawExt)):
        return _ext_json(value.code, value.data)
    if isinstance(value, msgpack.Timestamp):
        return _ext_json(tv.MSGPACK_TIMESTAMP_EXT, value.to_bytes())
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    return value


def _ext_json(code: int, data: bytes) -> dict[str, object]:
    return {"$ext": code, "data": base64.b64encode(data).decode("ascii")}


def _key_text(key: object) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).decode("utf-8", "backslashreplace")
    return _render_json(key)


def _render_json(value: object) -> str:
    """Lossless-enough text of a value for BadRecord.raw and messages."""
    try:
        jsonable = _jsonable(value)
        try:
            text = json.dumps(jsonable, ensure_ascii=False, separators=(",", ":"))
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(jsonable, separators=(",", ":"))
    except RecursionError:
        return _render_deep_json(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text


class _Literal(str):
    """Text already rendered, waiting on the work stack of _render_deep_json."""


def _render_deep_json(value: object) -> str:
    """_render_json with an explicit stack: a MessagePack item may nest deeper than Python's recursion limit."""
    parts: list[str] = []
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Literal):
            parts.append(item)
        elif isinstance(item, dict):
            pending: list[object] = [_Literal("{")]
            for index, (key, member) in enumerate(item.items()):
                try:
                    key_text = _key_text(key)
                except RecursionError:
                    key_text = "(a key nested too deeply to show)"
                separator = "," if index else ""
                pending += [_Literal(separator + json.dumps(key_text, ensure_ascii=False) + ":"), member]
            stack.extend(reversed([*pending, _Literal("}")]))
        elif type(item) in (list, tuple):  # not ExtType and kin, which are named tuples
            pending = [_Literal("[")]
            for index, member in enumerate(item):
                pending += [_Literal(",")] if index else []
                pending.append(member)
            stack.extend(reversed([*pending, _Literal("]")]))
        else:
            parts.append(_render_json(item))
    return "".join(parts)


def _to_string(value: object) -> str:
    if isinstance(value, str):
        return _valid_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, JsonFloat):
        return value.text
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Reject(f"{value!r} is not a finite number")
        return repr(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise _Reject(f"{_show(value)} is binary data that is not UTF-8 text") from None
    return _compact_json(_jsonable(value))


def _integer_coercer(type_name: str, low: int, high: int) -> Callable[[object], int]:
    an = f"{'an' if type_name == 'int' else 'a'} {type_name}"

    def coerce(value: object) -> int:
        if isinstance(value, bool):
            raise _Reject(f"{value!r} is a boolean, not {an}")
        if isinstance(value, int):
            number = value
        elif isinstance(value, float):
            if not value.is_integer():
                raise _Reject(f"{_show(value)} is not a whole number, so not {an}")
            number = int(value)
        elif isinstance(value, str):
            if not _INTEGER.fullmatch(value):
                raise _Reject(f"{_show(value)} is not {an}")
            try:
                number = int(value)
            except ValueError:  # beyond Python's digit limit: far outside any range anyway
                raise _Reject(f"{_show(value)} is outside the {type_name} range") from None
        else:
            raise _Reject(f"{_show(value)} is {_describe(value)}, not {an}")
        if not low <= number <= high:
            raise _Reject(f"{_show(value)} is outside the {type_name} range")
        return number

    return coerce


_INTEGER = re.compile(tv.INTEGER_PATTERN)
_NUMBER = re.compile(tv.NUMBER_PATTERN)


def _to_double(value: object, what: str = "double") -> float:
    if isinstance(value, bool):
        raise _Reject(f"{value!r} is a boolean, not a {what}")
    if isinstance(value, int):
        try:
            number = float(value)
        except OverflowError:
            raise _Reject(f"{_show(value)} is outside the {what} range") from None
    elif isinstance(value, float):
        number = float(value)
    elif isinstance(value, str):
        if not _NUMBER.fullmatch(value):
            raise _Reject(f"{_show(value)} is not a {what}")
        number = float(value)
    else:
        raise _Reject(f"{_show(value)} is {_describe(value)}, not a {what}")
    if not math.isfinite(number):
        raise _Reject(f"{_show(value)} is not a finite {what}")
    return number + 0.0  # folds -0.0 into 0.0, as the vectorised path does


def _to_float(value: object) -> float:
    """A double within float32's range; Arrow rounds it to the nearest float32 when the batch is built."""
    number = _to_double(value, "float")
    if abs(number) > FLOAT32_MAX:
        raise _Reject(f"{_show(value)} is outside the float range")
    return number


def _to_boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip(" \t").lower()
        if word == "true":
            return True
        if word == "false":
            return False
    raise _Reject(f"{_show(value)} is not a boolean (true or false)")


def _to_date(value: object) -> int:
    if not isinstance(value, str):
        raise _Reject(f"{_show(value)} is {_describe(value)}, not a date string YYYY-MM-DD")
    try:
        return tv.parse_date(value)
    except ValueError as exc:
        raise _Reject(str(exc)) from None


def _decimal_coercer(precision: int, scale: int) -> Callable[[object], Decimal]:
    type_name = f"decimal({precision},{scale})"
    zero = Decimal((0, (0,), -scale))

    def coerce(value: object) -> Decimal:
        if isinstance(value, bool):
            raise _Reject(f"{value!r} is a boolean, not a {type_name}")
        if isinstance(value, int):
            number = Decimal(value)
        elif isinstance(value, JsonFloat):
            number = _exact_decimal(value.text, value, type_name)  # exactly as written, not via a double
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise _Reject(f"{value!r} is not a finite number")
            number = Decimal(repr(value))
        elif isinstance(value, str):
            if not _NUMBER.fullmatch(value):
                raise _Reject(f"{_show(value)} is not a {type_name}")
            number = _exact_decimal(value.strip(" \t"), value, type_name)
        else:
            raise _Reject(f"{_show(value)} is {_describe(value)}, not a {type_name}")
        if not number:
            return zero
        sign, digits, exponent = number.as_tuple()
        assert isinstance(exponent, int)
        while digits[-1] == 0:
            digits = digits[:-1]
            exponent += 1
        if exponent < -scale:
            raise _Reject(f"{_show(value)} has more than {scale} decimal places for {type_name}")
        if len(digits) + exponent > precision - scale:
            raise _Reject(f"{_show(value)} has too many digits for {type_name}")
        return Decimal((sign, digits + (0,) * (exponent + scale), -scale))

    return coerce


def _exact_decimal(text: str, value: object, type_name: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:  # an exponent beyond what any decimal can hold, e.g. 1e9999999999999999999
        raise _Reject(f"{_show(value)} has an exponent too large in magnitude for {type_name}") from None


def _json_coercer(kind: str) -> Callable[[object], str]:
    if kind == "csv":

        def from_text(value: object) -> str:
            assert isinstance(value, str)
            try:
                parsed = _JSON_DECODER.decode(value)
            except (ValueError, RecursionError):
                raise _Reject(f"{_show(value)} is not JSON text") from None
            return _compact_json(parsed)

        return from_text
    if kind == "msgpack":
        return lambda value: _compact_json(_jsonable(value))
    return _compact_json


def _timestamp_coercer(epoch_unit: str) -> Callable[[object], int]:
    def coerce(value: object) -> int:
        try:
            return tv.parse_event_time(value, epoch_unit)
        except ValueError as exc:
            raise _Reject(str(exc)) from None

    return coerce


def _coercer(column: Column, epoch_unit: str, kind: str) -> Callable[[object], Any]:
    type_name = column.type
    if type_name == "string":
        return _to_string
    if type_name == "int":
        return _integer_coercer("int", *INT32_RANGE)
    if type_name == "bigint":
        return _integer_coercer("bigint", *INT64_RANGE)
    if type_name == "double":
        return _to_double
    if type_name == "float":
        return _to_float
    if type_name == "boolean":
        return _to_boolean
    if type_name == "timestamp":
        return _timestamp_coercer(epoch_unit)
    if type_name == "date":
        return _to_date
    if type_name == "json":
        return _json_coercer(kind)
    return _decimal_coercer(*decimal_parts(type_name))


def partition_dates(times: pa.ChunkedArray | pa.Array, timezone: str) -> pa.Array:
    """The calendar date of each UTC time in the table's time zone (DST-correct via the tz database)."""
    local = pc.local_timestamp(pc.cast(times, pa.timestamp("us", tz=timezone)))
    return pc.cast(local, pa.date32())


# A valid event time near 0001-01-01Z or 9999-12-31Z can fall on a date outside years 1..9999 in the table's
# zone, which no partition (nor Python's date) can hold. The tz database's offsets stay well under a day (among
# the largest: Manila's local mean time before 1845, UTC-15:56), so only times this close to the ends are looked at.
ZONE_EDGE_MICROS = 2 * 86400 * tv.MICROS_PER_SECOND
_FIRST_DAY = tv.days_from_civil(1, 1, 1)
_LAST_DAY = tv.days_from_civil(9999, 12, 31)


def _check_partition_date(micros: int, timezone: str) -> None:
    """_Reject unless the event time's date in the zone is within years 1..9999 (computed as the writer does)."""
    if tv.MIN_MICROS + ZONE_EDGE_MICROS <= micros <= tv.MAX_MICROS - ZONE_EDGE_MICROS:
        return
    times = pa.array([micros], pa.timestamp("us", tz="UTC"))
    day = pc.cast(partition_dates(times, timezone), pa.int32())[0].as_py()
    if day < _FIRST_DAY:
        where = "before 0001-01-01"
    elif day > _LAST_DAY:
        where = "after 9999-12-31"
    else:
        return
    raise _Reject(f"{tv.format_micros(micros)} is {where} in the table's time zone {timezone}, "
                  "so it has no partition date (partition dates are in years 1..9999)")


@dataclass(frozen=True)
class _ColumnPlan:
    column: Column
    source: str
    coerce: Callable[[object], Any]
    required: bool
    is_time: bool
    empty_is_null: bool
    label: str


class _RecordConverter:
    """Turns records (dicts of input fields) into column values, or says why it cannot."""

    def __init__(self, table: TableDef, kind: str) -> None:
        self.schema = table.arrow_schema()
        self.kind = kind
        self.timezone = table.timezone
        self.reject_unknown = table.unknown_fields == "reject"
        self.sources = frozenset(column.source_field for column in table.columns)
        self.plans = []
        for column in table.columns:
            is_time = column.name == table.time_column
            label = f"column {column.name}"
            if column.source_field != column.name:
                label += f" (field {column.source_field})"
            self.plans.append(
                _ColumnPlan(
                    column=column,
                    source=column.source_field,
                    coerce=_coercer(column, table.epoch_unit, kind),
                    required=is_time or not column.nullable,
                    is_time=is_time,
                    empty_is_null=kind == "csv" and column.type != "string",
                    label=label,
                )
            )
        self.columns: list[list[Any]] = [[] for _ in self.plans]

    @property
    def row_count(self) -> int:
        return len(self.columns[0])

    def add(self, record: dict[Any, Any], entry_time: object = None) -> str | None:
        """Append the record's row; return the reason instead when the record is bad.

        The boundary of one record: whatever converting it raises makes it bad, never its object."""
        try:
            row = self._row(record, entry_time)
        except _Reject as exc:
            return str(exc)
        except RecursionError:
            return "a value is nested too deeply to convert"
        except Exception as exc:  # noqa: BLE001 - see the docstring
            return _unexpected(exc)
        for values, value in zip(self.columns, row, strict=True):
            values.append(value)
        return None

    def _row(self, record: dict[Any, Any], entry_time: object) -> list[Any]:
        if self.reject_unknown:
            absent = "" if self.kind == "csv" else None
            unknown = [_key_text(key) for key, value in record.items() if key not in self.sources and value != absent]
            if unknown:
                raise _Reject(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))}")
        row = []
        for plan in self.plans:
            value = record.get(plan.source)
            if plan.empty_is_null and value == "":
                value = None
            if plan.is_time and entry_time is not None:
                row.append(self._time_with_entry(plan, value, entry_time))
                continue
            if value is None:
                if plan.is_time:
                    raise _Reject(f"missing event time (field {plan.source})")
                if plan.required:
                    raise _Reject(f"missing non-null field {plan.source}")
                row.append(None)
                continue
            prefix = f"event time {plan.source}" if plan.is_time else plan.label
            try:
                coerced = plan.coerce(value)
                if plan.is_time:
                    _check_partition_date(coerced, self.timezone)
            except _Reject as exc:
                raise _Reject(f"{prefix}: {exc}") from None
            except RecursionError:
                raise
            except Exception as exc:  # noqa: BLE001 - named with its column; the record is bad, see add()
                raise _Reject(f"{prefix}: {_unexpected(exc)}") from None
            row.append(coerced)
        return row

    def _time_with_entry(self, plan: _ColumnPlan, value: object, entry_time: object) -> int:
        # A Fluentd entry time is only a fallback: the record's own time, when usable, is
        # usually the more precise one (the entry time is often when the forwarder saw it).
        if value is not None:
            try:
                own = plan.coerce(value)
            except _Reject:
                pass
            else:
                try:
                    _check_partition_date(own, self.timezone)
                except _Reject as exc:
                    raise _Reject(f"event time {plan.source}: {exc}") from None
                return own
        try:
            entry = tv.parse_event_time(entry_time, "s")
        except ValueError as exc:
            if value is None:
                reason = f"missing event time (field {plan.source})"
            else:
                reason = f"event time {plan.source}: {_show(value)} is not a timestamp"
            raise _Reject(f"{reason}, and the entry time is unusable: {exc}") from None
        try:
            _check_partition_date(entry, self.timezone)
        except _Reject as exc:
            raise _Reject(f"entry time: {exc}") from None
        return entry

    def take_table(self) -> pa.Table:
        arrays = [pa.array(values, type=field.type) for values, field in zip(self.columns, self.schema, strict=True)]
        self.columns = [[] for _ in self.plans]
        return pa.Table.from_arrays(arrays, schema=self.schema)


# --------------------------------------------------------------------------------------------
# Batches


class _BatchAssembler:
    """Cuts decoded pieces into ParsedBatches of at most batch_rows records."""

    def __init__(self, schema: pa.Schema, batch_rows: int) -> None:
        self.schema = schema
        self.batch_rows = batch_rows
        self.tables: list[pa.Table] = []
        self.rows = 0
        self.bad: deque[BadRecord] = deque()

    def add(self, table: pa.Table | None, bad: Iterable[BadRecord] = ()) -> Iterator[ParsedBatch]:
        if table is not None and table.num_rows:
            self.tables.append(table)
            self.rows += table.num_rows
        self.bad.extend(bad)
        while self.rows + len(self.bad) >= self.batch_rows:
            yield self._emit(self.batch_rows)

    def finish(self) -> Iterator[ParsedBatch]:
        if self.rows or self.bad:
            yield self._emit(self.rows + len(self.bad))

    def _emit(self, size: int) -> ParsedBatch:
        bad = [self.bad.popleft() for _ in range(min(size, len(self.bad)))]
        wanted = size - len(bad)
        if self.tables:
            pending = self.tables[0] if len(self.tables) == 1 else pa.concat_tables(self.tables)
        else:
            pending = self.schema.empty_table()
        table, rest = pending.slice(0, wanted), pending.slice(wanted)
        self.tables = [rest] if rest.num_rows else []
        self.rows = rest.num_rows
        return ParsedBatch(table=table, bad=bad, records_in=table.num_rows + len(bad))


# --------------------------------------------------------------------------------------------
# JSON lines


@dataclass
class _Piece:
    table: pa.Table | None
    bad: list[BadRecord]
    objects: int
    lines: int


def _slow_json_block(block: bytes, first_line: int, converter: _RecordConverter) -> _Piece:
    """The exact per-record decoder for a block of whole lines (already known to be UTF-8)."""
    bad = []
    objects = 0
    lines = 0
    for offset, line in enumerate(block.decode("utf-8").split("\n")):
        if not line.strip(" \t\r"):
            continue
        lines += 1
        line_number = first_line + offset
        raw = line[:-1] if line.endswith("\r") else line
        try:
            value = _JSON_DECODER.decode(line)
        except RecursionError:
            bad.append(BadRecord(line_number, "invalid JSON: nested too deeply", raw))
            continue
        except ValueError as exc:
            bad.append(BadRecord(line_number, f"invalid JSON: {exc}", raw))
            continue
        except Exception as exc:  # noqa: BLE001 - one line never fails its object
            bad.append(BadRecord(line_number, f"invalid JSON: {_unexpected(exc)}", raw))
            continue
        if not isinstance(value, dict):
            bad.append(BadRecord(line_number, f"not a JSON object but {_describe(value)}", raw))
            continue
        objects += 1
        reason = converter.add(value)
        if reason is not None:
            bad.append(BadRecord(line_number, reason, raw))
    return _Piece(converter.take_table(), bad, objects, lines)


_TIME_KINDS = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
_CANONICAL_DATE = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_CANONICAL_TIME = _CANONICAL_DATE + r"[T ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
_CANONICAL_ZONE = r"(?:Z|[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9])?)"
_CANONICAL_ZONED = re.compile(_CANONICAL_TIME + _CANONICAL_ZONE)
_CANONICAL_NAIVE = re.compile(_CANONICAL_TIME)
_ISO_RE2 = "^" + tv.ISO_PATTERN + "$"
_DAYS_IN_MONTH = pa.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], pa.int64())
_MIN_DAYS = tv.MIN_MICROS // (86400 * tv.MICROS_PER_SECOND)
_UTC_MICROS = pa.timestamp("us", tz="UTC")


def _all_true(mask: pa.ChunkedArray | pa.Array) -> bool:
    # All-null and empty inputs aggregate to null, which means "nothing failed".
    return pc.all(mask).as_py() is not False


def _within(values: pa.ChunkedArray | pa.Array, low: int | float, high: int | float) -> bool:
    bounds = pc.min_max(values)
    low_seen, high_seen = bounds["min"].as_py(), bounds["max"].as_py()
    return low_seen is None or (low <= low_seen and high_seen <= high)


def _floor_divide(values: Any, divisor: int) -> Any:
    """Floor division by a positive divisor. Arrow's integer divide truncates toward zero; stepping
    the quotient down when the remainder is negative never overflows, even at the int64 minimum."""
    quotient = pc.divide(values, divisor)
    remainder = pc.subtract(values, pc.multiply(quotient, divisor))
    return pc.if_else(pc.less(remainder, 0), pc.subtract(quotient, 1), quotient)


def _first_valid(values: pa.ChunkedArray) -> Any:
    index = pc.index(values.is_valid(), True).as_py()
    return None if index < 0 else values[index].as_py()


def _digits(parts: Any, name: str, width: int) -> Any:
    # Optional groups that did not take part come back as "": pad them to zero.
    return pc.cast(pc.utf8_lpad(pc.struct_field(parts, name), width=width, padding="0"), pa.int64())


def _iso_general(values: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """Vectorised tv.parse_iso_timestamp for every spelling it accepts."""
    parts = pc.extract_regex(values, _ISO_RE2)
    if parts.null_count != values.null_count:
        return None
    year, month, day = _digits(parts, "year", 1), _digits(parts, "month", 1), _digits(parts, "day", 1)
    hour, minute, second = _digits(parts, "hour", 1), _digits(parts, "minute", 1), _digits(parts, "second", 1)
    offset_hour, offset_minute = _digits(parts, "offset_hour", 1), _digits(parts, "offset_minute", 1)
    if not (
        _within(month, 1, 12)
        and _within(hour, 0, 23)
        and _within(minute, 0, 59)
        and _within(second, 0, 59)
        and _within(offset_hour, 0, 23)
        and _within(offset_minute, 0, 59)
    ):
        return None
    leap = pc.and_(
        pc.equal(pc.modulo(year, 4), 0),
        pc.or_(pc.not_equal(pc.modulo(year, 100), 0), pc.equal(pc.modulo(year, 400), 0)),
    )
    month_days = pc.add(pc.take(_DAYS_IN_MONTH, month), pc.cast(pc.and_(leap, pc.equal(month, 2)), pa.int64()))
    if not (_within(day, 1, 31) and _all_true(pc.less_equal(day, month_days))):
        return None
    fraction = pc.struct_field(parts, "fraction")
    micros = pc.cast(pc.utf8_rpad(pc.utf8_slice_codeunits(fraction, 0, 6), width=6, padding="0"), pa.int64())
    sign = pc.if_else(pc.equal(pc.struct_field(parts, "sign"), "-"), -1, 1)
    offset = pc.multiply(sign, pc.add(pc.multiply(offset_hour, 3600), pc.multiply(offset_minute, 60)))
    # days_from_civil, as in timevalues
    shifted_year = pc.subtract(year, pc.cast(pc.less_equal(month, 2), pa.int64()))
    era = _floor_divide(shifted_year, 400)
    year_of_era = pc.subtract(shifted_year, pc.multiply(era, 400))
    month_index = pc.if_else(pc.greater(month, 2), pc.subtract(month, 3), pc.add(month, 9))
    day_of_year = pc.add(pc.divide(pc.add(pc.multiply(month_index, 153), 2), 5), pc.subtract(day, 1))
    day_of_era = pc.add(
        pc.add(pc.multiply(year_of_era, 365), pc.divide(year_of_era, 4)),
        pc.subtract(day_of_year, pc.divide(year_of_era, 100)),
    )
    days = pc.subtract(pc.add(pc.multiply(era, 146097), day_of_era), 719468)
    seconds = pc.add(
        pc.multiply(days, 86400),
        pc.add(pc.add(pc.multiply(hour, 3600), pc.multiply(minute, 60)), second),
    )
    return pc.add(pc.multiply(pc.subtract(seconds, offset), tv.MICROS_PER_SECOND), micros)


def _iso_canonical(values: pa.ChunkedArray, zoned: bool) -> pa.ChunkedArray | None:
    """Arrow's own ISO cast, for the common spellings where it agrees with timevalues."""
    pattern = (_CANONICAL_ZONED if zoned else _CANONICAL_NAIVE).pattern
    if not _all_true(pc.match_substring_regex(values, "^" + pattern + "$")):
        return None
    zone = "UTC" if zoned else None
    try:
        return pc.cast(pc.cast(values, pa.timestamp("us", tz=zone)), pa.int64())
    except pa.ArrowInvalid:
        pass  # more than six fractional digits
    try:
        nanos = pc.cast(pc.cast(values, pa.timestamp("ns", tz=zone)), pa.int64())
    except pa.ArrowInvalid:
        return None  # outside 1677..2262
    return _floor_divide(nanos, 1000)


def _strings_to_micros(values: pa.ChunkedArray) -> pa.ChunkedArray | None:
    first = _first_valid(values)
    if first is None:
        return pc.cast(values, pa.int64())
    micros = None
    if _CANONICAL_ZONED.fullmatch(first):
        micros = _iso_canonical(values, zoned=True)
    elif _CANONICAL_NAIVE.fullmatch(first):
        micros = _iso_canonical(values, zoned=False)
    return micros if micros is not None else _iso_general(values)


def _epochs_to_micros(values: pa.ChunkedArray, epoch_unit: str) -> pa.ChunkedArray | None:
    if pa.types.is_integer(values.type):
        if epoch_unit == "ns":
            return _floor_divide(values, 1000)
        try:
            return pc.multiply_checked(values, tv.INT_EPOCH_SCALE[epoch_unit])
        except pa.ArrowInvalid:
            return None
    if epoch_unit == "ns":
        return None  # integers read as doubles would lose the exact floor division
    scaled = pc.multiply(values, float(tv.INT_EPOCH_SCALE[epoch_unit]))
    # Below 2**53 a double holds every integer exactly, so integers read as doubles
    # (and scaled) agree with the exact integer rule; beyond it, leave it to the slow path.
    if not _all_true(pc.less(pc.abs(scaled), float(1 << 53))):
        return None
    return pc.cast(pc.round(scaled, 0, round_mode="half_to_even"), pa.int64())


def _dates_to_days(values: pa.ChunkedArray) -> pa.ChunkedArray | None:
    if not _all_true(pc.match_substring_regex(values, "^" + _CANONICAL_DATE + "$")):
        return None
    try:
        days = pc.cast(values, pa.date32())
    except pa.ArrowInvalid:
        return None
    if not _within(pc.cast(days, pa.int32()), _MIN_DAYS, 1 << 31):
        return None
    return days


def _fast_read_type(column: Column) -> pa.DataType | None:
    simple = {
        "string": pa.string(),
        "int": pa.int64(),
        "bigint": pa.int64(),
        "float": pa.float64(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "date": pa.string(),
    }
    if column.type in simple:
        return simple[column.type]
    if column.type.startswith("decimal"):
        return arrow_type(column.type)
    return None


class _JsonFastPath:
    """Whole-block conversion with pyarrow.json; returns None whenever it cannot be sure."""

    def __init__(self, table: TableDef) -> None:
        self.schema = table.arrow_schema()
        self.columns = table.columns
        self.time_column = table.time_column
        self.epoch_unit = table.epoch_unit
        self.unexpected = "error" if table.unknown_fields == "reject" else "ignore"
        self.static_types: dict[str, pa.DataType] = {}
        self.timestamp_sources: list[str] = []
        self.last_kinds: dict[str, str] = {}
        self.enabled = True
        for column in table.columns:
            if column.type == "timestamp":
                if column.source_field not in self.timestamp_sources:
                    self.timestamp_sources.append(column.source_field)
                continue
            read_type = _fast_read_type(column)
            previous = self.static_types.setdefault(column.source_field, read_type)
            if read_type is None or previous != read_type:
                self.enabled = False
        if set(self.timestamp_sources) & set(self.static_types):
            self.enabled = False
        # Stream tasks already run one per core, so Arrow's own threads would only contend.
        self.read_options = pa_json.ReadOptions(use_threads=False, block_size=4 << 20)

    def convert(self, block: bytes, layout: _LineLayout | None = None) -> pa.Table | None:
        """The block's rows, or None if any line needs the per-record decoder."""
        if not self.enabled:
            return None
        try:
            return self._convert(block, layout)
        except Exception:  # noqa: BLE001 - a shortcut only: the per-record decoder decides each line of the block
            return None

    def _convert(self, block: bytes, layout: _LineLayout | None) -> pa.Table | None:
        lines = (layout or _line_layout(block)).object_lines
        if not lines:
            return None
        kinds = self._guess_time_kinds(block)
        if kinds is None:
            return None
        read_schema = pa.schema(
            [(source, read_type) for source, read_type in self.static_types.items()]
            + [(source, _TIME_KINDS[kind]) for source, kind in kinds.items()]
        )
        options = pa_json.ParseOptions(
            explicit_schema=read_schema, unexpected_field_behavior=self.unexpected, newlines_in_values=False
        )
        try:
            parsed = pa_json.read_json(pa.BufferReader(block), read_options=self.read_options, parse_options=options)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
            return None
        if parsed.num_rows != lines:
            return None
        arrays = []
        for column in self.columns:
            values = self._column(column, parsed.column(column.source_field), kinds)
            if values is None:
                return None
            arrays.append(values)
        self.last_kinds.update(kinds)
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _guess_time_kinds(self, block: bytes) -> dict[str, str] | None:
        """How to read each timestamp field, judged by its first non-null values in the block."""
        kinds: dict[str, str] = {}
        start = 0
        for _ in range(32):
            if start >= len(block) or len(kinds) == len(self.timestamp_sources):
                break
            end = block.find(b"\n", start)
            end = len(block) if end < 0 else end
            try:
                record = json.loads(block[start:end])
            except (ValueError, RecursionError):
                record = None
            start = end + 1
            if not isinstance(record, dict):
                continue
            for source in self.timestamp_sources:
                value = record.get(source)
                if source in kinds or value is None:
                    continue
                if isinstance(value, bool):
                    return None
                if isinstance(value, int):
                    kinds[source] = "int64"
                elif isinstance(value, float):
                    if self.epoch_unit == "ns":
                        return None
                    kinds[source] = "float64"
                else:
                    kinds[source] = "string"
        for source in self.timestamp_sources:
            kinds.setdefault(source, self.last_kinds.get(source, "string"))
        return kinds

    def _column(self, column: Column, values: pa.ChunkedArray, kinds: dict[str, str]) -> Any:
        required = not column.nullable or column.name == self.time_column
        if required and values.null_count:
            return None
        type_name = column.type
        if type_name == "int":
            return pc.cast(values, pa.int32()) if _within(values, *INT32_RANGE) else None
        if type_name == "double":
            if not _all_true(pc.is_finite(values)):
                return None
            return pc.add(values, 0.0)
        if type_name == "float":
            if not _all_true(pc.is_finite(values)) or not _within(values, -FLOAT32_MAX, FLOAT32_MAX):
                return None
            return pc.cast(pc.add(values, 0.0), pa.float32())
        if type_name == "timestamp":
            if kinds[column.source_field] == "string":
                micros = _strings_to_micros(values)
            else:
                micros = _epochs_to_micros(values, self.epoch_unit)
            # Near the ends of the range the per-record decoder decides (the partition date may not exist).
            margin = ZONE_EDGE_MICROS if column.name == self.time_column else 0
            if micros is None or not _within(micros, tv.MIN_MICROS + margin, tv.MAX_MICROS - margin):
                return None
            return pc.cast(micros, _UTC_MICROS)
        if type_name == "date":
            return _dates_to_days(values)
        if type_name.startswith("decimal"):
            # pyarrow.json rescales a number like 1e3 without checking it fits the precision.
            precision, scale = decimal_parts(type_name)
            largest = Decimal((0, (9,) * precision, -scale))  # built exactly: no context rounding
            return values if _within(values, -largest, largest) else None
        return values


class _LineLayout(NamedTuple):
    newlines: int
    object_lines: int | None  # non-blank lines when each holds exactly one {...}, else None


def _line_layout(block: bytes) -> _LineLayout:
    """Newline count, and whether every non-blank line is a single {...}.

    A line that starts with '{' and ends with '}' cannot continue onto the next line (a
    string cannot span lines, and '{' never follows a complete value inside a container),
    so pyarrow yields at least one row per such line: equal counts then mean exactly one.
    """
    if not block:
        return _LineLayout(0, 0)
    # Arrow's kernels split and test ~10 MB of lines several times faster than bytes.count.
    lines = pc.list_flatten(pc.split_pattern(_as_binary_array(block), b"\n"))
    newlines = len(lines) - 1
    if block.endswith(b"\n"):
        lines = lines.slice(0, newlines)
    if _all_true(pc.starts_with(lines, b"{")) and (
        _all_true(pc.ends_with(lines, b"}"))
        or _all_true(pc.or_(pc.ends_with(lines, b"}"), pc.ends_with(lines, b"}\r")))
    ):
        return _LineLayout(newlines, len(lines))
    count = 0
    for line in block.split(b"\n"):
        stripped = line.strip(b" \t\r")
        if not stripped:
            continue
        if stripped[:1] != b"{" or stripped[-1:] != b"}":
            return _LineLayout(newlines, None)
        count += 1
    return _LineLayout(newlines, count)


def _as_binary_array(block: bytes) -> pa.Array:
    """The block as a one-element binary array, without copying it."""
    offsets = pa.array([0, len(block)], pa.int32()).buffers()[1]
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(block)])


def _split_block(block: bytes, first_line: int, parts: int) -> list[tuple[bytes, int, _LineLayout]]:
    """About `parts` runs of whole lines: (bytes, first line number, layout)."""
    pieces = []
    start = 0
    line = first_line
    step = max(len(block) // parts, 1)
    while start < len(block):
        cut = block.find(b"\n", start + step - 1) + 1 if start + step < len(block) else len(block)
        if cut <= 0:
            cut = len(block)
        part = block[start:cut]
        layout = _line_layout(part)
        pieces.append((part, line, layout))
        line += layout.newlines
        start = cut
    return pieces


def _without_bom(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The chunks with a UTF-8 byte order mark at the very start of the object dropped."""
    iterator = iter(chunks)
    head = b""
    for chunk in iterator:
        head += chunk
        if len(head) >= len(UTF8_BOM):
            break
    head = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    if head:
        yield head
    yield from iterator


def _check_utf8(block: bytes, first_line: int) -> None:
    """UnreadableObject unless the block is UTF-8; Arrow validates without building a str."""
    if block.isascii():
        return
    try:
        _as_binary_array(block).cast(pa.string())
        return
    except pa.ArrowInvalid:
        pass
    try:
        block.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + block.count(b"\n", 0, exc.start)
        raise UnreadableObject(f"invalid UTF-8 at line {line}: {exc.reason}") from None


class _JsonLinesReader:
    """JSON lines in blocks of whole lines, each through the fast path where it can be."""

    def __init__(self, table: TableDef, batch_rows: int) -> None:
        self.batch_rows = batch_rows
        self.converter = _RecordConverter(table, "json")
        self.fast = _JsonFastPath(table)
        self.assembler = _BatchAssembler(self.converter.schema, batch_rows)
        self.target = max(MIN_BLOCK_BYTES, min(FIRST_BLOCK_BYTES, batch_rows * 256))
        self.objects = 0
        self.lines = 0
        # After blocks where nothing could take the fast path, skip trying for a while.
        self.penalty = 0
        self.skip = 0

    def read(self, chunks: Iterable[bytes]) -> Iterator[ParsedBatch]:
        line_number = 1
        for block in self._line_blocks(_without_bom(chunks)):
            layout = _line_layout(block)
            yield from self._block(block, line_number, layout)
            line_number += layout.newlines
        yield from self.assembler.finish()
        if self.lines and not self.objects:
            raise UnreadableObject(f"not JSON lines: none of {self.lines} lines is a JSON object")

    def _line_blocks(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """Runs of whole lines of at least self.target bytes (the last one: whatever is left)."""
        pending: list[bytes | memoryview] = []
        size = 0
        unterminated = 0  # bytes since the last newline seen
        for chunk in chunks:
            pending.append(chunk)
            size += len(chunk)
            cut = chunk.rfind(b"\n") + 1
            unterminated = unterminated + len(chunk) if not cut else len(chunk) - cut
            if unterminated > MAX_LINE_BYTES:
                raise UnreadableObject(f"a line is longer than {MAX_LINE_BYTES >> 20} MiB")
            if size < self.target or not cut:
                continue
            if len(pending) == 1 and cut == len(chunk):
                block = chunk
            else:
                block = b"".join([*pending[:-1], memoryview(chunk)[:cut]])
            pending = [memoryview(chunk)[cut:]] if cut < len(chunk) else []
            size = len(chunk) - cut
            yield block
        if size:
            yield b"".join(pending)

    def _block(self, block: bytes, first_line: int, layout: _LineLayout) -> Iterator[ParsedBatch]:
        _check_utf8(block, first_line)
        # Aim the next block at batch_rows lines, judging line length by this block.
        wanted = len(block) * self.batch_rows // (layout.newlines or 1)
        self.target = max(MIN_BLOCK_BYTES, min(MAX_BLOCK_BYTES, wanted))
        for piece in self._pieces(block, first_line, layout, top=True):
            self.objects += piece.objects
            self.lines += piece.lines
            yield from self.assembler.add(piece.table, piece.bad)

    def _pieces(
        self, block: bytes, first_line: int, layout: _LineLayout, top: bool = False, tried: bool = False
    ) -> list[_Piece]:
        """Fast path where it succeeds; failing stretches are split to find the few bad lines."""
        if top and self.skip:
            self.skip -= 1
            return [_slow_json_block(block, first_line, self.converter)]
        if not tried:
            table = self.fast.convert(block, layout)
            if table is not None:
                if top:
                    self.penalty = 0
                return [_Piece(table, [], table.num_rows, table.num_rows)]
        if not self.fast.enabled or len(block) < 2 * MIN_SPLIT_BYTES:
            return [_slow_json_block(block, first_line, self.converter)]
        parts = _split_block(block, first_line, min(SPLIT_FANOUT, len(block) // MIN_SPLIT_BYTES))
        tables = [self.fast.convert(part, part_layout) for part, _, part_layout in parts]
        if all(table is None for table in tables):
            if top:
                self.penalty = min(max(1, self.penalty * 2), 16)
                self.skip = self.penalty
            return [_slow_json_block(part, line, self.converter) for part, line, _ in parts]
        pieces = []
        for (part, line, part_layout), table in zip(parts, tables, strict=True):
            if table is not None:
                pieces.append(_Piece(table, [], table.num_rows, table.num_rows))
            else:
                pieces.extend(self._pieces(part, line, part_layout, tried=True))
        return pieces


# --------------------------------------------------------------------------------------------
# MessagePack


def _new_unpacker() -> msgpack.Unpacker:
    # timestamp=0 keeps ext -1 as msgpack.Timestamp (the C unpacker decodes it before ext_hook);
    # surrogateescape turns invalid UTF-8 in a str into a bad value instead of a failed stream.
    return msgpack.Unpacker(
        raw=False,
        timestamp=0,
        strict_map_key=False,
        unicode_errors="surrogateescape",
        ext_hook=tv.msgpack_ext_hook,
        max_buffer_size=MAX_MSGPACK_ITEM,
    )


_MSGPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException, msgpack.ExtraData, msgpack.FormatError)
_TIME_LIKE = (int, float, tv.EventTime, msgpack.Timestamp, msgpack.ExtType, tv.RawExt)


def _is_time_like(value: object) -> bool:
    return isinstance(value, _TIME_LIKE) and not isinstance(value, bool)


@dataclass
class _Entry:
    record: dict[Any, Any] | None
    entry_time: object
    raw: object
    problem: str | None = None


def _packed_entries(data: bytes, option: object) -> list[object]:
    """The [time, record] entries of a PackedForward message (gzip members when compressed)."""
    if isinstance(option, dict) and option.get("compressed") == "gzip":
        members = []
        while data:
            inflater = zlib.decompressobj(wbits=31)
            members.append(inflater.decompress(data, MAX_MSGPACK_ITEM))
            if inflater.unconsumed_tail or not inflater.eof:
                raise ValueError("compressed entries are truncated or too large")
            data = inflater.unused_data
        data = b"".join(members)
    unpacker = _new_unpacker()
    unpacker.feed(data)
    entries = list(unpacker)
    if unpacker.tell() != len(data):
        raise ValueError("entries end in the middle of an item")
    return entries


def _msgpack_entries(item: object) -> Iterator[_Entry]:
    """The records of one stream item: a map, or one of Fluentd's forward protocol shapes."""
    if isinstance(item, dict):
        yield _Entry(item, None, item)
        return
    if isinstance(item, list) and 2 <= len(item) <= 4:
        head = item[0]
        option = item[2] if len(item) == 3 else None
        if isinstance(head, str) and len(item) <= 3 and isinstance(item[1], (list, bytes)):
            # Forward / PackedForward mode: [tag, entries(, option)]
            entries = item[1]
            if isinstance(entries, bytes):
                try:
                    entries = _packed_entries(entries, option)
                except (*_MSGPACK_ERRORS, zlib.error) as exc:
                    yield _Entry(None, None, item, f"Fluentd packed entries do not decode: {exc}")
                    return
            for entry in entries:
                # The entry time is checked with the record, which may carry a usable time itself.
                if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict):
                    yield _Entry(entry[1], entry[0], entry)
                else:
                    yield _Entry(None, None, entry, "Fluentd forward entry is not [time, record]")
            return
        if isinstance(head, str) and len(item) >= 3 and isinstance(item[2], dict):
            yield _Entry(item[2], item[1], item)  # Message mode: [tag, time, record(, option)]
            return
        if len(item) == 2 and _is_time_like(head) and isinstance(item[1], dict):
            yield _Entry(item[1], head, item)  # [time, record]
            return
    yield _Entry(
        None,
        None,
        item,
        f"MessagePack item of the wrong shape ({_describe(item)}): expected a map, [time, record], "
        "[tag, time, record] or [tag, [[time, record], ...]]",
    )


def msgpack_items(chunks: Iterable[bytes]) -> Iterator[Any]:
    """The top-level MessagePack items of a byte stream; UnreadableObject names the byte where it breaks.

    Past a malformed or cut-off item nothing can be trusted, so the whole stream is refused."""
    unpacker = _new_unpacker()
    fed = complete = 0
    for chunk in chunks:
        try:
            unpacker.feed(chunk)
        except msgpack.BufferFull:
            raise UnreadableObject(
                f"MessagePack item at byte {complete} is larger than {MAX_MSGPACK_ITEM >> 20} MiB"
            ) from None
        fed += len(chunk)
        while True:
            try:
                item = unpacker.unpack()
            except msgpack.OutOfData:
                break
            except _MSGPACK_ERRORS as exc:
                detail = str(exc) or type(exc).__name__
                raise UnreadableObject(f"not valid MessagePack at byte {complete}: {detail}") from None
            complete = unpacker.tell()
            yield item
    if complete < fed:
        raise UnreadableObject(f"truncated MessagePack stream: the item at byte {complete} is incomplete")


def _read_msgpack(chunks: Iterable[bytes], table: TableDef, batch_rows: int) -> Iterator[ParsedBatch]:
    converter = _RecordConverter(table, "msgpack")
    assembler = _BatchAssembler(converter.schema, batch_rows)
    index = 0
    items = 0
    structured = 0
    bad: list[BadRecord] = []
    for item in msgpack_items(chunks):
        items += 1
        structured += isinstance(item, (dict, list, tuple))
        try:
            entries = list(_msgpack_entries(item))
        except Exception as exc:  # noqa: BLE001 - one item never fails its object
            entries = [_Entry(None, None, item, f"MessagePack item does not decode: {_unexpected(exc)}")]
        for entry in entries:
            index += 1
            reason = entry.problem
            if entry.record is not None:
                reason = converter.add(entry.record, entry.entry_time)
            if reason is not None:
                bad.append(BadRecord(index, reason, _render_json(entry.raw)))
            if converter.row_count + len(bad) >= batch_rows:
                yield from assembler.add(converter.take_table(), bad)
                bad = []
    yield from assembler.add(converter.take_table(), bad)
    yield from assembler.finish()
    if items and not structured:
        raise UnreadableObject(f"not MessagePack records: none of {items} items is a map or an array")


# --------------------------------------------------------------------------------------------
# CSV


class _ChunkStream(io.RawIOBase):
    """A readable raw stream over an iterator of byte chunks, for io.TextIOWrapper."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        size = min(len(target), len(self._pending))
        target[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def _read_csv(chunks: Iterable[bytes], table: TableDef, batch_rows: int) -> Iterator[ParsedBatch]:
    converter = _RecordConverter(table, "csv")
    assembler = _BatchAssembler(converter.schema, batch_rows)
    # Undecodable bytes become lone surrogates, found per record below, so the error can name the line.
    text = io.TextIOWrapper(
        io.BufferedReader(_ChunkStream(chunks), READ_SIZE), encoding="utf-8-sig", errors="surrogateescape",
        newline=""
    )
    reader = csv.reader(text)
    rendered = io.StringIO()
    # With an empty line terminator the writer would not quote fields holding newlines.
    writer = csv.writer(rendered, lineterminator="\r\n")
    header: list[str] | None = None
    bad: list[BadRecord] = []
    previous_line = 0
    while True:
        try:
            row = next(reader, None)
        except csv.Error as exc:
            raise UnreadableObject(f"CSV error at line {reader.line_num}: {exc}") from None
        if row is None:
            break
        start_line, previous_line = previous_line + 1, reader.line_num
        if not row:
            continue
        if not all(field.isascii() for field in row):
            _check_csv_utf8(row, start_line)
        if header is None:
            header = _csv_header(row, converter.sources)
            continue
        if len(row) != len(header):
            reason = f"row has {len(row)} fields, the header has {len(header)}"
        else:
            reason = converter.add(dict(zip(header, row, strict=True)))
        if reason is not None:
            rendered.seek(0)
            rendered.truncate()
            writer.writerow(row)
            bad.append(BadRecord(start_line, reason, rendered.getvalue()[:-2]))
        if converter.row_count + len(bad) >= batch_rows:
            yield from assembler.add(converter.take_table(), bad)
            bad = []
    yield from assembler.add(converter.take_table(), bad)
    yield from assembler.finish()


def _check_csv_utf8(row: list[str], line: int) -> None:
    try:
        "".join(row).encode("utf-8")
    except UnicodeEncodeError:
        raise UnreadableObject(f"invalid UTF-8 in CSV at line {line}") from None


def _csv_header(row: list[str], sources: frozenset[str]) -> list[str]:
    seen = set()
    for name in row:
        if name in seen:
            raise UnreadableObject(f"CSV header names {name!r} twice")
        seen.add(name)
    if not seen & sources:
        shown = ", ".join(repr(name) for name in row[:5])
        raise UnreadableObject(
            f"CSV has no header: its first line ({shown}{', ...' if len(row) > 5 else ''}) "
            "names none of the table's fields"
        )
    return row
