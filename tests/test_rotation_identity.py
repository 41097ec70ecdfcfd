"""Local staging files followed by identity through what logrotate does between two rounds: several rotations
shifting files through names already registered, the empty file `create` leaves, a truncation while a tail is
in flight, a copy seen before its original is truncated, copies renamed and compressed (docs/design.md, "Files
written in place and appended to"). Each is done here by hand with the renames, copies and truncations
logrotate makes; tests/test_logrotate.py runs logrotate itself."""

from __future__ import annotations

import gzip
import os
import shutil
import time
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.stream import stream_once
from siltlake.stream.discover import discover

from .test_appends import KEY, append, deployment_with, lines
from .test_stream import assert_rows_once

pytestmark = pytest.mark.spark


def _rotate(path: Path, keep: int) -> None:
    """logrotate's `create` with `rotate keep`: access.log.N -> .N+1 from the oldest down, access.log -> .1, a new
    empty access.log."""
    for number in range(keep - 1, 0, -1):
        older = Path(f"{path}.{number}")
        if older.exists():
            older.rename(f"{path}.{number + 1}")
    path.rename(f"{path}.1")
    path.touch()


def _clean(deployment: Deployment) -> None:
    """Nothing unknown, no file stopped."""
    assert [row.reason for row in deployment.catalog.staging.unknown()] == []
    assert deployment.catalog.positions.rewritten() == []


def test_files_shifted_through_registered_names_keep_their_positions(appending: Deployment) -> None:
    """rotate 5: between two rounds .1 -> .2 and access.log -> .1, into names registered by earlier rotations: each
    file goes on from where it was consumed, under its new name (it was loaded again from 0 as a new file)."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 30))
    assert stream_once(appending).records_loaded == 30
    written = 30
    for rotation in range(4):
        append(path, lines(written, 5))  # after the last round: read under the rotated name
        _rotate(path, 5)
        append(path, lines(written + 5, 7))
        written += 12
        report = stream_once(appending)
        assert (report.records_loaded, report.rewritten, report.unknown) == (12, [], []), rotation
        assert stream_once(appending).records_loaded == 0
    assert_rows_once(appending, written)
    _clean(appending)


def test_an_empty_file_created_where_an_empty_file_was_is_new_not_a_stop(appending: Deployment) -> None:
    """logrotate `create` leaves an empty access.log; one rotation later another empty one takes its name. Nothing
    was loaded from the first, so the second is a new file (it stopped the name: "another file took its name
    with the same first bytes")."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 10))
    assert stream_once(appending).records_loaded == 10
    _rotate(path, 5)
    assert stream_once(appending).records_loaded == 0  # the empty access.log is followed from 0
    _rotate(path, 5)
    assert stream_once(appending).records_loaded == 0
    append(path, lines(10, 5))
    report = stream_once(appending)
    assert (report.records_loaded, report.rewritten, report.unknown) == (5, [], [])
    assert_rows_once(appending, 15)
    _clean(appending)


def test_copytruncate_while_a_tail_is_in_flight_loads_the_copys_rest_once(appending: Deployment) -> None:
    """A tail is registered; before its task reads it logrotate copies the file to .1 (the copy seen then holds
    bytes the original has not loaded yet) and truncates it. The tail reads nothing (it went to unknown objects),
    the copy's unloaded lines load once from the copy (they were skipped: the original held them when the
    copy was seen), the truncated file loads from 0."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 30))
    assert stream_once(appending).records_loaded == 30
    append(path, lines(30, 5))
    assert discover(appending).appended == 1  # the tail [30 lines, 35 lines) is in flight
    append(path, lines(35, 4))
    shutil.copyfile(path, f"{path}.1")
    assert discover(appending).appended == 0  # the copy is seen while the original still holds its lines
    os.truncate(path, 0)
    append(path, lines(100, 3))
    for _ in range(3):
        stream_once(appending)
    assert_rows_once(appending, 42)
    _clean(appending)


def test_copies_renamed_and_compressed_by_later_rotations_load_nothing_again(appending: Deployment) -> None:
    """copytruncate + delaycompress, three rotations: the copy access.log.1 becomes .2, then .2.gz, then .3.gz, in
    names registered earlier; none is loaded again (a copy known as loaded kept no identity: renamed into a
    registered name it was loaded from 0)."""
    path = Path(appending.staging.path(KEY))
    written = 0
    for rotation in range(3):
        append(path, lines(written, 20))
        written += 20
        assert stream_once(appending).records_loaded == 20, rotation
        append(path, lines(written, 4))  # only the copy will hold these
        written += 4
        for number in (3, 2):
            older = Path(f"{path}.{number}.gz")
            if older.exists():
                older.rename(f"{path}.{number + 1}.gz")
        if Path(f"{path}.1").exists():
            Path(f"{path}.2.gz").write_bytes(gzip.compress(Path(f"{path}.1").read_bytes()))
            Path(f"{path}.1").unlink()
        shutil.copyfile(path, f"{path}.1")
        os.truncate(path, 0)
        report = stream_once(appending)
        assert (report.records_loaded, report.rewritten, report.unknown) == (4, [], []), rotation
        assert stream_once(appending).records_loaded == 0, rotation
    assert_rows_once(appending, written)
    _clean(appending)


def test_a_compressed_copy_of_a_file_whose_tail_was_not_loaded_loads_that_tail_once(appending: Deployment) -> None:
    """delaycompress: access.log.1 (its last lines not loaded yet) becomes access.log.2.gz and is removed before a
    round sees it: the tail loads from the decompressed copy, and later full listings load nothing of it again,
    nor the next rotation's rename (its position counted decompressed bytes: the smaller file looked truncated)."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 30))
    assert stream_once(appending).records_loaded == 30
    append(path, lines(30, 6))
    Path(f"{path}.2.gz").write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    append(path, lines(100, 2))
    report = stream_once(appending)
    assert (report.records_loaded, report.unknown) == (8, [])
    for _ in range(2):
        assert stream_once(appending).records_loaded == 0
    Path(f"{path}.2.gz").rename(f"{path}.3.gz")  # the next rotation: found by identity, nothing more in it
    assert stream_once(appending).records_loaded == 0
    assert_rows_once(appending, 38)
    _clean(appending)


def test_a_file_shifted_into_a_name_whose_first_file_had_its_size_is_followed(appending: Deployment) -> None:
    """access.log.1 was registered at the size of its first file; the next rotation shifts another file of exactly
    that size into it (only its mtime says it changed): that file's unloaded lines load once under .1."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(10, 10))
    assert stream_once(appending).records_loaded == 10
    _rotate(path, 5)  # access.log.1 registered at the size of lines 10-19
    append(path, lines(20, 6))
    assert stream_once(appending).records_loaded == 6
    time.sleep(0.02)
    append(path, lines(26, 4))  # lines 20-29: as long as lines 10-19; 26-29 not loaded yet
    _rotate(path, 5)
    report = stream_once(appending)
    assert (report.records_loaded, report.rewritten, report.unknown) == (4, [], [])
    assert_rows_once(appending, 20)
    _clean(appending)


def test_a_file_renamed_while_its_first_delivery_is_in_flight_is_not_taken_for_a_new_file(
    tmp_path: Path, catalog_url: str, spark
) -> None:
    """The first delivery of a file names no identity. Its task has read access.log; before it commits, logrotate
    renames the file to access.log.1 and creates a new access.log, and another daemon's listing sees .1: the file
    waits for that commit and is then found by identity (it was loaded again whole as a new file)."""
    from siltlake.stream.runner import Progress

    deployment = deployment_with(tmp_path, catalog_url, spark, full_listing_interval=0, listing_margin=0)
    path = Path(deployment.staging.path(KEY))

    class Rotated(Progress):
        """After the task has read the file, before its commit."""

        def advance(self, count: int) -> None:
            append(path, lines(20, 3))
            path.rename(f"{path}.1")
            append(path, lines(100, 2))
            assert discover(deployment).registered == 0  # .1 is the file in flight; access.log is registered

    try:
        append(path, lines(0, 20))
        assert discover(deployment).registered == 1
        assert stream_once(deployment, Rotated()).records_loaded == 20
        for _ in range(3):
            stream_once(deployment)
        assert_rows_once(deployment, 25)
        _clean(deployment)
    finally:
        deployment.close()


def _copytruncate_twice_after_a_short_read(appending: Deployment, more: int, past_a_kib: bool) -> None:
    """Twice: a round loads the first 3 lines of a freshly truncated log (under a KiB), the writer appends `more`
    lines, and copytruncate copies and truncates it (the copy before renamed into .2): the next round loads only
    the copy's `more` lines."""
    path = Path(appending.staging.path(KEY))
    written = 0
    for rotation in range(2):
        append(path, lines(written, 3))
        assert len(path.read_bytes()) < 1024
        assert stream_once(appending).records_loaded == 3, rotation
        append(path, lines(written + 3, more))
        assert (len(path.read_bytes()) > 1024) == past_a_kib, rotation
        written += 3 + more
        if Path(f"{path}.1").exists():
            Path(f"{path}.1").rename(f"{path}.2")
        shutil.copyfile(path, f"{path}.1")
        os.truncate(path, 0)
        report = stream_once(appending)
        assert (report.records_loaded, report.rewritten, report.unknown) == (more, [], []), rotation
        assert stream_once(appending).records_loaded == 0, rotation
    assert_rows_once(appending, written)
    _clean(appending)


def test_copytruncate_of_a_file_shorter_than_a_kib_loads_only_the_copys_unloaded_lines(appending: Deployment) -> None:
    """A copy shorter than the first KiB compared: found by the CRC of the lines its original was consumed to (it
    was loaded whole as a new file). Twice, the second copy renamed into .2 by the next rotation."""
    _copytruncate_twice_after_a_short_read(appending, more=2, past_a_kib=False)


def test_files_rotated_and_compressed_before_their_deliveries_read_them_load_from_their_copies(
    tmp_path: Path, catalog_url: str, spark
) -> None:
    """delaycompress with exclude = ["*.gz"], rotations faster than the rounds: a renamed file's tail and a new
    file's first bytes are registered, then both files are compressed away before their tasks read them. The
    deliveries read nothing (no unknown object); the excluded .gz copies carry what was not loaded, the new file's
    from 0 (its position had consumed nothing and no fingerprint: it was no copy candidate, and was lost)."""
    deployment = deployment_with(tmp_path, catalog_url, spark, full_listing_interval=0, exclude=["*.gz"])
    path = Path(deployment.staging.path(KEY))
    try:
        append(path, lines(0, 20))
        assert stream_once(deployment).records_loaded == 20
        append(path, lines(20, 3))
        _rotate(path, 5)
        append(path, lines(100, 5))
        assert discover(deployment).appended == 2  # the tail of .1 and access.log's new file, from 0
        for name, number in ((f"{path}.1", 2), (str(path), 3)):  # both compressed away, as later rotations do
            Path(f"{path}.{number}.gz").write_bytes(gzip.compress(Path(name).read_bytes()))
            Path(name).unlink()
        path.touch()
        for _ in range(3):
            stream_once(deployment)
        assert_rows_once(deployment, 28)
        _clean(deployment)
    finally:
        deployment.close()


def test_copytruncate_of_a_file_consumed_short_of_a_kib_and_grown_past_it_loads_only_the_copys_rest(
    appending: Deployment,
) -> None:
    """A round loads the first lines of a freshly truncated log (under a KiB); the writer appends past a KiB and
    copytruncate copies and truncates it before the next round. The copy's first KiB was never the position's
    head (it noted fewer bytes): it is found by the CRC of the lines its original was consumed to (it was loaded
    again whole as a new file: 26 rows instead of 23). Twice, the first copy renamed into .2 by the next rotation."""
    _copytruncate_twice_after_a_short_read(appending, more=20, past_a_kib=True)


@pytest.fixture
def reuse(monkeypatch: pytest.MonkeyPatch):
    """Inode numbers reused, without relying on the file system: reuse(path, identity) makes the file now at
    `path` report `identity` (a deleted file's device:inode) to discovery and to the tasks, which run in this
    process for it. The files "deleted" are moved out of the root instead, so that the file system cannot hand
    their real inode numbers to other files during the test."""
    from siltlake.stream import identity, stage, tails

    faked: dict[tuple[int, int], str] = {}

    def fake_identity(stat: os.stat_result) -> str:
        return faked.get((stat.st_dev, stat.st_ino)) or f"{stat.st_dev}:{stat.st_ino}"

    monkeypatch.setattr(identity, "file_identity", fake_identity)
    monkeypatch.setattr(tails, "file_identity", fake_identity)
    monkeypatch.setattr(
        stage,
        "run_on_workers",
        lambda function, items, weights=None, on_progress=None: [function(item) for item in items],
    )

    def make(path: Path, reused: str) -> None:
        found = path.stat()
        faked[(found.st_dev, found.st_ino)] = reused

    return make


def _identity(path: Path) -> str:
    from siltlake.stream.identity import file_identity

    return file_identity(path.stat())


def _remove(path: Path, graveyard: Path) -> None:
    """Delete as far as the root can tell: moved out of it, its inode number kept from other files."""
    graveyard.mkdir(exist_ok=True)
    path.rename(graveyard / f"{len(list(graveyard.iterdir()))}-{path.name}")


def _compress(path: Path, to: Path, graveyard: Path) -> None:
    """delaycompress: the plain file compressed to `to` and removed."""
    to.write_bytes(gzip.compress(path.read_bytes()))
    _remove(path, graveyard)


def test_a_new_file_reusing_a_deleted_files_inode_renamed_onto_that_files_stale_name_loads_its_rest_once(
    appending: Deployment, reuse, tmp_path: Path
) -> None:
    """create + delaycompress: access.log.1's position still names file A (compressed away since, no round saw it
    go). A new file C took A's inode number at access.log and was followed there; renamed onto access.log.1 with
    lines not loaded, it is C renamed, not A truncated (it was taken for a copy of its own position, whose
    delivery moved C's position past its rest at once; C was compressed before that delivery read it, and the
    compressed copy was then judged all loaded: its last lines were lost)."""
    graveyard = tmp_path / "deleted"
    path = Path(appending.staging.path(KEY))
    one = Path(f"{path}.1")
    append(path, lines(0, 20))  # A
    assert stream_once(appending).records_loaded == 20
    path.rename(one)  # A -> .1: its position moves there
    path.touch()  # B
    assert stream_once(appending).records_loaded == 0
    a = _identity(one)
    _compress(one, Path(f"{path}.2.gz"), graveyard)  # A compressed away: its position at .1 stays
    _remove(path, graveyard)  # B gone
    append(path, lines(100, 30))  # C, with A's inode number
    reuse(path, a)
    assert stream_once(appending).records_loaded == 30
    append(path, lines(130, 10))  # not loaded at access.log
    path.rename(one)  # C -> .1, onto the position that still names A's identity
    path.touch()  # D
    discover(appending)  # C's rest is registered
    _compress(one, Path(f"{path}.2.gz.tmp"), graveyard)  # compressed before the delivery reads it
    Path(f"{path}.2.gz").rename(f"{path}.3.gz")
    Path(f"{path}.2.gz.tmp").rename(f"{path}.2.gz")
    for _ in range(4):
        stream_once(appending)
    assert_rows_once(appending, 60)
    _clean(appending)


def test_a_copys_rest_whose_delivery_found_the_copy_compressed_away_loads_from_the_compressed_copy(
    appending: Deployment, tmp_path: Path
) -> None:
    """copytruncate + delaycompress: the copy access.log.1 holds lines the original had not loaded; their delivery
    is registered from the copy, then the copy is compressed to access.log.2.gz before the delivery reads it. The
    delivery reads nothing, and the compressed copy loads those lines (the original's position had moved past
    them when the delivery was registered, so the compressed copy was judged all loaded: lost)."""
    graveyard = tmp_path / "deleted"
    path = Path(appending.staging.path(KEY))
    one = Path(f"{path}.1")
    append(path, lines(0, 20))
    assert stream_once(appending).records_loaded == 20
    append(path, lines(20, 5))  # only the copy will hold these
    shutil.copyfile(path, one)
    os.truncate(path, 0)
    append(path, lines(100, 3))
    assert discover(appending).appended == 2  # the copy's rest, and the truncated file from 0
    _compress(one, Path(f"{path}.2.gz"), graveyard)
    for _ in range(4):
        stream_once(appending)
    assert_rows_once(appending, 28)
    _clean(appending)


def test_a_new_file_with_a_deleted_files_content_and_inode_number_is_no_rename_of_it(
    appending: Deployment, reuse, tmp_path: Path
) -> None:
    """A file registered, then deleted (its directory removed) before its first delivery ran; a new file with the
    same bytes takes its inode number under another name. Its original's name is gone and it was written after
    the registration: a new file, registered now (it was taken for the deleted one renamed, and waited for a
    delivery that could only fail)."""
    graveyard = tmp_path / "deleted"
    gone = Path(appending.staging.path("f1.web.access/2026/11/19/app.log"))
    append(gone, lines(0, 5))
    assert discover(appending).registered == 1
    old = _identity(gone)
    _remove(gone.parent, graveyard)
    time.sleep(0.02)
    new = Path(appending.staging.path("f1.web.access/2026/11/21/app.log"))
    append(new, lines(0, 5))
    reuse(new, old)
    assert discover(appending).registered == 1
    stream_once(appending)
    assert_rows_once(appending, 5)


def test_a_new_file_at_an_excluded_name_once_followed_is_loaded_from_its_start(
    tmp_path: Path, catalog_url: str, spark
) -> None:
    """exclude = ["*.1"]: access.log renamed to access.log.1 is followed there (its tail is read); another file
    that takes access.log.1 later is loaded once from its start: it may be the successor of the live file, renamed
    before any round saw it at access.log, and cannot be told from one put there by hand."""
    deployment = deployment_with(tmp_path, catalog_url, spark, full_listing_interval=0, exclude=["*.1"])
    path = Path(deployment.staging.path(KEY))
    try:
        append(path, lines(0, 10))
        assert stream_once(deployment).records_loaded == 10
        append(path, lines(10, 2))
        _rotate(path, 2)
        assert stream_once(deployment).records_loaded == 2  # the renamed file's tail, under the excluded name
        rotated = Path(f"{path}.1")
        rotated.unlink()
        rotated.write_bytes(lines(50, 4))  # another file, another inode, other first bytes
        append(path, lines(20, 3))
        for _ in range(2):
            stream_once(deployment)
        assert_rows_once(deployment, 19)
        _clean(deployment)
    finally:
        deployment.close()


def _rotate_a_file_of_its_size_into_dot_1(path: Path, appending: Deployment) -> None:
    """access.log.1 registered at the size of lines 10-19, and access.log (lines 20-29, 26-29 not loaded) shifted
    into it by the next rotation: only its mtime says the name holds another file."""
    append(path, lines(10, 10))
    assert stream_once(appending).records_loaded == 10
    _rotate(path, 5)
    append(path, lines(20, 6))
    assert stream_once(appending).records_loaded == 6
    time.sleep(0.02)
    append(path, lines(26, 4))


def test_a_file_shifted_into_a_name_of_its_size_is_followed_after_a_round_died_before_judging_it(
    appending: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round lists .1 put again and dies (SIGKILL) before it judges the file there: the next round still sees
    another file at the name and loads its unloaded lines once (the put is taken only once judged)."""
    from siltlake.stream import discover as discovering

    path = Path(appending.staging.path(KEY))
    _rotate_a_file_of_its_size_into_dot_1(path, appending)
    _rotate(path, 5)

    def killed(*args: object, **kwargs: object) -> None:
        raise SystemExit("killed while judging")

    with monkeypatch.context() as patched:
        patched.setattr(discovering, "take_growth", killed)
        with pytest.raises(SystemExit):
            discover(appending)
    report = stream_once(appending)
    assert (report.records_loaded, report.rewritten, report.unknown) == (4, [], [])
    assert stream_once(appending).records_loaded == 0
    assert_rows_once(appending, 20)
    _clean(appending)


def test_a_file_shifted_into_a_name_of_its_size_while_its_tail_is_in_flight_is_followed_once_the_tail_ends(
    appending: Deployment,
) -> None:
    """The tail of access.log is registered, then access.log is shifted into .1, a name of its size: the round
    that first sees .1 put again must wait for that tail (LOOK_AGAIN); a later round still judges the name,
    although nothing about its listing changes again."""
    path = Path(appending.staging.path(KEY))
    _rotate_a_file_of_its_size_into_dot_1(path, appending)
    assert discover(appending).appended == 1  # the tail of lines 26-29 is in flight
    _rotate(path, 5)
    for _ in range(3):
        stream_once(appending)
    assert_rows_once(appending, 20)
    _clean(appending)


def test_copytruncate_while_the_first_delivery_is_in_flight_then_writes_of_the_size_read_load_once(
    appending: Deployment,
) -> None:
    """The first delivery's task has read access.log; before it commits, logrotate copies the file to .1 and
    truncates it, and the writer then writes exactly as many bytes as were read: same inode, same size, only the
    first bytes and the mtime changed. Those lines load once, from 0 (they were never loaded)."""
    from siltlake.stream.runner import Progress

    path = Path(appending.staging.path(KEY))

    class Copytruncated(Progress):
        def advance(self, count: int) -> None:
            shutil.copyfile(path, f"{path}.1")
            os.truncate(path, 0)

    append(path, lines(0, 3))
    assert stream_once(appending, Copytruncated()).records_loaded == 3
    append(path, lines(3, 3))  # as long as lines 0-2
    assert stream_once(appending).records_loaded == 3
    assert stream_once(appending).records_loaded == 0
    assert_rows_once(appending, 6)
    _clean(appending)
