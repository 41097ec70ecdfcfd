"""The `silt` group imports a command's module only when that command is used: the registry's short help (what
`silt --help` lists) matches each command's own, and importing the CLI loads none of the engines."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from siltlake.cli import main
from siltlake.cli.lazy import REGISTRY, SHORT_HELP_LIMIT, load_command

ENGINES = ("pyspark", "duckdb", "pyiceberg", "sqlglot")


def modules_after(code: str) -> set[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_loads_no_engine() -> None:
    loaded = {name.split(".")[0] for name in modules_after("import siltlake.cli")}
    assert not loaded & set(ENGINES), sorted(loaded & set(ENGINES))


def test_importing_the_cli_imports_no_command_module() -> None:
    loaded = modules_after("import siltlake.cli")
    commands = {f"siltlake.cli.{entry.module}" for entry in REGISTRY.values()}
    assert not loaded & commands, sorted(loaded & commands)


def test_the_registry_names_each_command_with_its_own_short_help() -> None:
    for name, entry in REGISTRY.items():
        command = load_command(name)
        assert command.name == name
        assert entry.short_help == command.get_short_help_str(SHORT_HELP_LIMIT), (
            f"update the short help of {name!r} in siltlake/cli/lazy.py's REGISTRY"
        )


def test_every_command_module_command_is_in_the_registry() -> None:
    context = click.Context(main, info_name="silt")
    assert main.list_commands(context) == sorted(REGISTRY)
    assert main.get_command(context, "no-such-command") is None


def test_a_command_resolves_by_importing_only_its_module() -> None:
    loaded = modules_after(
        "from siltlake.cli import main\nimport click\nmain.get_command(click.Context(main), 'status')"
    )
    assert "siltlake.cli.status" in loaded
    assert "siltlake.cli.sql" not in loaded and "siltlake.cli.run" not in loaded


def test_each_progress_bar_imports_only_its_own_runner() -> None:
    # `silt merge --once` draws MergeBar: the load's runner (pandas, the input readers) and the stream's stay out.
    loaded = modules_after("import siltlake.cli.merge_bar")
    assert "siltlake.merge.runner" in loaded
    assert not {"siltlake.load", "siltlake.load.runner", "siltlake.stream.runner"} & loaded
    loaded = modules_after("import siltlake.cli.stream_bar")
    assert "siltlake.stream.runner" in loaded and "siltlake.load" not in loaded


def test_the_sql_command_imports_no_engine_until_it_runs() -> None:
    loaded = modules_after("from siltlake.cli import main\nimport click\nmain.get_command(click.Context(main), 'sql')")
    assert "siltlake.cli.sql" in loaded
    top = {name.split(".")[0] for name in loaded}
    assert not top & {*ENGINES, "sqlalchemy", "pydantic"}, sorted(top & {*ENGINES, "sqlalchemy", "pydantic"})
    assert "siltlake.lake" not in loaded and "siltlake.read.query" not in loaded


def test_the_sql_import_block_turns_the_gc_off_once() -> None:
    # cli.context.importing: the GC is off while the command's libraries load, then on, with what they made frozen.
    loaded = modules_after(
        "import gc\nfrom siltlake.cli.context import importing\n"
        "with importing():\n    assert not gc.isenabled()\n    with importing():\n        assert not gc.isenabled()\n"
        "    import siltlake.deployment\n    assert not gc.isenabled()\n"
        "assert gc.isenabled() and gc.get_freeze_count() > 0\n"
        "with importing():\n    assert gc.isenabled()  # once per process: the deployment's modules are in"
    )
    assert "siltlake.deployment" in loaded
