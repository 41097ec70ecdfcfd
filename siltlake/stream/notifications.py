"""Staging objects named by S3 event notifications on an SQS queue (stream.notifications), read at the start of
each discovery round besides the listing (docs/design.md, "Notifications from an SQS queue").

A message is acknowledged (deleted) only after what it names is registered and committed: delivery is at least
once, and a message seen twice, or naming a key the catalog knows, registers nothing."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, unquote_plus, urlsplit

from siltlake.catalog import DiscoveryCursor
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.logs import event
from siltlake.storage.filesystem import ObjectInfo, S3Options
from siltlake.storage.sqs import RECEIVE_LIMIT, Message, Queue, QueueUnavailable, open_queue

log = logging.getLogger(__name__)

ROUND_LIMIT = 10_000  # messages one round reads at most, so that a round stays bounded; the rest wait for the next
CHUNK = 1_000  # messages registered and acknowledged together: well within any queue's visibility timeout
_warned_foreign: set[str] = set()  # queues whose foreign records were logged (once per process)


@dataclass
class NotificationTally:
    """What one round read from the queue."""

    messages: int = 0  # received
    objects: int = 0  # object-created records naming a key under the staging root
    foreign: int = 0  # records of another bucket or outside the staging prefix: acknowledged, ignored
    ignored: int = 0  # s3:TestEvent, events other than ObjectCreated, directory markers: acknowledged
    malformed: int = 0  # messages that are no S3 event: left in the queue, for its redrive policy
    unacknowledged: int = 0  # deletes SQS refused: delivered again later, which registers nothing
    error: str | None = None  # the queue could not be read or written: this round relied on the listing


@dataclass(frozen=True)
class Created:
    """An object-created record of an S3 event."""

    bucket: str
    key: str  # the full object key, decoded
    size: int
    time: dt.datetime  # eventTime: when S3 finished the request, at or after the object's LastModified


class Malformed(ValueError):
    """A message that is no S3 event notification (direct or wrapped by SNS)."""


def parse_message(body: str) -> tuple[list[Created], int]:
    """The object-created records of a message, and how many of its events are ignored (test events, other
    event types). Raises Malformed, and nothing else: whatever a body holds costs only its own message."""
    try:
        return _parsed(body)
    except Malformed:
        raise
    except Exception as exc:
        raise Malformed(f"unreadable ({type(exc).__name__}: {str(exc)[:200]})") from None


def _json(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except RecursionError:  # JSON nested deeper than Python's recursion limit: no S3 event is
        raise Malformed(f"{what} nests too deeply") from None
    except (TypeError, ValueError):
        raise Malformed(f"{what} is not JSON") from None


def _parsed(body: str) -> tuple[list[Created], int]:
    document = _json(body, "the body")
    if isinstance(document, dict) and document.get("Type") == "Notification" and "Message" in document:
        # An SNS topic's envelope (raw message delivery off): the S3 event is its Message, as a string.
        document = _json(document["Message"], "an SNS notification whose Message")
    if not isinstance(document, dict):
        raise Malformed("the body is no JSON object")
    if document.get("Event") == "s3:TestEvent":  # sent once when a bucket's notification is configured
        return [], 1
    records = document.get("Records")
    if not isinstance(records, list):
        raise Malformed("no Records list (not an S3 event notification)")
    created, ignored = [], 0
    for number, record in enumerate(records):
        try:
            name = record["eventName"]
            if not isinstance(name, str) or not name.startswith("ObjectCreated:"):
                ignored += 1
                continue
            target = record["s3"]
            # The key is URL-encoded, with '+' for a space (a literal '+' arrives as %2B).
            key = unquote_plus(target["object"]["key"], errors="strict")
            created.append(
                Created(
                    target["bucket"]["name"],
                    key,
                    int(target["object"].get("size", 0)),
                    _event_time(record["eventTime"]),
                )
            )
        except Exception as exc:
            raise Malformed(f"record {number} is no S3 object event ({type(exc).__name__}: {str(exc)[:200]})") from None
    return created, ignored


def _event_time(text: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"eventTime {text!r} has no time zone")
    return moment.astimezone(dt.UTC)


def take_notified(deployment: Deployment, register: Callable[[list[ObjectInfo]], None]) -> NotificationTally:
    """Read the queue of stream.notifications in chunks: hand each chunk's objects under the staging root that the
    catalog does not know to `register` (which commits them), then acknowledge the chunk's messages. A failure
    before the acknowledgement leaves them in the queue, delivered again after its visibility timeout."""
    staging = deployment.staging
    spec = deployment.config.stream.notifications
    assert spec is not None
    queue = open_queue(spec, staging.s3 or S3Options())
    parts = urlsplit(staging.root)
    bucket, prefix = parts.netloc, unquote(parts.path).strip("/")
    tally = NotificationTally()
    while tally.messages < ROUND_LIMIT:
        try:
            chunk = _receive(queue, min(CHUNK, ROUND_LIMIT - tally.messages))
        except QueueUnavailable as exc:
            tally.error = str(exc)
            event(
                log,
                "stream.notifications_unavailable",
                logging.WARNING,
                queue=spec,
                error=str(exc),
                note="this round relies on the listing",
            )
            break
        if not chunk:
            break
        tally.messages += len(chunk)
        handled: list[Message] = []
        objects: dict[str, ObjectInfo] = {}
        for message in chunk:
            try:
                created, ignored = parse_message(message.body)
            except Malformed as exc:
                tally.malformed += 1
                event(
                    log,
                    "stream.notification_malformed",
                    logging.WARNING,
                    queue=spec,
                    message_id=message.id,
                    reason=str(exc),
                    note="left in the queue for its redrive policy (dead-letter queue)",
                )
                continue
            tally.ignored += ignored
            handled.append(message)
            for record in created:
                if record.bucket != bucket or not (prefix == "" or record.key.startswith(prefix + "/")):
                    tally.foreign += 1
                    _warn_foreign(spec, record, staging.root)
                    continue
                key = record.key[len(prefix) + 1 :] if prefix else record.key
                if not key or key.endswith("/"):  # a directory marker: no object to load
                    tally.ignored += 1
                    continue
                tally.objects += 1
                known = objects.get(key)
                if known is None or known.mtime is None or known.mtime < record.time:
                    objects[key] = ObjectInfo(key, record.size, record.time)
        register(_unknown(deployment, list(objects.values())))
        error = None
        try:
            refused = queue.delete(handled)
        except QueueUnavailable as exc:  # registered already: a redelivery registers nothing
            refused, error = [message.id for message in handled], str(exc)
        if refused:
            tally.unacknowledged += len(refused)
            event(
                log,
                "stream.notifications_unacknowledged",
                logging.WARNING,
                queue=spec,
                messages=len(refused),
                error=error,
                note="delivered again after the visibility timeout; their objects are registered "
                "already, so they register nothing",
            )
    return tally


@dataclass(frozen=True)
class ListingTurn:
    """Whether an object store round lists, when notifications name new objects between listings (docs/design.md,
    "Notifications from an SQS queue")."""

    due: bool
    waits: float = 0.0  # seconds until the next listing is due (when not due now)
    # The listing's sweep slice, in stream.sweep_keys_per_round: the rounds it stands for (itself and those that
    # did not list)
    sweep_rounds: int = 1


def listing_turn(
    deployment: Deployment, cursor: DiscoveryCursor | None, tally: NotificationTally | None
) -> ListingTurn:
    """A round whose queue read succeeded lists only once stream.notified_listing_interval has passed since the
    last listing started; so that a sweep pass takes as long as when every round lists, a listing round's slice
    covers the rounds that did not list (at most the interval's worth). Without a queue, with a queue that could
    not be read, on a root's first round and with the interval 0, every round lists."""
    config = deployment.config.stream
    interval = config.notified_listing_interval
    if tally is None or tally.error is not None or cursor is None or interval == 0:
        return ListingTurn(due=True)
    # The cursor stays listing_margin behind its listing's start (discover_s3.ObjectStoreListing.advance).
    since = (utcnow() - cursor.cursor_time).total_seconds() - config.listing_margin
    period = max(1, config.poll_interval)
    if 0 <= since < interval:  # a cursor ahead of this host's clock (another host's) lists now
        return ListingTurn(due=False, waits=interval - since)
    return ListingTurn(due=True, sweep_rounds=max(1, min(round(since / period), math.ceil(interval / period))))


def _receive(queue: Queue, limit: int) -> list[Message]:
    """Up to `limit` messages, ten per request without waiting, until the queue answers none: an idle round
    costs one request. (A short poll may miss a few messages of a busy queue: the next round gets them.)"""
    messages: list[Message] = []
    while len(messages) + RECEIVE_LIMIT <= limit:
        answer = queue.receive()
        if not answer:
            break
        messages += answer
    return messages


def _unknown(deployment: Deployment, objects: list[ObjectInfo]) -> list[ObjectInfo]:
    """The objects whose URIs the catalog does not know. Known ones (a message delivered twice, an object the
    listing registered first) are dropped here: their event time is not their LastModified, so the
    registration's re-put check would report them put again; listings find real re-puts."""
    if not objects:
        return []
    uris = [deployment.staging.uri(info.key) for info in objects]
    known, _ = deployment.catalog.staging.sort_listed(
        [(uri, None, info.size) for uri, info in zip(uris, objects, strict=True)]
    )
    return [info for uri, info in zip(uris, objects, strict=True) if uri not in known]


def _warn_foreign(spec: str, record: Created, root: str) -> None:
    if spec not in _warned_foreign:
        _warned_foreign.add(spec)
        event(
            log,
            "stream.notification_foreign",
            logging.WARNING,
            queue=spec,
            object=f"s3://{record.bucket}/{record.key}",
            staging_root=root,
            note="records outside the staging root are acknowledged and ignored; limit the bucket's notification "
            "to the staging prefix (logged once)",
        )
