"""Manifest files of a merged version: the JSON form Redshift Spectrum reads and a Hive symlink text form."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from siltlake.storage import Storage, TableLayout


def manifest_keys(layout: TableLayout, partition_date: dt.date, version: int,
                  label: str | None = None) -> tuple[str, str]:
    """The JSON manifest's key and the symlink manifest's key (inside a directory of its own, which a
    Hive SymlinkTextInputFormat partition can point at). A merged version's manifests are named by the
    upper bound they show; an update's by its own label, so they never replace a manifest an older
    version lists."""
    base = f"{layout.prefix}/manifests/dt={partition_date.isoformat()}"
    name = label or f"{version:019d}"
    return f"{base}/manifest-{name}.json", f"{base}/symlink-{name}/manifest"


def write_manifests(lake: Storage, layout: TableLayout, partition_date: dt.date, version: int,
                    objects: Sequence[tuple[str, int]], label: str | None = None) -> tuple[str, str]:
    """Write both forms listing `objects` (key, content length); returns their keys. Idempotent."""
    json_key, symlink_key = manifest_keys(layout, partition_date, version, label)
    entries = [{"url": lake.uri(key), "mandatory": True, "meta": {"content_length": size}} for key, size in objects]
    lake.write_bytes(json_key, json.dumps({"entries": entries}, indent=1).encode())
    lake.write_bytes(symlink_key, "".join(lake.uri(key) + "\n" for key, _ in objects).encode())
    return json_key, symlink_key


def read_manifest(lake: Storage, json_key: str) -> list[tuple[str, int]]:
    """The (URI, content length) entries of a JSON manifest."""
    data = json.loads(lake.read_bytes(json_key))
    return [(entry["url"], entry["meta"]["content_length"]) for entry in data["entries"]]
