"""A local gzip file's delivery is read as whole members and inflated once (stream/tails.py, assume_whole); when
that read finds a member cut short (a file appended to, Fluentd's `compress gzip` + `append true`, listed while a
member was half written) or bytes that are not gzip, it is read again up to its last whole member, as before."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from siltlake.delivery_names import DeliveryName, delivery_uri
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout
from siltlake.stream.identity import file_identity
from siltlake.stream.tails import open_delivery
from siltlake.stream.task import StreamTask, process_staging_object
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .test_appends import lines


def test_a_delivery_assumed_whole_ends_at_its_end_without_inflating(tmp_path: Path, monkeypatch) -> None:
    from siltlake.stream import tails

    def inflated(*args: object) -> int:
        raise AssertionError("the range was inflated to find its last member")

    monkeypatch.setattr(tails, "last_gzip_member", inflated)
    path = tmp_path / "a.log.gz"
    path.write_bytes(gzip.compress(lines(0, 3)) + gzip.compress(lines(3, 3))[:20])
    table = TableDef.from_mapping(ACCESS_TABLE)
    with path.open("rb") as file:
        delivery = open_delivery(file, "a.log.gz", table, DeliveryName("file:///a.log.gz"), None, 0, True)
    assert (delivery.assumed_whole, delivery.consumed_end) == (True, path.stat().st_size)


def test_a_tail_registered_inside_a_member_loads_its_whole_members_once_read_again(tmp_path: Path) -> None:
    """The listing saw the third member half written (the tail's end is inside it), the file is whole when the task
    reads it: the read as whole members finds the range cut short, and the range read again up to its last whole
    member loads the second member alone; the third is the next tail's."""
    first, second, third = (gzip.compress(lines(start, 3)) for start in (0, 3, 6))
    path = tmp_path / "app.log.gz"
    path.write_bytes(first + second + third)
    start, end = len(first), len(first) + len(second) + len(third) // 2
    identity = file_identity(os.stat(path))
    task = StreamTask(
        staging_object_id=1,
        uri=delivery_uri(path.as_uri(), start, end, generation="g1", identity=identity),
        staging=Storage(str(tmp_path)),
        lake=Storage(str(tmp_path / "lake")),
        layout=TableLayout("k1k1", "web", "access"),
        table_json=TableDef.from_mapping(ACCESS_TABLE).to_json(),
        run_id="r",
        batch_rows=4096,
        spill_bytes=1 << 30,
        end=end,
    )
    result = process_staging_object(task)
    assert (result["status"], result["records_in"], result["bad_records"]) == ("ok", 3, 0), result
    assert result["position"]["consumed_end"] == len(first) + len(second)
