"""Whole-column conversions with Arrow kernels that agree with the per-record rules (siltlake.records.coerce)
or give None, never a different value: texts and epoch numbers to microseconds, date texts to days.

The JSON lines fast path and the load's vectorised CSV path both use them.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from siltlake import timevalues as tv

_CANONICAL_DATE = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_CANONICAL_TIME = _CANONICAL_DATE + r"[T ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
_CANONICAL_ZONE = r"(?:Z|[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9])?)"
_CANONICAL_ZONED = re.compile(_CANONICAL_TIME + _CANONICAL_ZONE)
_CANONICAL_NAIVE = re.compile(_CANONICAL_TIME)
_ISO_RE2 = "^" + tv.ISO_PATTERN + "$"
_MIN_DAYS = tv.MIN_MICROS // (86400 * tv.MICROS_PER_SECOND)


@functools.cache
def _days_in_month() -> pa.Array:
    # Made on first use: pyarrow's first conversion of Python values imports pandas (0.2 s) where it is installed.
    return pa.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], pa.int64())


def all_true(mask: pa.ChunkedArray | pa.Array) -> bool:
    # All-null and empty inputs aggregate to null, which means "nothing failed".
    return pc.all(mask).as_py() is not False


def within(values: pa.ChunkedArray | pa.Array, low: int | float | Decimal, high: int | float | Decimal) -> bool:
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


def _iso_general(values: pa.ChunkedArray, naive_is_utc: bool = True) -> pa.ChunkedArray | None:
    """Vectorised tv.parse_iso_timestamp for every spelling it accepts (with naive texts only when they are
    UTC: else None)."""
    parts = pc.extract_regex(values, _ISO_RE2)
    if parts.null_count != values.null_count:
        return None
    if not naive_is_utc:
        zoned = pc.or_(
            pc.not_equal(pc.struct_field(parts, "utc"), ""), pc.not_equal(pc.struct_field(parts, "sign"), "")
        )
        if not all_true(zoned):
            return None
    year, month, day = _digits(parts, "year", 1), _digits(parts, "month", 1), _digits(parts, "day", 1)
    hour, minute, second = _digits(parts, "hour", 1), _digits(parts, "minute", 1), _digits(parts, "second", 1)
    offset_hour, offset_minute = _digits(parts, "offset_hour", 1), _digits(parts, "offset_minute", 1)
    if not (
        within(month, 1, 12)
        and within(hour, 0, 23)
        and within(minute, 0, 59)
        and within(second, 0, 59)
        and within(offset_hour, 0, 23)
        and within(offset_minute, 0, 59)
    ):
        return None
    leap = pc.and_(
        pc.equal(pc.modulo(year, 4), 0),
        pc.or_(pc.not_equal(pc.modulo(year, 100), 0), pc.equal(pc.modulo(year, 400), 0)),
    )
    month_days = pc.add(pc.take(_days_in_month(), month), pc.cast(pc.and_(leap, pc.equal(month, 2)), pa.int64()))
    if not (within(day, 1, 31) and all_true(pc.less_equal(day, month_days))):
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
    if not _all_canonical_by_position(values, zoned) and not all_true(
        pc.match_substring_regex(values, "^" + pattern + "$")
    ):
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


def _all_canonical_by_position(values: pa.ChunkedArray, zoned: bool) -> bool:
    """True only when every value matches the canonical pattern: a chunk's values of one length, none null, each
    character checked where it stands (a pass over a matrix of the bytes, a third of the regex's time). Zoned, the
    zone must be Z. False says nothing: the regex decides."""
    for chunk in values.chunks:
        count = len(chunk)
        if not count:
            continue
        if chunk.null_count or not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
            return False
        _, offsets_buffer, data_buffer = chunk.buffers()
        offset_type = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
        offsets = np.frombuffer(offsets_buffer, offset_type, count + 1, chunk.offset * np.dtype(offset_type).itemsize)
        width = int(offsets[1] - offsets[0])
        if width < 19 or int(offsets[-1] - offsets[0]) != width * count or not (np.diff(offsets) == width).all():
            return False
        text = np.frombuffer(data_buffer, np.uint8, width * count, int(offsets[0])).reshape(count, width)
        if not _canonical_rows(text, zoned):
            return False
    return True


def _canonical_rows(text: np.ndarray, zoned: bool) -> bool:
    """Whether every row of bytes spells YYYY-MM-DD[T ]HH:MM:SS, then .d{1,9} or nothing, then Z when zoned."""
    width = text.shape[1]
    fraction = width - (20 if zoned else 19)  # its digits and point
    if fraction < 0 or fraction == 1 or fraction > 10:
        return False
    low, high = _canonical_bounds(width, zoned)
    if not ((text >= low) & (text <= high)).all():
        return False
    if not ((text[:, 10] == ord("T")) | (text[:, 10] == ord(" "))).all():
        return False
    value = text[:, [5, 6, 8, 9, 11, 12]].astype(np.int16) - ord("0")
    month, day, hour = value[:, 0] * 10 + value[:, 1], value[:, 2] * 10 + value[:, 3], value[:, 4] * 10 + value[:, 5]
    return bool(((month >= 1) & (month <= 12) & (day >= 1) & (day <= 31) & (hour <= 23)).all())


@functools.cache
def _canonical_bounds(width: int, zoned: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each position's lowest and highest byte in a canonical time of this width (the tens of a minute and a
    second at most 5; the month's, day's and hour's values, and T or space, are checked apart)."""
    layout = "dddd-dd-dd?dd:dd:dd" + ("." + "d" * (width - 20 - zoned) if width > 19 + zoned else "") + "Z" * zoned
    low = np.array([ord("0") if c == "d" else ord(" ") if c == "?" else ord(c) for c in layout], np.uint8)
    high = np.array([ord("9") if c == "d" else ord("T") if c == "?" else ord(c) for c in layout], np.uint8)
    high[[14, 17]] = ord("5")
    return low, high


def strings_to_micros(values: pa.ChunkedArray, naive_zone: str = "UTC") -> pa.ChunkedArray | None:
    """Microseconds of ISO-8601 texts; those without an offset are wall times in naive_zone."""
    first = _first_valid(values)
    if first is None:
        return pc.cast(values, pa.int64())
    micros = None
    if _CANONICAL_ZONED.fullmatch(first):
        micros = _iso_canonical(values, zoned=True)
    elif _CANONICAL_NAIVE.fullmatch(first):
        micros = _iso_canonical(values, zoned=False)
        if micros is not None and naive_zone != "UTC":
            return _wall_times(micros, naive_zone)
    if micros is not None:
        return micros
    return _iso_general(values, naive_zone == "UTC")


def _wall_times(micros: pa.ChunkedArray, zone: str) -> pa.ChunkedArray | None:
    """Wall times in `zone` as UTC microseconds: the earlier instant of a repeated one (as Python's fold=0);
    None when one falls in a gap, which the per-record rules refuse."""
    try:
        local = pc.assume_timezone(pc.cast(micros, pa.timestamp("us")), zone, ambiguous="earliest", nonexistent="raise")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return pc.cast(local, pa.int64())


def epochs_to_micros(values: pa.ChunkedArray, epoch_unit: str) -> pa.ChunkedArray | None:
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
    if not all_true(pc.less(pc.abs(scaled), float(1 << 53))):
        return None
    return pc.cast(pc.round(scaled, 0, round_mode="half_to_even"), pa.int64())


def dates_to_days(values: pa.ChunkedArray) -> pa.ChunkedArray | None:
    if not all_true(pc.match_substring_regex(values, "^" + _CANONICAL_DATE + "$")):
        return None
    try:
        days = pc.cast(values, pa.date32())
    except pa.ArrowInvalid:
        return None
    if not within(pc.cast(days, pa.int32()), _MIN_DAYS, 1 << 31):
        return None
    return days
