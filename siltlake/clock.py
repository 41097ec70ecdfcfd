"""The one place that reads the wall clock; the catalog stores naive UTC times."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def to_naive_utc(value: dt.datetime) -> dt.datetime:
    """Naive UTC from an aware time (converted) or a naive one (taken as UTC)."""
    if value.tzinfo is None:
        return value
    return value.astimezone(dt.UTC).replace(tzinfo=None)
