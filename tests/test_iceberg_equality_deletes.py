"""Why a keyed table's hidden rows are position deletes (siltlake.publish.iceberg.deletes): what the Python engines do
with an equality delete file. siltlake never writes one; this test registers one by hand on a keyed table's snapshot
(the keys of ten rows): PyIceberg and polars (native and PyIceberg readers) refuse the table, DataFusion through
pyiceberg-core applies the file."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.deletes import DeleteChange
from siltlake.publish.iceberg.manifests import EPOCH, commit_files

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_iceberg_readers import datafusion_context
from .test_merge import DAY, make_table
from .test_upsert import KEYED

IDENT = ("web", "access")


class EqualityDeletes(DeleteChange):
    def summary(self) -> dict[str, str]:
        return {
            "added-delete-files": str(len(self.added)),
            "added-equality-delete-files": str(len(self.added)),
            "added-equality-deletes": str(sum(f.record_count for f in self.added)),
        }


def equality_delete_file(deployment: Deployment, iceberg: Any, user_ids: list[int]) -> Any:  # pyiceberg
    """An equality delete file on user_id for DAY's partition, written beside the table's data."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    field_id = iceberg.schema().find_field("user_id").field_id
    rows = pa.table(
        [pa.array(user_ids, pa.int64())],
        schema=pa.schema(
            [pa.field("user_id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(field_id).encode()})]
        ),
    )
    sink = io.BytesIO()
    pq.write_table(rows, sink)
    key = "test0001/_iceberg/web.access/data/equality-deletes.parquet"
    deployment.lake.write_bytes(key, sink.getvalue())
    data_file = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=deployment.lake.uri(key),
        file_format=FileFormat.PARQUET,
        partition=Record((DAY - EPOCH).days),
        record_count=rows.num_rows,
        file_size_in_bytes=len(sink.getvalue()),
        equality_ids=[field_id],
        sort_order_id=None,
        key_metadata=None,
    )
    data_file.spec_id = iceberg.spec().spec_id
    return data_file


@pytest.fixture
def with_equality_deletes(tmp_path: Path, catalog_url: str) -> Any:  # a pyiceberg Table
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.config.publish.targets = ["iceberg"]
    deployment.init()
    record = make_table(deployment, **KEYED)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 100, 0)])
    assert not publish_once(deployment).target_errors
    iceberg = open_catalog(deployment).load_table(IDENT)
    commit_files(
        iceberg,
        [],
        [],
        {"siltlake.table-version": "1"},
        deletes=EqualityDeletes(added=[equality_delete_file(deployment, iceberg, list(range(10)))]),
    )
    yield open_catalog(deployment).load_table(IDENT)
    deployment.close()


def test_pyiceberg_and_polars_refuse_an_equality_delete_file(with_equality_deletes: Any) -> None:
    import polars as pl

    iceberg = with_equality_deletes
    with pytest.raises(ValueError, match="PyIceberg does not yet support equality deletes"):
        iceberg.scan().to_arrow()
    for reader in ("native", "pyiceberg"):  # both plan the scan through PyIceberg here (no polars_iceberg plugin)
        with pytest.raises(ValueError, match="PyIceberg does not yet support equality deletes"):
            pl.scan_iceberg(iceberg, reader_override=reader).collect()
    # DataFusion through pyiceberg-core, for the record: it applies the file (90 of 100 rows).
    context = datafusion_context(iceberg, {1: iceberg.current_snapshot()})
    assert context.sql("SELECT count(*) AS n FROM v1").to_arrow_table().column("n").to_pylist() == [90]
