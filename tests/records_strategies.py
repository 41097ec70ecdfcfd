"""Hypothesis strategies for JSON texts: numbers, ISO-8601 and epoch times, edge values of each type."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from hypothesis import strategies as st

# --- properties --------------------------------------------------------------------------------

PROPERTY_COLUMNS = [
    {"name": "ts", "type": "timestamp"},
    {"name": "s", "type": "string"},
    {"name": "i", "type": "int"},
    {"name": "b", "type": "bigint"},
    {"name": "d", "type": "double"},
    {"name": "f", "type": "boolean"},
    {"name": "t2", "type": "timestamp"},
    {"name": "day", "type": "date"},
    {"name": "dec", "type": "decimal(10,3)"},
]

number_texts = st.from_regex(r"-?(0|[1-9][0-9]{0,19})(\.[0-9]{1,19})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
iso_texts = st.builds(
    lambda y, mo, d, sep, h, mi, s, frac, zone: f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}{s}{frac}{zone}",
    st.integers(0, 9999) | st.sampled_from([1970, 2024, 2000, 1900]),
    st.integers(0, 13) | st.just(2),
    st.integers(0, 32) | st.sampled_from([28, 29, 30]),
    st.sampled_from(["T", " ", "t"]),
    st.integers(0, 25),
    st.integers(0, 61),
    st.sampled_from(["", ":00", ":59", ":60", ":07"]),
    st.sampled_from(["", ".5", ".123456", ".1234567", ".123456789", ",25", ".0000001", "."]),
    st.sampled_from(["", "Z", "z", "+09:00", "-05:30", "+0900", "+09", " +09:00", "+24:00", "+23:59", "-00:00"]),
) | st.dates().map(lambda d: d.isoformat())
canonical_iso = st.builds(
    lambda moment, frac, zone: moment.strftime("%Y-%m-%dT%H:%M:%S") + frac + zone,
    st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9998, 12, 31)),
    st.sampled_from(["", ".5", ".123456", ".123456789"]),
    st.sampled_from(["Z", "+09:00", "-0130"]),
)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


anything = st.one_of(
    st.just("null"),
    st.sampled_from(["true", "false", "[]", "{}", '[1,"a"]', '{"x":1}', "NaN", "-0", "1e400", '"\\ud800"', '""']),
    st.integers(-(2**70), 2**70).map(str),
    number_texts,
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=8).map(dumps),
    st.text(alphabet="0123456789.-+eE tTrufalsTRUE", max_size=8).map(dumps),
    iso_texts.map(dumps),
    number_texts.map(dumps),
)


def sometimes_anything(good: st.SearchStrategy[str], noise: int) -> st.SearchStrategy[str]:
    """good, or with a chance of one in `noise` any JSON value at all (noise 0: always good)."""
    if not noise:
        return good
    return st.integers(0, noise - 1).flatmap(lambda k: anything if k == 0 else good)


def rarely(good: st.SearchStrategy[str], edge: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.integers(0, 59).flatmap(lambda k: edge if k == 0 else good)


loose_iso = st.builds(
    lambda moment, sep, frac, zone, pad: f"{pad}{moment:%Y-%m-%d}{sep}{moment:%H:%M:%S}{frac}{zone}{pad}",
    st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9998, 12, 31)),
    st.sampled_from(["T", " ", "t"]),
    st.sampled_from(["", ",5", ".1234567", ".000000001"]),
    st.sampled_from(["", "z", " +09:00", "+0900", "-05"]),
    st.sampled_from(["", " "]),
)
EPOCH_RANGE = {"s": 2**33, "ms": 2**43, "us": 2**53, "ns": 2**62}


def epoch_edges(unit: str) -> st.SearchStrategy[str]:
    """Epochs at and just beyond the ends of the supported range, in `unit`."""
    per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    low, high = -62_135_596_800 * per_second, 253_402_300_800 * per_second - 1
    edges = [low, low - 1, high, high + 1, 2**53, 2**53 + 1, -(2**63), 2**63 - 1, 2**63, 0, -1]
    return st.sampled_from([str(edge) for edge in edges] + ["1e15", "2.5e11", "-6.2e10", "1.5"])


def time_styles(unit: str) -> dict[str, st.SearchStrategy[str]]:
    return {
        "canonical": rarely(canonical_iso.map(dumps), iso_texts.map(dumps)),
        "loose": rarely(loose_iso.map(dumps), iso_texts.map(dumps)),
        "int": rarely(st.integers(-EPOCH_RANGE[unit], EPOCH_RANGE[unit]).map(str), epoch_edges(unit) | anything),
        "float": rarely(st.floats(-EPOCH_RANGE[unit], EPOCH_RANGE[unit], allow_nan=False).map(repr), epoch_edges(unit)),
        "mixed": anything,
    }


EDGE_VALUES = {
    "s": st.sampled_from(['"\\ud800"', '"\\u0000"', '"\\ud83d\\ude00"', "1", "true", "{}", '""', "NaN"]),
    "i": st.sampled_from([str(2**31), str(-(2**31) - 1), str(2**31 - 1), str(-(2**31)), "1.0", "1e2", '"3"', "-0"]),
    "b": st.sampled_from([str(2**63), str(2**63 - 1), str(-(2**63)), str(-(2**63) - 1), "1e3", '"7"', "-0"]),
    "d": number_texts
    | st.sampled_from(["1e308", "1.7976931348623157e308", "1.8e308", "1e309", "-0", "-0.0", "5e-324", "1e-400"]),
    "f": st.sampled_from(['"true"', "1", "0", "null"]),
    "day": st.sampled_from(
        ['"2023-02-29"', '"0000-01-01"', '"0001-01-01"', '"9999-12-31"', '"2024-02-29"', '" 2024-01-01"']
    ),
    "dec": st.decimals(-9999999, 9999999, places=4, allow_nan=False).map(str)
    | number_texts
    | st.sampled_from(
        [
            "1e7",
            "-1e7",
            "9999999.999",
            "10000000",
            "1e6",
            "1e-3",
            "1e-4",
            '"1e7"',
            '"9999999.9990"',
            "0e-9",
            "-0",
        ]
    ),
}
GOOD_VALUES = {
    "s": st.text(max_size=12).map(lambda t: json.dumps(t, ensure_ascii=False)) | st.text(max_size=5).map(json.dumps),
    "i": st.integers(-(2**31), 2**31 - 1).map(str),
    "b": st.integers(-(2**63), 2**63 - 1).map(str),
    "d": st.floats(allow_nan=False, allow_infinity=False).map(repr)
    | st.integers(-(2**64), 2**64).map(str)
    | st.from_regex(r"-?(0|[1-9][0-9]{0,19})(\.[0-9]{1,19})?([eE][+-]?[0-9]{1,2})?", fullmatch=True),
    "f": st.sampled_from(["true", "false"]),
    "day": st.dates().map(lambda d: dumps(d.isoformat())),
    "dec": st.decimals(min_value=-(10**7) + 1, max_value=10**7 - 1, places=3, allow_nan=False).map(str)
    | st.decimals(-9999999, 9999999, places=3, allow_nan=False).map(lambda d: dumps(str(d))),
}
MOSTLY_GOOD = {name: rarely(GOOD_VALUES[name], EDGE_VALUES[name]) for name in GOOD_VALUES}
TYPES = {
    "s": "string",
    "i": "int",
    "b": "bigint",
    "d": "double",
    "f": "boolean",
    "day": "date",
    "dec": "decimal(10,3)",
}


FIELDS = ["ts", "s", "i", "b", "d", "f", "t2", "day", "dec"]
