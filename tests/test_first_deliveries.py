"""A name's first delivery and the file at the name: what was noted of the file when the name was registered (its
device:inode and first bytes), a rotation that shifts another file into the name before that delivery reads it,
the file gone, and what the next listing judges at the name then (docs/design.md, "Files written in place and
appended to"). The rest of following files through logrotate is tests/test_rotation_identity.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.stream import stream_once
from siltlake.stream.discover import discover

from .test_appends import KEY, append, lines
from .test_stream import assert_rows_once

pytestmark = pytest.mark.spark


def test_a_file_left_at_a_name_whose_first_delivery_found_it_gone_is_followed(appending: Deployment) -> None:
    """The name's first delivery found no file (renamed away before it read it): set aside as unknown, its lines
    load from the renamed file. The file created at the name afterwards is another file: followed from its start
    (it was never loaded: the name's unknown first delivery kept every round from judging it)."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 6))
    discover(appending)  # registered, its first delivery in flight
    path.rename(f"{path}.1")
    stream_once(appending)  # the first delivery finds nothing at the name
    append(path, lines(6, 5))
    for _ in range(4):
        report = stream_once(appending)
        assert (report.rewritten, report.failed) == ([], []), report
    assert_rows_once(appending, 11)


def test_a_file_shifted_into_a_registered_name_before_its_first_delivery_is_not_read_by_that_delivery(
    appending: Deployment,
) -> None:
    """logrotate `create` twice: access.log.1 is registered for the first file (its device:inode noted), and the
    second rotation shifts that file to .2 and the followed access.log to .1 before the name's first delivery reads
    it. That delivery reads no file: the followed file keeps its position (moved to .1), the first file loads from
    .2. Before, the delivery read the followed file at the name and its line loaded twice (the rotation property
    test's search; a first delivery read whatever file had its name)."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 3))
    discover(appending)
    path.rename(f"{path}.1")
    append(path, lines(3, 1))
    stream_once(appending)
    discover(appending)  # access.log.1 registered, the first file's identity noted
    Path(f"{path}.1").rename(f"{path}.2")
    path.rename(f"{path}.1")
    append(path, b"")
    for _ in range(5):
        report = stream_once(appending)
        assert (report.rewritten, report.failed) == ([], []), report
    assert_rows_once(appending, 4)
    # Both names' first deliveries found another file: the reason says so, and what a replay would read
    reasons = {row.uri.rpartition("/")[2]: row.reason for row in appending.catalog.staging.unknown()}
    assert sorted(reasons) == ["app.log", "app.log.1"], reasons
    assert all(
        "replaced by" in reason and "a replay would read the file here now" in reason for reason in reasons.values()
    )


def test_a_new_log_at_a_name_whose_first_delivery_is_in_flight_loads_once_that_delivery_refuses_it(
    appending: Deployment,
) -> None:
    """access.log is registered (its file noted), rotated away by `create` before its first delivery, and the new
    access.log grows to exactly the registered size. The round that lists it sees another file at a name whose
    first delivery is still in flight: that delivery refuses it (another file, other first bytes), so the put is
    judged after it, and the new lines load from 0. Before, the put was taken while the delivery was in flight and
    the file at the name was never judged again: its lines were lost (the rotation property test's search)."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 3))
    discover(appending)  # access.log registered, its first delivery not run yet
    path.rename(f"{path}.1")
    append(path, lines(3, 3))
    assert path.stat().st_size == Path(f"{path}.1").stat().st_size
    for _ in range(5):
        report = stream_once(appending)
        assert (report.rewritten, report.failed) == ([], []), report
    assert_rows_once(appending, 6)


def test_a_followed_file_renamed_to_an_empty_name_whose_first_delivery_found_it_gone_is_followed(
    appending: Deployment, tmp_path: Path
) -> None:
    """An empty file registered at access.log.1 is deleted before its first delivery, which finds no file (set
    aside as unknown); then logrotate renames the followed access.log to .1 and it is written on. The empty file
    was noted when it was registered, so the file at the name now is told from it and found as the followed file,
    renamed: its new line loads, once. Before, an empty file was not noted, the name stayed set aside as unknown
    and the line was lost (the rotation property test's search)."""
    path = Path(appending.staging.path(KEY))
    rotated = Path(f"{path}.1")
    append(path, lines(0, 3))
    assert stream_once(appending).records_loaded == 3
    rotated.touch()
    discover(appending)  # access.log.1 registered empty
    rotated.rename(tmp_path / "deleted")  # out of the root: its inode number is not handed on
    assert stream_once(appending).records_loaded == 0
    assert [row.uri.rpartition("/")[2] for row in appending.catalog.staging.unknown()] == ["app.log.1"]
    path.rename(rotated)
    append(rotated, lines(3, 1))
    append(path, b"")
    for _ in range(4):
        report = stream_once(appending)
        assert (report.rewritten, report.failed) == ([], []), report
    assert_rows_once(appending, 4)


def test_other_bytes_put_at_a_name_before_its_first_delivery_load_once(appending: Deployment, tmp_path: Path) -> None:
    """A shipper puts an object again, atomically and with other bytes of the same size, after the listing that
    registered it and before its first delivery read it. That delivery reads no other file than the one noted (set
    aside as unknown, saying so), and the listing after it judges the new file at the name: its lines load, once.
    Before, the put was counted as a redelivery and the new bytes were never loaded."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 3))
    discover(appending)
    replacement = tmp_path / "replacement"
    replacement.write_bytes(lines(3, 3))
    assert replacement.stat().st_size == path.stat().st_size
    os.replace(replacement, path)
    for _ in range(4):
        report = stream_once(appending)
        assert (report.rewritten, report.failed) == ([], []), report
    assert_rows_once(appending, 3)
    (unknown,) = appending.catalog.staging.unknown()
    assert "replaced by" in unknown.reason
