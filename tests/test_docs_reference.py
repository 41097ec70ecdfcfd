"""docs/operations.md's configuration and command references name exactly what the code has.

The configuration models are walked from the type `load_config` returns and the commands from the `silt` group
through Click's public API only, so moving a model between modules or loading subcommands lazily changes nothing
here; a key, command or option added to the code without a line in the reference fails, and so does a line for
one the code no longer has.
"""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path
from typing import Any

import click
import pytest
from pydantic import BaseModel, ValidationError

from siltlake.cli import main as silt_group
from siltlake.config import load_config

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = ROOT / "docs" / "operations.md"
CONFIG_SECTION = "## Configuration reference"
COMMAND_SECTION = "## Command reference"
EVERY_COMMAND = "### Every command and its options"
AT_A_GLANCE = "### Commands at a glance"
ROOT_TYPE = typing.get_type_hints(load_config)["return"]


def _section(text: str, heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    # A TOML comment in a code block is no heading: blank the blocks out (same length) before looking.
    prose = re.sub(r"```.*?```", lambda block: " " * len(block.group()), text, flags=re.S)
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", prose[start + len(heading) :], re.M)]
    return text[start : start + len(heading) + ends[0]] if ends else text[start:]


# --- configuration -------------------------------------------------------------------------------------------


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _config_keys(model: type[BaseModel], table: str = "") -> dict[str, tuple[str, type[BaseModel]]]:
    """Every key path of the configuration, mapped to (its table, the model that holds it)."""
    keys: dict[str, tuple[str, type[BaseModel]]] = {}
    for name, field in model.model_fields.items():
        if field.exclude:  # not a setting (e.g. where the configuration came from)
            continue
        path = f"{table}.{name}" if table else name
        sub_model = _model_of(field.annotation)
        if sub_model is not None:
            keys.update(_config_keys(sub_model, path))
        else:
            keys[path] = (table, model)
    return keys


COMMENTED_KEY = re.compile(r"^#\s*([a-z_][a-z0-9_]*\s*=\s*.+)$")
TABLE_HEADER = re.compile(r"^\[([a-z0-9_.]+)\]")


class DocumentedKey(typing.NamedTuple):
    value: Any
    commented: bool  # `# key = example`: the key is unset by default
    says_unset: bool  # its line, or its table's header line, says what "unset" means
    line: str


def _documented_keys() -> dict[str, DocumentedKey]:
    """The keys of the reference's TOML block, by path."""
    section = _section(OPERATIONS.read_text(encoding="utf-8"), CONFIG_SECTION)
    match = re.search(r"```toml\n(.*?)```", section, re.S)
    assert match, f"{OPERATIONS.name}: {CONFIG_SECTION!r} has no ```toml block"
    block = match.group(1)
    set_values = tomllib.loads(block)  # every uncommented line, under its table
    documented: dict[str, DocumentedKey] = {}
    table, header_says_unset, previous = "", False, ""
    for line in block.splitlines():
        if re.match(r"^\s+#", line) and previous:  # a key's comment continued on the next line
            if "unset" in line:
                documented[previous] = documented[previous]._replace(says_unset=True)
            continue
        previous = ""
        if header := TABLE_HEADER.match(line):
            table, header_says_unset = header.group(1), "unset" in line
            continue
        commented = COMMENTED_KEY.match(line)
        if commented:
            try:
                parsed = tomllib.loads(commented.group(1))
            except tomllib.TOMLDecodeError:
                continue  # prose in a comment, not an example key
            ((name, value),) = parsed.items()
        elif re.match(r"^[a-z_][a-z0-9_]*\s*=", line):
            name = line.split("=", 1)[0].strip()
            value = set_values
            for part in [*table.split("."), name] if table else [name]:
                value = value[part]
        else:
            continue
        path = f"{table}.{name}" if table else name
        previous = path
        documented[path] = DocumentedKey(value, bool(commented), "unset" in line or header_says_unset, line)
    return documented


def _where(table: str) -> str:
    return f"under [{table}]" if table else "at the top, before the first table header"


def test_configuration_reference_lists_every_key_with_its_default() -> None:
    documented = _documented_keys()
    keys = _config_keys(ROOT_TYPE)
    defaults = ROOT_TYPE()
    problems: list[str] = []
    for path, (table, model) in keys.items():
        name = path.rsplit(".", 1)[-1]
        entry = documented.get(path)
        if entry is None:
            field = model.model_fields[name]
            hint = f" ({field.description})" if field.description else ""
            problems.append(f"{path} is missing: add `{name} = ...` {_where(table)}{hint}")
            continue
        default = defaults
        for part in path.split("."):
            default = getattr(default, part)
        if entry.commented:
            if default is not None:
                problems.append(f"{path} defaults to {default!r}: write it uncommented as its default {_where(table)}")
            elif not entry.says_unset:
                problems.append(f"{path} is unset by default: its line {_where(table)} should say `# unset: ...`")
            continue
        try:
            meant = getattr(model.model_validate({name: entry.value}), name)
        except Exception as exc:  # the documented value is not even valid
            problems.append(f"{path} = {entry.value!r} {_where(table)} is refused by the model: {exc}")
            continue
        if meant != default:
            problems.append(
                f"{path} = {entry.value!r} {_where(table)} means {meant!r}, but the default is {default!r}: "
                "document the default (or comment the line out as an example if it is unset)"
            )
    for path, entry in documented.items():
        if path not in keys:
            problems.append(f"{path} (line {entry.line.strip()!r}) is no configuration key: remove it or fix its name")
    assert not problems, f"{OPERATIONS.name}, {CONFIG_SECTION!r} TOML block:\n" + "\n".join(problems)


# --- commands ------------------------------------------------------------------------------------------------


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    """Every command path under `group` (groups included), through Click's public API only."""
    context = click.Context(group, info_name="silt")
    found: dict[tuple[str, ...], click.Command] = {}
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if command is None or command.hidden:
            continue
        found[(*path, name)] = command
        if isinstance(command, click.Group):
            found.update(_commands(command, (*path, name)))
    return found


COMMAND_TREE = _commands(silt_group)


def _long_flags(command: click.Command) -> list[str]:
    flags = []
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            flags += [opt for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")]
    return [flag for flag in flags if flag != "--help"]


def _bullets(section: str) -> list[tuple[str, str]]:
    """The per-command bullets: (the bold `silt ...` synopsis, the whole bullet)."""
    every = _section(section, EVERY_COMMAND)
    items = re.split(r"^- ", every, flags=re.M)[1:]
    return [(m.group(1), item) for item in items if (m := re.match(r"\*\*`(silt [^`]*)`\*\*", item))]


def _names_command(synopsis: str, path: tuple[str, ...]) -> bool:
    return synopsis == " ".join(("silt", *path)) or synopsis.startswith(" ".join(("silt", *path)) + " ")


def _leaves() -> dict[tuple[str, ...], click.Command]:
    return {path: command for path, command in COMMAND_TREE.items() if not isinstance(command, click.Group)}


def test_command_reference_lists_every_command_and_option() -> None:
    section = _section(OPERATIONS.read_text(encoding="utf-8"), COMMAND_SECTION)
    glance = _section(section, AT_A_GLANCE)
    bullets = _bullets(section)
    problems: list[str] = []
    for flag in _long_flags(silt_group):
        if flag not in section:
            problems.append(f"`silt {flag}` (an option of every command) is missing: add it to the section's intro")
    for path, command in COMMAND_TREE.items():
        if isinstance(command, click.Group):
            for flag in _long_flags(command):
                if flag not in section:
                    problems.append(f"`silt {' '.join(path)} {flag}` is missing from {COMMAND_SECTION!r}")
    for path, command in _leaves().items():
        name = " ".join(("silt", *path))
        if not re.search(rf"^\| `{re.escape(name)}(?: [^`]*)?` \|", glance, re.M):
            problems.append(f"`{name}` is missing from {AT_A_GLANCE!r}: add a row `| `{name} ...` | what it does |`")
        own = [text for synopsis, text in bullets if _names_command(synopsis, path)]
        if not own:
            problems.append(f"`{name}` has no bullet in {EVERY_COMMAND!r}: add `- **`{name} [OPTIONS]`**: ...`")
            continue
        for flag in _long_flags(command):
            if not any(re.search(rf"{re.escape(flag)}(?![\w-])", text) for text in own):
                help_text = next(p.help for p in command.params if flag in (*p.opts, *p.secondary_opts))
                problems.append(f"`{name} {flag}` is missing from its bullet in {EVERY_COMMAND!r} ({help_text})")
    assert not problems, f"{OPERATIONS.name}, {COMMAND_SECTION!r}:\n" + "\n".join(problems)


SILT_COMMAND = re.compile(r"(?<![\w/.-])silt((?: [a-z][a-z-]*)+)")


def _unknown_commands(text: str) -> list[str]:
    """`silt WORD...` in code spans and code blocks whose words name no command (WORD in lower case only)."""
    code = re.findall(r"```.*?```", text, re.S) + re.findall(r"`[^`\n]+`", re.sub(r"```.*?```", "", text, flags=re.S))
    unknown = []
    for snippet in code:
        for match in SILT_COMMAND.finditer(snippet):
            words = match.group(1).split()
            path: tuple[str, ...] = ()
            for word in words:
                command = COMMAND_TREE.get(path) if path else silt_group
                if not isinstance(command, click.Group):
                    break  # an argument of a command, not a subcommand
                if (*path, word) not in COMMAND_TREE:
                    unknown.append(" ".join(("silt", *path, word)))
                    break
                path = (*path, word)
    return unknown


def test_command_reference_names_no_command_that_does_not_exist() -> None:
    section = _section(OPERATIONS.read_text(encoding="utf-8"), COMMAND_SECTION)
    unknown = sorted(set(_unknown_commands(section)))
    assert not unknown, f"{OPERATIONS.name}, {COMMAND_SECTION!r} names commands `silt` does not have: {unknown}"
    stale = [synopsis for synopsis, _ in _bullets(section) if not any(_names_command(synopsis, p) for p in _leaves())]
    assert not stale, f"{OPERATIONS.name}, {EVERY_COMMAND!r}: bullets for no command: {stale}"


@pytest.mark.parametrize(
    "document", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda path: path.name
)
def test_docs_name_only_commands_that_exist(document: Path) -> None:
    unknown = sorted(set(_unknown_commands(document.read_text(encoding="utf-8"))))
    assert not unknown, f"{document.relative_to(ROOT)} names commands `silt` does not have: {unknown}"


def _unknown_config_keys(text: str) -> list[str]:
    """Keys the configuration forbids, in the TOML blocks of `text` that set any of its tables."""
    unknown = []
    for block in re.findall(r"```toml\n(.*?)```", text, re.S):
        try:
            data = tomllib.loads(block)
        except tomllib.TOMLDecodeError:
            continue  # a fragment, not a whole file
        if not set(data) & set(ROOT_TYPE.model_fields):
            continue  # a table definition or another tool's file
        try:
            ROOT_TYPE.model_validate(data)
        except ValidationError as exc:
            # Only the key names: a snippet may leave out a setting a value of it needs elsewhere.
            unknown += [".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden"]
    return unknown


@pytest.mark.parametrize(
    "document", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda path: path.name
)
def test_docs_configuration_snippets_name_only_keys_that_exist(document: Path) -> None:
    unknown = _unknown_config_keys(document.read_text(encoding="utf-8"))
    assert not unknown, f"{document.relative_to(ROOT)}: a configuration snippet sets keys that do not exist: {unknown}"
