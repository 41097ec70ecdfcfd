"""Load configuration (docs/design.md, "Load"): in, decoder, parser, filters, out, error; default + jobs."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from siltlake.defbase import check_identifier, describe_validation_error
from siltlake.errors import ConfigError

# Parser column types (Embulk's names) and the table column type each becomes with `out.create`.
PARSER_TYPES = {
    "long": "bigint",
    "double": "double",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "string": "string",
    "json": "json",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone name such as Asia/Tokyo or UTC") from None
    return value


class InConfig(_Strict):
    path: str = Field(description="a file, directory or glob; local path or any pyarrow file system URI")
    # Uncompressed files above this size become several tasks. JSON lines split by default; CSV only when
    # this is set, as a split can only start at a line start if no quoted field holds a newline.
    split_bytes: Annotated[int, Field(ge=1 << 20)] | None = None

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name a file, a directory or a glob")
        return value


class LineRule(_Strict):
    """Rewrite (`replace`) or drop (`skip: true`) the lines a regular expression matches."""

    regex: str
    replace: str | None = None
    skip: bool = False

    @field_validator("regex")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one(self) -> LineRule:
        if (self.replace is None) == (not self.skip):
            raise ValueError("give either replace: TEXT or skip: true")
        return self


class DecoderConfig(_Strict):
    compression: Literal["auto", "none", "gzip", "bzip2", "zstd"] = "auto"
    line_filter: tuple[LineRule, ...] = ()


class ParserColumn(_Strict):
    name: str
    type: Literal["long", "double", "boolean", "timestamp", "string", "json"]
    format: str | None = Field(default=None, description="strptime format of a timestamp column")
    zone: str | None = Field(default=None, description="zone of timestamps without an offset")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_identifier(value, "column name")

    @field_validator("zone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        return None if value is None else _zone(value)

    @model_validator(mode="after")
    def _timestamp_only(self) -> ParserColumn:
        if self.type != "timestamp" and (self.format is not None or self.zone is not None):
            raise ValueError("format and zone apply to timestamp columns only")
        return self


class ParserConfig(_Strict):
    type: Literal["csv", "jsonl", "msgpack"]
    delimiter: str = ","
    quote: str | None = '"'
    escape: str | None = None
    header: bool = True
    null_string: str | None = None
    skip_header_lines: Annotated[int, Field(ge=0)] = 0
    columns: tuple[ParserColumn, ...] = ()

    @field_validator("delimiter", "quote", "escape")
    @classmethod
    def _one_character(cls, value: str | None) -> str | None:
        if value is not None and len(value) != 1:
            raise ValueError(f"must be one character, got {value!r}")
        return value

    @model_validator(mode="after")
    def _columns(self) -> ParserConfig:
        names = [c.name for c in self.columns]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate column names: {', '.join(duplicates)}")
        if self.type == "csv" and not self.columns:
            raise ValueError("a csv parser needs columns (silt guess writes them)")
        if self.type != "csv":
            csv_only = {"delimiter", "quote", "escape", "header", "null_string", "skip_header_lines"}
            given = sorted(csv_only & self.model_fields_set)
            if given:
                raise ValueError(f"{', '.join(given)} apply to the csv parser only")
        return self


class RenameFilter(_Strict):
    type: Literal["rename"]
    columns: dict[str, str]

    @field_validator("columns")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for new in value.values():
            check_identifier(new, "new column name")
        return value


class DropFilter(_Strict):
    type: Literal["drop"]
    columns: tuple[str, ...]


class AddFilter(_Strict):
    type: Literal["add"]
    column: str
    value: str | int | float | bool | None
    column_type: Literal["long", "double", "boolean", "timestamp", "string", "json"] = "string"

    @field_validator("column")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_identifier(value, "column name")


class SqlFilter(_Strict):
    type: Literal["sql"]
    query: str = Field(description="Spark SQL over the view `in`")

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        from siltlake.read.sandbox import RefusedSQL, refuse_substitution

        if not value.strip():
            raise ValueError("the sql filter needs a query over the view `in`")
        try:
            refuse_substitution(value, "the sql filter")
        except RefusedSQL as exc:  # pydantic reports a ValueError with the key's path
            raise ValueError(str(exc)) from None
        return value


Filter = Annotated[RenameFilter | DropFilter | AddFilter | SqlFilter, Field(discriminator="type")]


class OutConfig(_Strict):
    table: str
    create: bool = False
    time_column: str | None = None
    timezone: str = "UTC"

    @field_validator("table")
    @classmethod
    def _table(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) != 2:
            raise ValueError(f"{value!r} is not schema.table")
        for part in parts:
            check_identifier(part, "name")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return _zone(value)

    @model_validator(mode="after")
    def _create(self) -> OutConfig:
        if self.create and self.time_column is None:
            raise ValueError("create: true needs time_column (the event-time column; silt guess picks one)")
        return self


class ErrorConfig(_Strict):
    type: Literal["skip", "abort", "file"] = "skip"
    path: str | None = Field(default=None, description="directory (or URI) for the bad records of type file")

    @model_validator(mode="after")
    def _path(self) -> ErrorConfig:
        if (self.type == "file") != (self.path is not None):
            raise ValueError("type file needs path; skip and abort take none")
        return self


class JobConfig(_Strict):
    input: InConfig = Field(alias="in")
    decoder: DecoderConfig = DecoderConfig()
    parser: ParserConfig
    filters: dict[str, Filter] = Field(default_factory=dict)
    out: OutConfig
    error: ErrorConfig = ErrorConfig()

    @model_validator(mode="after")
    def _sql_last(self) -> JobConfig:
        names = list(self.filters)
        for position, (name, item) in enumerate(self.filters.items()):
            if isinstance(item, SqlFilter) and position != len(names) - 1:
                raise ValueError(
                    f"filters.{name}: the sql filter must be the last filter (it runs in Spark, "
                    "after the per-record filters)"
                )
        return self

    @property
    def sql(self) -> str | None:
        last = list(self.filters.values())[-1] if self.filters else None
        return last.query if isinstance(last, SqlFilter) else None


class LoadConfig(_Strict):
    jobs: dict[str, JobConfig]

    @field_validator("jobs")
    @classmethod
    def _names(cls, value: dict[str, JobConfig]) -> dict[str, JobConfig]:
        if not value:
            raise ValueError("at least one job")
        for name in value:
            check_identifier(name, "job name")
        return value

    def digest(self) -> str:
        """Ties a resume state to this config: any change to what the jobs do changes it."""
        text = json.dumps(
            {name: job.model_dump(mode="json", by_alias=True) for name, job in self.jobs.items()}, sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()


def _merge(base: Any, override: Any) -> Any:
    """Deep-merge mappings; `filters` entries are replaced whole by name, and null removes one."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if key == "filters" and isinstance(value, dict) and isinstance(merged.get(key), dict):
            filters = merged[key]
            for name, item in value.items():
                if item is None:
                    filters.pop(name, None)
                else:
                    filters[name] = copy.deepcopy(item)
        elif key in merged:
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _job_mappings(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError("load config: the top level must be a mapping with in/parser/out, or default/jobs")
    if "jobs" in data or "default" in data:
        unknown = sorted(set(data) - {"jobs", "default"})
        if unknown:
            raise ConfigError(f"load config: {unknown[0]}: unknown key (next to jobs:, put it under default:)")
        default = data.get("default") or {}
        jobs = data.get("jobs")
        if not isinstance(default, dict):
            raise ConfigError("load config: default: must be a mapping")
        if not isinstance(jobs, dict) or not jobs:
            raise ConfigError("load config: jobs: must map job names to their settings")
        result = {}
        for name, job in jobs.items():
            if not isinstance(job, dict):
                raise ConfigError(f"load config: jobs.{name}: must be a mapping")
            result[str(name)] = _merge(default, job)
        return result
    return {"main": data}


def parse_load_config(data: Any, source: str = "load config") -> LoadConfig:
    """Validate a load config mapping; errors name the key path (jobs.<name>.parser.delimiter: ...)."""
    jobs = _job_mappings(data)
    try:
        return LoadConfig.model_validate({"jobs": jobs})
    except ValidationError as exc:
        message = describe_validation_error(exc)
        if list(jobs) == ["main"]:
            message = message.replace("jobs.main.", "")
        raise ConfigError(f"{source}: {message}") from None
    except ValueError as exc:  # DefinitionError from identifier checks raised outside a field
        raise ConfigError(f"{source}: {exc}") from None


def read_yaml(path: str | Path) -> Any:
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None


def load_config_file(path: str | Path) -> LoadConfig:
    return parse_load_config(read_yaml(path), str(path))
