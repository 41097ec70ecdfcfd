"""The merge planner: limits, chaining, continuation, and invariants over random histories."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siltlake.merge.planner import MergedRange, MergeLimits, SmallObject, plan_merge


def objects(*sizes: int, start: int = 1) -> list[SmallObject]:
    return [SmallObject(start + i, size, size // 10) for i, size in enumerate(sizes)]


def apply(ranges: list[MergedRange], plan) -> list[MergedRange]:
    """What the commit does to the partition's range rows (sentinel left implicit)."""
    result = list(ranges)
    for planned in plan.ranges:
        row = MergedRange(planned.lower, planned.upper, planned.content_length, planned.row_count)
        if planned.extends is not None:
            assert result[-1] == planned.extends, "only the open (last) range can be extended"
            result[-1] = row
        else:
            result.append(row)
    return result


def test_first_job_opens_the_chain_at_zero_with_a_sentinel() -> None:
    plan = plan_merge(objects(10, 10, 10), None, MergeLimits(merged_object_size=100))
    assert plan.needs_sentinel and not plan.continuing
    assert [(r.lower, r.upper, r.extends) for r in plan.ranges] == [(0, 3, None)]
    assert plan.desired_version == 3


def test_the_open_range_is_extended_until_full_then_new_ranges_chain() -> None:
    open_range = MergedRange(0, 5, content_length=70, row_count=7)
    plan = plan_merge(objects(20, 20, 50, 50, 200, 5, start=6), open_range, MergeLimits(merged_object_size=100))
    assert [(r.lower, r.upper, [o.id for o in r.objects]) for r in plan.ranges] == [
        (0, 6, [6]),  # 70 + 20 fits; another 20 would not
        (6, 8, [7, 8]),  # 20 + 50
        (8, 9, [9]),  # 50 + 50 would pass 100
        (9, 10, [10]),  # 200 alone: over the limit, so a range of its own
        (10, 11, [11]),  # and nothing joins it
    ]
    assert plan.ranges[0].extends == open_range and plan.ranges[0].content_length == 90
    assert not plan.needs_sentinel


def test_an_object_over_the_limit_gets_a_range_of_its_own() -> None:
    plan = plan_merge(objects(500, 10), None, MergeLimits(merged_object_size=100))
    assert [[o.id for o in r.objects] for r in plan.ranges] == [[1], [2]]


def test_a_full_open_range_is_left_alone() -> None:
    full = MergedRange(0, 5, content_length=100, row_count=10)
    plan = plan_merge(objects(10, start=6), full, MergeLimits(merged_object_size=100))
    assert [(r.lower, r.upper, r.extends) for r in plan.ranges] == [(5, 6, None)]


def test_batch_size_leaves_the_rest_for_a_continuing_job() -> None:
    plan = plan_merge(objects(*[1] * 7), None, MergeLimits(merge_batch_size=3))
    assert plan.continuing and [o.id for o in plan.objects] == [1, 2, 3]


def test_row_limit_bounds_a_range() -> None:
    plan = plan_merge([SmallObject(i, 1, 40) for i in range(1, 6)], None, MergeLimits(max_rows=100))
    assert [[o.id for o in r.objects] for r in plan.ranges] == [[1, 2], [3, 4], [5]]


def test_objects_already_covered_are_refused() -> None:
    with pytest.raises(ValueError, match="already covered"):
        plan_merge(objects(1, start=5), MergedRange(0, 5, 1, 1), MergeLimits())


def test_nothing_to_merge_plans_nothing() -> None:
    plan = plan_merge([], MergedRange(0, 5, 1, 1), MergeLimits())
    assert plan.ranges == () and not plan.continuing and not plan.needs_sentinel and plan.desired_version is None


@given(
    rounds=st.lists(st.lists(st.integers(1, 120), max_size=12), min_size=1, max_size=12),
    limit=st.integers(50, 300),
    batch=st.integers(1, 8),
)
def test_ranges_chain_and_cover_every_merged_id_exactly_once(rounds, limit, batch) -> None:
    """Any history of stream batches and merge jobs: ranges chain from 0, every id up to the last
    upper bound lies in exactly one range, no range over the limit but single objects, and
    continuing jobs eventually merge everything."""
    limits = MergeLimits(merged_object_size=limit, merge_batch_size=batch)
    ranges: list[MergedRange] = []
    sizes: dict[int, int] = {}
    next_id = 1
    for round_sizes in rounds:
        for size in round_sizes:
            sizes[next_id] = size
            next_id += 2  # ids are global: other partitions take some
        while True:
            upper = ranges[-1].upper if ranges else 0
            pending = [SmallObject(i, s, s) for i, s in sorted(sizes.items()) if i > upper]
            plan = plan_merge(pending, ranges[-1] if ranges else None, limits)
            assert len(plan.objects) <= batch
            assert plan.needs_sentinel == (not ranges and bool(plan.ranges))
            ranges = apply(ranges, plan)
            if not plan.continuing:
                break
        assert ranges == [] or ranges[0].lower == 0
        for before, after in zip(ranges, ranges[1:], strict=False):
            assert after.lower == before.upper and after.upper > after.lower
        covered = [i for i in sizes if any(r.lower < i <= r.upper for r in ranges)]
        assert sorted(covered) == sorted(sizes), "every streamed object is merged once its job ends"
        for i in sizes:
            assert sum(r.lower < i <= r.upper for r in ranges) == 1
        for r in ranges:
            members = [sizes[i] for i in sizes if r.lower < i <= r.upper]
            assert r.content_length == sum(members)
            assert r.content_length <= limit or len(members) == 1
