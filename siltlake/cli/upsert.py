"""`silt upsert`: replace rows of a keyed table by key, one `merge` version per partition date."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from siltlake.cli.context import deployment_of, friendly, needs_spark
from siltlake.cli.options import parse_now
from siltlake.cli.output import Column, activity, format_count, grid, out, write_json
from siltlake.cli.writes import write_options

if TYPE_CHECKING:
    import pyarrow as pa

    from siltlake.tabledef import TableDef

OUTCOME_COLUMNS = (
    Column("dt"),
    Column("rows upserted", show=format_count, right=True),
    Column("deleted keys", show=format_count, right=True),
    Column("version", right=True),
)


def read_rows(path: Path, definition: TableDef) -> pa.Table:
    """A file's rows: Parquet, JSON lines (.jsonl, .ndjson, .json) or CSV (.csv), read with pyarrow; JSON
    and CSV values are read as the table's column types (event times: ISO 8601, with an offset or in UTC)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    from siltlake.errors import SiltError
    from siltlake.records.nesting import MAX_FAST_DEPTH, nests_within

    suffix = path.suffix.lower()
    if not path.is_file():
        raise SiltError(f"{path} is not a file")
    types = {f.name: f.type for f in definition.arrow_schema()}
    try:
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix in (".jsonl", ".ndjson", ".json"):
            data = path.read_bytes()
            if not nests_within(data):  # pyarrow's inference would overflow its stack (records.nesting)
                raise SiltError(f"cannot read {path}: a line nests deeper than {MAX_FAST_DEPTH} levels")
            present = set(pjson.read_json(pa.BufferReader(data)).column_names)  # the explicit schema names these
            schema = pa.schema([(name, kind) for name, kind in types.items() if name in present])
            return pjson.read_json(pa.BufferReader(data), parse_options=pjson.ParseOptions(explicit_schema=schema))
        if suffix == ".csv":
            # Times stay as read (text or naive UTC) and are cast with the rest: CSV's own parser wants one form.
            return pcsv.read_csv(
                path,
                convert_options=pcsv.ConvertOptions(
                    column_types={name: kind for name, kind in types.items() if not pa.types.is_timestamp(kind)}
                ),
            )
    except (pa.ArrowInvalid, OSError) as exc:
        raise SiltError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    raise SiltError(f"cannot read {path}: give a .parquet, .jsonl (.ndjson, .json) or .csv file")


@click.command("upsert")
@click.argument("name")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--sql",
    "query",
    default=None,
    help='Spark SQL whose result is the rows to upsert, e.g. "SELECT * FROM staging.users WHERE changed".',
)
@click.option(
    "--delete-column",
    default=None,
    help="A boolean column of the rows: where it is true, the row's key is deleted instead of replaced.",
)
@write_options
@click.pass_context
@friendly
@needs_spark("silt upsert")
def upsert_command(
    context: click.Context,
    name: str,
    file: Path | None,
    query: str | None,
    delete_column: str | None,
    now_text: str | None,
    request_id: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Replace the rows of NAME (a table with a primary_key) that have the same date and key as the rows of
    FILE (or of --sql's result); one `merge` version per partition date, stamped with --now's time. With
    --dry-run the rows are checked and counted per date, and nothing is written."""
    from siltlake.lake import Lake

    if (file is None) == (query is None):
        raise click.UsageError("give the rows: a FILE (.parquet, .jsonl, .csv) or --sql QUERY")
    now = parse_now(now_text)
    table = Lake(deployment_of(context)).table(name)  # an unknown table is refused before any file is read
    with activity(f"upserting into {name}…") as step:
        rows = None
        if query is not None:
            step(f"running the query and upserting its rows into {name}…")
        else:
            assert file is not None
            rows = read_rows(file, table.record.definition)
            step(f"upserting {rows.num_rows:,} rows into {name}…")
        report = table.upsert(rows, delete_column, now, request_id, query=query, dry_run=dry_run)
    if as_json:
        write_json(
            {
                "table": table.name,
                "dry_run": dry_run,
                "request_id": request_id,
                "applied_before": report.message,
                "table_version": report.table_version,
                "partitions": [
                    {
                        "dt": p.partition_date.isoformat(),
                        "rows": p.rows,
                        "deleted_keys": p.deleted_keys,
                        "version": p.version.version if p.version is not None else None,
                        "delayed": p.delayed,
                    }
                    for p in report.partitions
                ],
            }
        )
    elif report.applied_before is not None:
        out.print(report.message, highlight=False, soft_wrap=True)
    else:
        out.print(
            grid(
                OUTCOME_COLUMNS,
                [
                    (
                        p.partition_date.isoformat(),
                        p.rows - p.deleted_keys,
                        p.deleted_keys,
                        "dry run" if p.version is None else str(p.version.version),
                    )
                    for p in report.partitions
                ],
            )
        )
