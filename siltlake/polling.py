"""The polling loop the daemons share: one round every interval, failing rounds retried with backoff."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from siltlake.errors import CatalogUnreachable, SiltError

R = TypeVar("R")


def backoff(interval: float, failures: int) -> float:
    """Seconds to wait after `failures` failures in a row: doubling from the interval, at most ten intervals."""
    base = max(interval, 1.0)
    return min(base * 2 ** (max(failures, 1) - 1), base * 10)


def poll_forever(round_: Callable[[], R], stop: threading.Event, interval: float,
                 on_report: Callable[[R], None],
                 on_error: Callable[[Exception, float], None] | None = None) -> None:
    """Run round_ and report its result every interval until stop is set.

    A round that raises (catalog or storage unreachable, a lost executor) is reported and retried
    with backoff(); any other SiltError (not initialised, bad settings) needs the user and propagates.
    """
    failures = 0
    while not stop.is_set():
        try:
            result = round_()
        except Exception as exc:  # transient: a dropped connection, a full disk, a lost executor
            if isinstance(exc, SiltError) and not isinstance(exc, CatalogUnreachable):
                raise
            failures += 1
            wait = backoff(interval, failures)
            if on_error is not None:
                on_error(exc, wait)
        else:
            failures = 0
            wait = interval
            on_report(result)
        stop.wait(wait)
