"""siltlake.records.vectorised: Arrow-kernel conversions agree with the per-record rules."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siltlake import timevalues as tv
from siltlake.records import vectorised

from .records_strategies import canonical_iso, iso_texts

# --- the vectorised conversions ---------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        ["2024-05-01T12:34:56Z", "2024-05-01 12:34:56.123+09:00", "2024-05-01T12:34:56.123456789-0130"],
        ["2024-05-01T12:34:56", "2024-05-01 12:34:56.1234567", None],
        ["2024-05-01t12:34:56,5z", " 2024-05-01 12:34 +09", "2024-05-01"],
        ["1969-12-31T23:59:59.9999999Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z"],
        ["1600-02-29T00:00:00Z", "2000-02-29T23:59:59.5+23:59", "0000-12-31T23:00:00-05:00"],
    ],
)
def test_vectorised_iso_matches_python(values: list[str | None]) -> None:
    array = pa.chunked_array([values], pa.string())
    micros = vectorised.strings_to_micros(array)
    assert micros is not None
    assert micros.to_pylist() == [None if v is None else tv.parse_iso_timestamp(v) for v in values]


@pytest.mark.parametrize(
    "value",
    [
        "2023-02-29T00:00:00Z",
        "2024-05-01T24:00:00Z",
        "2024-05-01T12:00:00+24:00",
        "0000-01-01T00:00:00Z",
        "x",
    ],
)
def test_vectorised_iso_refuses_what_python_refuses(value: str) -> None:
    micros = vectorised.strings_to_micros(pa.chunked_array([["2024-05-01T12:34:56Z", value]]))
    if micros is not None:  # range problems surface in the caller's range check
        assert not vectorised.within(micros, tv.MIN_MICROS, tv.MAX_MICROS)


@settings(max_examples=200, deadline=None)
@given(st.lists(iso_texts | st.none() | canonical_iso, min_size=1, max_size=8))
def test_vectorised_iso_never_disagrees(values: list[str | None]) -> None:
    micros = vectorised.strings_to_micros(pa.chunked_array([values], pa.string()))
    if micros is None or not vectorised.within(micros, tv.MIN_MICROS, tv.MAX_MICROS):
        return
    assert micros.to_pylist() == [None if v is None else tv.parse_iso_timestamp(v) for v in values]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(-(2**62), 2**62) | st.none(), min_size=1, max_size=8),
    st.sampled_from(tv.EPOCH_UNITS),
)
def test_vectorised_integer_epochs(values: list[int | None], unit: str) -> None:
    micros = vectorised.epochs_to_micros(pa.chunked_array([values], pa.int64()), unit)
    if micros is None:
        return
    expected = [None if v is None else tv.epoch_int_to_micros(v, unit) for v in values]
    assert micros.to_pylist() == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True) | st.integers(-(2**53), 2**53), min_size=1, max_size=8),
    st.sampled_from(["s", "ms", "us"]),
)
def test_vectorised_float_epochs(values: list[float], unit: str) -> None:
    micros = vectorised.epochs_to_micros(pa.chunked_array([[float(v) for v in values]], pa.float64()), unit)
    if micros is None:
        return
    for value, got in zip(values, micros.to_pylist(), strict=True):
        if isinstance(value, int):
            assert got == tv.epoch_int_to_micros(value, unit)
        else:
            assert got == tv.epoch_float_to_micros(value, unit)


def test_floor_division_matches_python_at_the_int64_extremes() -> None:
    # Found by the fast == slow property: epoch nanoseconds at the int64 minimum once wrapped around.
    values = [-(2**63), -(2**63) + 1, -1001, -1000, -1, 0, 999, 1000, 2**63 - 1]
    assert vectorised._floor_divide(pa.array(values), 1000).to_pylist() == [v // 1000 for v in values]


near_canonical = st.builds(
    lambda text, index, byte: (
        text if index is None else text[: index % len(text)] + byte + text[index % len(text) + 1 :]
    ),
    canonical_iso
    | st.sampled_from(
        [
            "2024-05-01 12:34:56",
            "2024-05-01T12:34:56.",
            "2024-13-01T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:60:00Z",
            "2024-05-01T12:00:60Z",
            "2024-05-00T00:00:00Z",
            "2024-05-32T00:00:00.5",
            "2024-00-01T00:00:00.1234567890Z",
        ]
    ),
    st.none() | st.integers(0, 40),
    st.sampled_from(["0", "9", "3", "2", "5", "6", "1", "T", " ", "t", "-", ":", ".", "Z", "z", "/", "é"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(near_canonical, min_size=1, max_size=6), st.booleans())
def test_the_positional_check_accepts_only_what_the_canonical_pattern_matches(values: list[str], zoned: bool) -> None:
    """The check by position (values of one length) stands in for the regex only where it would match them all."""
    pattern = vectorised._CANONICAL_ZONED if zoned else vectorised._CANONICAL_NAIVE
    array = pa.chunked_array([values[: len(values) // 2], values[len(values) // 2 :]], pa.string())
    if vectorised._all_canonical_by_position(array, zoned):
        assert all(pattern.fullmatch(value) for value in values)
    if len({len(value) for value in values}) == 1 and all(
        pattern.fullmatch(value) and (not zoned or value.endswith("Z")) for value in values
    ):
        assert vectorised._all_canonical_by_position(array, zoned)


@pytest.mark.parametrize(
    "value",
    [
        "2024-13-01T00:00:00Z",
        "2024-00-01T00:00:00Z",
        "2024-05-00T00:00:00Z",
        "2024-05-32T00:00:00Z",
        "2024-05-01T24:00:00Z",
        "2024-05-01T12:60:00Z",
        "2024-05-01T12:00:60Z",
        "2024-05-01t12:00:00Z",
        "2024-05-01A12:00:00Z",
        "2024-05-01T12:00:00.Z",
        "2024-05-01T12:00:00.1234567890Z",
        "2024/05-01T12:00:00Z",
    ],
)
def test_the_positional_check_refuses_each_field_out_of_its_range(value: str) -> None:
    assert not vectorised._CANONICAL_ZONED.fullmatch(value)
    assert not vectorised._all_canonical_by_position(pa.chunked_array([[value, value]]), zoned=True)
    assert vectorised._all_canonical_by_position(pa.chunked_array([["2024-05-01T12:00:00.5Z"] * 2]), zoned=True)
