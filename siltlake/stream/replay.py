"""Replay bad records kept in error files: the user fixes the raw records, then stages them again."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from siltlake.clock import utcnow
from siltlake.deployment import Deployment


@dataclass
class ReplayResult:
    records: int
    kept: int
    staging_uri: str | None


def _error_lines(deployment: Deployment, key: str) -> list[dict]:
    if not deployment.lake.exists(key):
        return []
    text = deployment.lake.read_bytes(key).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def error_files(deployment: Deployment, qualified: str) -> list[tuple[str, int]]:
    """(error file key, bad records in it) for a table."""
    record = deployment.catalog.get_table(qualified)
    return [(key, len(_error_lines(deployment, key))) for key in deployment.catalog.error_uris(record.id)]


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


def replay_errors(deployment: Deployment, qualified: str) -> ReplayResult:
    """Stage every kept raw record that is a JSON object as one JSON-lines staging object.

    Records still not JSON objects stay in their error file for the user to fix.
    """
    record = deployment.catalog.get_table(qualified)
    replayable: list[dict] = []
    kept = 0
    finished: list[str] = []
    for key in deployment.catalog.error_uris(record.id):
        remaining = []
        for line in _error_lines(deployment, key):
            value = _as_object(line["raw"])
            if value is None:
                remaining.append(line)
            else:
                replayable.append(value)
        kept += len(remaining)
        if remaining:
            body = "".join(_json_line(line) for line in remaining)
            deployment.lake.write_bytes(key, body.encode())
        else:
            finished.append(key)
    if not replayable:
        return ReplayResult(0, kept, None)
    now = utcnow()
    d = record.definition
    key = f"replay.{d.schema_name}.{d.name}/{now:%Y/%m/%d}/replay-{now:%H%M%S}-{uuid.uuid4().hex[:8]}.jsonl"
    body = "".join(_json_line(value) for value in replayable)
    deployment.staging.write_bytes(key, body.encode())
    info = deployment.staging.info(key)
    uri = deployment.staging.uri(key)
    deployment.catalog.register_staging_objects([(uri, record.id, info.size if info else len(body), now)])
    for error_key in finished:
        deployment.catalog.clear_error_uri(error_key)
        deployment.lake.delete(error_key)
    return ReplayResult(len(replayable), kept, uri)
