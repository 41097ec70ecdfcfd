"""A load run's commit: every job's output registered, given ids and moved to its keys in one transaction."""

from __future__ import annotations

from siltlake.catalog import TableRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import CatalogError
from siltlake.load.config import LoadConfig


def _units(name: str, state: dict) -> list[tuple[str, dict, int, int]]:
    """(staging URI, report, records in, bad records) of each committed unit of a job: a task, or a
    partition of the sql stage."""
    job_state, run_id = state["jobs"][name], state["run_id"]
    if job_state.get("sql_reports") is not None:
        return [
            (f"load:{run_id}/{name}/sql-{r['index']:05d}", r, r["rows_in"], r["bad_records"])
            for r in job_state["sql_reports"]
        ]
    return [
        (f"load:{run_id}/{name}/{r['index']:05d}", r, r["records_in"], r["bad_records"]) for r in job_state["reports"]
    ]


def commit_run(deployment: Deployment, config: LoadConfig, state: dict, tables: dict[str, TableRecord | None]) -> None:
    """One transaction for every job: ids under the ordering lock, objects moved, rows inserted.

    Each task's output is registered as a processed staging row `load:<run>/<job>/<task>`; a row that
    exists already means this state was committed before (a crash after the commit), so it adds nothing."""
    from siltlake.stream.commit import _update_conflict, commit_parts

    lake = deployment.lake
    run_id = state["run_id"]
    units = {name: _units(name, state) for name in config.jobs}
    committed = deployment.catalog.staging.known_uris([uri for job in units.values() for uri, *_ in job])
    # Checked before the transaction: a move cannot be rolled back with it.
    targets: dict[str, TableRecord] = {}
    for name, table_or_none in tables.items():
        if table_or_none is None:  # a sql filter's table, made by an earlier run of this state, dropped since
            raise CatalogError(
                f"load {run_id}: the table {config.jobs[name].out.table} of job {name} does not exist "
                "any more; nothing was committed: `silt cleanup` this load and run it again"
            )
        targets[name] = table_or_none
    for name, job_units in units.items():
        for uri, report, _, _ in job_units:
            if uri in committed:
                continue
            for part in report["parts"]:
                if not lake.exists(part["tmp_key"]):
                    raise CatalogError(
                        f"load {run_id}: the output {lake.uri(part['tmp_key'])} of job {name} is gone "
                        "(reaped after reap.grace, or deleted); nothing was committed: `silt cleanup` "
                        "this load and run it again"
                    )
    with deployment.catalog.partitions.stream_commit() as tx:
        now = utcnow()
        for name, job_units in units.items():
            table = targets[name]
            layout = table.layout(deployment.instance_key)
            for uri, report, records_in, bad in job_units:
                parts = report["parts"]
                staging_id = tx.register_loaded(
                    uri,
                    table_id=table.id,
                    size=sum(p["bytes"] for p in parts),
                    records_in=records_in,
                    bad_records=bad,
                    error_uri=None,
                    now=now,
                )
                if staging_id is None:
                    continue
                conflict = _update_conflict(tx, table, parts, state["version_mark"])
                if conflict is not None:
                    raise CatalogError(
                        f"load {run_id}: {conflict.split(';')[0]}; nothing was committed: "
                        "`silt cleanup` this load and run it again"
                    )
                commit_parts(tx, lake, table, layout, staging_id, parts, report["upload_start_time"], now)
