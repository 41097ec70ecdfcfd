"""Event-time parsing: ISO strings, epoch numbers, MessagePack Timestamp and Fluentd EventTime."""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime, timedelta, timezone

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from siltlake import timevalues as tv

EPOCH_2024 = 1_714_566_896  # 2024-05-01T12:34:56Z
US = 1_000_000


def iso_micros(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * US + delta.microseconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:34:56Z", EPOCH_2024 * US),
        ("2024-05-01T12:34:56z", EPOCH_2024 * US),
        ("2024-05-01t12:34:56", EPOCH_2024 * US),
        ("2024-05-01 12:34:56", EPOCH_2024 * US),
        ("2024-05-01T12:34:56.5Z", EPOCH_2024 * US + 500_000),
        ("2024-05-01T12:34:56,25Z", EPOCH_2024 * US + 250_000),
        ("2024-05-01T12:34:56.123456Z", EPOCH_2024 * US + 123_456),
        ("2024-05-01T12:34:56.123456999Z", EPOCH_2024 * US + 123_456),  # truncated, not rounded
        ("2024-05-01T12:34:56.1234569999999Z", EPOCH_2024 * US + 123_456),
        ("2024-05-01T21:34:56+09:00", EPOCH_2024 * US),
        ("2024-05-01T21:34:56+0900", EPOCH_2024 * US),
        ("2024-05-01T21:34:56+09", EPOCH_2024 * US),
        ("2024-05-01 21:34:56 +0900", EPOCH_2024 * US),
        ("2024-05-01T07:04:56-05:30", EPOCH_2024 * US),
        ("2024-05-01T12:34:56-00:00", EPOCH_2024 * US),
        ("2024-05-01T12:34", (EPOCH_2024 - 56) * US),
        ("2024-05-01T12:34Z", (EPOCH_2024 - 56) * US),
        ("2024-05-01", (EPOCH_2024 - 45296) * US),
        ("  2024-05-01T12:34:56Z\t", EPOCH_2024 * US),
        ("1970-01-01T00:00:00Z", 0),
        ("1969-12-31T23:59:59.9999999Z", -1),  # before 1970 truncation still goes toward the past
        ("0001-01-01T00:00:00Z", tv.MIN_MICROS),
        ("9999-12-31T23:59:59.999999999Z", tv.MAX_MICROS),
        ("2024-02-29T00:00:00Z", iso_micros(datetime(2024, 2, 29, tzinfo=UTC))),
        ("2000-02-29T00:00:00Z", iso_micros(datetime(2000, 2, 29, tzinfo=UTC))),
        ("0000-12-31T23:00:00-05:00", tv.MIN_MICROS + 4 * 3600 * US),  # year 0 is fine if UTC is in range
    ],
)
def test_iso_strings(text: str, expected: int) -> None:
    assert tv.parse_event_time(text) == expected
    assert tv.parse_iso_timestamp(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2024-02-30T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2024-13-01T00:00:00Z",
        "2024-00-10T00:00:00Z",
        "2024-05-00T00:00:00Z",
        "2024-05-01T24:00:00Z",
        "2024-05-01T23:60:00Z",
        "2024-05-01T23:59:60Z",  # leap seconds are refused
        "2024-05-01T12:00:00+24:00",
        "2024-05-01T12:00:00+09:60",
        "2024-05-01T12:00:00.Z",
        "2024-05-01T12Z",
        "2024-5-01T12:00:00Z",
        "2024-05-01T12:00:00 Z",
        "2024-05-01T12:00:00UTC",
        "2024-05-01X12:00:00",
        "２０２４-05-01T12:00:00Z",  # full-width digits are not digits here
        "0000-01-01T00:00:00Z",
        "0001-01-01T00:00:00+00:01",
        "9999-12-31T23:59:59-00:01",
        "yesterday",
        "",
        "2024-05-01T12:00:00Z\n",
    ],
)
def test_invalid_iso_strings(text: str) -> None:
    with pytest.raises(ValueError):
        tv.parse_event_time(text)


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (EPOCH_2024, "s", EPOCH_2024 * US),
        (EPOCH_2024 * 1000 + 7, "ms", EPOCH_2024 * US + 7000),
        (EPOCH_2024 * US + 7, "us", EPOCH_2024 * US + 7),
        (EPOCH_2024 * US * 1000 + 7999, "ns", EPOCH_2024 * US + 7),
        (-1, "ns", -1),  # floor, toward the past
        (-1500, "ns", -2),
        (0, "s", 0),
        (-86400, "s", -86400 * US),
        (1714566896.123456, "s", EPOCH_2024 * US + 123_456),  # rounded: the double is ...123455.9
        (1714566896123.5, "ms", EPOCH_2024 * US + 123_500),
        (0.5, "us", 0),  # half to even
        (1.5, "us", 2),
        (1500.0, "ns", 2),
        (str(EPOCH_2024), "s", EPOCH_2024 * US),
        (" 1714566896 ", "s", EPOCH_2024 * US),
        ("1714566896.25", "s", EPOCH_2024 * US + 250_000),
        ("-5", "ms", -5000),
    ],
)
def test_epoch_numbers(value: object, unit: str, expected: int) -> None:
    assert tv.parse_event_time(value, unit) == expected


@pytest.mark.parametrize(
    ("value", "unit"),
    [
        (True, "s"),
        (False, "ms"),
        (float("nan"), "s"),
        (float("inf"), "s"),
        (1e300, "s"),
        (10**20, "s"),
        (-(10**20), "ms"),
        ("1_000", "s"),
        ("0x10", "s"),
        ("nan", "s"),
        ([1], "s"),
        ({"a": 1}, "s"),
        (None, "s"),
        (b"1714566896", "s"),
        (1, "minutes"),
    ],
)
def test_values_that_are_not_event_times(value: object, unit: str) -> None:
    with pytest.raises(ValueError):
        tv.parse_event_time(value, unit)


def test_datetimes() -> None:
    aware = datetime(2024, 5, 1, 21, 34, 56, 7, tzinfo=timezone(timedelta(hours=9)))
    assert tv.parse_event_time(aware) == EPOCH_2024 * US + 7
    assert tv.parse_event_time(datetime(2024, 5, 1, 12, 34, 56)) == EPOCH_2024 * US
    assert tv.parse_event_time(date(1970, 1, 2)) == 86400 * US


def test_parse_date() -> None:
    assert tv.parse_date("1970-01-01") == 0
    assert tv.parse_date("2024-05-01") == date(2024, 5, 1).toordinal() - date(1970, 1, 1).toordinal()
    assert tv.parse_date(" 0001-01-01 ") == date(1, 1, 1).toordinal() - date(1970, 1, 1).toordinal()
    for bad in ("0000-01-01", "2023-02-29", "2024-05-01T00:00:00Z", "2024/05/01", "20240501", ""):
        with pytest.raises(ValueError):
            tv.parse_date(bad)


# --- MessagePack Timestamp (ext -1) and Fluentd EventTime (ext 0) -----------------------------


def test_timestamp32_layout() -> None:
    data = struct.pack(">I", EPOCH_2024)
    assert tv.decode_msgpack_timestamp(data) == (EPOCH_2024, 0)
    assert tv.decode_msgpack_timestamp(b"\xff\xff\xff\xff") == (2**32 - 1, 0)


def test_timestamp64_layout() -> None:
    # 30-bit nanoseconds in the high bits, 34-bit seconds in the low bits.
    seconds, nanos = 2**34 - 1, 999_999_999
    data = struct.pack(">Q", (nanos << 34) | seconds)
    assert tv.decode_msgpack_timestamp(data) == (seconds, nanos)
    data = bytes([0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01])  # nanos=1, seconds=1
    assert tv.decode_msgpack_timestamp(data) == (1, 1)


def test_timestamp96_layout_including_before_1970() -> None:
    data = struct.pack(">I", 123_456_789) + struct.pack(">q", -1)
    assert tv.decode_msgpack_timestamp(data) == (-1, 123_456_789)
    assert tv.parse_event_time(msgpack.Timestamp(-1, 123_456_789)) == -US + 123_456
    data = struct.pack(">Iq", 5, -62_135_596_800)
    assert tv.decode_msgpack_timestamp(data) == (-62_135_596_800, 5)


def test_timestamp_bad_payloads() -> None:
    for data in (b"", b"\x00" * 5, b"\x00" * 16):
        with pytest.raises(ValueError, match="bytes"):
            tv.decode_msgpack_timestamp(data)
    with pytest.raises(ValueError, match="nanoseconds"):
        tv.decode_msgpack_timestamp(struct.pack(">Q", (1_000_000_000 << 34) | 1))
    with pytest.raises(ValueError, match="nanoseconds"):
        tv.decode_msgpack_timestamp(struct.pack(">Iq", 1_000_000_000, 0))


def test_fluentd_event_time() -> None:
    data = bytes.fromhex("6632376f075bcd15")  # seconds, nanoseconds as big-endian uint32
    assert tv.decode_fluentd_event_time(data) == (0x6632376F, 123_456_789)
    assert tv.parse_event_time(tv.EventTime(0x6632376F, 123_456_789)) == 0x6632376F * US + 123_456
    with pytest.raises(ValueError):
        tv.decode_fluentd_event_time(b"\x00" * 7)
    with pytest.raises(ValueError):
        tv.decode_fluentd_event_time(struct.pack(">II", 1, 1_000_000_000))


def test_ext_hook_with_the_msgpack_library() -> None:
    packed = msgpack.packb([tv.encode_fluentd_event_time(EPOCH_2024, 5), msgpack.Timestamp(EPOCH_2024, 7000)])
    event_time, timestamp = msgpack.unpackb(packed, ext_hook=tv.msgpack_ext_hook)
    assert event_time == tv.EventTime(EPOCH_2024, 5)
    assert tv.parse_event_time(event_time) == EPOCH_2024 * US
    assert isinstance(timestamp, msgpack.Timestamp)
    assert tv.parse_event_time(timestamp) == EPOCH_2024 * US + 7
    # A malformed EventTime stays an ExtType: one bad value, not an undecodable stream.
    odd = msgpack.unpackb(msgpack.packb(msgpack.ExtType(0, b"abc")), ext_hook=tv.msgpack_ext_hook)
    assert odd == msgpack.ExtType(0, b"abc")
    with pytest.raises(ValueError):
        tv.parse_event_time(odd)
    assert tv.msgpack_ext_hook(-1, struct.pack(">I", 5)) == msgpack.Timestamp(5, 0)
    assert tv.msgpack_ext_hook(7, b"x") == msgpack.ExtType(7, b"x")
    assert tv.msgpack_ext_hook(-1, b"12345") == tv.RawExt(-1, b"12345")
    assert tv.msgpack_ext_hook(-5, b"x") == tv.RawExt(-5, b"x")


def test_undecoded_ext_types_are_understood() -> None:
    assert tv.parse_event_time(msgpack.ExtType(0, struct.pack(">II", 10, 2000))) == 10 * US + 2
    assert tv.parse_event_time(tv.RawExt(-1, struct.pack(">I", 10))) == 10 * US
    with pytest.raises(ValueError):
        tv.parse_event_time(tv.RawExt(-1, b"\x00" * 5))
    with pytest.raises(ValueError):
        tv.parse_event_time(msgpack.ExtType(5, b""))


@given(st.integers(-(2**63), 2**63 - 1), st.integers(0, 999_999_999))
def test_timestamp_encoding_round_trip(seconds: int, nanos: int) -> None:
    data = tv.encode_msgpack_timestamp(seconds, nanos)
    assert tv.decode_msgpack_timestamp(data) == (seconds, nanos)
    if 0 <= seconds < 2**34:
        assert len(data) in (4, 8)
    # the msgpack library agrees about the layouts
    assert msgpack.Timestamp.from_bytes(data) == msgpack.Timestamp(seconds, nanos)
    assert msgpack.Timestamp(seconds, nanos).to_bytes() == data


@given(st.integers(0, 2**32 - 1), st.integers(0, 999_999_999))
def test_event_time_round_trip(seconds: int, nanos: int) -> None:
    ext = tv.encode_fluentd_event_time(seconds, nanos)
    value = msgpack.unpackb(msgpack.packb(ext), ext_hook=tv.msgpack_ext_hook)
    assert value == tv.EventTime(seconds, nanos)
    assert tv.parse_event_time(value) == seconds * US + nanos // 1000


# --- properties ---------------------------------------------------------------------------------


@given(st.integers(tv.MIN_MICROS, tv.MAX_MICROS))
def test_formatted_micros_parse_back(micros: int) -> None:
    assert tv.parse_event_time(tv.format_micros(micros)) == micros


@given(
    st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)),
    st.integers(-(23 * 60 + 59), 23 * 60 + 59),
    st.integers(0, 999),
    st.sampled_from(["T", " ", "t"]),
    st.booleans(),
)
def test_iso_with_offsets_matches_datetime(
    local: datetime, offset_minutes: int, extra_nanos: int, separator: str, colon: bool
) -> None:
    sign = "-" if offset_minutes < 0 else "+"
    hours, minutes = divmod(abs(offset_minutes), 60)
    zone = f"{sign}{hours:02d}{':' if colon else ''}{minutes:02d}"
    text = f"{local.year:04d}-{local.month:02d}-{local.day:02d}{separator}"
    text += f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}.{local.microsecond:06d}"
    text += f"{extra_nanos:03d}" + zone
    aware = local.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    assert tv.parse_event_time(text) == iso_micros(aware.astimezone(UTC))


@given(st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)))
def test_days_from_civil_matches_ordinals(day: date) -> None:
    expected = day.toordinal() - date(1970, 1, 1).toordinal()
    assert tv.days_from_civil(day.year, day.month, day.day) == expected
    assert tv.parse_date(day.isoformat()) == expected


@given(st.integers(-(10**20), 10**20), st.sampled_from(tv.EPOCH_UNITS))
def test_integer_epochs_are_exact_or_refused(value: int, unit: str) -> None:
    expected = value // 1000 if unit == "ns" else value * {"s": US, "ms": 1000, "us": 1}[unit]
    if tv.MIN_MICROS <= expected <= tv.MAX_MICROS:
        assert tv.parse_event_time(value, unit) == expected
        assert tv.parse_event_time(str(value), unit) == expected
    else:
        with pytest.raises(ValueError, match="outside"):
            tv.parse_event_time(value, unit)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-6e10, max_value=2.5e11))
def test_float_epochs_round_to_nearest_microsecond(value: float) -> None:
    micros = tv.parse_event_time(value, "s")
    assert abs(micros - value * US) <= 0.5 + abs(value) * US * 2**-52
