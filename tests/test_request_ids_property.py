"""Request ids under retries and crashes: a write retried with its id is applied exactly once.

A crash between write and commit is an exception raised inside the commit's transaction right after the id is
recorded (the last thing before COMMIT): nothing of that attempt may stay visible, and its retry must apply it.
A retry after a commit, at once or stale (after later writes), must change nothing: nothing lost, nothing doubled,
no key rolled back.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import siltlake.catalog.requests as applied_requests
from siltlake.deployment import Deployment
from siltlake.lake import Lake

from .test_merge import DAY, make_table
from .test_upsert import KEYED, late


class SimulatedCrash(Exception):
    """The process died after writing, before the catalog commit."""


@pytest.fixture
def crashing(monkeypatch) -> list[bool]:  # pytest's
    """Set crashing[0] to make the next commits fail just before COMMIT, after recording their request id."""
    crash = [False]
    record = applied_requests.record_applied

    def record_then_crash(*args, **kwargs) -> None:  # record_applied's
        record(*args, **kwargs)
        if crash[0]:
            raise SimulatedCrash("killed before the commit")

    monkeypatch.setattr(applied_requests, "record_applied", record_then_crash)
    return crash


def rows(keys: list[int], action: str, minute: int) -> pa.Table:
    return pa.table(
        {
            "utc_event_time": pa.array([late(DAY, minute)] * len(keys), pa.timestamp("us", tz="UTC")),
            "user_id": pa.array(keys, pa.int64()),
            "action": pa.array([action] * len(keys)),
        }
    )


def shown(lake: Lake, name: str) -> dict[int, str]:
    table = lake.table(name).to_arrow(columns=["user_id", "action"])
    keys = table.column("user_id").to_pylist()
    assert len(keys) == len(set(keys)), "a key shows once"
    return dict(zip(keys, table.column("action").to_pylist(), strict=True))


WRITE = st.tuples(
    st.sampled_from(["append", "upsert"]),
    st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True),
    st.integers(0, 2),  # crashes before the attempt that commits
    st.integers(0, 2),
)  # retries after it
_tables = itertools.count()


@given(writes=st.lists(WRITE, min_size=1, max_size=5), stale=st.lists(st.integers(0, 4), max_size=3))
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_retried_writes_apply_exactly_once(plain_deployment: Deployment, crashing: list[bool], writes, stale) -> None:
    name = f"keyed_{next(_tables)}"
    make_table(plain_deployment, name, **KEYED)
    lake = Lake(plain_deployment)
    table = lake.table(f"web.{name}")
    model: dict[int, str] = {}
    sent = []
    for number, (kind, keys, crashes, retries) in enumerate(writes):
        # Later writes are later in the day: the keyed rule orders an append's rows by time, then commit order.
        request_id, batch = f"req-{number}", rows(keys, f"v{number}", number)
        write = table.append if kind == "append" else table.upsert
        sent.append((write, batch, request_id))
        for _ in range(crashes):
            crashing[0] = True
            with pytest.raises(SimulatedCrash):
                write(batch, request_id=request_id)
            crashing[0] = False
            assert shown(lake, table.name) == model, "a crashed attempt leaves nothing"
            assert plain_deployment.catalog.requests.get(table.record.id, request_id) is None
        report = write(batch, request_id=request_id)
        assert report.applied_before is None, "the first attempt that commits applies it"
        model.update(dict.fromkeys(keys, f"v{number}"))
        for _ in range(retries):
            again = write(batch, request_id=request_id)
            assert again.applied_before is not None and again.message.startswith(f"request id {request_id!r}")
        assert shown(lake, table.name) == model
    for index in stale:  # a client retrying an old request after newer ones
        write, batch, request_id = sent[index % len(sent)]
        assert write(batch, request_id=request_id).applied_before is not None
    assert shown(lake, table.name) == model, "a stale retry rolls nothing back"


@pytest.mark.spark
@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_a_delete_crashed_before_its_commit_is_applied_once_by_its_retries(
    deployment: Deployment, crashing: list[bool]
) -> None:
    make_table(deployment, **KEYED)
    lake = Lake(deployment)
    table = lake.table("web.access")
    table.upsert(rows([1, 2, 3], "a", 0))
    table.upsert(rows([1], "b", 1))  # two objects: a delete rewrites the partition into one
    crashing[0] = True
    with pytest.raises(SimulatedCrash):
        table.delete("user_id = 2", dates=DAY, request_id="erase-2")
    crashing[0] = False
    assert shown(lake, table.name) == {1: "b", 2: "a", 3: "a"} and table.version == 2
    first = table.delete("user_id = 2", dates=DAY, request_id="erase-2")
    assert first.applied_before is None and first.table_version == 3
    table.upsert(rows([2], "back", 2))  # the key comes back later, legitimately
    retried = table.delete("user_id = 2", dates=DAY, request_id="erase-2")
    assert retried.applied_before is not None and retried.applied_before.table_version == 3
    assert shown(lake, table.name) == {1: "b", 2: "back", 3: "a"}, "the retry deleted nothing again"
    assert table.version == 4
