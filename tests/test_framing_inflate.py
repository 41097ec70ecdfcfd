"""siltlake.records.inflate: ISA-L's inflate where python-isal imports, zlib's otherwise; the same bytes, errors,
limits and bounded chunks either way (records.framing.ObjectBytes)."""

from __future__ import annotations

import functools
import gzip
import importlib
import importlib.util
import random
import sys
import zlib
from collections.abc import Iterator

import pytest

from siltlake.records import UnreadableObject, framing, inflate
from siltlake.records.framing import ObjectLimits

from .records_helpers import OneWayStream, TrickleStream

BACKENDS = ["zlib", pytest.param("isal", marks=pytest.mark.skipif("isal" not in inflate.BACKENDS, reason="no isal"))]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(inflate, "backend", request.param)
    return request.param


class RandomReads(OneWayStream):
    """Reads of random sizes, from a byte to more than was asked."""

    def __init__(self, data: bytes, seed: int) -> None:
        super().__init__(data)
        self._rng = random.Random(seed)

    def read(self, size: int = -1) -> bytes:
        return super().read(self._rng.choice([1, 7, 100, 5000, 1 << 16, size]))


def inflated(data: bytes, stream: type[OneWayStream] = OneWayStream, limits: ObjectLimits | None = None) -> bytes:
    return b"".join(framing.ObjectBytes(stream(data), limits).chunks())


def outcome(data: bytes, seed: int) -> bytes | str:
    """The object's bytes, or the reason it is unreadable up to the library's own words."""
    try:
        return b"".join(framing.ObjectBytes(RandomReads(data, seed)).chunks())
    except UnreadableObject as exc:
        return exc.reason.split(": ")[0]


@functools.cache
def _line_block(seed: int) -> bytes:
    rng = random.Random(seed)
    return b"".join(b'{"n":%d,"user":"u-%d"}\n' % (i, rng.randrange(10**6)) for i in range(4000))


def lines(size: int, seed: int) -> bytes:
    """size bytes of JSON lines, compressing about as logs do."""
    block = _line_block(seed % 4)
    return (block * (size // len(block) + 1))[:size]


def test_isal_is_the_default_where_it_imports() -> None:
    expected = "isal" if importlib.util.find_spec("isal") else "zlib"
    assert inflate.BACKENDS[0] == inflate.backend == expected


def test_one_member_inflates_to_its_bytes(backend: str) -> None:
    payload = lines(3 << 20, 1)
    assert inflated(gzip.compress(payload)) == payload
    small = lines(5000, 1)
    assert inflated(gzip.compress(small), TrickleStream) == small


def test_members_and_zero_padding_inflate_to_their_bytes(backend: str) -> None:
    parts = [lines(size, size) for size in (0, 1, 100, framing.MAX_INFLATE_CHUNK, (9 << 20) + 3)]
    data = b"\0".join(gzip.compress(part, compresslevel=1) for part in parts) + b"\0" * 10
    assert inflated(data) == b"".join(parts)


def test_chunks_stay_bounded(backend: str) -> None:
    data = gzip.compress(b" " * (48 << 20), compresslevel=9)  # 48 MiB of spaces in ~50 KB
    sizes = [len(chunk) for chunk in framing.ObjectBytes(OneWayStream(data)).chunks()]
    assert sum(sizes) == 48 << 20 and max(sizes) <= framing.MAX_INFLATE_CHUNK


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[: len(data) // 2], r"^truncated gzip stream after \d+ compressed bytes$"),
        (lambda data: data[:-4] + b"\0\0\0\0", r"^corrupt gzip stream within the first \d+ compressed bytes: "),
        (lambda data: data[:-8] + b"\0\0\0\0" + data[-4:], r"^corrupt gzip stream within the first \d+ compressed "),
        (lambda data: data + b"trailing junk", r"^corrupt gzip stream within the first \d+ compressed bytes: "),
        (lambda data: data[:5000] + b"\x55" * 40 + data[5040:], r"^corrupt gzip stream within the first \d+ "),
    ],
    ids=["truncated", "bad-length", "bad-crc", "junk-after", "corrupt-block"],
)
def test_damaged_gzip_is_unreadable_alike(backend: str, damage, reason: str) -> None:
    data = damage(gzip.compress(lines(1 << 20, 2)))
    with pytest.raises(UnreadableObject, match=reason):
        inflated(data)


def test_the_ratio_limit_trips_with_its_message(backend: str) -> None:
    bomb = gzip.compress(b"\n" * (64 << 20), compresslevel=9)
    source = framing.ObjectBytes(OneWayStream(bomb), ObjectLimits(max_ratio=50, ratio_floor=1 << 20))
    seen = 0
    with pytest.raises(
        UnreadableObject,
        match=r"^the object decompresses to more than 50 times its compressed size \([\d,]+ bytes from the first "
        r"[\d,]+; stream.max_compression_ratio\)$",
    ):
        for chunk in source.chunks():
            seen += len(chunk)
    assert seen < 8 << 20


def test_the_size_limit_trips_with_its_message(backend: str) -> None:
    with pytest.raises(UnreadableObject, match=r"more than 1,048,576 bytes \(stream.max_object_bytes\)"):
        inflated(gzip.compress(b"\n" * (4 << 20)), limits=ObjectLimits(max_bytes=1 << 20))


@pytest.mark.skipif("isal" not in inflate.BACKENDS, reason="no isal to compare zlib with")
def test_isal_and_zlib_agree_on_random_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    for case in range(24):
        parts = []
        for _ in range(rng.randint(1, 3)):
            size = rng.choice([0, 1, 100, (4 << 20) - 1, 4 << 20, (4 << 20) + 1, 6 << 20])
            payload = lines(size, case) if rng.random() < 0.5 else rng.randbytes(size)
            parts.append(gzip.compress(payload, compresslevel=rng.choice([1, 6])))
            if rng.random() < 0.3:
                parts.append(b"\0" * rng.randint(1, 50))
        data = b"".join(parts)
        damage = rng.choice(["none", "none", "truncate", "flip", "junk"])
        if damage == "truncate":
            data = data[: rng.randint(2, len(data) - 1)]
        elif damage == "flip":
            spot = rng.randint(10, len(data) - 1)
            data = data[:spot] + bytes([data[spot] ^ 0x55]) + data[spot + 1 :]
        elif damage == "junk":
            data += b"trailing junk"
        found = {}
        for name in ("zlib", "isal"):
            monkeypatch.setattr(inflate, "backend", name)
            found[name] = outcome(data, seed=case)
        assert found["isal"] == found["zlib"], (case, damage)


@pytest.fixture
def without_isal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """records.inflate as imported where python-isal is not installed."""
    for name in ("isal", "isal.isal_zlib"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it now raises ImportError
    importlib.reload(inflate)
    yield
    monkeypatch.undo()
    importlib.reload(inflate)


def test_without_isal_zlib_inflates(without_isal: None) -> None:
    assert inflate.BACKENDS == ("zlib",) and inflate.backend == "zlib"
    assert (zlib.error,) == inflate.INFLATE_ERRORS
    assert type(inflate.gzip_inflater()) is type(zlib.decompressobj(wbits=31))
    payload = lines(5 << 20, 3)
    data = gzip.compress(payload, compresslevel=1) + gzip.compress(b"tail\n") + b"\0" * 3
    assert inflated(data) == payload + b"tail\n"
    with pytest.raises(UnreadableObject, match="^corrupt gzip stream within the first"):
        inflated(gzip.compress(payload, compresslevel=1) + b"trailing junk")


def test_an_unknown_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflate, "backend", "brotli")
    with pytest.raises(ValueError, match="'brotli' is not one of"):
        inflate.gzip_inflater()
