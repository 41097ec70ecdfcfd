"""A local gzip file's head is inflated only as far as it goes, with gzip(1)'s reading of members and padding."""

from __future__ import annotations

import gzip
import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siltlake.stream.identity import UNREADABLE_HEAD, head_bytes


def _head(data: bytes, length: int) -> bytes:
    with tempfile.TemporaryFile() as file:
        file.write(data)
        file.flush()
        return head_bytes(file.fileno(), True, length)


@settings(max_examples=60, deadline=None)
@given(
    members=st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=4),
    padding=st.integers(0, 20),
    length=st.sampled_from([1, 100, 1024, 4096, 20000]),
)
def test_the_head_is_what_gzip_reads_whatever_the_members_and_padding(
    members: list[bytes], padding: int, length: int
) -> None:
    data = b"".join(gzip.compress(member, compresslevel=1) for member in members) + b"\0" * padding
    assert _head(data, length) == gzip.decompress(data)[:length]


def test_a_stream_cut_short_before_the_head_ends_and_a_corrupt_one_are_unreadable() -> None:
    whole = gzip.compress(os.urandom(5000))
    with pytest.raises(EOFError):
        _head(whole[: len(whole) // 2], 4096)
    with pytest.raises(UNREADABLE_HEAD):
        _head(whole[:10] + b"\xff" * 200, 1024)


def test_a_stream_being_written_has_its_head_once_it_holds_it() -> None:
    """Only the head is inflated: a gzip file cut short after its first KiB (a member being written) has its head,
    the bytes it keeps as it is written on (a followed gzip file, a compressed copy in progress); the reader of its
    delivery reports the cut. Cut short before the KiB, it has none yet."""
    whole = gzip.compress(os.urandom(5000) + b"\n" * 100_000)
    assert _head(whole[: len(whole) // 2], 1024) == gzip.decompress(whole)[:1024]
    assert _head(whole[: len(whole) // 2], 10) == gzip.decompress(whole)[:10]
    with pytest.raises(EOFError):
        _head(whole[:40], 1024)


def test_a_plain_file_is_read_as_it_is() -> None:
    with tempfile.TemporaryFile() as file:
        file.write(b"abc\ndef\n")
        file.flush()
        assert head_bytes(file.fileno(), False, 5) == b"abc\nd"
