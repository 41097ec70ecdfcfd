"""Small objects made without a Spark stream run, through the same catalog commit the stream uses."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from contextlib import nullcontext

import pyarrow as pa
import pyarrow.parquet as pq

from siltlake.catalog import TableRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.records.writer import object_rows, object_schema

_staging_names = itertools.count()


def rows_for(date: dt.date, count: int, seed: int) -> list[dict]:
    """`count` access rows on a Tokyo date, times spread over the day, user ids unique per (seed, i)."""
    base = dt.datetime.combine(date, dt.time(0, 30), tzinfo=dt.UTC) - dt.timedelta(hours=9)
    return [
        {
            "utc_event_time": base + dt.timedelta(seconds=(seed * 7919 + i * 104729) % 80000),
            "user_id": seed * 1_000_000 + i,
            "action": f"a{(seed + i) % 5}",
        }
        for i in range(count)
    ]


def add_small_objects(
    deployment: Deployment,
    table: TableRecord,
    date: dt.date,
    batches: list[list[dict]],
    now: dt.datetime | None = None,
    write_files: bool = True,
    legacy: bool = False,
    batched: bool = False,
    before_commit: Callable[[], None] | None = None,
) -> list[int]:
    """Write each batch as one time-sorted small object and commit it as the stream does; returns ids.

    write_files=False commits catalog rows only (for scheduling tests that never read the objects); legacy=True
    writes objects as siltlake did before they held dt and Iceberg field ids; batched=True commits through a
    batch as a stream round's chunk does; before_commit runs inside the open transaction, after the writes."""
    definition = table.definition
    schema = definition.arrow_schema()
    layout = table.layout(deployment.instance_key)
    lake = deployment.lake
    now = now or utcnow()
    ids: list[int] = []
    catalog = deployment.catalog
    staged = []
    for batch in batches:
        uri = f"file:///staging/{table.physical_table_name}/{next(_staging_names)}-{id(batch)}.jsonl"
        staged.append((uri, table.id, 1, None))
    catalog.staging.register(staged)
    pending = {p.uri: p.id for p in catalog.staging.pending(1_000_000)}
    with (
        catalog.partitions.stream_commit() as tx,
        (
            tx.batch([pending[uri] for uri, *_ in staged], {(table.id, date, "")}, len(batches), 0)
            if batched
            else nullcontext()
        ),
    ):
        for (uri, *_), batch, object_id in zip(staged, batches, tx.allocate_ids(len(batches)), strict=True):
            data = pa.Table.from_pylist(batch, schema=schema).sort_by(definition.time_column)
            partition = tx.partition_for(table.id, date, definition.merge_interval, now)
            key = layout.small_object(date, object_id, partition.closed)
            size = 1000
            if write_files:
                with lake.open_output(key) as sink:
                    pq.write_table(
                        data if legacy else object_rows(data, object_schema(definition), date),
                        sink,
                        compression=definition.codec,
                    )
                size = lake.info(key).size
            times = data.column(definition.time_column)
            tx.add_small_object(
                object_id=object_id,
                staging_object_id=pending[uri],
                partition_id=partition.id,
                delayed=partition.closed,
                content_length=size,
                row_count=data.num_rows,
                min_event_time=pa.compute.min(times).as_py().replace(tzinfo=None),
                max_event_time=pa.compute.max(times).as_py().replace(tzinfo=None),
                upload_start_time=now,
            )
            tx.mark_processed(pending[uri], records_in=len(batch), bad_records=0, error_uri=None, now=now)
            ids.append(object_id)
        if before_commit is not None:
            tx.flush()
            before_commit()
    return ids


def merged_rows(deployment: Deployment, table: TableRecord, partition_id: int, date: dt.date) -> pa.Table:
    """Every row of the partition's merged objects, as the catalog's ranges name them."""
    layout = table.layout(deployment.instance_key)
    tables = [
        pq.read_table(
            deployment.lake.path(r.key(layout, date)),
            columns=table.definition.arrow_schema().names,
            filesystem=deployment.lake.filesystem,
        )
        for r in deployment.catalog.merge_queue.ranges(partition_id)
        if r.lower is not None
    ]
    return pa.concat_tables(tables) if tables else table.definition.arrow_schema().empty_table()


def small_rows(deployment: Deployment, table: TableRecord, partition_id: int, date: dt.date, up_to: int) -> pa.Table:
    layout = table.layout(deployment.instance_key)
    objects = [
        o for o in deployment.catalog.partitions.small_objects(table.id, up_to_id=up_to) if o.partition_date == date
    ]
    tables = [
        pq.read_table(
            deployment.lake.path(layout.small_object(date, o.id, o.delayed)),
            columns=table.definition.arrow_schema().names,
            filesystem=deployment.lake.filesystem,
        )
        for o in objects
    ]
    return pa.concat_tables(tables) if tables else table.definition.arrow_schema().empty_table()


def point_cli_at(deployment: Deployment, monkeypatch) -> None:  # pytest's monkeypatch
    """Make `silt` commands run in this process use the deployment's configuration."""
    config = deployment.config
    monkeypatch.setenv("SILTLAKE_CATALOG__URL", config.catalog.url)
    monkeypatch.setenv("SILTLAKE_STORAGE__ROOT", config.storage.root)
    monkeypatch.setenv("SILTLAKE_STORAGE__STAGING_ROOT", config.storage.staging_root)
    monkeypatch.setenv("SILTLAKE_INSTANCE_KEY", config.instance_key)
    monkeypatch.setenv("SILTLAKE_SPARK__MASTER", "local[2]")
    if config.storage.s3.endpoint_override:  # the S3 suite's local endpoint
        monkeypatch.setenv("SILTLAKE_STORAGE__S3__ENDPOINT_OVERRIDE", config.storage.s3.endpoint_override)
        monkeypatch.setenv("SILTLAKE_STORAGE__S3__SCHEME", config.storage.s3.scheme)


def silt_in_process(deployment: Deployment, monkeypatch):  # pytest's monkeypatch; a function
    """A `silt` that runs commands in this process against the deployment and checks their exit status."""
    from click.testing import CliRunner

    from siltlake.cli import main

    point_cli_at(deployment, monkeypatch)
    runner = CliRunner()

    def silt(*args: str, code: int = 0) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result.output

    return silt
