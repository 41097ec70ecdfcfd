"""Objects as shippers write them, streamed end to end on Spark: Fluentd out_file lines, LTSV and MessagePack
under a .log name each load exactly once, with the right rows and times; dropped fields are counted."""

from __future__ import annotations

import datetime as dt

import msgpack
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.observe.metrics import STREAM_DROPPED_FIELDS, observe_report
from siltlake.stream import stream_once

from .test_stream import assert_rows_once, lake_files, stage

pytestmark = pytest.mark.spark
UTC = dt.UTC
TOKYO = dt.timezone(dt.timedelta(hours=9))


def test_shipper_formats_load_once_with_their_times(deployment: Deployment, access_table) -> None:
    # Fluentd out_file's default line: time (Fluentd's default %Y-%m-%dT%H:%M:%S%z), tag, the record as JSON
    # without a time field; the file named as out_file names it (path + time slice + index + .log).
    fluentd = "".join(
        f'2026-11-20T21:00:0{i}+0900\tweb.access\t{{"user_id":{i},"action":"view","host":"h{i}"}}\n' for i in range(3)
    )
    stage(deployment, "f1.web.access/2026/11/20/access.20261120_0.log", fluentd.encode())
    # LTSV from an access log: a Common Log Format time, and a naive one read in the table's zone (Tokyo).
    ltsv = (
        "time:[20/Nov/2026:22:00:00 +0900]\tuser_id:10\taction:click\treqtime:0.1\n"
        "time:2026-11-20 22:00:01\tuser_id:11\taction:-\n"
    )
    stage(deployment, "f1.web.access/2026/11/20/access_log.log", ltsv.encode())
    # Fluentd's <format msgpack> under its default .log suffix: [time, record] entries here.
    entries = b"".join(
        msgpack.packb(
            [int(dt.datetime(2026, 11, 20, 14, 0, i, tzinfo=UTC).timestamp()), {"user_id": 20 + i, "action": "buy"}]
        )
        for i in range(2)
    )
    stage(deployment, "f1.web.access/2026/11/20/buffer.b5f1.log", entries)

    report = stream_once(deployment)

    assert report.unknown == [] and report.failed == []
    assert (report.registered, report.processed, report.records_loaded, report.bad_records) == (3, 3, 7, 0)
    assert report.dropped_fields == 4  # host thrice, reqtime once
    by_uri = {item.uri.rsplit("/", 1)[-1]: item for item in report.dropped_by_object}
    assert (by_uri["access.20261120_0.log"].values, by_uri["access.20261120_0.log"].names) == (3, ("host",))
    assert (by_uri["access_log.log"].values, by_uri["access_log.log"].table) == (1, "web.access")
    before = STREAM_DROPPED_FIELDS.labels("web.access")._value.get()
    observe_report("stream", report)
    assert STREAM_DROPPED_FIELDS.labels("web.access")._value.get() == before + 4

    again = stream_once(deployment)
    assert (again.registered, again.processed, again.records_loaded) == (0, 0, 0)
    assert_rows_once(deployment, 7)
    rows = {}
    for key in lake_files(deployment, "live"):
        for row in pq.read_table(deployment.lake.path(key)).to_pylist():
            rows[row["user_id"]] = (row["utc_event_time"], row["action"])
    expected = {
        0: dt.datetime(2026, 11, 20, 21, 0, 0, tzinfo=TOKYO),
        1: dt.datetime(2026, 11, 20, 21, 0, 1, tzinfo=TOKYO),
        2: dt.datetime(2026, 11, 20, 21, 0, 2, tzinfo=TOKYO),
        10: dt.datetime(2026, 11, 20, 22, 0, 0, tzinfo=TOKYO),
        11: dt.datetime(2026, 11, 20, 22, 0, 1, tzinfo=TOKYO),
        20: dt.datetime(2026, 11, 20, 14, 0, 0, tzinfo=UTC),
        21: dt.datetime(2026, 11, 20, 14, 0, 1, tzinfo=UTC),
    }
    assert {user: time for user, (time, _) in rows.items()} == expected
    assert rows[11][1] == "-"  # in a string column an LTSV "-" is kept as written


def test_a_misdetected_object_is_unknown_and_loads_nothing(deployment: Deployment, access_table) -> None:
    stage(deployment, "f1.web.access/2026/11/20/broken.log", b"\x93\x01\x02\x03" * 10)  # arrays, not records
    stage(deployment, "f1.web.access/2026/11/20/squeezed.log.zst", b"\x28\xb5\x2f\xfd" + b"\x00" * 32)

    report = stream_once(deployment)

    reasons = dict((uri.rsplit("/", 1)[-1], reason) for uri, reason in report.unknown)
    assert "zstd-compressed" in reasons["squeezed.log.zst"]
    assert "none of 10 items is a map or a Fluentd entry" in reasons["broken.log"]
    assert (report.records_loaded, report.bad_records, report.processed) == (0, 0, 0)
