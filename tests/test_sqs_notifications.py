"""Discovery from S3 event notifications on an SQS queue (stream.notifications), on moto's server: moto sends
the S3 events itself when an object is put into a bucket whose notification configuration names the queue (or
an SNS topic the queue subscribes to), in AWS's message format, and serves SQS on the same port.

The rule: docs/design.md, "Notifications from an SQS queue"."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
import time
import uuid
from collections import Counter
from pathlib import Path

import boto3
import pyarrow.parquet as pq
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from siltlake.catalog import DiscoveryCursor
from siltlake.clock import utcnow
from siltlake.config import Config
from siltlake.deployment import Deployment
from siltlake.errors import ConfigError
from siltlake.observe.metrics import observe_report, registry_for
from siltlake.stream.discover import discover
from siltlake.stream.notifications import ListingTurn, NotificationTally, listing_turn, parse_message
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .processes import free_port
from .s3_server import CountingProxy, MotoS3, s3_config

ACCOUNT = "123456789012"  # moto's default account
DAY = "f1.web.access/2026/11/20"


class Bucket:
    """A bucket whose object-created events go to a queue of its own, with boto3 clients on moto directly (the
    shipper's side); the deployment reaches the same server through the counting proxy."""

    def __init__(self, moto: MotoS3, visibility: int = 30, redrive_to: str | None = None) -> None:
        endpoint = f"http://{moto.endpoint}"
        self.s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        self.sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
        self.sns = boto3.client("sns", endpoint_url=endpoint, region_name="us-east-1")
        self.name = moto.create_bucket()
        self.queue_name = f"staging-{uuid.uuid4().hex[:10]}"
        attributes = {"VisibilityTimeout": str(visibility)}
        if redrive_to is not None:
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": self.arn(redrive_to), "maxReceiveCount": "1"}
            )
        self.queue_url = self.sqs.create_queue(QueueName=self.queue_name, Attributes=attributes)["QueueUrl"]

    @staticmethod
    def arn(queue_name: str) -> str:
        return f"arn:aws:sqs:us-east-1:{ACCOUNT}:{queue_name}"

    def notify_queue(self, prefix: str | None = "staging/") -> None:
        """Object-created events under the prefix (as a deployment should configure it: the lake's own writes
        are no staging objects) go to the queue; prefix None: every object's."""
        rule = {"Key": {"FilterRules": [{"Name": "prefix", "Value": prefix}]}} if prefix else {}
        self.s3.put_bucket_notification_configuration(
            Bucket=self.name,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {
                        "QueueArn": self.arn(self.queue_name),
                        "Events": ["s3:ObjectCreated:*"],
                        **({"Filter": rule} if rule else {}),
                    }
                ]
            },
        )

    def notify_through_sns(self) -> None:
        topic = self.sns.create_topic(Name=f"t-{self.queue_name}")["TopicArn"]
        self.sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=self.arn(self.queue_name))
        self.s3.put_bucket_notification_configuration(
            Bucket=self.name,
            NotificationConfiguration={"TopicConfigurations": [{"TopicArn": topic, "Events": ["s3:ObjectCreated:*"]}]},
        )

    def put(self, key: str, body: bytes = b'{"time": "2026-11-20T01:00:00Z", "user_id": 1}\n') -> None:
        self.s3.put_object(Bucket=self.name, Key=key, Body=body)

    def send(self, body: str) -> None:
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)

    def counts(self, queue_url: str | None = None) -> tuple[int, int]:
        """(visible, in flight) messages of the queue."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=queue_url or self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


def aws_event(
    bucket: str,
    encoded_key: str,
    size: int = 10,
    time_text: str = "2026-11-20T01:02:03.456Z",
    name: str = "ObjectCreated:Put",
) -> str:
    """An S3 event notification as AWS writes it (the key URL-encoded, '+' for a space)."""
    return json.dumps(
        {
            "Records": [
                {
                    "eventVersion": "2.1",
                    "eventSource": "aws:s3",
                    "awsRegion": "us-east-1",
                    "eventTime": time_text,
                    "eventName": name,
                    "userIdentity": {"principalId": "AWS:EXAMPLE"},
                    "s3": {
                        "s3SchemaVersion": "1.0",
                        "configurationId": "staging",
                        "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
                        "object": {
                            "key": encoded_key,
                            "size": size,
                            "eTag": "0123456789abcdef",
                            "sequencer": "0A1B2C3D",
                        },
                    },
                }
            ]
        }
    )


def notified_deployment(
    bucket: Bucket, endpoint: str, catalog_url: str, queue: str | None = None, max_attempts: int = 10, **stream: object
) -> Deployment:
    """A deployment whose stream reads the bucket's queue (created with the access table unless the catalog has
    it already); `stream` sets other stream settings."""
    config = s3_config(
        bucket.name,
        endpoint,
        catalog_url,
        max_attempts=max_attempts,
        stream={"notifications": queue or f"sqs://{bucket.queue_name}", **stream},
    )
    deployment = Deployment(config)
    deployment.init()
    if not [table for table in deployment.catalog.tables.list() if table.qualified_name == "web.access"]:
        deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    return deployment


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


@pytest.fixture
def bucket(moto_s3: MotoS3) -> Bucket:
    bucket = Bucket(moto_s3)
    bucket.notify_queue()
    return bucket


@pytest.fixture
def lake(bucket: Bucket, s3_proxy: CountingProxy, sqlite_url: str) -> Deployment:
    deployment = notified_deployment(bucket, s3_proxy.endpoint, sqlite_url)
    yield deployment
    deployment.close()


def registered(deployment: Deployment) -> list[str]:
    return sorted(item.uri for item in deployment.catalog.staging.pending(1000))


def test_an_object_put_is_registered_from_its_notification_and_acknowledged(
    bucket: Bucket, s3_proxy: CountingProxy, catalog_url: str
) -> None:
    """moto sends the event of each put; a duplicate delivery of one of them registers nothing more; every
    message (the bucket's s3:TestEvent too) is deleted once the round has registered what they name."""
    deployment = notified_deployment(bucket, s3_proxy.endpoint, catalog_url)
    try:
        for n in range(3):
            bucket.put(f"staging/{DAY}/obj-{n}.jsonl")
        bucket.send(aws_event(bucket.name, f"staging/{DAY}/obj-1.jsonl"))  # delivered twice
        assert bucket.counts() == (5, 0)

        report = discover(deployment)

        assert (report.notified, report.registered, report.redelivered, report.unknown) == (3, 3, 0, 0)
        tally = report.notifications
        assert (tally.messages, tally.objects, tally.ignored, tally.malformed, tally.foreign) == (5, 4, 1, 0, 0)
        assert registered(deployment) == [deployment.staging.uri(f"{DAY}/obj-{n}.jsonl") for n in range(3)]
        assert bucket.counts() == (0, 0), "acknowledged after the registration"

        bucket.send(aws_event(bucket.name, f"staging/{DAY}/obj-2.jsonl"))  # a late redelivery
        again = discover(deployment)
        assert (again.notified, again.registered, again.redelivered, again.notifications.objects) == (0, 0, 0, 1)
        assert bucket.counts() == (0, 0)
        s3_proxy.reset()
        idle = discover(deployment)
        requests = s3_proxy.reset()
        assert idle.notifications.messages == 0 and requests["POST"] == 1, "an idle round: one ReceiveMessage"
        assert requests["LIST"] == 0 and 0 < idle.listing_waits <= 60, "the listing waits its interval"
    finally:
        deployment.close()


def test_a_round_that_fails_before_the_commit_leaves_its_messages_for_redelivery(
    moto_s3: MotoS3, s3_proxy: CountingProxy, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = Bucket(moto_s3, visibility=1)
    bucket.notify_queue()
    deployment = notified_deployment(bucket, s3_proxy.endpoint, sqlite_url)
    try:
        bucket.put(f"staging/{DAY}/a.jsonl")
        bucket.put(f"staging/{DAY}/b.jsonl")

        def refused(*rows: object) -> int:
            raise OSError("the catalog's disk is full (injected)")

        monkeypatch.setattr(deployment.catalog.staging, "register", refused)
        with pytest.raises(OSError, match="injected"):
            discover(deployment)
        monkeypatch.undo()
        assert registered(deployment) == []
        assert sum(bucket.counts()) == 3, "nothing deleted: the test event and both objects' events"

        time.sleep(1.5)  # the queue's visibility timeout: the messages are delivered again
        report = discover(deployment)
        assert (report.notified, report.registered) == (2, 2)
        assert bucket.counts() == (0, 0)
    finally:
        deployment.close()


def test_the_listing_registers_what_no_notification_named_and_a_late_notice_is_no_re_put(
    bucket: Bucket, s3_proxy: CountingProxy, sqlite_url: str
) -> None:
    """An object listed (and registered) before its notification is read: the notice registers nothing and is
    not reported as a re-put (its event time is after the object's LastModified)."""
    listing_only = Deployment(s3_config(bucket.name, s3_proxy.endpoint, sqlite_url))
    listing_only.init()
    listing_only.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    bucket.put(f"staging/{DAY}/listed.jsonl")
    assert discover(listing_only).registered == 1
    listing_only.close()

    deployment = notified_deployment(bucket, s3_proxy.endpoint, sqlite_url, notified_listing_interval=0)
    try:
        report = discover(deployment)
        assert (report.notified, report.registered, report.redelivered, report.changed) == (0, 0, 0, [])
        assert report.notifications.objects == 1 and bucket.counts() == (0, 0)
        # Lost notifications: the listing still finds the object.
        bucket.s3.put_bucket_notification_configuration(Bucket=bucket.name, NotificationConfiguration={})
        bucket.put(f"staging/{DAY}/never-notified.jsonl")
        report = discover(deployment)
        assert (report.notified, report.registered) == (0, 1)
    finally:
        deployment.close()


def test_between_listings_a_round_reads_the_queue_only_and_the_next_listing_finds_what_it_missed(
    bucket: Bucket, s3_proxy: CountingProxy, sqlite_url: str
) -> None:
    """With notifications the listing runs every stream.notified_listing_interval; its sweep slice covers the
    rounds that did not list (here three slices of one key)."""
    deployment = notified_deployment(
        bucket, s3_proxy.endpoint, sqlite_url, notified_listing_interval=3, poll_interval=1, sweep_keys_per_round=1
    )
    try:
        for n in range(4):
            bucket.put(f"staging/{DAY}/notified-{n}.jsonl")
        first = discover(deployment)
        assert (first.registered, first.full_listing, first.listing_waits) == (4, True, None), "a first round lists"
        bucket.s3.put_bucket_notification_configuration(Bucket=bucket.name, NotificationConfiguration={})
        bucket.put(f"staging/{DAY}/never-notified.jsonl")  # a lost notification
        s3_proxy.reset()

        waiting = discover(deployment)

        assert (waiting.registered, waiting.listed, s3_proxy.reset()["LIST"]) == (0, 0, 0)
        assert 0 < waiting.listing_waits <= 3
        time.sleep(waiting.listing_waits + 0.2)

        caught = discover(deployment)

        assert (caught.registered, caught.listing_waits, caught.swept) == (1, None, 3)
        assert deployment.staging.uri(f"{DAY}/never-notified.jsonl") in registered(deployment)
    finally:
        deployment.close()


def test_when_the_listing_is_due() -> None:
    """listing_turn: due without a queue, with one that failed, on the first round, with the interval 0, and
    once the interval has passed (the sweep's share then the rounds waited, at most the interval's); not due
    between."""
    config = s3_config("bucket", "127.0.0.1:1", "sqlite://", stream={"notifications": "sqs://q"})
    deployment = Deployment(config)  # poll_interval 10, notified_listing_interval 60, listing_margin 5
    listed = utcnow() - dt.timedelta(seconds=5)  # a listing that started just now

    def cursor(seconds_ago: float) -> DiscoveryCursor:
        return DiscoveryCursor(listed - dt.timedelta(seconds=seconds_ago), listed)

    read = NotificationTally()
    assert listing_turn(deployment, cursor(0), None) == ListingTurn(due=True)
    assert listing_turn(deployment, cursor(0), NotificationTally(error="throttled")) == ListingTurn(due=True)
    assert listing_turn(deployment, None, read) == ListingTurn(due=True)
    waiting = listing_turn(deployment, cursor(20), read)
    assert not waiting.due and 39 < waiting.waits <= 40
    assert listing_turn(deployment, cursor(-30), read) == ListingTurn(due=True), "another host's clock ahead"
    assert listing_turn(deployment, cursor(62), read) == ListingTurn(due=True, sweep_rounds=6)
    assert listing_turn(deployment, cursor(86_400), read) == ListingTurn(due=True, sweep_rounds=6)
    late = Deployment(
        s3_config(
            "bucket", "127.0.0.1:1", "sqlite://", stream={"notifications": "sqs://q", "notified_listing_interval": 300}
        )
    )
    assert listing_turn(late, cursor(122), read) == ListingTurn(due=False, waits=pytest.approx(178, abs=1))
    assert listing_turn(late, cursor(310), read).sweep_rounds == 30
    every = Deployment(
        s3_config(
            "bucket", "127.0.0.1:1", "sqlite://", stream={"notifications": "sqs://q", "notified_listing_interval": 0}
        )
    )
    assert listing_turn(every, cursor(1), read) == ListingTurn(due=True)


def test_sns_wrapped_events_register_their_objects(moto_s3: MotoS3, s3_proxy: CountingProxy, sqlite_url: str) -> None:
    bucket = Bucket(moto_s3)
    bucket.notify_through_sns()
    deployment = notified_deployment(bucket, s3_proxy.endpoint, sqlite_url)
    try:
        bucket.put(f"staging/{DAY}/via-sns.jsonl")
        body = bucket.sqs.receive_message(QueueUrl=bucket.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)[
            "Messages"
        ]
        assert all(json.loads(m["Body"])["Type"] == "Notification" for m in body), "moto wraps them in SNS'"

        report = discover(deployment)

        assert (report.notified, report.registered, report.notifications.ignored) == (1, 1, 1)  # + the test event
        assert registered(deployment) == [deployment.staging.uri(f"{DAY}/via-sns.jsonl")]
        assert bucket.counts() == (0, 0)
    finally:
        deployment.close()


def test_a_malformed_message_is_kept_for_the_redrive_policy_and_reported(
    moto_s3: MotoS3, s3_proxy: CountingProxy, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    dead_letters = f"dead-{uuid.uuid4().hex[:10]}"
    sqs = boto3.client("sqs", endpoint_url=f"http://{moto_s3.endpoint}", region_name="us-east-1")
    dead_url = sqs.create_queue(QueueName=dead_letters)["QueueUrl"]
    # Long enough that a loaded machine's round never sees a malformed message come back within it.
    bucket = Bucket(moto_s3, visibility=5, redrive_to=dead_letters)
    deployment = notified_deployment(bucket, s3_proxy.endpoint, sqlite_url)
    try:
        bucket.send("this is no S3 event")
        bucket.send(json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {}}]}))
        bucket.send(aws_event(bucket.name, f"staging/{DAY}/fine.jsonl"))
        bucket.put(f"staging/{DAY}/fine.jsonl")  # (no notification configured: the event above is by hand)

        with caplog.at_level(logging.WARNING, logger="siltlake.stream.notifications"):
            report = discover(deployment)

        assert (report.notifications.malformed, report.notified, report.registered) == (2, 1, 1)
        assert bucket.counts() == (0, 2), "the malformed ones stay in flight, not deleted"
        warnings = [r.getMessage() for r in caplog.records if "notification_malformed" in r.getMessage()]
        assert len(warnings) == 2 and all(bucket.queue_name in w and "message_id=" in w for w in warnings)
        assert "not JSON" in warnings[0] and "record 0" in warnings[1]

        time.sleep(5.5)  # delivered again: past maxReceiveCount, SQS moves them to the dead-letter queue
        discover(deployment)
        assert bucket.counts() == (0, 0) and sum(bucket.counts(dead_url)) == 2
    finally:
        deployment.close()


def test_records_outside_the_staging_root_are_acknowledged_and_ignored(
    bucket: Bucket, lake: Deployment, moto_s3: MotoS3, caplog: pytest.LogCaptureFixture
) -> None:
    other = moto_s3.create_bucket()
    bucket.notify_queue(prefix=None)
    bucket.sqs.purge_queue(QueueUrl=bucket.queue_url)  # the test events
    bucket.put("lake/not-staging.jsonl")
    bucket.put(f"stagingX/{DAY}/sibling-prefix.jsonl")
    bucket.send(aws_event(other, f"staging/{DAY}/other-bucket.jsonl"))
    bucket.send(aws_event(bucket.name, f"staging/{DAY}/", name="ObjectCreated:Put"))  # a directory marker
    bucket.send(aws_event(bucket.name, f"staging/{DAY}/gone.jsonl", name="ObjectRemoved:Delete"))

    with caplog.at_level(logging.WARNING, logger="siltlake.stream.notifications"):
        report = discover(lake)

    tally = report.notifications
    assert (tally.foreign, tally.ignored, tally.objects, report.registered) == (3, 2, 0, 0)
    assert bucket.counts() == (0, 0)
    assert sum("notification_foreign" in r.getMessage() for r in caplog.records) <= 1, "logged once per process"


@pytest.mark.parametrize(
    "key, encoded",
    [
        ("a b+c.jsonl", "a+b%2Bc.jsonl"),  # AWS: '+' for a space, %2B for a plus
        ("été (1) & more.jsonl", "%C3%A9t%C3%A9+%281%29+%26+more.jsonl"),
        ("x=1,y;z@host:~!$'*.jsonl", "x%3D1%2Cy%3Bz%40host%3A%7E%21%24%27%2A.jsonl"),
    ],
)
def test_encoded_keys_decode_to_the_listed_key(bucket: Bucket, lake: Deployment, key: str, encoded: str) -> None:
    """The notified object gets the URI its listing would: the listing then finds it registered."""
    bucket.s3.put_bucket_notification_configuration(Bucket=bucket.name, NotificationConfiguration={})
    bucket.put(f"staging/{DAY}/{key}")
    bucket.send(aws_event(bucket.name, f"staging/{DAY.replace('/', '%2F')}%2F{encoded}"))

    report = discover(lake)

    assert (report.notified, report.registered, report.unknown) == (1, 1, 0)
    assert registered(lake) == [lake.staging.uri(f"{DAY}/{key}")]
    assert [info.key for info in lake.staging.list()] == [f"{DAY}/{key}"]


def test_moto_encodes_keys_as_aws_does_and_they_register_once(bucket: Bucket, lake: Deployment) -> None:
    keys = [f"{DAY}/with space.jsonl", f"{DAY}/plus+sign.jsonl", f"{DAY}/ünï.jsonl"]
    for key in keys:
        bucket.put(f"staging/{key}")

    report = discover(lake)

    assert (report.notified, report.registered) == (3, 3)
    assert registered(lake) == sorted(lake.staging.uri(key) for key in keys)
    assert discover(lake).registered == 0


def test_an_unreachable_queue_leaves_the_round_to_its_listing(
    bucket: Bucket, s3_proxy: CountingProxy, sqlite_url: str
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/{ACCOUNT}/{bucket.queue_name}"
    deployment = notified_deployment(bucket, s3_proxy.endpoint, sqlite_url, queue=closed, max_attempts=1)
    try:
        bucket.put(f"staging/{DAY}/a.jsonl")
        report = discover(deployment)
        assert "receive_message on the SQS queue" in (report.notifications.error or "")
        assert (report.notified, report.registered) == (0, 1), "the listing found it"
        bucket.put(f"staging/{DAY}/b.jsonl")
        again = discover(deployment)
        assert (again.registered, again.listing_waits) == (1, None), "within the interval, but the queue failed: listed"
    finally:
        deployment.close()


def test_a_missing_queue_is_a_configuration_error(moto_s3: MotoS3, s3_proxy: CountingProxy, sqlite_url: str) -> None:
    bucket = Bucket(moto_s3)
    deployment = notified_deployment(bucket, s3_proxy.endpoint, sqlite_url, queue="sqs://no-such-queue")
    try:
        with pytest.raises(ConfigError, match="no-such-queue does not exist"):
            discover(deployment)
    finally:
        deployment.close()


def test_the_setting_is_validated() -> None:
    storage = {"staging_root": "s3://bucket/staging"}
    for good in (
        "sqs://staging-events",
        "https://sqs.eu-west-1.amazonaws.com/123456789012/staging-events",
        "http://127.0.0.1:5000/123456789012/q.fifo",
    ):
        assert Config.model_validate({"storage": storage, "stream": {"notifications": good}}).stream.notifications
    assert Config.model_validate({"storage": storage, "stream": {"notifications": ""}}).stream.notifications is None
    for bad, message in (
        ("sqs://two words", "does not name an SQS queue"),
        ("kafka://x/y/z", "is no SQS queue"),
        ("https://sqs.amazonaws.com/only-a-name", "is no SQS queue"),
    ):
        with pytest.raises(ValueError, match=message):
            Config.model_validate({"storage": storage, "stream": {"notifications": bad}})
    with pytest.raises(ValueError, match="no s3:// root"):
        Config.model_validate({"stream": {"notifications": "sqs://q"}})


def test_parse_message_reads_aws_events() -> None:
    created, ignored = parse_message(aws_event("b", "staging/a+b%2Bc%2F%C3%A9"))
    assert ignored == 0 and [(c.bucket, c.key, c.size) for c in created] == [("b", "staging/a b+c/é", 10)]
    assert created[0].time.isoformat() == "2026-11-20T01:02:03.456000+00:00"
    assert parse_message(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"})) == ([], 1)
    wrapped = json.dumps(
        {"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": aws_event("b", "k")}
    )
    assert [c.key for c in parse_message(wrapped)[0]] == ["k"]


# --- end to end: a stream round loads notified objects once ------------------------------------------------


def jsonl_gz(first: int, count: int) -> bytes:
    return gzip.compress(
        "".join(
            json.dumps({"time": f"2026-11-20T01:00:{i % 60:02d}Z", "user_id": first + i, "action": "view"}) + "\n"
            for i in range(count)
        ).encode()
    )


def notification_counts(deployment: Deployment) -> Counter[str]:
    """siltlake_stream_notifications_total by kind, as /metrics serves it."""
    text = generate_latest(registry_for(deployment)).decode()
    return Counter(
        {
            sample.labels["kind"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "siltlake_stream_notifications_total"
        }
    )


@pytest.mark.spark
def test_stream_once_loads_notified_objects_exactly_once(bucket: Bucket, lake: Deployment, spark) -> None:
    from siltlake.stream import stream_once

    lake.use_spark(spark)
    for n in range(3):
        bucket.put(f"staging/{DAY}/obj-{n}.jsonl.gz", jsonl_gz(n * 100, 20))
    bucket.send(aws_event(bucket.name, f"staging/{DAY}/obj-0.jsonl.gz"))  # a duplicate delivery

    before = notification_counts(lake)
    report = stream_once(lake)
    assert (report.notified, report.registered, report.processed, report.records_loaded) == (3, 3, 3, 60)
    observe_report("stream", report)
    after = notification_counts(lake)
    assert (after["object"] - before["object"], after["ignored"] - before["ignored"]) == (4, 1)  # + the test event
    bucket.send(aws_event(bucket.name, f"staging/{DAY}/obj-1.jsonl.gz"))  # redelivered after the commit
    again = stream_once(lake)
    assert (again.notified, again.registered, again.processed) == (0, 0, 0)
    assert bucket.counts() == (0, 0)

    record = lake.catalog.tables.get("web.access")
    objects = lake.catalog.partitions.small_objects(record.id)
    assert sum(o.row_count for o in objects) == 60
    users: Counter[int] = Counter()
    for info in lake.lake.list():
        if "/live/" in info.key:
            with lake.lake.open_input_file(info.key) as handle:
                users.update(pq.read_table(handle).column("user_id").to_pylist())
    assert len(users) == 60 and set(users.values()) == {1}


def test_a_round_that_did_not_list_says_when_the_listing_is_due(capsys: pytest.CaptureFixture[str]) -> None:
    from siltlake.cli.reports import print_stream_report
    from siltlake.stream import StreamReport

    print_stream_report(StreamReport(listing_waits=42.4), "s3://bucket/staging", verbose=False)
    printed = " ".join(capsys.readouterr().err.split())
    assert printed.endswith("; the queue only, the listing is due in 42s"), printed
    print_stream_report(StreamReport(), "s3://bucket/staging")
    assert "listing" not in capsys.readouterr().err
