"""A UtcBound compares listed times, aware in any zone or naive (taken as UTC), as converting each would."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from siltlake.clock import UtcBound, to_naive_utc

TIMES = st.datetimes(min_value=dt.datetime(2000, 1, 2), max_value=dt.datetime(2100, 1, 1))
ZONES = st.sampled_from([None, dt.UTC, dt.timezone(dt.timedelta(hours=9)), dt.timezone(dt.timedelta(hours=-5))])


@given(value=TIMES, zone=ZONES, bound=TIMES)
def test_a_bound_orders_a_listed_time_as_its_naive_utc_time_does(
    value: dt.datetime, zone: dt.tzinfo | None, bound: dt.datetime
) -> None:
    listed = value.replace(tzinfo=zone)
    utc_bound = UtcBound(bound)
    assert (listed >= utc_bound.like(listed)) == (to_naive_utc(listed) >= bound)
    assert (listed <= utc_bound.like(listed)) == (to_naive_utc(listed) <= bound)


def test_a_listed_time_equal_to_the_bound_is_at_it_in_every_zone() -> None:
    bound = UtcBound(dt.datetime(2026, 11, 29, 12, 0))
    for listed in (
        dt.datetime(2026, 11, 29, 12, 0),
        dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 29, 21, 0, tzinfo=dt.timezone(dt.timedelta(hours=9))),
    ):
        assert listed >= bound.like(listed) and listed <= bound.like(listed)
