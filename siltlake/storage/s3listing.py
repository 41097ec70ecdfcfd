"""Listing an S3 root from a key on (ListObjectsV2's StartAfter), which pyarrow's S3 file system cannot do:
what object store discovery (stream/discover_s3.py) reads instead of listing the whole root every round.

The client is botocore's, built from the same settings as the root's pyarrow file system (storage.s3: endpoint,
scheme, region, attempts, timeouts; else the AWS SDKs' environment). Credentials come from the SDK's chain."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from siltlake.storage.filesystem import ObjectInfo, S3Options, Storage, s3_endpoint

if TYPE_CHECKING:
    from collections.abc import Iterator

PAGE_KEYS = 1000  # S3's most keys per ListObjectsV2 answer


@dataclass
class KeyListing:
    """What one listing of a prefix found. Keys are raw (as stored, relative to the root: what StartAfter takes);
    each object's ObjectInfo carries its key as Storage.list gives it (the same URI either way)."""

    objects: list[tuple[str, ObjectInfo]] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)  # common prefixes (with a delimiter), each ending in "/"
    requests: int = 0
    complete: bool = True  # False when max_keys stopped it before the end of the prefix
    last_key: str | None = None  # the greatest key (or common prefix) answered: where a stopped listing resumes


@functools.lru_cache(maxsize=16)
def _client(options: S3Options, bucket: str) -> Any:  # botocore's generated client class
    """A botocore S3 client for a bucket (cached: one per options and bucket per process; thread-safe)."""
    import boto3
    from botocore.config import Config

    endpoint, scheme, region = s3_endpoint(options, bucket)
    timeouts = {
        name: value
        for name, value in (("connect_timeout", options.connect_timeout), ("read_timeout", options.request_timeout))
        if value is not None
    }
    config = Config(
        retries={"total_max_attempts": options.max_attempts, "mode": "standard"},
        max_pool_connections=32,
        **timeouts,
        # pyarrow addresses a bucket by path on an endpoint it is given; do the same.
        s3={"addressing_style": "path" if endpoint else "auto"},
    )
    return boto3.session.Session().client(
        "s3", region_name=region, config=config, endpoint_url=f"{scheme}://{endpoint}" if endpoint else None
    )


def _split(storage: Storage) -> tuple[str, str]:
    """(bucket, the root's key prefix in it: "" or ending in "/") of an s3:// root."""
    if not storage.is_object_store:
        raise ValueError(f"{storage.root} is not an object store root: it has no keys to list after")
    bucket, _, prefix = storage.root[len("s3://") :].partition("/")
    prefix = unquote(prefix).strip("/")
    return bucket, prefix + "/" if prefix else ""


def list_after(
    storage: Storage,
    prefix: str = "",
    start_after: str | None = None,
    *,
    delimiter: bool = False,
    max_keys: int | None = None,
) -> KeyListing:
    """The keys under `prefix` (relative to the root) that sort after `start_after` (a raw relative key; None:
    all), in key order; with `delimiter`, the keys directly under it and its next-level prefixes instead. At most
    max_keys keys and prefixes (None: to the end). Keys ending in "/" (directory markers) are skipped, as
    Storage.list skips them. Storage errors raise OSError (the stream loop's storage failure)."""
    bucket, root = _split(storage)
    listing = KeyListing()
    request: dict[str, Any] = {"Bucket": bucket, "Prefix": root + prefix}
    if start_after:
        request["StartAfter"] = root + start_after
    if delimiter:
        request["Delimiter"] = "/"
    for page in _pages(storage, request, max_keys, listing):
        for entry in page.get("CommonPrefixes", ()):
            listing.prefixes.append(entry["Prefix"][len(root) :])
        for entry in page.get("Contents", ()):
            key = entry["Key"][len(root) :]
            if not key.endswith("/"):
                name = storage.key_of(f"{bucket}/{root}{key}") if _odd(key) else key
                put = entry.get("LastModified")
                listing.objects.append(
                    (key, ObjectInfo(name, entry.get("Size", 0), put.astimezone(dt.UTC) if put is not None else None))
                )
    return listing


def _odd(key: str) -> bool:
    """Whether Storage.list would give this key otherwise (it normalises empty, '.' and '..' segments)."""
    return not key or "//" in key or "/." in key or key.startswith(("/", "."))


def _pages(
    storage: Storage, request: dict[str, Any], max_keys: int | None, listing: KeyListing
) -> Iterator[dict[str, Any]]:
    from botocore.exceptions import BotoCoreError, ClientError

    client = _client(storage.s3 or S3Options(), request["Bucket"])
    root_length = len(_split(storage)[1])
    remaining = max_keys
    while remaining is None or remaining > 0:
        size = PAGE_KEYS if remaining is None else min(PAGE_KEYS, remaining)
        try:
            page = client.list_objects_v2(**request, MaxKeys=size)
        except (BotoCoreError, ClientError) as exc:
            raise OSError(f"listing s3://{request['Bucket']}/{request['Prefix']} failed: {exc}") from exc
        listing.requests += 1
        answered = page.get("KeyCount", len(page.get("Contents", ())) + len(page.get("CommonPrefixes", ())))
        last = max(
            [entry["Key"] for entry in page.get("Contents", ())]
            + [entry["Prefix"] for entry in page.get("CommonPrefixes", ())],
            default=None,
        )
        if last is not None:
            listing.last_key = last[root_length:]
        yield page
        if remaining is not None:
            remaining -= answered
        if not page.get("IsTruncated"):
            listing.complete = True
            return
        listing.complete = False
        request.pop("StartAfter", None)
        request["ContinuationToken"] = page["NextContinuationToken"]
