"""Manifest files: the exact data files of one partition version, in the JSON form Redshift Spectrum reads
and a Hive symlink text form. Every version has one: merged, updated and live (small objects) alike."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from typing import NamedTuple
from urllib.parse import unquote

from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout


class ManifestKeys(NamedTuple):
    """The keys of a version's two manifests (a named pair: most writers unpack it)."""

    json_key: str
    symlink_key: str


def write_manifests(
    lake: Storage,
    layout: TableLayout,
    partition_date: dt.date,
    version: int,
    objects: Sequence[tuple[str, int]],
    label: str | None = None,
    listed: Sequence[tuple[str, int]] = (),
    values: str = "",
) -> ManifestKeys:
    """Write both forms listing `listed` (URI, content length: entries of another manifest) and then
    `objects` (key, content length); returns their keys. Idempotent."""
    json_key, symlink_key = layout.manifest_keys(partition_date, version, label, values)
    uris = [*listed, *((lake.uri(key), size) for key, size in objects)]
    entries = [{"url": uri, "mandatory": True, "meta": {"content_length": size}} for uri, size in uris]
    lake.write_bytes(json_key, json.dumps({"entries": entries}, indent=1).encode())
    # The symlink form is read by Hadoop's Path and Trino, which take each line as the path itself: unescaped.
    _write_symlink(lake, symlink_key, "".join(unquote(uri) + "\n" for uri, _ in uris).encode())
    return ManifestKeys(json_key=json_key, symlink_key=symlink_key)


def _write_symlink(lake: Storage, symlink_key: str, data: bytes) -> None:
    """Write the symlink file through a temporary beside its directory, not in it: an engine reads every
    file of a symlink partition's directory, so a writer that stops between the two steps must leave
    nothing there but whole manifests of this one version."""
    if lake.writes_are_atomic:  # nothing partial is ever listed: write in place
        with lake.open_output(symlink_key) as out:
            out.write(data)
        return
    directory, _ = symlink_key.rsplit("/", 1)
    temporary = f"{directory}.{uuid.uuid4().hex}.tmp"
    with lake.open_output(temporary) as out:
        out.write(data)
    lake.move(temporary, symlink_key)


def read_manifest(lake: Storage, json_key: str) -> list[tuple[str, int]]:
    """The (URI, content length) entries of a JSON manifest."""
    data = json.loads(lake.read_bytes(json_key))
    return [(entry["url"], entry["meta"]["content_length"]) for entry in data["entries"]]
