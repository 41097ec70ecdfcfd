"""Replay bad records kept in error files: the user fixes the raw records, then stages them again."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass

from siltlake.catalog import TableRecord
from siltlake.clock import to_naive_utc, utcnow
from siltlake.deployment import Deployment
from siltlake.storage.keys import replay_staging_key


@dataclass
class ReplayResult:
    records: int
    kept: int
    staging_uris: list[str]


def _error_lines(deployment: Deployment, key: str) -> list[dict]:
    try:
        text = deployment.lake.read_bytes(key).decode("utf-8")
    except FileNotFoundError:  # replayed to the end, by this run earlier or by another one just now
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def error_files(deployment: Deployment, qualified: str) -> list[tuple[str, int]]:
    """(error file key, bad records in it) for a table."""
    record = deployment.catalog.tables.get(qualified)
    return [(key, len(_error_lines(deployment, key))) for key in deployment.catalog.staging.error_uris(record.id)]


def _as_object(raw: str) -> dict | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _json_line(value: object) -> str:
    """One JSON line; escaped where the value holds lone surrogates (a raw record's \\udcxx), which UTF-8 cannot."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value)
    return text + "\n"


def _stage(
    deployment: Deployment, record: TableRecord, error_key: str, received: dt.datetime, values: list[dict]
) -> str:
    """Stage one error file's replayable records under a key derived from the file and the records, so a
    retried or concurrent replay of the same records stages the same key, which is registered once."""
    body = "".join(_json_line(value) for value in values).encode()
    digest = hashlib.sha256(error_key.encode() + b"\0" + body).hexdigest()[:32]
    d = record.definition
    key = replay_staging_key(d.schema_name, d.name, received, digest)
    uri = deployment.staging.uri(key)
    if not deployment.catalog.staging.known_uris([uri]):
        info = deployment.staging.info(key)  # staged by a replay that died before registering it
        if info is None:
            deployment.staging.write_bytes(key, body)
            info = deployment.staging.info(key)
        # The put time as a listing sees it, so discovery does not take this put for a second one.
        put_time = to_naive_utc(info.mtime) if info is not None and info.mtime is not None else utcnow()
        deployment.catalog.staging.register([(uri, record.id, len(body), put_time)])
    return uri


def replay_errors(deployment: Deployment, qualified: str, dry_run: bool = False) -> ReplayResult:
    """Stage the kept raw records that are JSON objects again, one JSON-lines staging object per error file
    (dry_run: count what would be staged and kept, changing nothing).

    Records still not JSON objects stay in their error file for the user to fix. An error file is
    rewritten (or removed) only after its records are staged and registered, under a key derived from
    them: a replay that dies in between, run again, or two replays at once, stage each record once.
    """
    record = deployment.catalog.tables.get(qualified)
    staged, kept, uris = 0, 0, []
    for key, received in deployment.catalog.staging.error_uris_received(record.id):
        replayable, remaining = [], []
        for line in _error_lines(deployment, key):
            value = _as_object(line["raw"])
            if value is None:
                remaining.append(line)
            else:
                replayable.append(value)
        kept += len(remaining)
        if dry_run:
            staged += len(replayable)
            continue
        if replayable:
            uris.append(_stage(deployment, record, key, received, replayable))
            staged += len(replayable)
        if not remaining:
            deployment.catalog.staging.clear_error_uri(key)
            deployment.lake.delete(key)
        elif replayable:
            deployment.lake.write_bytes(key, "".join(_json_line(line) for line in remaining).encode())
    return ReplayResult(staged, kept, uris)
