"""Event times: ISO-8601 / RFC 3339 strings, epoch numbers and MessagePack time extensions.

Every event time becomes an integer count of microseconds since 1970-01-01T00:00:00Z.
The rules are written out in docs/coercion.md; the vectorised conversions in siltlake.records.vectorised
implement the same rules with Arrow kernels and are tested against this module.
"""

from __future__ import annotations

import math
import re
import struct
from datetime import UTC, date, datetime
from typing import NamedTuple
from zoneinfo import ZoneInfo

import msgpack

MICROS_PER_SECOND = 1_000_000
# 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z: what Python's datetime and
# Parquet/Trino readers can render without surprises.
MIN_MICROS = -62_135_596_800 * MICROS_PER_SECOND
MAX_MICROS = 253_402_300_800 * MICROS_PER_SECOND - 1

EPOCH_UNITS = ("s", "ms", "us", "ns")
# Integer epochs are scaled exactly; ns is divided (floor) instead.
INT_EPOCH_SCALE = {"s": 1_000_000, "ms": 1_000, "us": 1}

MSGPACK_TIMESTAMP_EXT = -1
FLUENTD_EVENT_TIME_EXT = 0

# Both re (via fullmatch) and RE2 (Arrow's match/extract kernels, with ^...$) must read
# this pattern the same way: hence [0-9] rather than \d, which is Unicode-aware in Python.
ISO_PATTERN = (
    r"[ \t]*(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"(?:[Tt ](?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})"
    r"(?::(?P<second>[0-9]{2})(?:[.,](?P<fraction>[0-9]+))?)?"
    r"(?:(?P<utc>[Zz])| ?(?P<sign>[+-])(?P<offset_hour>[0-9]{2})(?::?(?P<offset_minute>[0-9]{2}))?)?)?"
    r"[ \t]*"
)
_ISO = re.compile(ISO_PATTERN)
# The Common Log Format's time, as Apache and nginx ($time_local) write it, in its brackets or not:
# 10/Oct/2000:13:55:36 -0700.
_CLF = re.compile(
    r"[ \t]*(?P<open>\[)?(?P<day>[0-9]{2})/(?P<month_name>[A-Za-z]{3})/(?P<year>[0-9]{4})"
    r":(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?: (?P<sign>[+-])(?P<offset_hour>[0-9]{2})(?P<offset_minute>[0-9]{2}))?(?(open)\])[ \t]*"
)
_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
    )
}
DATE_PATTERN = r"[ \t]*(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})[ \t]*"
_DATE = re.compile(DATE_PATTERN)
INTEGER_PATTERN = r"[ \t]*[+-]?[0-9]+[ \t]*"
_INTEGER = re.compile(INTEGER_PATTERN)
NUMBER_PATTERN = r"[ \t]*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t]*"
_NUMBER = re.compile(NUMBER_PATTERN)

_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class EventTime(NamedTuple):
    """A Fluentd EventTime (ext type 0): whole seconds and nanoseconds since the epoch."""

    seconds: int
    nanoseconds: int


class RawExt(NamedTuple):
    """An ext value with a negative (reserved) code, which msgpack.ExtType refuses to hold."""

    code: int
    data: bytes


def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    return 29 if month == 2 and is_leap_year(year) else _DAYS_IN_MONTH[month]


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (year 0 allowed)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def parse_date(value: str) -> int:
    """Days since 1970-01-01 of a 'YYYY-MM-DD' string (surrounding spaces/tabs allowed)."""
    match = _DATE.fullmatch(value)
    if not match:
        raise ValueError(f"{_show(value)} is not a date: expected YYYY-MM-DD")
    year, month, day = int(match["year"]), int(match["month"]), int(match["day"])
    if year < 1 or not 1 <= month <= 12 or not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"{_show(value)} is not a valid calendar date")
    return days_from_civil(year, month, day)


def parse_iso_timestamp(value: str, naive_zone: str = "UTC") -> int:
    """UTC microseconds of an ISO-8601 / RFC 3339 string; no offset means a wall time in naive_zone."""
    match = _ISO.fullmatch(value)
    if not match:
        expected = "ISO-8601 such as 2024-05-01T12:34:56.789Z or an epoch number"
        raise ValueError(f"{_show(value)} is not a timestamp: expected {expected}")
    return _iso_match_micros(match, value, naive_zone)


def _iso_match_micros(match: re.Match[str], value: str, naive_zone: str = "UTC") -> int:
    year = int(match["year"])
    names = match.groupdict()
    month = _MONTHS.get(names["month_name"].lower(), 0) if "month_name" in names else int(match["month"])
    day = int(match["day"])
    if not 1 <= month <= 12 or not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"{_show(value)} is not a valid calendar date")
    hour = int(match["hour"] or 0)
    minute = int(match["minute"] or 0)
    second = int(match["second"] or 0)
    # A leap second (:60) is refused rather than folded into the next minute.
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{_show(value)} has an invalid time of day")
    fraction = match.groupdict().get("fraction") or ""
    # Digits beyond the sixth are dropped, which rounds toward the past because the
    # fraction is always a positive offset from the (whole-minute-offset) second.
    micros = int(fraction[:6].ljust(6, "0"))
    offset = 0
    if match["sign"]:
        offset_hour = int(match["offset_hour"])
        offset_minute = int(match["offset_minute"] or 0)
        if offset_hour > 23 or offset_minute > 59:
            raise ValueError(f"{_show(value)} has an invalid UTC offset")
        offset = (offset_hour * 3600 + offset_minute * 60) * (-1 if match["sign"] == "-" else 1)
    elif naive_zone != "UTC" and not match.groupdict().get("utc"):
        offset = _wall_offset(year, month, day, hour, minute, second, naive_zone, value)
    seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset
    return _checked(seconds * MICROS_PER_SECOND + micros, value)


def _wall_offset(
    year: int, month: int, day: int, hour: int, minute: int, second: int, zone: str, original: object
) -> int:
    """Seconds east of UTC of a wall time in `zone`: the earlier instant of one a clock change repeats (as
    Python's fold=0); a wall time a clock change skips is no time at all."""
    if year < 1:
        raise ValueError(f"{_show(original)} is outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999Z")
    wall = datetime(year, month, day, hour, minute, second, tzinfo=ZoneInfo(zone))
    before, after = wall.utcoffset(), wall.replace(fold=1).utcoffset()
    assert before is not None and after is not None
    if before < after:  # in a gap, fold=0 takes the offset from before the change and fold=1 the one after
        raise ValueError(f"{_show(original)} does not exist in the time zone {zone} (a clock change skips it)")
    return int(before.total_seconds())


def epoch_int_to_micros(value: int, epoch_unit: str) -> int:
    """Exact conversion of an integer epoch; nanoseconds are floored to microseconds."""
    if epoch_unit == "ns":
        return value // 1000
    return value * INT_EPOCH_SCALE[epoch_unit]


def epoch_float_to_micros(value: float, epoch_unit: str) -> int:
    """Double-precision scaling, then rounding half to even.

    A double carries ~0.2 us of precision at current dates, so truncating would turn
    1714566896.123456 into ...455; rounding keeps the intended microsecond.
    """
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite epoch number")
    scaled = value / 1000.0 if epoch_unit == "ns" else value * float(INT_EPOCH_SCALE[epoch_unit])
    if not math.isfinite(scaled):
        raise ValueError(f"epoch {value!r} {epoch_unit} is out of range")
    return round(scaled)


def split_seconds_nanos_to_micros(seconds: int, nanoseconds: int) -> int:
    """Microseconds of a (seconds, nanoseconds) pair, sub-microsecond part floored."""
    return seconds * MICROS_PER_SECOND + nanoseconds // 1000


def parse_event_time(value: object, epoch_unit: str = "s", naive_zone: str = "UTC") -> int:
    """UTC epoch microseconds of an event time value; ValueError says why it is not one.

    Accepts ISO-8601 strings and Common Log Format times, epoch numbers (int/float, or strings of
    them) in epoch_unit, Fluentd EventTime, msgpack.Timestamp, ext types -1/0 left undecoded
    (ExtType/RawExt), and datetimes. A string or datetime without an offset is a wall time in naive_zone.
    """
    if epoch_unit not in EPOCH_UNITS:
        raise ValueError(f"epoch unit {epoch_unit!r} is not one of {', '.join(EPOCH_UNITS)}")
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean, not a timestamp")
    if isinstance(value, int):
        return _checked(epoch_int_to_micros(value, epoch_unit), value)
    if isinstance(value, float):
        return _checked(epoch_float_to_micros(value, epoch_unit), value)
    if isinstance(value, str):
        match = _ISO.fullmatch(value)
        if match:
            return _iso_match_micros(match, value, naive_zone)
        if _INTEGER.fullmatch(value):
            return _checked(epoch_int_to_micros(int(value), epoch_unit), value)
        if _NUMBER.fullmatch(value):
            return _checked(epoch_float_to_micros(float(value), epoch_unit), value)
        match = _CLF.fullmatch(value)
        if match:
            return _iso_match_micros(match, value, naive_zone)
        return parse_iso_timestamp(value)  # raises with the ISO explanation
    if isinstance(value, EventTime):
        return _checked(split_seconds_nanos_to_micros(value.seconds, value.nanoseconds), value)
    if isinstance(value, msgpack.Timestamp):
        return _checked(split_seconds_nanos_to_micros(value.seconds, value.nanoseconds), value)
    if isinstance(value, (msgpack.ExtType, RawExt)):
        if value.code == MSGPACK_TIMESTAMP_EXT:
            return _checked(split_seconds_nanos_to_micros(*decode_msgpack_timestamp(value.data)), value)
        if value.code == FLUENTD_EVENT_TIME_EXT:
            return _checked(split_seconds_nanos_to_micros(*decode_fluentd_event_time(value.data)), value)
        raise ValueError(f"MessagePack ext type {value.code} is not a timestamp")
    if isinstance(value, datetime):
        offset = 0
        if value.tzinfo is None:
            if naive_zone != "UTC":
                offset = _wall_offset(
                    value.year, value.month, value.day, value.hour, value.minute, value.second, naive_zone, value
                )
            value = value.replace(tzinfo=UTC)
        delta = value - datetime(1970, 1, 1, tzinfo=UTC)
        seconds = delta.days * 86400 + delta.seconds - offset
        return _checked(seconds * MICROS_PER_SECOND + delta.microseconds, value)
    if isinstance(value, date):
        days = days_from_civil(value.year, value.month, value.day)
        return _checked(days * 86400 * MICROS_PER_SECOND, value)
    raise ValueError(f"a {type(value).__name__} value is not a timestamp")


def decode_msgpack_timestamp(data: bytes) -> tuple[int, int]:
    """(seconds, nanoseconds) of a MessagePack Timestamp ext (-1) payload in any of its layouts."""
    if len(data) == 4:
        return struct.unpack(">I", data)[0], 0
    if len(data) == 8:
        packed = struct.unpack(">Q", data)[0]
        seconds, nanoseconds = packed & 0x3_FFFF_FFFF, packed >> 34
    elif len(data) == 12:
        nanoseconds, seconds = struct.unpack(">Iq", data)
    else:
        raise ValueError(f"MessagePack timestamp payload has {len(data)} bytes; expected 4, 8 or 12")
    if nanoseconds >= 1_000_000_000:
        raise ValueError(f"MessagePack timestamp has {nanoseconds} nanoseconds; must be below 10**9")
    return seconds, nanoseconds


def encode_msgpack_timestamp(seconds: int, nanoseconds: int = 0) -> bytes:
    """The shortest Timestamp ext (-1) payload for (seconds, nanoseconds)."""
    if not 0 <= nanoseconds < 1_000_000_000:
        raise ValueError("nanoseconds must be in [0, 10**9)")
    if seconds >> 34 == 0:
        if nanoseconds == 0 and seconds >> 32 == 0:
            return struct.pack(">I", seconds)
        return struct.pack(">Q", nanoseconds << 34 | seconds)
    return struct.pack(">Iq", nanoseconds, seconds)


def decode_fluentd_event_time(data: bytes) -> tuple[int, int]:
    """(seconds, nanoseconds) of a Fluentd EventTime ext (0): big-endian uint32 + uint32."""
    if len(data) != 8:
        raise ValueError(f"Fluentd EventTime payload has {len(data)} bytes; expected 8")
    seconds, nanoseconds = struct.unpack(">II", data)
    if nanoseconds >= 1_000_000_000:
        raise ValueError(f"Fluentd EventTime has {nanoseconds} nanoseconds; must be below 10**9")
    return seconds, nanoseconds


def encode_fluentd_event_time(seconds: int, nanoseconds: int = 0) -> msgpack.ExtType:
    """An ext type 0 value for msgpack.packb, as Fluentd's forward protocol sends it."""
    return msgpack.ExtType(FLUENTD_EVENT_TIME_EXT, struct.pack(">II", seconds, nanoseconds))


def msgpack_ext_hook(code: int, data: bytes) -> object:
    """ext_hook for msgpack.Unpacker: time extensions become values parse_event_time reads.

    A malformed payload is kept as an ExtType so that it makes one record bad instead of
    making the whole stream undecodable.
    """
    try:
        if code == FLUENTD_EVENT_TIME_EXT:
            return EventTime(*decode_fluentd_event_time(data))
        if code == MSGPACK_TIMESTAMP_EXT:
            return msgpack.Timestamp(*decode_msgpack_timestamp(data))
    except ValueError:
        pass
    return msgpack.ExtType(code, data) if code >= 0 else RawExt(code, data)


def format_micros(micros: int) -> str:
    """RFC 3339 text of UTC microseconds, for messages and tests."""
    seconds, fraction = divmod(micros, MICROS_PER_SECOND)
    days, second_of_day = divmod(seconds, 86400)
    moment = date.fromordinal(days + 719163)
    hour, rest = divmod(second_of_day, 3600)
    minute, second = divmod(rest, 60)
    return f"{moment.isoformat()}T{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}Z"


def _checked(micros: int, original: object) -> int:
    if not MIN_MICROS <= micros <= MAX_MICROS:
        raise ValueError(f"{_show(original)} is outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999Z")
    return micros


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
