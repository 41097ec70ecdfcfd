"""Table.overwrite: the rows of some partitions replaced by new rows, as one table version (update versions of each)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from siltlake.deployment import Deployment
from siltlake.errors import NotFoundError, SiltError
from siltlake.partspec import row_values
from siltlake.records.coerce import partition_dates
from siltlake.write.append import _tables
from siltlake.write.requests import UpdatesReport, applied_before, commit_updates, write_request
from siltlake.write.update import PreparedUpdates, partitions_of, prepare_overwrite, present_dates, updatable_table
from siltlake.write.upsert import shaped_rows


def overwrite(
    deployment: Deployment,
    name: str,
    rows: Any,
    dates: Any = None,
    *,
    request_id: str | None = None,
    now: dt.datetime | None = None,
) -> UpdatesReport:
    """Replace every row of the partitions `dates` (dates, or None: those the rows fall on) with `rows` (anything
    Arrow, as append takes; the table's columns by name, nullable ones may be missing) as one table version: all of
    them or none, once per `request_id`. A partition given no row is emptied. Rows on a date not given, and dates
    the table has no partition for (append creates partitions), are refused before anything is written."""
    from siltlake.read.version_files import parse_dates

    record = updatable_table(deployment, name)
    name = record.qualified_name
    request = write_request(record, request_id, "overwrite")
    applied = applied_before(deployment, request)
    if applied is not None:
        return UpdatesReport(name, (), request_id, applied)
    given = [shaped_rows(record, table, None, "overwrite") for table in _tables(rows, name)]
    shaped = pa.concat_tables(given) if given else record.definition.arrow_schema().empty_table()
    on = partition_dates(shaped.column(record.definition.time_column), record.definition.timezone)
    found = set(pc.unique(on).to_pylist())
    wanted = sorted(found) if dates is None else sorted(parse_dates(dates) or ())
    if not wanted:
        raise SiltError(f"cannot overwrite {name}: no rows and no dates: give the partitions, dates=")
    outside = sorted(found - set(wanted))
    if outside:
        raise SiltError(
            f"cannot overwrite {name}: {len(outside)} dates of the rows are not among the dates "
            f"overwritten: {', '.join(d.isoformat() for d in outside)}; nothing was changed"
        )
    try:
        wanted = present_dates(deployment, record, wanted, "overwritten")
    except NotFoundError as exc:
        raise NotFoundError(f"{exc} (overwrite replaces partitions the table has; append adds new ones)") from None
    fields = record.definition.partition_fields
    places = pc.cast(on, pa.string())
    if fields:  # a partition below dt is given the rows of its values; one with none is emptied
        places = pc.binary_join_element_wise(places, row_values(fields, shaped), "/")
    partitions = partitions_of(deployment, record, wanted)
    named = {"/".join(filter(None, (date.isoformat(), values))) for date, values in partitions}
    unknown = sorted(set(pc.unique(places).to_pylist()) - named)
    if unknown:
        raise NotFoundError(
            f"cannot overwrite {name}: rows fall in partitions it does not have ({', '.join(unknown[:5])}); append "
            "adds new ones; nothing was changed"
        )
    prepared = PreparedUpdates([], now)
    try:
        for date, values in partitions:
            place = "/".join(filter(None, (date.isoformat(), values)))
            part = shaped.filter(pc.equal(places, pa.scalar(place, pa.string())))
            prepared.updates.append(prepare_overwrite(deployment, name, date, part, now, values))
    except BaseException:
        prepared.discard()
        raise
    return commit_updates(
        deployment, record, prepared, request, f"overwrote {len(wanted)} partitions with {shaped.num_rows} rows"
    )
