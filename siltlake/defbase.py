"""What every definition (tables, derived tables, configuration) shares: identifiers, durations, strict
pydantic models and their one-line errors, and reading definition files (TOML or YAML)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo

from siltlake.errors import DefinitionError

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}\Z")  # \Z: "$" would let a trailing newline through
_DURATION = re.compile(r"^(\d+)\s*(s|m|h|d)?$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def absent(value: Any) -> bool:
    return value is None


def check_identifier(value: str, what: str) -> str:
    """Return value if it is a safe lower-case identifier, else raise DefinitionError."""
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        raise DefinitionError(
            f"{what} {value!r} is not a valid identifier: use 1-63 characters of a-z, 0-9 and _, "
            "starting with a letter or _"
        )
    return value


def parse_duration(value: int | str, what: str = "duration") -> int:
    """Seconds from an integer or a string such as '12h', '30m', '0s', '45'."""
    if isinstance(value, bool):
        raise DefinitionError(f"{what} {value!r} is not a duration")
    if isinstance(value, int):
        if value < 0:
            raise DefinitionError(f"{what} must not be negative, got {value}")
        return value
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if match:
            return int(match.group(1)) * _DURATION_UNITS[match.group(2)]
    raise DefinitionError(f"{what} {value!r} is not a duration: use seconds or a number with s, m, h or d")


def format_duration(seconds: int) -> str:
    """A duration as a user writes it ('12h', '30m', '0s'): the largest unit parse_duration reads back exactly."""
    for unit in ("d", "h", "m"):
        if seconds and seconds % _DURATION_UNITS[unit] == 0:
            return f"{seconds // _DURATION_UNITS[unit]}{unit}"
    return f"{seconds}s"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Model = TypeVar("Model", bound=BaseModel)


def exact_bool(value: Any, info: ValidationInfo) -> bool:
    """A real boolean: pydantic would take "no", "off" or 0 for false."""
    if not isinstance(value, bool):
        raise DefinitionError(f"{info.field_name} {value!r} is not a boolean: write true or false")
    return value


def exact_int(value: Any, info: ValidationInfo) -> Any:
    """A real integer: pydantic would take true for 1 and "100" or 1.0 for a number."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise DefinitionError(f"{info.field_name} {value!r} is not a whole number")
    return value


def validated(model: type[Model], data: dict[str, Any], source: str) -> Model:
    """The model of `data`; a DefinitionError naming `source` and each problem's key path otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise DefinitionError(f"{source}: {describe_validation_error(exc)}") from None
    except DefinitionError as exc:
        raise DefinitionError(f"{source}: {exc}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, each naming the key path."""
    lines = []
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{path}: {message}")
    return "; ".join(lines)


def definition_file(path: Path, what: str) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DefinitionError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except Exception as exc:  # the parsers raise several unrelated exception types
        raise DefinitionError(f"{path} is not valid {path.suffix.lstrip('.') or 'toml'}: {exc}") from None
    if not isinstance(data, dict):
        raise DefinitionError(f"{path}: expected a mapping at the top level")
    return data
