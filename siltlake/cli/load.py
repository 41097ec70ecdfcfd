"""`silt guess`, `silt load`, `silt cleanup`: bulk loads of existing files."""

from __future__ import annotations

import sys

import click

from siltlake.cli.context import deployment_of, friendly, needs_spark
from siltlake.cli.options import dry_run_option, json_option, resume_state_option
from siltlake.cli.output import Column, console, format_value, grid, out, report, shown, transfer_bar, write_json


@click.command("guess")
@click.argument("seed", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the config.")
@json_option
@friendly
def guess_command(seed: str, output: str, as_json: bool) -> None:
    """Read a sample of the seed's inputs and write a full load config to review."""
    import yaml

    from siltlake.load.config import parse_load_config, read_yaml
    from siltlake.load.guess import guess

    config = guess(read_yaml(seed))
    parse_load_config(config, f"guessed config for {seed}")  # what guess writes must load
    with open(output, "w") as handle:
        yaml.safe_dump(config, handle, sort_keys=False, allow_unicode=True)
    report(
        as_json,
        {"action": "guess", "output": output, "config": config},
        f"wrote {output}: review the parser columns and out.time_column before loading",
    )


@click.command("load")
@click.argument("config_file", metavar="CONFIG", type=click.Path(exists=True, dir_okay=False))
@resume_state_option()
@dry_run_option
@click.option("--no-commit", is_flag=True, help="Run every task and keep the resume state, but commit nothing.")
@click.option("--rows", default=10, show_default=True, help="Rows --dry-run prints per job.")
@json_option
@click.pass_context
@friendly
@needs_spark("silt load")
def load_command(
    context: click.Context,
    config_file: str,
    resume_state: str | None,
    dry_run: bool,
    no_commit: bool,
    rows: int,
    as_json: bool,
) -> None:
    """Bulk-load files into tables: one Spark stage, one commit.

    --dry-run prints the first rows of each job as they would be loaded and writes nothing. --json prints the
    load's report (with --dry-run: the rows, by job) as one JSON document."""
    from siltlake.cli.load_bar import LoadBar
    from siltlake.load import LoadFailed, load, load_config_file
    from siltlake.load.preview import preview

    config = load_config_file(config_file)
    deployment = deployment_of(context)
    if dry_run:
        previews = preview(deployment, config, rows)
        if as_json:
            write_json({"dry_run": True, "jobs": {name: table.to_pylist() for name, table in previews.items()}})
            return
        for name, table in previews.items():
            out.print(f"[bold]{name}[/] (first {table.num_rows} rows as they would be loaded):")
            out.print(
                grid(
                    [Column(column, show=format_value) for column in table.column_names],
                    [list(row.values()) for row in table.to_pylist()],
                )
            )
        return
    try:
        with transfer_bar() as bar:
            report = load(deployment, config, state_path=resume_state, commit=not no_commit, progress=LoadBar(bar))
    except LoadFailed as exc:
        console.print(f"[red]load failed[/]: {shown(exc)}", highlight=False)
        sys.exit(1)
    if as_json:
        from dataclasses import asdict

        write_json(asdict(report))
        return
    if report.already_committed:
        console.print(f"load {report.run_id} was already committed ({resume_state}); nothing to do", highlight=False)
    for job in report.jobs:
        console.print(shown(job.line()), highlight=False)
        for sample in job.bad_samples[:3]:
            console.print(f"  bad: {shown(sample)}", highlight=False)
        for path in job.error_files:
            console.print(f"  bad records kept in {shown(path)}", highlight=False)
    if not report.committed:
        console.print(
            f"not committed (--no-commit): run the same command without it to commit; the state is in "
            f"{report.state_path}",
            highlight=False,
        )


@click.command("cleanup")
@click.argument("config_file", metavar="CONFIG", type=click.Path(exists=True, dir_okay=False))
@resume_state_option(required=True)
@dry_run_option
@json_option
@click.pass_context
@friendly
def cleanup_command(context: click.Context, config_file: str, resume_state: str, dry_run: bool, as_json: bool) -> None:
    """Remove what an abandoned load wrote (temporary objects, error files) and its resume state."""
    from siltlake.load import cleanup, load_config_file

    removed = cleanup(deployment_of(context), load_config_file(config_file), resume_state, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    report(
        as_json,
        {"action": "cleanup", "dry_run": dry_run, "removed": [str(item) for item in removed]},
        "".join(f"{verb} {item}\n" for item in removed)
        + f"cleanup: {len(removed)} {verb}"
        + (" (dry run: nothing changed)" if dry_run else ""),
    )
