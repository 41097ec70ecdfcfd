"""A staging object whose decoding kills its process (a segfault in a native library) counts as that object's
failure and, at stream.max_failures, becomes unknown; the other objects of its wave load (stream/stage.py)."""

from __future__ import annotations

import ctypes
import datetime as dt
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.stream import stage as wave_stage
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .test_stream import event, jsonl_gz, stage

pytestmark = pytest.mark.spark
POISON = "/02.jsonl.gz"


def _staged(tmp_path: Path, catalog_url: str, spark, **stream: object) -> Deployment:
    stream = {"group_bytes": 0, **stream}  # each object its own task
    deployment = Deployment(make_config(tmp_path, catalog_url, max_failures=2, **stream))
    deployment.init()
    deployment.use_spark(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    when = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)
    for n in range(4):
        stage(
            deployment,
            f"f.web.access/2026/11/20/{n:02d}.jsonl.gz",
            jsonl_gz([event(when + dt.timedelta(minutes=i), n * 100 + i) for i in range(3)]),
        )
    return deployment


def test_an_object_that_crashes_its_decoder_fails_alone_and_then_becomes_unknown(
    tmp_path: Path, catalog_url: str, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It crashes this host's worker process first (the wave then runs on Spark), then Spark's Python worker."""
    deployment = _staged(tmp_path, catalog_url, spark)
    real = wave_stage.process_wave_item

    def crashes_on_the_poison(task):  # on this host's workers and in Spark's alike
        if task.uri.endswith(POISON):
            ctypes.string_at(0)  # a segfault: the process ends, no exception reaches Python
        return real(task)

    monkeypatch.setattr(wave_stage, "process_wave_item", crashes_on_the_poison)
    try:
        first = stream_once(deployment)
        assert first.processed == 3 and first.records_loaded == 9 and first.unknown == []
        [(uri, reason)] = first.failed
        assert uri.endswith(POISON) and "the process decoding it died" in reason and "failed 1 of" in reason
        second = stream_once(deployment)
        assert second.processed == 0 and second.failed == []
        [(uri, reason)] = second.unknown
        assert uri.endswith(POISON) and reason.startswith("failed 2 times") and "decoding it died" in reason
        assert [row.uri for row in deployment.catalog.staging.unknown()][-1].endswith(POISON)
        assert stream_once(deployment).processed == 0  # nothing is left pending: the wave no longer stalls
    finally:
        deployment.close()
