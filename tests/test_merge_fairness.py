"""Fair shares of the merge queue (docs/design.md "Merge", Fairness): a claim serves schemas, then tables within
a schema, round robin, least recently served first, so one schema's backlog never starves another's."""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siltlake.catalog import JobOutcome, TableRecord
from siltlake.config import MergeConfig
from siltlake.deployment import Deployment
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, rows_for

DAY = dt.date(2026, 11, 20)
START = dt.datetime(2026, 11, 24, 10, 0)
LATER = START + dt.timedelta(hours=1)
_examples = itertools.count()


def make_table(deployment: Deployment, schema: str, name: str) -> TableRecord:
    return deployment.catalog.tables.create(
        TableDef.from_mapping({**ACCESS_TABLE, "schema": schema, "name": name, "merge_interval": 0})
    )


def add_jobs(deployment: Deployment, table: TableRecord, days: int, at: dt.datetime) -> None:
    """One due merge job in each of `days` partitions of the table."""
    for offset in range(days):
        day = DAY - dt.timedelta(days=offset)
        add_small_objects(deployment, table, day, [rows_for(day, 1, offset)], now=at, write_files=False)


def claim(deployment: Deployment, limit: int, **limits: object) -> list:
    return deployment.catalog.merge_queue.claim(
        "worker", limit=limit, now=LATER, timeout=600, per_table_limit=limits.pop("per_table_limit", 100), **limits
    )


def finish(deployment: Deployment, jobs: list, continuing: set[int] = frozenset()) -> None:
    for job in jobs:
        deployment.catalog.merge_queue.commit(
            job,
            "worker",
            base_upper=None,
            writes=[],
            continuing=job.partition_id in continuing,
            result=JobOutcome(mode=None),
            now=LATER,
        )


def test_a_schema_with_one_table_is_served_beside_a_schema_of_twelve_backlogged_tables(
    plain_deployment: Deployment,
) -> None:
    """The issue's case: 12 tables of schema big with 5 due jobs each, then small.s's one job, due last."""
    for number in range(12):
        add_jobs(plain_deployment, make_table(plain_deployment, "big", f"t{number:02}"), 5, START)
    small = make_table(plain_deployment, "small", "s")
    add_jobs(plain_deployment, small, 1, START + dt.timedelta(minutes=5))
    first = claim(plain_deployment, 8)
    assert Counter(job.table.definition.schema_name for job in first) == {"big": 7, "small": 1}
    assert first[1].table.id == small.id, "the second job of a claim goes to the schema not yet served"
    assert len({job.table.id for job in first if job.table.id != small.id}) == 7, "big's tables round robin"
    finish(plain_deployment, first)

    # `silt merge --once --slots 4` claims 4 at a time: small.s's next job is among the first two of a claim.
    add_jobs(plain_deployment, small, 1, START + dt.timedelta(minutes=6))
    order = [job.table.id for job in claim(plain_deployment, 4)]
    assert small.id in order[:2]


def test_slots_per_schema_caps_a_schemas_running_jobs_over_all_workers(plain_deployment: Deployment) -> None:
    for number in range(3):
        add_jobs(plain_deployment, make_table(plain_deployment, "big", f"t{number}"), 4, START)
    add_jobs(plain_deployment, make_table(plain_deployment, "small", "s"), 4, START)
    first = claim(plain_deployment, 10, per_schema_limit=3)
    assert Counter(job.table.definition.schema_name for job in first) == {"big": 3, "small": 3}
    assert claim(plain_deployment, 10, per_schema_limit=3) == [], "another worker: both schemas at their cap"
    finish(plain_deployment, first[:1])
    (next_job,) = claim(plain_deployment, 10, per_schema_limit=3)
    assert next_job.table.definition.schema_name == first[0].table.definition.schema_name


def test_no_fair_levels_takes_the_oldest_due_jobs_first(plain_deployment: Deployment) -> None:
    big = make_table(plain_deployment, "big", "t")
    add_jobs(plain_deployment, big, 3, START)
    add_jobs(plain_deployment, make_table(plain_deployment, "small", "s"), 1, START + dt.timedelta(minutes=5))
    assert [job.table.id for job in claim(plain_deployment, 3, fair_levels=())] == [big.id] * 3


def test_fair_shares_config_names_levels_outer_first() -> None:
    assert MergeConfig().fair_shares == ("schema", "table")
    assert MergeConfig(fair_shares=["table"]).fair_shares == ("table",)
    with pytest.raises(ValueError, match="name each level once, the outer first"):
        MergeConfig(fair_shares=["table", "schema"])


backlogs = st.lists(  # schemas, of tables, of partitions, each with how many jobs it takes to merge (continuations)
    st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=3), min_size=1, max_size=3), min_size=1, max_size=4
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    backlog=backlogs,
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    delays=st.lists(st.integers(0, 30), min_size=4, max_size=4),
)
def test_no_schema_or_table_waits_more_than_one_job_of_each_other(
    plain_deployment: Deployment, backlog, sizes, delays
) -> None:
    """The bound: while a schema has a job it may take, no other schema is given two jobs before it is given one
    (so it waits at most one job per other schema with jobs); within a schema, the same of its tables. Claims of
    random sizes, each claim's jobs finished (continuing while their partition has more to merge) before the
    next; schemas' jobs fall due at random times, the oldest first in the plain queue."""
    example = next(_examples)
    remaining: dict[int, int] = {}  # partition id: jobs left to take
    where: dict[int, tuple[str, int]] = {}  # partition id: (schema, table id)
    for s_index, tables in enumerate(backlog):
        schema = f"x{example}s{s_index}"
        for t_index, partitions in enumerate(tables):
            table = make_table(plain_deployment, schema, f"t{t_index}")
            add_jobs(plain_deployment, table, len(partitions), START + dt.timedelta(minutes=delays[s_index]))
            for partition, jobs in zip(plain_deployment.catalog.partitions.list(table.id), partitions, strict=True):
                remaining[partition.id] = jobs
                where[partition.id] = (schema, table.id)
    waited: dict[str, Counter] = {}  # per schema that may take a job and waits: jobs given to each other schema
    waited_in: dict[int, Counter] = {}  # the same per table, of jobs given to its schema's other tables
    for size in itertools.cycle(sizes):
        if not any(remaining.values()):
            break
        jobs = claim(plain_deployment, size, table_ids=sorted({table for _, table in where.values()}))
        taken: set[int] = set()
        for job in jobs:
            schema, table_id = where[job.partition_id]
            open_partitions = [p for p, left in remaining.items() if left and p not in taken]
            eligible_schemas = {where[p][0] for p in open_partitions}
            eligible_tables = {where[p][1] for p in open_partitions if where[p][0] == schema}
            assert job.partition_id in open_partitions
            for gone in set(waited) - eligible_schemas:
                del waited[gone]  # its jobs are all taken: its wait starts anew
            for gone in set(waited_in) - {where[p][1] for p in open_partitions}:
                del waited_in[gone]
            for other in eligible_schemas - {schema}:
                waited.setdefault(other, Counter())[schema] += 1
                assert waited[other][schema] <= 1, f"{other} waited for a second job of {schema}"
            waited.pop(schema, None)
            for other in eligible_tables - {table_id}:
                waited_in.setdefault(other, Counter())[table_id] += 1
                assert waited_in[other][table_id] <= 1, f"table {other} waited for a second job of {table_id}"
            waited_in.pop(table_id, None)
            taken.add(job.partition_id)
        expected = min(size, sum(1 for left in remaining.values() if left))
        assert len(jobs) == expected, "a claim leaves no slot idle while a job may be taken"
        continuing = {job.partition_id for job in jobs if remaining[job.partition_id] > 1}
        finish(plain_deployment, jobs, continuing)
        for job in jobs:
            remaining[job.partition_id] -= 1
