"""Discovery of an S3 staging root from cursors (stream/discover_s3.py): an idle round's LIST requests and catalog
statements do not grow with what the root holds; new keys, new directories and late keys under an older date are
found by the next round, a key sorting before the cursors by the rolling sweep within one pass; nothing is
registered twice, and a failed round moves no cursor. The rule and its horizon: docs/design.md, "Discovery on an
object store"."""

from __future__ import annotations

import math
import re
import time
from collections import Counter

import pytest
import sqlalchemy as sa

from siltlake.catalog import PrefixCursor
from siltlake.deployment import Deployment
from siltlake.stream.discover import discover
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .s3_server import CountingProxy, MotoS3, s3_config

SWEEP = 1000
STREAMS = ["host00.web.access/", "host01.web.access/"]
DAYS = ["2026/01/01/", "2026/01/02/"]


def open_lake(
    moto_s3: MotoS3, proxy: CountingProxy, catalog_url: str, attempts: int = 10, **stream: object
) -> Deployment:
    """A deployment with the access table whose staging root is a fresh bucket behind the counting proxy.
    Cursors settle at once (no reorder window, no clock margin: the test's puts do not race its rounds)."""
    settings = {"reorder_window": 0, "listing_margin": 0, "sweep_keys_per_round": SWEEP, **stream}
    config = s3_config(moto_s3.create_bucket(), proxy.endpoint, catalog_url, max_attempts=attempts, stream=settings)
    deployment = Deployment(config)
    deployment.init()
    if not deployment.catalog.tables.by_key_names():  # a second lake on the test's catalog
        deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    return deployment


@pytest.fixture
def lake(moto_s3: MotoS3, s3_proxy: CountingProxy, catalog_url: str) -> Deployment:
    deployment = open_lake(moto_s3, s3_proxy, catalog_url)
    yield deployment
    deployment.close()


def put(deployment: Deployment, key: str) -> None:
    deployment.staging.write_bytes(key, b'{"t":"2026-01-01"}\n')


def put_many(moto_s3: MotoS3, deployment: Deployment, keys: list[str]) -> None:
    """Straight into moto's memory (the set-up of large roots; no request passes the proxy)."""
    bucket, _, prefix = deployment.staging.root[len("s3://") :].partition("/")
    moto_s3.put_objects(bucket, [f"{prefix}/{key}" for key in keys])


def registered(deployment: Deployment) -> Counter:
    """How many staging rows each key has (a URI is unique: every count is 1)."""
    root = deployment.staging.root + "/"
    return Counter(
        row.uri[len(root) :] for row in deployment.catalog.staging.pending(1_000_000) if row.uri.startswith(root)
    )


def seed(deployment: Deployment, moto_s3: MotoS3, per_day: int) -> list[str]:
    keys = [f"{stream}{day}obj-{n:05d}.jsonl" for stream in STREAMS for day in DAYS for n in range(per_day)]
    put_many(moto_s3, deployment, keys)
    return keys


class StatementCounter:
    def __init__(self, deployment: Deployment) -> None:
        self.count = 0
        self._engine = deployment.catalog.engine
        sa.event.listen(self._engine, "before_cursor_execute", self._seen)

    def _seen(self, *args: object) -> None:
        self.count += 1

    def close(self) -> None:
        sa.event.remove(self._engine, "before_cursor_execute", self._seen)


def idle_round(deployment: Deployment, proxy: CountingProxy) -> tuple[int, int]:
    """(LIST requests, catalog statements) of one round that finds nothing new."""
    proxy.reset()
    statements = StatementCounter(deployment)
    try:
        found = discover(deployment)
    finally:
        statements.close()
    assert found.registered == 0 and found.unknown == 0
    lists = proxy.reset()["LIST"]
    assert found.list_requests == lists
    return lists, statements.count


def test_an_idle_rounds_requests_and_statements_do_not_grow_with_the_root(
    moto_s3: MotoS3, s3_proxy: CountingProxy, catalog_url: str
) -> None:
    costs = []
    for per_day in (5, 755):  # 20 and 3,020 objects under the same prefixes
        deployment = open_lake(moto_s3, s3_proxy, catalog_url)
        try:
            keys = seed(deployment, moto_s3, per_day)
            first = discover(deployment)
            assert first.full_listing and first.registered == len(keys)
            # a whole pass of the sweep (the last round of a pass records one statement more)
            rounds = [idle_round(deployment, s3_proxy) for _ in range(math.ceil(len(keys) / SWEEP))]
            assert len({lists for lists, _ in rounds}) == 1, rounds
            costs.append(max(rounds))
        finally:
            deployment.close()
    assert costs[0] == costs[1], f"an idle round's (LIST requests, catalog statements) grew with the root: {costs}"
    # the root's level, each stream from its cursor, yesterday's directory of each, one page of the sweep
    assert costs[0][0] == 1 + len(STREAMS) + len(STREAMS) + 1


def test_new_keys_new_directories_and_late_keys_are_found_by_the_next_round(lake: Deployment, moto_s3: MotoS3) -> None:
    keys = seed(lake, moto_s3, 5)
    assert discover(lake).registered == len(keys)
    new = [
        "host00.web.access/2026/01/02/obj-00100.jsonl",  # the newest directory
        "host01.web.access/2026/01/03/obj-00000.jsonl",  # a new directory
        "host00.web.access/2026/01/01/obj-00200.jsonl",  # late, under yesterday's prefix
        "host02.web.access/2026/01/02/obj-00000.jsonl",
    ]  # a new stream
    for key in new:
        put(lake, key)
    found = discover(lake)
    assert not found.full_listing
    assert found.registered == len(new)
    assert discover(lake).registered == 0
    counts = registered(lake)
    assert set(counts) == set(keys) | set(new) and set(counts.values()) == {1}


def test_a_key_sorting_before_the_cursors_is_found_by_the_sweep_within_one_pass(
    lake: Deployment, moto_s3: MotoS3
) -> None:
    keys = seed(lake, moto_s3, 400)  # 1,600 keys: a pass is two rounds of the sweep
    assert discover(lake).registered == len(keys)
    early = "host01.web.access/2026/01/02/obj-00000-late.jsonl"  # sorts before keys listed long ago
    put(lake, early)
    assert discover(lake).registered == 0, "no cursor lists before its key"
    rounds = 1
    while early not in registered(lake):
        assert rounds <= math.ceil((len(keys) + 1) / SWEEP), "the sweep's pass ended without finding the key"
        discover(lake)
        rounds += 1
    assert set(registered(lake).values()) == {1}


def test_the_sweep_looks_up_no_key_put_before_the_last_completed_listing(lake: Deployment, moto_s3: MotoS3) -> None:
    keys = seed(lake, moto_s3, 5)
    time.sleep(1.1)  # S3's LastModified is whole seconds: the first listing starts a second after the puts
    assert discover(lake).registered == len(keys)
    idle = discover(lake)
    assert idle.swept == len(keys) and idle.sweep_unchanged == len(keys), "the sweep's page lists every key"
    assert idle.looked_up == 0, "keys the first listing looked up are asked of the catalog again"
    late = "host01.web.access/2026/01/01/obj-00000-late.jsonl"  # behind the cursors: only the sweep lists it
    put(lake, late)
    found = discover(lake)
    assert (found.sweep_unchanged, found.looked_up, found.registered) == (len(keys), 1, 1)


def test_a_completed_sweep_pass_is_a_full_listing(lake: Deployment, moto_s3: MotoS3) -> None:
    seed(lake, moto_s3, 400)
    discover(lake)  # the first round lists the whole root
    root = lake.staging.root
    first = lake.catalog.discovery.get(root)
    discover(lake)
    during = lake.catalog.discovery.get(root)
    assert during.full_listing_time == first.full_listing_time, "half a pass is no full listing"
    assert during.sweep_after is not None and during.sweep_started is not None
    discover(lake)
    after = lake.catalog.discovery.get(root)
    assert after.sweep_after is None
    assert after.full_listing_time == during.sweep_started, "a completed pass counts from its start"
    assert after.sweep_started > during.sweep_started


def test_cursors_only_move_forward(lake: Deployment) -> None:
    root = lake.staging.root
    discovery = lake.catalog.discovery
    discovery.advance_prefixes(root, [PrefixCursor("a/", "stream", "a/2026/01/02/x", None)], {})
    discovery.advance_prefixes(root, [PrefixCursor("a/", "stream", "a/2026/01/01/x", None)], {})
    assert discovery.prefixes(root) == [PrefixCursor("a/", "stream", "a/2026/01/02/x", None)]


def test_a_failed_round_moves_no_cursor_and_the_next_loses_nothing(
    moto_s3: MotoS3, s3_proxy: CountingProxy, catalog_url: str
) -> None:
    lake = open_lake(moto_s3, s3_proxy, catalog_url, attempts=1)  # no retry: an injected fault fails the round
    try:
        keys = seed(lake, moto_s3, 5)
        assert discover(lake).registered == len(keys)
        discover(lake)
        new = [f"host00.web.access/2026/01/0{day}/new-{n}.jsonl" for day in (1, 2, 3) for n in range(3)]
        for key in new:
            put(lake, key)
        before = (
            sorted(lake.catalog.discovery.prefixes(lake.staging.root), key=lambda c: c.prefix),
            lake.catalog.discovery.get(lake.staging.root),
        )
        failed = 0
        for fail_every in (2, 3, 4, 5):
            s3_proxy.reset()
            s3_proxy.fail_every = fail_every
            try:
                discover(lake)
            except OSError:
                failed += 1
                assert (
                    sorted(lake.catalog.discovery.prefixes(lake.staging.root), key=lambda c: c.prefix),
                    lake.catalog.discovery.get(lake.staging.root),
                ) == before
            else:
                break
        assert failed, "no injected fault failed a round"
        s3_proxy.fail_every = 0
        discover(lake)
        discover(lake)
        counts = registered(lake)
        assert set(counts) == set(keys) | set(new) and set(counts.values()) == {1}
    finally:
        lake.close()


def test_a_key_still_uploading_past_a_newer_one_is_found_within_the_reorder_window(
    moto_s3: MotoS3, s3_proxy: CountingProxy, catalog_url: str
) -> None:
    lake = open_lake(moto_s3, s3_proxy, catalog_url, reorder_window=3600)
    try:
        put(lake, "host00.web.access/2026/01/02/b.jsonl")
        assert discover(lake).registered == 1
        put(lake, "host00.web.access/2026/01/02/a.jsonl")  # completes after b although it sorts before it
        assert discover(lake).registered == 1
        cursor = {c.prefix: c for c in lake.catalog.discovery.prefixes(lake.staging.root)}
        assert cursor["host00.web.access/"].start_after == "", "keys put within the window do not move the cursor"
    finally:
        lake.close()


@pytest.fixture(autouse=True)
def _no_leftover_faults(s3_proxy: CountingProxy) -> None:
    yield
    s3_proxy.fail_every = 0


def test_only_the_root_prefix_is_listed_when_nothing_is_there(lake: Deployment, s3_proxy: CountingProxy) -> None:
    first = discover(lake)
    assert first.full_listing and first.registered == 0
    assert idle_round(lake, s3_proxy)[0] == 1  # no prefix yet: the root's level only (a full listing again)


def test_a_directory_is_listed_on_its_own_until_the_late_window_has_passed(
    lake: Deployment, moto_s3: MotoS3, s3_proxy: CountingProxy
) -> None:
    yesterday = re.compile(r"^LIST .*[?&]prefix=[^&]*2026%2F01%2F01")
    seed(lake, moto_s3, 5)
    discover(lake)
    kinds = {cursor.prefix: cursor.kind for cursor in lake.catalog.discovery.prefixes(lake.staging.root)}
    assert kinds == {
        **{stream: "stream" for stream in STREAMS},
        **{stream + day.rstrip("/"): "recent" for stream in STREAMS for day in DAYS},
    }
    s3_proxy.log = []
    discover(lake)
    assert any(yesterday.search(line) for line in s3_proxy.log), "yesterday's directories are listed on their own"
    lake.config.stream.late_window = 0  # the window has passed since their newest put
    discover(lake)
    assert {cursor.prefix for cursor in lake.catalog.discovery.prefixes(lake.staging.root)} == set(STREAMS)
    s3_proxy.log = []
    discover(lake)
    assert not any(yesterday.search(line) for line in s3_proxy.log)


FLUENT_BIT = (
    r"^(?:.*/)?(?P<schema>[^/.]+)\.(?P<table>[^/.]+)/(?P<year>\d{4})/(?P<month>\d{2})/(?P<day>\d{2})/"
    r"(?P<name>(?:[^/]+/)*[^/]+)$"
)


def test_streams_nested_below_one_prefix_have_cursors_of_their_own(
    moto_s3: MotoS3, s3_proxy: CountingProxy, catalog_url: str
) -> None:
    """Fluent Bit's default layout: /fluent-bit-logs/<tag>/%Y/%m/%d/%H/%M/%S, every stream below one prefix and
    a directory per minute. Cursors go by the key pattern: a stream's is what precedes the year, a day's what
    ends with the day (not a directory per minute)."""
    lake = open_lake(moto_s3, s3_proxy, catalog_url, key_pattern=FLUENT_BIT)
    try:
        lake.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": "zlog"}))
        keys = [
            f"fluent-bit-logs/web.{table}/2026/01/0{day}/10/{minute:02d}/{second:02d}"
            for table in ("access", "zlog")
            for day in (1, 2)
            for minute in range(3)
            for second in (0, 30)
        ]
        put_many(moto_s3, lake, keys)
        assert discover(lake).registered == len(keys)
        prefixes = {cursor.prefix: cursor.kind for cursor in lake.catalog.discovery.prefixes(lake.staging.root)}
        assert prefixes == {
            "fluent-bit-logs/": "stream",
            "fluent-bit-logs/web.access/": "stream",
            "fluent-bit-logs/web.zlog/": "stream",
            **{
                f"fluent-bit-logs/web.{table}/2026/01/0{day}": "recent"
                for table in ("access", "zlog")
                for day in (1, 2)
            },
        }
        # web.access sorts before web.zlog, whose keys moved the first-level prefix's cursor past it
        new = [
            "fluent-bit-logs/web.access/2026/01/02/11/00/00",
            "fluent-bit-logs/web.access/2026/01/03/00/00/00",
            "fluent-bit-logs/web.access/2026/01/01/23/59/59",
        ]
        for key in new:
            put(lake, key)
        assert discover(lake).registered == len(new)
        counts = registered(lake)
        assert set(counts) == set(keys) | set(new) and set(counts.values()) == {1}
        lists, _ = idle_round(lake, s3_proxy)
        # the root's level, the first-level prefix, 2 streams, yesterday's day of each
        # (and web.access's 01/02, passed by its new day), one page of the sweep
        assert lists == 1 + 1 + 2 + 3 + 1
    finally:
        lake.close()
