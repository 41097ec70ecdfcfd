"""The gzip inflater a staging object is decompressed with: ISA-L's (python-isal's isal_zlib) where it imports,
zlib's otherwise. Both are zlib's decompressobj interface (decompress(data, max_length), unconsumed_tail,
unused_data, eof), give the same bytes and release the GIL while they inflate; ISA-L's takes about half the CPU
time (docs/design.md, "Decompression")."""

from __future__ import annotations

import importlib
import zlib
from types import ModuleType
from typing import Protocol, cast


def _isal_zlib() -> ModuleType | None:
    try:
        return importlib.import_module("isal.isal_zlib")
    except ImportError:  # a platform without a python-isal wheel: zlib's inflate, the same bytes, slower
        return None


isal_zlib = _isal_zlib()

GZIP_WBITS = 31  # a gzip header and trailer around the deflate stream, checked (CRC-32 and length)
BACKENDS = ("isal", "zlib") if isal_zlib is not None else ("zlib",)
# What new inflaters use; tests and benchmarks set it to "zlib" to force the fallback.
backend = BACKENDS[0]


class Inflater(Protocol):
    """One gzip member's decompressor, as zlib.decompressobj(wbits=31) gives it."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    @property
    def unconsumed_tail(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int = 0, /) -> bytes: ...


# What either raises on a stream that is not gzip or is corrupt (isal_zlib.error is no zlib.error).
INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,)
if isal_zlib is not None:
    INFLATE_ERRORS += (cast(type[Exception], isal_zlib.error),)


def gzip_inflater() -> Inflater:
    """A decompressor for one gzip member, by `backend`."""
    if backend == "isal" and isal_zlib is not None:
        return isal_zlib.decompressobj(wbits=GZIP_WBITS)
    if backend not in BACKENDS:
        raise ValueError(f"gzip inflate backend {backend!r} is not one of {', '.join(BACKENDS)}")
    return zlib.decompressobj(wbits=GZIP_WBITS)


def head_inflater() -> Inflater:
    """A decompressor for the first KiB of a gzip member (a file's head): zlib's, whatever `backend` says. ISA-L's
    inflates at least 16 KiB a call whatever max_length asks, 16 us where zlib gives a KiB in 5 (docs/design.md,
    "Decompression"); both give the same bytes."""
    return zlib.decompressobj(wbits=GZIP_WBITS)
