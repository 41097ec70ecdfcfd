"""The one place that reads the wall clock; the catalog stores naive UTC times."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def to_naive_utc(value: dt.datetime) -> dt.datetime:
    """Naive UTC from an aware time (converted) or a naive one (taken as UTC)."""
    if value.tzinfo is None:
        return value
    if value.tzinfo is dt.UTC:  # every listing's times: no conversion to make
        return value.replace(tzinfo=None)
    return value.astimezone(dt.UTC).replace(tzinfo=None)


class UtcBound:
    """A naive UTC time to compare listed times with, aware or naive, without converting each (a daily check pass
    compares every file of the staging root): `value >= bound.like(value)`."""

    __slots__ = ("aware", "naive")

    def __init__(self, naive: dt.datetime) -> None:
        self.naive = naive
        self.aware = naive.replace(tzinfo=dt.UTC)

    def like(self, value: dt.datetime) -> dt.datetime:
        return self.naive if value.tzinfo is None else self.aware


_EPOCH = dt.datetime(1970, 1, 1)


def from_nanoseconds(nanoseconds: int) -> dt.datetime:
    """Naive UTC of a file system time in nanoseconds since the epoch, truncated to the microsecond (what the
    catalog stores, and what pyarrow's listing gives)."""
    return _EPOCH + dt.timedelta(microseconds=nanoseconds // 1000)


def to_nanoseconds(naive: dt.datetime) -> int:
    """Nanoseconds since the epoch of a naive UTC time."""
    return (naive - _EPOCH) // dt.timedelta(microseconds=1) * 1000


def parse_time(value: dt.datetime | dt.date | str) -> dt.datetime:
    """A time given by a user as naive UTC: an aware time is converted, a naive one (or a date, at midnight)
    is taken as UTC; text is ISO-8601 ("2026-11-20 10:00:00", "2026-11-20T10:00:00+09:00", "...Z").
    ValueError names the text."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{value!r} is not a time such as '2026-11-20 10:00:00' or "
                "'2026-11-20T10:00:00+09:00' (naive times are UTC)"
            ) from None
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    return to_naive_utc(value)
