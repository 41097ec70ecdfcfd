"""`silt load --dry-run`: the first rows of each job's first input, as they would be loaded."""

from __future__ import annotations

import re

import pyarrow as pa

from siltlake.deployment import Deployment
from siltlake.errors import ConfigError, NotFoundError
from siltlake.load.config import LoadConfig
from siltlake.load.inputs import list_inputs
from siltlake.load.task import apply_filters, open_source, output_columns, records, row_table
from siltlake.records.coerce import RecordConverter
from siltlake.tabledef import Column


def preview(deployment: Deployment, config: LoadConfig, limit: int) -> dict[str, pa.Table]:
    """Parse locally (no Spark) up to `limit` good rows per job; the sql filter runs on them in Spark."""
    shown = {}
    for name, job in config.jobs.items():
        inputs = list_inputs(job.input.path)
        if not inputs:
            raise ConfigError(f"jobs.{name}.in.path: no files match {job.input.path}")
        produced = output_columns(job)
        try:
            definition = deployment.catalog.tables.get(job.out.table).definition
        except NotFoundError:
            definition = None
        if job.sql is None and definition is not None:
            columns = [Column(name=c.name, type=c.type, nullable=c.nullable) for c in definition.columns]
            time_column = definition.time_column
        elif produced is not None:
            columns = [Column(name=n, type=t) for n, t in produced]
            time_column = ""
        else:
            raise ConfigError(f"jobs.{name}.parser.columns: name the columns to preview a new table")
        converter = RecordConverter(row_table(columns, time_column, job.out.timezone, "zstd"), job.parser.type)
        timestamps = [c for c in job.parser.columns if c.type == "timestamp"]
        with open_source(inputs[0][0], job.decoder.compression) as source:
            try:
                for _, record, _, reason in records(source, job):
                    if record is None or reason is not None:
                        continue
                    try:
                        converter.add(apply_filters(record, job, timestamps))
                    except ValueError:
                        continue
                    if converter.row_count >= limit:
                        break
            except (ValueError, OSError) as exc:  # the file as a whole (its encoding, its compressed stream)
                if isinstance(exc, OSError) and exc.filename:
                    raise  # names its path already
                raise ConfigError(f"{inputs[0][0]}: cannot be read as jobs.{name} says: {exc}") from None
        rows = converter.take_table()
        sql = job.sql  # a property: read once
        if sql is not None:
            query = re.sub(r"(?i)\b(from|join)\s+`?in`?\b", r"\1 silt_load_preview", sql)
            spark = deployment.spark()
            spark.createDataFrame(rows).createOrReplaceTempView("silt_load_preview")
            rows = spark.sql(query).limit(limit).toArrow()
        shown[name] = rows
    return shown
