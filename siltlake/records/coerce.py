"""Per-record coercion, the reference rules of docs/coercion.md: every format's values become column values
through RecordConverter, which also says why a record cannot become a row."""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from siltlake import timevalues as tv
from siltlake.coltypes import decimal_parts
from siltlake.tabledef import Column, TableDef

INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)
FLOAT32_MAX = 3.4028234663852886e38  # larger magnitudes would round to infinity


class _Reject(Exception):
    """A record is bad; the message is the BadRecord reason."""


def unexpected_reason(exc: Exception) -> str:
    """The bad-record reason for an exception no coercion rule foresaw: one record never fails its object."""
    return f"{type(exc).__name__}: {exc}"


class JsonFloat(float):
    """A JSON number with a fraction or exponent, remembering the text it was written as."""

    __slots__ = ("text",)
    text: str


def _json_float(text: str) -> JsonFloat:
    value = JsonFloat(text)
    value.text = text
    return value


JSON_DECODER = json.JSONDecoder(parse_float=_json_float)


def _show(value: object) -> str:
    if isinstance(value, JsonFloat):
        text = value.text
    elif isinstance(value, (dict, list)):
        text = render_json(value)
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe(value: object) -> str:
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
    return render_json(key)


def render_json(value: object) -> str:
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
    """render_json with an explicit stack: a MessagePack item may nest deeper than Python's recursion limit."""
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
        elif type(item) is list or type(item) is tuple:  # not ExtType and kin, which are named tuples
            pending = [_Literal("[")]
            for index, member in enumerate(item):
                pending += [_Literal(",")] if index else []
                pending.append(member)
            stack.extend(reversed([*pending, _Literal("]")]))
        else:
            parts.append(render_json(item))
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
            raise _Reject(f"{_show(value)} is {describe(value)}, not {an}")
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
        raise _Reject(f"{_show(value)} is {describe(value)}, not a {what}")
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
        raise _Reject(f"{_show(value)} is {describe(value)}, not a date string YYYY-MM-DD")
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
            raise _Reject(f"{_show(value)} is {describe(value)}, not a {type_name}")
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
    if kind in TEXT_KINDS:

        def from_text(value: object) -> str:
            assert isinstance(value, str)
            try:
                parsed = JSON_DECODER.decode(value)
            except (ValueError, RecursionError):
                raise _Reject(f"{_show(value)} is not JSON text") from None
            return _compact_json(parsed)

        return from_text
    if kind == "msgpack":
        return lambda value: _compact_json(_jsonable(value))
    return _compact_json


def _timestamp_coercer(epoch_unit: str, naive_zone: str) -> Callable[[object], int]:
    def coerce(value: object) -> int:
        try:
            return tv.parse_event_time(value, epoch_unit, naive_zone)
        except ValueError as exc:
            raise _Reject(str(exc)) from None

    return coerce


def _coercer(column: Column, epoch_unit: str, kind: str, naive_zone: str) -> Callable[[object], Any]:
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
        return _timestamp_coercer(epoch_unit, naive_zone)
    if type_name == "date":
        return _to_date
    if type_name == "json":
        return _json_coercer(kind)
    return _decimal_coercer(*decimal_parts(type_name))


def value_coercer(column: Column, table: TableDef) -> Callable[[object], Any]:
    """Coerces one value, as a JSON-lines record would hold it, to the column's type by the rules above (a
    column's rewrite to a new type converts its values as the stream would have); ValueError gives the reason."""
    coerce = _coercer(column, table.epoch_unit, "jsonl", table.naive_zone)

    def checked(value: object) -> Any:
        try:
            return coerce(value)
        except _Reject as exc:
            raise ValueError(str(exc)) from None

    return checked


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
    raise _Reject(
        f"{tv.format_micros(micros)} is {where} in the table's time zone {timezone}, "
        "so it has no partition date (partition dates are in years 1..9999)"
    )


# Formats whose values are all text: a json column's value is JSON text, and in a column of another type
# than string these texts are null (what a CSV writer leaves empty, what an access log writes for "none").
TEXT_KINDS = ("csv", "ltsv")
NULL_TEXTS = {"csv": frozenset({""}), "ltsv": frozenset({"", "-"})}


@dataclass(frozen=True)
class _ColumnPlan:
    column: Column
    source: str
    coerce: Callable[[object], Any]
    required: bool
    is_time: bool
    empty_is_null: bool
    label: str


class RecordConverter:
    """Turns records (dicts of input fields) into column values, or says why it cannot.

    With `dropped`, the values of fields that are no column (unknown_fields = "ignore") are counted there
    by field name, for the rows made."""

    def __init__(self, table: TableDef, kind: str, dropped: Counter[str] | None = None) -> None:
        self.schema = table.arrow_schema()
        self.kind = kind
        self.timezone = table.timezone
        self.reject_unknown = table.unknown_fields == "reject"
        self.sources = frozenset(column.source_field for column in table.columns)
        self.dropped = dropped
        self.null_texts = NULL_TEXTS.get(kind, frozenset())
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
                    coerce=_coercer(column, table.epoch_unit, kind, table.naive_zone),
                    required=is_time or not column.nullable,
                    is_time=is_time,
                    empty_is_null=kind in TEXT_KINDS and column.type != "string",
                    label=label,
                )
            )
        self.columns: list[list[Any]] = [[] for _ in self.plans]
        self.naive_zone = table.naive_zone

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
        except Exception as exc:  # see the docstring
            return unexpected_reason(exc)
        for values, value in zip(self.columns, row, strict=True):
            values.append(value)
        if self.dropped is not None and not self.reject_unknown:
            self._count_dropped(record)
        return None

    def _count_dropped(self, record: dict[Any, Any]) -> None:
        unknown = record.keys() - self.sources
        if unknown:
            absent = None if self.kind not in TEXT_KINDS else ""
            dropped = self.dropped
            assert dropped is not None
            for key in unknown:
                if record[key] != absent:
                    dropped[_key_text(key)] += 1

    def _row(self, record: dict[Any, Any], entry_time: object) -> list[Any]:
        if self.reject_unknown:
            absent = "" if self.kind in TEXT_KINDS else None
            unknown = [_key_text(key) for key, value in record.items() if key not in self.sources and value != absent]
            if unknown:
                raise _Reject(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))}")
        row: list[Any] = []
        for plan in self.plans:
            value = record.get(plan.source)
            if plan.empty_is_null and value in self.null_texts:
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
            except Exception as exc:  # named with its column; the record is bad, see add()
                raise _Reject(f"{prefix}: {unexpected_reason(exc)}") from None
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
            entry = tv.parse_event_time(entry_time, "s", self.naive_zone)
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
