"""copytruncate listed while logrotate copies (docs/design.md, "Files written in place and appended to"): logrotate
creates the copy empty and writes it in chunks before it truncates the log, and a listing in between sees the copy
empty or part written. Each loads only what the log's position had not loaded, once. Found as a flaky
tests/test_logrotate.py (a copy's 161 lines loaded twice) and pinned here by hand."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.stream import stream_once
from siltlake.stream.discover import discover

from .draining import rounds_until_quiet
from .test_appends import KEY, append, lines
from .test_stream import assert_rows_once

pytestmark = pytest.mark.spark


def _copy_truncate(path: Path, written: int, meanwhile: Callable[[], object]) -> None:
    """logrotate's copytruncate with `meanwhile` done once `written` bytes of the copy are written."""
    content = path.read_bytes()
    copy = Path(f"{path}.1")
    copy.write_bytes(content[:written])
    meanwhile()
    append(copy, content[written:])
    os.truncate(path, 0)


def _drain(deployment: Deployment) -> None:
    for report in rounds_until_quiet(deployment, 10):
        assert (report.rewritten, report.failed) == ([], []), report
    assert [row.reason for row in deployment.catalog.staging.unknown()] == []
    assert deployment.catalog.positions.rewritten() == []


@pytest.mark.parametrize("meanwhile", ["discover", "round"])
def test_a_copy_listed_empty_loads_only_the_lines_its_log_had_not_loaded(appending: Deployment, meanwhile: str) -> None:
    """Registered empty, its first delivery reads nothing; grown to the copy, it is judged as a new file is: a copy
    of the log's loaded bytes, of which only the rest loads."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 30))
    assert stream_once(appending).records_loaded == 30
    append(path, lines(30, 5))  # not loaded before the rotation: the copy's rest
    _copy_truncate(path, 0, lambda: discover(appending) if meanwhile == "discover" else stream_once(appending))
    append(path, lines(35, 4))
    _drain(appending)
    assert_rows_once(appending, 39)


@pytest.mark.parametrize("meanwhile", ["discover", "round"])
def test_a_copy_listed_part_written_is_known_and_loads_its_rest_once_written(
    appending: Deployment, meanwhile: str
) -> None:
    """A copy holding the first 4 KiB of a log loaded past them, the log still holding them: all it holds was
    loaded (a copy, loading nothing). Written whole, then the log truncated: its rest loads from the copy, or from
    the log when a round reads the log's tail first."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 100))
    assert path.stat().st_size > 4096
    assert stream_once(appending).records_loaded == 100
    append(path, lines(100, 10))

    def listed() -> None:
        if meanwhile == "discover":
            discover(appending)
        else:
            assert stream_once(appending).records_loaded == 10  # the log's tail: the copy holds none of it yet
        positions = appending.catalog.positions.states([f"{appending.staging.uri(KEY)}.1"])
        assert [state.position.state for state in positions.values() if state.position] == ["copy"]

    _copy_truncate(path, 4096, listed)
    append(path, lines(110, 3))
    _drain(appending)
    assert_rows_once(appending, 113)


def test_a_copy_of_a_log_truncated_and_written_again_to_its_loaded_size_loads_once(appending: Deployment) -> None:
    """The log was truncated under a delivery of its tail and written again to the size it had been loaded to: the
    listing that sees it so (another file's bytes: followed anew from its start) also sees logrotate's whole copy of
    it, not truncated yet. The copy waits for the log's delivery from its start; then it holds only loaded bytes.
    Found by the rotation property test's search (1,500 examples)."""
    path = Path(appending.staging.path(KEY))
    append(path, lines(0, 3))
    assert stream_once(appending).records_loaded == 3
    append(path, lines(3, 2))
    _copy_truncate(path, 4096, lambda: discover(appending))  # the log's tail registered, then truncated under it
    append(path, lines(5, 1))
    assert stream_once(appending).records_loaded == 0  # the tail's delivery finds the log truncated
    append(path, lines(6, 2))
    assert path.stat().st_size == len(lines(0, 3))  # the size its position was loaded to, other lines
    Path(f"{path}.1").rename(f"{path}.2")
    _copy_truncate(path, 4096, lambda: stream_once(appending))
    _drain(appending)
    assert_rows_once(appending, 8)
