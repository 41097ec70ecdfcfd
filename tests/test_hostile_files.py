"""Files no siltlake writer makes, read anyway: a manifest entry outside a dt=<date> directory and a data file
whose time column holds no timestamps. Each is refused or read with what is known, never a stray TypeError."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.read.inspect import _footer_stats

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo


def test_footer_statistics_that_are_no_times_leave_the_time_range_unknown(tmp_path: Path) -> None:
    """A file written by hand with strings in the time column, in two row groups: its size and rows are read,
    its event time range is unknown (the statistics are compared as times nowhere)."""
    path = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"utc_event_time": ["b", "a", "d", "c"]}), path, row_group_size=2)
    lake = SimpleNamespace(open_input_file=lambda key: pa.OSFile(str(tmp_path / key)))
    stats = _footer_stats(SimpleNamespace(lake=lake), "odd.parquet", "utc_event_time")
    assert (stats.content_length, stats.row_count) == (path.stat().st_size, 4)
    assert (stats.min_event_time, stats.max_event_time) == (None, None)


@pytest.mark.spark
def test_a_manifest_entry_outside_a_day_directory_is_refused_by_the_spark_reader(tmp_path: Path, spark) -> None:
    """Inside the lake's root but not in a dt=<date> directory: the Spark reader has no date to give its rows,
    so it refuses the manifest, as it refuses one naming a file outside the root."""
    from .conftest import make_config

    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    deployment.use_spark(spark)
    try:
        record = make_table(deployment)
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 3, 1)])
        publish_once(deployment, now=tokyo(DAY, 10))
        lake_root = Path(deployment.config.storage.root)
        dateless = lake_root / "planted" / "obj-0000000000000000009.parquet"
        dateless.parent.mkdir(parents=True)
        shutil.copyfile(next(lake_root.rglob("live/**/*.parquet")), dateless)
        for manifest in lake_root.rglob("manifests/**/*.json"):
            content = json.loads(manifest.read_text())
            content["entries"].append(
                {
                    "url": f"{deployment.lake.root}/planted/{dateless.name}",
                    "mandatory": True,
                    "meta": {"content_length": dateless.stat().st_size},
                }
            )
            manifest.write_text(json.dumps(content))
        table = Lake(deployment).table("web.access")
        with pytest.raises(SiltError, match=r"is not in a dt=<date> directory"):
            table.to_spark(spark, as_of_version=table.version).collect()
    finally:
        deployment.close()
