"""An SQS queue reached with the deployment's S3 settings (endpoint, region, retries, timeouts): where
stream.notifications reads S3 event notifications from. Credentials come from the AWS SDK's usual sources."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from siltlake.errors import ConfigError
from siltlake.storage.filesystem import S3Options

__all__ = ["Message", "Queue", "QueueUnavailable", "open_queue"]

RECEIVE_LIMIT = 10  # messages one ReceiveMessage or DeleteMessageBatch takes at most (SQS's limit)
_AWS_QUEUE_HOST = re.compile(r"sqs\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?\Z")


class QueueUnavailable(OSError):
    """The queue could not be read or written (network, throttling, 5xx) after the SDK's retries."""


@dataclass(frozen=True)
class Message:
    id: str
    body: str
    receipt: str  # the receipt handle of this delivery: what acknowledges (deletes) it


def queue_spec(value: str) -> tuple[str | None, str | None]:
    """(queue name, queue URL) of a stream.notifications value (config.py validated its form)."""
    if value.startswith("sqs://"):
        return value[len("sqs://") :].rstrip("/"), None
    return None, value.rstrip("/")


class Queue:
    """One SQS queue: receive, and delete (acknowledge) what was handled. Errors after the SDK's retries raise
    QueueUnavailable; a queue that does not exist raises ConfigError."""

    def __init__(self, spec: str, s3: S3Options) -> None:
        self.spec = spec
        name, url = queue_spec(spec)
        endpoint, region = _endpoint_and_region(url, s3)
        self._client = _client(endpoint, region, s3)
        self.url = url or self._call("get_queue_url", QueueName=name)["QueueUrl"]

    def receive(self, wait_seconds: int = 0) -> list[Message]:
        """At most ten messages (one ReceiveMessage request)."""
        answer = self._call(
            "receive_message", QueueUrl=self.url, MaxNumberOfMessages=RECEIVE_LIMIT, WaitTimeSeconds=wait_seconds
        )
        return [
            Message(item["MessageId"], item.get("Body", ""), item["ReceiptHandle"])
            for item in answer.get("Messages", [])
        ]

    def delete(self, messages: list[Message]) -> list[str]:
        """Delete (acknowledge) messages, ten per request; returns the ids of those SQS refused to delete
        (they are delivered again after the queue's visibility timeout)."""
        refused = []
        for start in range(0, len(messages), RECEIVE_LIMIT):
            batch = messages[start : start + RECEIVE_LIMIT]
            answer = self._call(
                "delete_message_batch",
                QueueUrl=self.url,
                Entries=[{"Id": str(number), "ReceiptHandle": message.receipt} for number, message in enumerate(batch)],
            )
            refused += [batch[int(failure["Id"])].id for failure in answer.get("Failed", [])]
        return refused

    def _call(self, operation: str, **parameters: Any) -> dict:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client, operation)(**parameters)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
                raise ConfigError(
                    f"stream.notifications: the SQS queue {self.spec} does not exist at "
                    f"{self._client.meta.endpoint_url} (create it, or correct the setting)"
                ) from None
            if code in ("AccessDenied", "AccessDeniedException", "InvalidClientTokenId", "SignatureDoesNotMatch"):
                raise ConfigError(
                    f"stream.notifications: {operation} on the SQS queue {self.spec} was refused "
                    f"({code}): these credentials need sqs:GetQueueUrl, sqs:ReceiveMessage and "
                    "sqs:DeleteMessage on it"
                ) from None
            raise QueueUnavailable(f"{operation} on the SQS queue {self.spec} failed: {exc}") from None
        except BotoCoreError as exc:  # connection refused or reset, timeouts, after the SDK's retries
            raise QueueUnavailable(f"{operation} on the SQS queue {self.spec} failed: {exc}") from None


def _endpoint_and_region(url: str | None, s3: S3Options) -> tuple[str | None, str]:
    """Where the SQS API is asked, and in which region. A queue URL says its own host. Else AWS_ENDPOINT_URL_SQS,
    else the S3 endpoint_override (moto and LocalStack serve both on one port), else the SDK's default (which
    reads AWS_ENDPOINT_URL): AWS. The region: storage.s3.region, AWS_REGION, AWS_DEFAULT_REGION, an AWS queue
    URL's, or us-east-1 with an endpoint of one's own."""
    endpoint = None
    aws_region = None
    if url is not None:
        parts = urlsplit(url)
        endpoint = f"{parts.scheme}://{parts.netloc}"
        match = _AWS_QUEUE_HOST.match(parts.hostname or "")
        aws_region = match.group(1) if match else None
    elif os.environ.get("AWS_ENDPOINT_URL_SQS"):
        endpoint = os.environ["AWS_ENDPOINT_URL_SQS"]
    elif s3.endpoint_override:
        endpoint = f"{s3.scheme}://{s3.endpoint_override}"
    region = (
        aws_region
        or s3.region
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or ("us-east-1" if endpoint or os.environ.get("AWS_ENDPOINT_URL") else None)
    )
    if region is None:
        raise ConfigError(
            "stream.notifications: the SQS queue's region is unknown; set storage.s3.region or "
            "AWS_REGION, or give the queue's URL (https://sqs.<region>.amazonaws.com/...)"
        )
    return endpoint, region


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None, region: str, s3: S3Options) -> Any:
    import boto3
    from botocore.config import Config as ClientConfig

    settings = ClientConfig(
        retries={"max_attempts": s3.max_attempts, "mode": "standard"},
        connect_timeout=s3.connect_timeout or 60,
        read_timeout=s3.request_timeout or 60,
    )
    return boto3.session.Session().client("sqs", endpoint_url=endpoint, region_name=region, config=settings)


@functools.lru_cache(maxsize=8)
def open_queue(spec: str, s3: S3Options) -> Queue:
    """The queue of a stream.notifications value, its URL asked once per process (a failure is not cached)."""
    return Queue(spec, s3)
