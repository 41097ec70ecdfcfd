"""Lake objects as a Spark DataFrame read by pyarrow inside Spark's Python tasks: for object stores Spark's
own reader cannot reach (s3:// without Hadoop's S3A jars on the classpath)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from siltlake.read.version_files import data_file_key
from siltlake.spark import is_remote, jvm
from siltlake.storage.filesystem import Storage

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
OBJECTS_PER_TASK = 8
REMOTE_CORES = 8


def spark_reads(spark: SparkSession, lake: Storage) -> bool:
    """Whether Spark reads the lake's objects itself: a file system root, or an object store whose Hadoop
    connector (S3A: hadoop-aws and the AWS SDK bundle) is on Spark's classpath."""
    if not lake.is_object_store:
        return True
    try:
        jvm(spark).org.apache.spark.util.Utils.classForName(S3A_CLASS, True, False)
    except Exception:  # py4j raises its own error types for a missing class
        return False
    return True


class _ReadObjects:
    """Runs in a Spark Python task: reads each (key, dt) row's object with pyarrow, in the table's schema; or,
    for a keyed table (primary_key given), each (keys, dt) row's partition objects in commit order, merged on
    read to one row per key (siltlake.read.keyed)."""

    def __init__(
        self, lake: Storage, schema: pa.Schema, primary_key: Sequence[str] = (), sequence_column: str = ""
    ) -> None:
        self.lake = lake
        self.schema = schema
        self.primary_key = tuple(primary_key)
        self.sequence_column = sequence_column

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from siltlake.read.keyed import conform, read_partitions

        for batch in batches:
            days = batch.column("day").to_pylist() if "day" in batch.schema.names else [None] * batch.num_rows
            if self.primary_key:
                partitions = list(zip(days, batch.column("keys").to_pylist(), strict=True))
                for table in read_partitions(
                    self.lake, partitions, self.schema, self.primary_key, self.sequence_column
                ):
                    yield from table.to_batches()
                continue
            for key, day in zip(batch.column("key").to_pylist(), days, strict=True):
                with self.lake.open_input_file(key) as handle:
                    table = conform(pq.read_table(handle), self.schema)
                if "dt" in self.schema.names:
                    table = table.append_column(
                        self.schema.field("dt"), pa.repeat(pa.scalar(day, self.schema.field("dt").type), table.num_rows)
                    )
                yield from table.to_batches()


def arrow_objects_frame(
    spark: SparkSession, lake: Storage, schema: StructType, objects: list[tuple[str, dt.date]]
) -> DataFrame:
    """A DataFrame of the objects (URI, partition date), each read by pyarrow in a Spark task."""
    from pyspark.sql.pandas.types import to_arrow_schema

    rows: list[tuple[Any, ...]] = [(data_file_key(lake, uri), day) for uri, day in objects]
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    keys = _tasks_frame(spark, rows, "key string, day date", _slices(spark, len(rows)))
    return keys.mapInArrow(_ReadObjects(lake, arrow_schema), schema)


def arrow_partitions_frame(
    spark: SparkSession,
    lake: Storage,
    schema: StructType,
    partitions: list[tuple[dt.date, list[str]]],
    primary_key: Sequence[str],
    sequence_column: str,
) -> DataFrame:
    """A DataFrame of a keyed table's partitions (date, object URIs in commit order) that need a merge on read:
    one Spark task per partition reads its objects with pyarrow and keeps one row per key."""
    from pyspark.sql.pandas.types import to_arrow_schema

    rows = [([data_file_key(lake, uri) for uri in uris], day) for day, uris in partitions]
    keys = _tasks_frame(spark, rows, "keys array<string>, day date", max(1, len(rows)))
    return keys.mapInArrow(
        _ReadObjects(lake, to_arrow_schema(schema, timezone="UTC"), primary_key, sequence_column), schema
    )


def parquet_frame(spark: SparkSession, lake: Storage, keys: list[str]) -> DataFrame:
    """spark.read.parquet of lake objects (all of one schema); without a connector for the lake's object store,
    pyarrow reads them in Spark's tasks, in the schema of the first object's footer."""
    if spark_reads(spark, lake):
        return spark.read.parquet(*(lake.engine_uri(key) for key in keys))
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    with lake.open_input_file(keys[0]) as handle:
        schema = from_arrow_schema(pq.read_schema(handle))
    frame = _tasks_frame(spark, [(key,) for key in keys], "key string", _slices(spark, len(keys)))
    return frame.mapInArrow(_ReadObjects(lake, to_arrow_schema(schema, timezone="UTC")), schema)


def _slices(spark: SparkSession, objects: int) -> int:
    """Tasks for reading `objects` objects: OBJECTS_PER_TASK each, up to four per core (a Spark Connect client
    cannot see the server's cores: REMOTE_CORES)."""
    cores = REMOTE_CORES if is_remote(spark) else spark.sparkContext.defaultParallelism
    return max(1, min(cores * 4, -(-objects // OBJECTS_PER_TASK)))


def _tasks_frame(spark: SparkSession, rows: list[tuple[Any, ...]], ddl: str, slices: int) -> DataFrame:
    """The rows as a DataFrame of `slices` partitions, each read by a task of its own."""
    if is_remote(spark):  # no SparkContext on a Spark Connect client: the rows travel in the plan
        return spark.createDataFrame(rows, ddl).repartition(slices)
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, slices), ddl)
