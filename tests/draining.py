"""Stream rounds until a staging root is quiet, for the tests that write, rotate or kill and then check that
everything written loaded once."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from siltlake.deployment import Deployment
from siltlake.stream import stream_once
from siltlake.stream.report import StreamReport


def rounds_until_quiet(deployment: Deployment, limit: int | None = None, **options: object) -> Iterator[StreamReport]:
    """stream_once(deployment, **options) round after round, each report yielded, until two rounds in a row found
    nothing new, loaded nothing and left nothing pending; at most `limit` rounds. One quiet round is not enough: a
    tail ends at the size its file was seen with, and a file judged while a delivery it depends on was in flight
    is judged again by the round after the one that committed that delivery (which may have read nothing)."""
    quiet = 0
    for _ in itertools.count() if limit is None else range(limit):
        report = stream_once(deployment, **options)  # type: ignore[arg-type]
        yield report
        found = report.registered or report.appended or report.records_loaded
        quiet = 0 if found or deployment.catalog.staging.pending(1) else quiet + 1
        if quiet == 2:
            return
