"""The ordered comparison of a directory's listing with its record of names (storage/accounted.names_added), and
the walk that uses it (storage/localwalk._read_by_name)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from siltlake.storage import localwalk
from siltlake.storage.accounted import SEPARATOR, AccountedNames, names_added
from siltlake.storage.filesystem import Storage


def joined(names: list[str]) -> str:
    return SEPARATOR.join(names)


def test_names_inserted_anywhere_are_found_in_listing_order() -> None:
    record = [f"obj-{n:05d}.jsonl" for n in range(3000)]
    listing = list(record)
    for position, name in ((0, "first"), (1500, "obj-01499.jsonl.tmp"), (1501, "obj-0149"), (3003, "last")):
        listing.insert(position, name)
    assert names_added(joined(listing), joined(record), most=10) == ["first", "obj-01499.jsonl.tmp", "obj-0149", "last"]


def test_a_name_that_extends_a_recorded_one_or_is_cut_from_it_is_new() -> None:
    assert names_added("ab/abc/b", "ab/b", most=4) == ["abc"]
    assert names_added("abc/ab/b", "abc/b", most=4) == ["ab"]
    assert names_added("a/b", "a/b", most=4) == []


def test_an_empty_record_or_listing() -> None:
    assert names_added("a/b", "", most=1) == ["a", "b"]
    assert names_added("", "", most=1) == []
    assert names_added("", "a", most=1) is None


def test_a_removed_or_reordered_name_or_too_many_new_ones_give_no_answer() -> None:
    assert names_added("a/c", "a/b/c", most=4) is None
    assert names_added("b/a", "a/b", most=4) is None
    assert names_added("x/a/y/b/z", "a/b", most=1) is None
    assert names_added("x/a/y/b/z/w", "a/b", most=2) == ["x", "y", "z", "w"]


names = st.text(
    st.characters(blacklist_characters=SEPARATOR + "\x00", blacklist_categories=("Cs",)), min_size=1, max_size=12
)


@settings(max_examples=400, deadline=None)
@given(st.lists(names, unique=True, max_size=60), st.data())
def test_an_answer_is_always_the_set_difference(listing: list[str], data: st.DataObject) -> None:
    """Whatever the record (a subsequence of the listing, a shuffled one, one with names gone): an answer, when
    given, is exactly the listing's names the record lacks; a subsequence always gets one."""
    kept = data.draw(st.lists(st.booleans(), min_size=len(listing), max_size=len(listing)))
    record = [name for name, keep in zip(listing, kept, strict=True) if keep]
    added = names_added(joined(listing), joined(record), most=len(listing) + 1)
    assert added == [name for name in listing if name not in set(record)]
    shuffled = data.draw(st.permutations(record))
    gone = data.draw(st.lists(names, unique=True, max_size=3).filter(lambda extra: not set(extra) & set(listing)))
    other = shuffled + gone
    answer = names_added(joined(listing), joined(other), most=len(listing) + 1)
    if answer is not None:
        assert not gone
        assert sorted(answer) == sorted(set(listing) - set(other))


def test_the_walk_stores_its_record_in_listing_order_and_finds_new_names_against_one_in_another(
    tmp_path: Path, monkeypatch
) -> None:
    answers: list[list[str] | None] = []

    def answered(*args, **kwargs):
        answers.append(names_added(*args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(localwalk, "names_added", answered)
    root = tmp_path / "staging"
    day = root / "host" / "2026" / "01" / "07"
    day.mkdir(parents=True)
    for n in range(500):
        (day / f"obj-{n:04d}.jsonl").write_bytes(b"{}\n")
    staging, hour = Storage(str(root)), 3600 * 10**9
    accounted = AccountedNames()
    cursor = time.time_ns()
    time.sleep(0.02)
    (day / "obj-0500.jsonl").write_bytes(b"{}\n")
    accounted.keep(staging.list_changed(cursor, accounted).directories, time.time_ns(), hour)
    assert accounted.files(str(day), os.stat(day)).split(SEPARATOR) == os.listdir(day)

    # A record in another order (one an earlier version stored) is compared as sets, and stored anew in order.
    shuffled = sorted(os.listdir(day), reverse=True)
    recorded = accounted.recorded()[str(day)]
    accounted = AccountedNames({str(day): type(recorded)(recorded.identity, recorded.newest_ns, joined(shuffled))})
    cursor = time.time_ns()
    time.sleep(0.02)
    for name in ("late-a.jsonl", "late-b.jsonl"):
        (day / name).write_bytes(b"{}\n")
    os.mkfifo(day / "pipe")  # no regular file: neither recorded nor returned
    listing = staging.list_changed(cursor, accounted)
    assert answers[-1] is None
    assert sorted(info.key.rsplit("/", 1)[1] for info in listing.objects) == ["late-a.jsonl", "late-b.jsonl"]
    assert listing.remembered == 501
    accounted.keep(listing.directories, time.time_ns(), hour)
    assert accounted.files(str(day), os.stat(day)).split(SEPARATOR) == [n for n in os.listdir(day) if n != "pipe"]

    # Against that record, two more names are found by the ordered comparison alone.
    cursor = time.time_ns()
    time.sleep(0.02)
    for name in ("later-a.jsonl", "later-b.jsonl"):
        (day / name).write_bytes(b"{}\n")
    listing = staging.list_changed(cursor, accounted)
    assert sorted(answers[-1]) == ["later-a.jsonl", "later-b.jsonl", "pipe"]
    assert sorted(info.key.rsplit("/", 1)[1] for info in listing.objects) == ["later-a.jsonl", "later-b.jsonl"]
    assert listing.remembered == 503
