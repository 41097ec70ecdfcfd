"""A derived table's partitions are built or stale (DERIVED_PARTITION_STATES), never a log table's new, live or
closed: publish closes none of them; `silt status`, the dashboard, the metrics and `silt table show` say built
or stale."""

from __future__ import annotations

import datetime as dt

import pytest

from siltlake.catalog import DERIVED_PARTITION_STATES
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.derived import build_derived
from siltlake.observe.dashboard import render_page
from siltlake.publish import publish_once

from .merge_helpers import add_small_objects, rows_for
from .test_derived import FIRST, make_source, rollup

pytestmark = pytest.mark.spark


def derived_status(deployment: Deployment) -> dict[str, int]:
    (row,) = [
        row for row in deployment.catalog.merge_queue.status(utcnow(), 600) if row["table"] == "web.daily_actions"
    ]
    return row["partitions"]


def test_derived_partitions_are_built_or_stale_and_never_closed(deployment: Deployment, spark) -> None:
    source = make_source(deployment, days=2)
    record = rollup(deployment, spark)
    build_derived(deployment, "web.daily_actions")
    derived_ids = {p.id for p in deployment.catalog.partitions.list(record.table.id)}
    assert len(derived_ids) == 2
    assert derived_status(deployment) == {"built": 2, "stale": 0}

    later = utcnow() + dt.timedelta(days=1)
    report = publish_once(deployment, now=later)  # the days have ended: the source's closed, the rollup's do not
    assert not derived_ids & set(report.closed)
    assert {p.state for p in deployment.catalog.partitions.list(source.id)} <= {"closed", "switched"}
    summary = deployment.catalog.partitions.summary(record.table.id)
    assert [(row["state"], row["closed"]) for row in summary] == [("built", False), ("built", False)]
    page = render_page(deployment, now=later)
    section = page[page.index('data-table="web.daily_actions"') :]
    assert "<th>built</th><th>stale</th>" in section[: section.index("</section>")]

    # The source moves past the version the build read: every rollup partition is stale until the next build.
    third = FIRST + dt.timedelta(days=2)
    add_small_objects(deployment, source, third, [rows_for(third, 5, 99)], now=later)
    publish_once(deployment, now=later + dt.timedelta(minutes=1))
    assert deployment.catalog.version_reads.table_bounds(source.id)[1] == 2
    assert derived_status(deployment) == {"built": 0, "stale": 2}
    assert {row["state"] for row in deployment.catalog.partitions.summary(record.table.id)} == {"stale"}
    build_derived(deployment, "web.daily_actions")
    assert derived_status(deployment) == {"built": 3, "stale": 0}
    assert tuple(derived_status(deployment)) == DERIVED_PARTITION_STATES
