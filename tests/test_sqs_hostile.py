"""Hostile notification bodies never stop a round: each is a malformed message with its reason (left in the
queue for its redrive policy), and the real notices received with it register (stream/notifications.py)."""

from __future__ import annotations

import json

import pytest

from siltlake.deployment import Deployment
from siltlake.stream.discover import discover
from siltlake.stream.notifications import Malformed, parse_message

from .test_sqs_notifications import DAY, Bucket, aws_event, bucket, lake, registered, sqlite_url  # noqa: F401

RECORD = json.loads(aws_event("b", "staging/x.jsonl"))["Records"][0]
HOSTILE = {
    "deep-array": "[" * 50_000,
    "deep-object": '{"a":' * 50_000,
    "deep-in-records": '{"Records":' + "[" * 50_000 + "]" * 50_000 + "}",
    "deep-sns-message": json.dumps({"Type": "Notification", "Message": "[" * 50_000}),
    "huge-size": json.dumps({"Records": [{**RECORD, "s3": {**RECORD["s3"], "object": {"key": "k", "size": 1e400}}}]}),
    "time-not-text": json.dumps({"Records": [{**RECORD, "eventTime": 5}]}),
    "key-not-utf8": json.dumps({"Records": [{**RECORD, "s3": {**RECORD["s3"], "object": {"key": "a%FF"}}}]}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_body_is_malformed_with_a_reason(name: str) -> None:
    with pytest.raises(Malformed) as raised:
        parse_message(HOSTILE[name])
    assert str(raised.value)


def test_a_body_of_50000_brackets_leaves_the_rest_of_its_batch_registered(
    bucket: Bucket,  # noqa: F811
    lake: Deployment,  # noqa: F811
) -> None:
    bucket.send("[" * 50_000)
    bucket.send(aws_event(bucket.name, f"staging/{DAY}/real.jsonl"))
    bucket.put(f"staging/{DAY}/real.jsonl")
    report = discover(lake)
    assert (report.notifications.malformed, report.notified, report.registered) == (1, 1, 1)
    assert registered(lake) == [lake.staging.uri(f"{DAY}/real.jsonl")]
    assert bucket.counts()[0] == 0  # the real notice acknowledged; the bad one in flight, for the redrive policy
