"""MessagePack that Python's unpacker refuses is described in MessagePack's terms (an array as a map key, nesting,
a reserved byte, an impossible length, bad gzip), with the item and byte: never "unhashable type: 'list'"."""

from __future__ import annotations

import gzip
import re

import pytest

from siltlake.records import UnreadableObject
from siltlake.records.msgpack_format import msgpack_entries

from .records_helpers import event_record, pack, read_all

# What Python or msgpack-python would say instead: none of it may reach a reason.
PYTHON_WORDS = re.compile(r"unhashable|StackError|FormatError|max_\w+_len|Error -\d|TypeError|ValueError")


@pytest.mark.parametrize(
    ("item", "said"),
    [
        (b"\x81\x91\x01\x01", "a map has an array as a key; record keys must be strings"),  # {[1]: 1}
        (b"\x81\x81\x01\x01\x01", "a map has a map as a key; record keys must be strings"),  # {{1: 1}: 1}
        (b"\x91" * 1100 + b"\x01", "arrays and maps nested more than 1024 levels deep"),
        (b"\xc1", "a byte that starts no MessagePack value (0xc1"),
        (b"\xdd\xff\xff\xff\xff", "an array of 4,294,967,295 elements, more than the"),
        (b"\xdf\xff\xff\xff\xff", "a map of 4,294,967,295 entries, more than the"),
    ],
)
def test_an_item_the_unpacker_refuses_is_said_in_messagepack_terms(item: bytes, said: str) -> None:
    first = pack(event_record(1))
    with pytest.raises(UnreadableObject) as refused:
        read_all(first + item + pack(event_record(2)), key="in/x.msgpack")
    reason = str(refused.value)
    assert reason.startswith(f"not valid MessagePack at byte {len(first)} (item 2): ") and said in reason, reason
    assert not PYTHON_WORDS.search(reason), reason


@pytest.mark.parametrize(
    ("entries", "said"),
    [
        (b"not gzip at all", "not valid gzip (incorrect header check)"),
        # mtime=0: the same bytes, and the same test id, in every pytest-xdist worker
        (
            gzip.compress(b"\x81\x91\x01\x01", mtime=0),
            "a map has an array as a key; record keys must be strings (field names)",
        ),
    ],
)
def test_fluentd_packed_entries_that_do_not_decode_are_said_in_the_same_terms(entries: bytes, said: str) -> None:
    (entry,) = msgpack_entries(["app.log", entries, {"compressed": "gzip"}])
    assert entry.record is None and entry.problem == f"Fluentd packed entries do not decode: {said}"
    assert not PYTHON_WORDS.search(entry.problem), entry.problem
