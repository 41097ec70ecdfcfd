"""A staging key swapped after discovery (for a symbolic link out of the root, a FIFO, a directory) is
refused when it is opened, in the task that reads it: the check and the read are one act."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.storage.filesystem import Storage, UnsafeKey
from siltlake.stream.discover import discover
from siltlake.stream.task import process_staging_object
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .test_hostile_names import lake, record, stream_task  # noqa: F401 - `lake`: a deployment without Spark

KEY = "f.web.access/2026/11/20/a.jsonl"
sqlite_only = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)


def registered(deployment: Deployment) -> Path:
    """KEY staged and registered (pending), as discovery leaves it; returns its path."""
    path = Path(deployment.staging.path(KEY))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record(1))
    assert discover(deployment).registered == 1
    path.unlink()
    return path


def run(deployment: Deployment) -> dict:
    return process_staging_object(stream_task(deployment, deployment.staging.uri(KEY)))


@sqlite_only
@pytest.mark.parametrize("target", ["outside", "/etc/passwd"])
def test_a_key_swapped_for_a_link_out_of_the_root_is_unknown_not_read(
    lake: Deployment,  # noqa: F811
    tmp_path: Path,
    target: str,
) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(record(666))
    registered(lake).symlink_to(secret if target == "outside" else target)

    result = run(lake)

    assert result["status"] == "unknown", result
    assert "symbolic link" in result["reason"] and "out of the root" in result["reason"], result["reason"]
    assert not list((tmp_path / "lake").rglob("*.parquet"))


@sqlite_only
def test_a_parent_swapped_for_a_link_out_of_the_root_is_unknown(lake: Deployment, tmp_path: Path) -> None:  # noqa: F811
    path = registered(lake)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / path.name).write_bytes(record(666))
    path.parent.rmdir()
    path.parent.symlink_to(tmp_path / "elsewhere", target_is_directory=True)

    result = run(lake)

    assert result["status"] == "unknown" and "out of the root" in result["reason"], result


@sqlite_only
def test_links_that_stay_inside_the_root_are_still_read(lake: Deployment) -> None:  # noqa: F811
    path = registered(lake)
    other = path.parent.parent / "21"
    other.mkdir()
    (other / "real.jsonl").write_bytes(record(7))
    path.symlink_to("../21/real.jsonl")

    result = run(lake)

    assert result["status"] == "ok", result
    (part,) = result["parts"]
    assert pq.read_table(lake.lake.path(part["tmp_key"])).column("user_id").to_pylist() == [7]


@sqlite_only
def test_a_key_swapped_for_a_fifo_is_unknown_and_does_not_hang(lake: Deployment) -> None:  # noqa: F811
    path = registered(lake)
    os.mkfifo(path)
    results: list[dict] = []
    reading = threading.Thread(target=lambda: results.append(run(lake)), daemon=True)
    reading.start()
    reading.join(30)
    if reading.is_alive():  # release the blocked open so the test ends, then fail
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        reading.join(5)
        pytest.fail("opening a FIFO blocked the task")
    (result,) = results
    assert result["status"] == "unknown" and "not a regular file" in result["reason"], result
    assert "FIFO" in result["reason"]


@sqlite_only
def test_a_key_that_became_a_directory_is_unknown(lake: Deployment) -> None:  # noqa: F811
    registered(lake).mkdir()
    result = run(lake)
    assert result["status"] == "unknown" and "not a regular file" in result["reason"], result
    assert "directory" in result["reason"]


@sqlite_only
def test_a_key_whose_parent_became_a_file_is_unknown(lake: Deployment) -> None:  # noqa: F811
    path = registered(lake)
    path.parent.rmdir()
    path.parent.write_bytes(b"")
    result = run(lake)
    assert result["status"] == "unknown" and "not a directory" in result["reason"], result


def test_storage_opens_only_regular_files_inside_its_root(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "root"))
    storage.write_bytes("a/b.txt", b"x")
    assert storage.open_uri(storage.uri("a/b.txt")).read() == b"x"
    (tmp_path / "root" / "a" / "up").symlink_to("../..")
    with pytest.raises(UnsafeKey, match="out of the root"):
        storage.open_uri(storage.uri("a/up/root/a/b.txt"))
    with pytest.raises(UnsafeKey, match="outside"):
        storage.open_uri((tmp_path / "other.txt").as_uri())
    (tmp_path / "root" / "loop").symlink_to("loop")
    with pytest.raises(UnsafeKey, match="symbolic links"):
        storage.open_uri(storage.uri("loop"))
    with pytest.raises(FileNotFoundError):
        storage.open_uri(storage.uri("a/missing.txt"))


@pytest.mark.spark
@sqlite_only
def test_a_registered_key_that_became_a_directory_moves_to_unknown_in_a_round(deployment: Deployment) -> None:
    from siltlake.stream import stream_once

    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    registered(deployment).mkdir()

    report = stream_once(deployment)

    assert report.failed == [] and [uri for uri, _ in report.unknown] == [deployment.staging.uri(KEY)], report
    assert deployment.catalog.staging.pending(10) == []
    (unknown,) = deployment.catalog.staging.unknown()
    assert "not a regular file" in unknown.reason
