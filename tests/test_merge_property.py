"""Property: whatever the history of stream batches, closes and merge runs, merged objects are exact."""

from __future__ import annotations

import datetime as dt

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siltlake.deployment import Deployment
from siltlake.merge import merge_once

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, assert_exact, make_table

DATES = (DAY, DAY + dt.timedelta(days=1))

stream_step = st.tuples(st.just("stream"), st.integers(0, 1), st.lists(st.integers(1, 60), min_size=1, max_size=4))
close_step = st.tuples(st.just("close"), st.integers(0, 1))
merge_step = st.tuples(st.just("merge"))


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    mode=st.sampled_from(["deep", "shallow", "auto"]),
    batch_size=st.integers(1, 4),
    object_size=st.sampled_from([5_000, 12_000, 1 << 30]),
    steps=st.lists(st.one_of(stream_step, stream_step, close_step, merge_step), min_size=1, max_size=7),
)
def test_merged_objects_hold_each_small_object_row_once(
    spark, tmp_path_factory, mode: str, batch_size: int, object_size: int, steps: list[tuple]
) -> None:
    root = tmp_path_factory.mktemp("merge-property")
    deployment = Deployment(make_config(root, f"sqlite:///{root / 'catalog.db'}"))
    deployment.init()
    deployment.use_spark(spark)
    try:
        table = make_table(
            deployment,
            merge_mode=mode,
            merge_batch_size=batch_size,
            merged_object_size=object_size,
            row_group_bytes=2048,
        )
        seed = 0
        for step in [*steps, ("merge",)]:
            if step[0] == "stream":
                date = DATES[step[1]]
                batches = []
                for count in step[2]:
                    seed += 1
                    batches.append(rows_for(date, count, seed))
                add_small_objects(deployment, table, date, batches)
            elif step[0] == "close":
                if any(p.partition_date == DATES[step[1]] for p in deployment.catalog.partitions.list(table.id)):
                    deployment.catalog.partitions.close(table.id, DATES[step[1]])
            else:
                report = merge_once(deployment)
                assert report.failed == 0, report.errors
                for partition in deployment.catalog.partitions.list(table.id):
                    assert_exact(deployment, table, partition.id, partition.partition_date)
        # After the final run every small object is merged (delayed ones too) and no job is left.
        for partition in deployment.catalog.partitions.list(table.id):
            objects = [
                o.id
                for o in deployment.catalog.partitions.small_objects(table.id)
                if o.partition_date == partition.partition_date
            ]
            assert partition.desired_manifest_version == max(objects)
            assert deployment.catalog.merge_queue.jobs(partition.id) == []
    finally:
        deployment.close()
