"""A round's discovery runs beside its waves (stream/runner.py): new objects are registered a chunk at a time,
and the first wave starts on the first chunk while later chunks are marked and registered. Every object loads
once, a discovery that fails part way fails the round and leaves nothing behind, and the progress display's total
follows what was registered."""

from __future__ import annotations

import threading

import pytest

from siltlake.deployment import Deployment
from siltlake.stream import discover as discovering
from siltlake.stream import stream_once
from siltlake.stream.runner import Progress
from siltlake.stream.stage import WaveStage

from .test_stream import assert_rows_once
from .test_stream_batches import stage_objects

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("access_table")]

OBJECTS = 35  # four chunks of 10
ROWS = 3


class Recorded(Progress):
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.read = threading.Event()

    def start(self, total: int) -> None:
        self.events.append(("start", total))

    def resize(self, total: int) -> None:
        self.events.append(("resize", total))

    def advance(self, count: int) -> None:
        self.events.append(("advance", count))
        self.read.set()


@pytest.fixture
def chunked(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    monkeypatch.setattr(discovering, "REGISTER_CHUNK", 10)
    deployment.config.stream.objects_per_wave = 10
    stage_objects(deployment, OBJECTS, ROWS)
    return deployment


def test_the_first_wave_runs_while_discovery_registers_the_rest(
    chunked: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    progress = Recorded()
    register_fresh = discovering._register_fresh
    chunks: list[int] = []

    def after_the_first_wave_read(*args, **kwargs) -> int:
        if chunks:  # the second chunk waits for the first wave: it never comes if waves wait for discovery
            assert progress.read.wait(60), "no wave started while discovery was registering"
        chunks.append(len(progress.events))
        return register_fresh(*args, **kwargs)

    monkeypatch.setattr(discovering, "_register_fresh", after_the_first_wave_read)
    report = stream_once(chunked, progress)
    assert len(chunks) == 4 and progress.events[0] == ("start", 10)
    assert (report.registered, report.processed, report.records_loaded) == (OBJECTS, OBJECTS, OBJECTS * ROWS)
    assert ("resize", OBJECTS) in progress.events
    assert sum(count for what, count in progress.events if what == "advance") == OBJECTS
    assert_rows_once(chunked, OBJECTS * ROWS)
    assert stream_once(chunked).processed == 0


def test_a_discovery_failing_after_its_first_chunks_fails_the_round_and_the_next_round_loads_the_rest(
    chunked: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_fresh = discovering._register_fresh
    chunks: list[int] = []

    def failing_at_the_third(*args, **kwargs) -> int:
        chunks.append(1)
        if len(chunks) == 3:
            raise OSError("the catalog went away")
        return register_fresh(*args, **kwargs)

    monkeypatch.setattr(discovering, "_register_fresh", failing_at_the_third)
    with pytest.raises(OSError, match="the catalog went away"):
        stream_once(chunked)
    monkeypatch.setattr(discovering, "_register_fresh", register_fresh)
    stream_once(chunked)
    assert_rows_once(chunked, OBJECTS * ROWS)


def test_a_failing_wave_waits_for_discovery_to_end(chunked: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """No discovery keeps registering once its round has failed: the next round starts from a settled catalog."""
    register_fresh = discovering._register_fresh
    running = threading.Event()
    ended: list[bool] = []

    def slow(*args, **kwargs) -> int:
        running.set()
        try:
            return register_fresh(*args, **kwargs)
        finally:
            ended.append(True)

    def failing(self, wave, run_id):
        raise RuntimeError("a wave failed")

    monkeypatch.setattr(discovering, "_register_fresh", slow)
    monkeypatch.setattr(WaveStage, "run", failing)
    with pytest.raises(RuntimeError, match="a wave failed"):
        stream_once(chunked)
    assert len(ended) == 4 and not any(t.name == "siltlake-discover" for t in threading.enumerate())
    monkeypatch.undo()
    stream_once(chunked)
    assert_rows_once(chunked, OBJECTS * ROWS)
