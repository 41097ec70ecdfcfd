"""Staging file names that are not UTF-8 (a local root, names made with the os bytes APIs): each is either
loaded under a faithful percent-encoded URI or an unknown object with its reason; never a round's failure."""

from __future__ import annotations

import datetime as dt
import os

from siltlake.stream import stream_once

from .test_stream import event, jsonl_gz

WHEN = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)


def put(deployment, name: bytes, data: bytes) -> None:  # a Deployment
    path = os.path.join(os.fsencode(deployment.staging.path("f.web.access/2026/11/20")), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as file:
        file.write(data)


def test_a_name_that_is_not_utf8_loads_and_the_others_with_it(plain_deployment) -> None:
    put(plain_deployment, b"bad\xff.jsonl.gz", jsonl_gz([event(WHEN, 1), event(WHEN, 2)]))
    put(plain_deployment, b"good.jsonl.gz", jsonl_gz([event(WHEN, 3)]))
    put(plain_deployment, b"\xe2\x80.jsonl.gz", jsonl_gz([event(WHEN, 4)]))  # a cut-off UTF-8 sequence
    report = stream_once(plain_deployment)
    assert (report.processed, report.records_loaded, report.failed, report.unknown) == (3, 4, [], [])
    staging = plain_deployment.staging
    key = os.fsdecode(b"f.web.access/2026/11/20/bad\xff.jsonl.gz")
    assert staging.uri(key).endswith("/bad%FF.jsonl.gz") and staging.key_in_uri(staging.uri(key)) == key
    again = stream_once(plain_deployment)
    assert (again.registered, again.processed, again.failed) == (0, 0, [])
    # A later round's walk of what changed (not a full listing) finds a new one.
    put(plain_deployment, b"later\xfe\xfd.jsonl.gz", jsonl_gz([event(WHEN, 5)]))
    later = stream_once(plain_deployment)
    assert (later.registered, later.processed, later.records_loaded, later.failed) == (1, 1, 1, [])


def test_a_directory_name_that_is_not_utf8_stops_no_round(plain_deployment) -> None:
    """The one-off runs' record of names (a text column per directory) leaves such a directory out: it is read
    whole each round. Its file fits no key pattern (a directory below the day): unknown, with the reason."""
    put(plain_deployment, b"sub\xff/a.jsonl.gz", jsonl_gz([event(WHEN, 1)]))
    put(plain_deployment, b"b.jsonl.gz", jsonl_gz([event(WHEN, 2)]))
    assert stream_once(plain_deployment).processed == 1
    [unknown] = plain_deployment.catalog.staging.unknown()
    assert unknown.uri.endswith("/sub%FF/a.jsonl.gz") and unknown.reason
    put(plain_deployment, b"c.jsonl.gz", jsonl_gz([event(WHEN, 3)]))
    later = stream_once(plain_deployment)
    assert (later.processed, later.failed) == (1, [])
