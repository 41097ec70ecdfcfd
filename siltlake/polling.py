"""The polling loop the daemons share: one round every interval, failing rounds retried with backoff."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from siltlake.errors import CatalogUnreachable, Refusal, SiltError

R = TypeVar("R")


def backoff(interval: float, failures: int) -> float:
    """Seconds to wait after `failures` failures in a row: doubling from the interval, at most ten intervals."""
    base = max(interval, 1.0)
    return min(base * 2 ** (max(failures, 1) - 1), base * 10)


def poll_forever(
    round_: Callable[[], R],
    stop: threading.Event,
    interval: float,
    on_report: Callable[[R], None],
    on_error: Callable[[Exception, float], None] | None = None,
    wake: threading.Event | None = None,
) -> None:
    """Run round_ and report its result every interval (start to start) until stop is set.

    A round that raises (catalog or storage unreachable, a lost executor) is reported and retried
    with backoff(); any other SiltError (not initialised, bad settings) needs the user and propagates.
    Setting `wake` starts the next round at once (after a successful round; a backoff is waited out).
    """
    failures = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            result = round_()
        except Exception as exc:  # transient: a dropped connection, a full disk, a lost executor
            # A Refusal (one input's) is retried as it was before it became a SiltError.
            if isinstance(exc, SiltError) and not isinstance(exc, CatalogUnreachable | Refusal):
                raise
            failures += 1
            wait = backoff(interval, failures)
            if on_error is not None:
                on_error(exc, wait)
        else:
            failures = 0
            on_report(result)
            # Rounds start every interval (a long round's next starts at once): an object put just after a
            # poll waits one interval for the next, not an interval plus the round.
            wait = max(0.0, interval - (time.monotonic() - started))
            if wake is not None:
                _wait_for(wake, stop, wait)
                continue
        stop.wait(wait)


def _wait_for(wake: threading.Event, stop: threading.Event, seconds: float) -> None:
    """Wait until wake or stop is set, or seconds pass (stop is looked at every second)."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0 or wake.wait(min(left, 1.0)):
            break
    wake.clear()
