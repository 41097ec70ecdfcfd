"""Configuration: defaults, then `siltlake.toml`, then SILTLAKE_* environment variables."""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from siltlake.configbase import AtLeastOne, Section, check_heartbeat
from siltlake.defbase import describe_validation_error, parse_duration
from siltlake.errors import DEBUG_VARIABLE, ConfigError
from siltlake.glueconfig import GlueTargetConfig
from siltlake.streamconfig import StreamConfig

CONFIG_FILE = "siltlake.toml"
ENV_PREFIX = "SILTLAKE_"
INSTANCE_KEY = re.compile(r"^[a-z0-9]{4,32}\Z")  # \Z: "$" would let a trailing newline through


class CatalogConfig(Section):
    url: str = "sqlite:///.siltlake/catalog.db"

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("sqlite:", "postgresql:", "postgresql+psycopg:", "postgres:")):
            raise ValueError(f"catalog url {value!r} must start with sqlite:/// or postgresql://")
        return value


class S3Config(Section):
    """How s3:// roots are reached (docs/operations.md, "Storage on S3"). Credentials never live here: pyarrow takes
    them from the usual AWS settings (environment, ~/.aws, instance or pod roles)."""

    endpoint_override: str | None = Field(
        default=None,
        description="host:port of an S3-compatible endpoint "
        "(MinIO, a local test server); unset: AWS, or AWS_ENDPOINT_URL_S3",
    )
    scheme: str = Field(default="https", pattern="^https?$")
    region: str | None = Field(
        default=None,
        description="unset: the bucket's own region, asked once (AWS), "
        "or AWS_DEFAULT_REGION / us-east-1 with an endpoint_override",
    )
    max_attempts: AtLeastOne = Field(
        default=10,
        description="attempts of one request (AWS standard retry "
        "strategy: exponential backoff with jitter on 5xx, throttling and "
        "network errors)",
    )
    request_timeout: float | None = Field(default=None, gt=0, description="seconds; unset: the SDK's")
    connect_timeout: float | None = Field(default=None, gt=0, description="seconds; unset: the SDK's")


class StorageConfig(Section):
    root: str = ".siltlake/lake"
    staging_root: str = ".siltlake/staging"
    s3: S3Config = Field(default_factory=S3Config)


class SparkConfig(Section):
    master: str = "local[*]"
    app_name: str = "siltlake"
    conf: dict[str, str] = Field(default_factory=dict)
    connect: str | None = Field(
        default=None,
        description="host:port of the Spark Connect server `silt run` "
        "holds in its session, which `silt sql --engine spark` and notebooks use while it "
        "runs; unset: none. Loopback only unless connect_remote (Spark Connect runs any "
        "code a client sends, as the server's user)",
    )
    connect_remote: bool = Field(default=False, description="let spark.connect bind an address other than loopback")
    connect_token_file: str = Field(
        default=".siltlake/spark-connect.token",
        description="where `silt run` writes "
        "the token its Spark Connect server requires (mode 0600) and where siltlake's "
        "clients read it; $SPARK_CONNECT_AUTHENTICATE_TOKEN, when set, is the token",
    )

    @field_validator("connect")
    @classmethod
    def _connect(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        host, _, port = value.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{value!r} is not host:port (e.g. 127.0.0.1:15002)")
        return value.strip()

    @model_validator(mode="after")
    def _loopback_unless_remote(self) -> SparkConfig:
        if self.connect and not self.connect_remote and not is_loopback(self.connect_address[0]):
            raise ValueError(
                f"spark.connect {self.connect!r} is not a loopback address: anyone who reaches it runs "
                "code as the server's user; set spark.connect_remote = true to bind it anyway "
                '(docs/operations.md, "A warm Spark session")'
            )
        return self

    @property
    def connect_address(self) -> tuple[str, int]:
        """spark.connect as (host, port); the host without the brackets of an IPv6 address."""
        assert self.connect is not None
        host, _, port = self.connect.rpartition(":")
        return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether the address reaches this host only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MergeConfig(Section):
    slots: AtLeastOne = Field(default=32, description="jobs one worker runs at once (each one Spark task)")
    per_table_limit: AtLeastOne = Field(default=16, description="running jobs per table across all workers")
    slots_per_schema: int = Field(
        default=0, ge=0, description="running jobs per schema across all workers; 0: no limit beyond the per-table one"
    )
    fair_shares: tuple[Literal["schema", "table"], ...] = Field(
        default=("schema", "table"),
        description="the levels a claim shares its slots across, round robin, the "
        "outer first: schema then table; [] takes the oldest due jobs",
    )
    poll_interval: int = 10
    job_timeout: AtLeastOne = Field(default=600, description="seconds without a heartbeat before a job is taken over")
    heartbeat_interval: AtLeastOne = 30
    max_attempts: AtLeastOne = Field(default=5, description="failed attempts before a job parks as failed")
    retry_backoff: int = Field(default=30, description="seconds before the first retry; doubles per attempt")
    in_driver_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="a batch of jobs whose small objects total at most this many bytes "
        "runs in the worker's own process, without a Spark stage; 0: never",
    )

    @field_validator("poll_interval", "job_timeout", "heartbeat_interval", "retry_backoff", mode="before")
    @classmethod
    def _durations(cls, value: Any, info: ValidationInfo) -> int:
        return parse_duration(value, f"merge.{info.field_name}")

    @field_validator("fair_shares")
    @classmethod
    def _levels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if list(value) not in ([], ["schema"], ["table"], ["schema", "table"]):
            raise ValueError(
                f'{list(value)}: name each level once, the outer first: ["schema", "table"], '
                '["schema"], ["table"] or []'
            )
        return value

    @model_validator(mode="after")
    def _heartbeat_within_timeout(self) -> MergeConfig:
        check_heartbeat("merge", self.heartbeat_interval, "job_timeout", self.job_timeout, "live jobs get taken over")
        return self


def check_name_prefix(value: str) -> str:
    """A prefix of external database or namespace names: empty, or a lower-case identifier."""
    if value and not re.fullmatch(r"[a-z_][a-z0-9_]{0,63}", value):
        raise ValueError(f"{value!r} must be empty or up to 64 characters of a-z, 0-9 and _")
    return value


class HiveTargetConfig(Section):
    """The Hive metastore publish target: embedded (Derby under metastore_dir) unless metastore_uris is set."""

    metastore_dir: str = ".siltlake/metastore"
    metastore_uris: str | None = None
    database_prefix: str = ""

    @field_validator("metastore_uris")
    @classmethod
    def _uris(cls, value: str | None) -> str | None:
        if value is not None and not all(uri.strip().startswith("thrift://") for uri in value.split(",")):
            raise ValueError(f"{value!r} is not a comma-separated list of thrift://host:port URIs")
        return value or None

    @field_validator("database_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return check_name_prefix(value)


class IcebergTargetConfig(Section):
    """The Apache Iceberg publish target: a PyIceberg SQL catalog (SQLite or PostgreSQL) or a REST catalog.

    catalog_url unset: next to siltlake's catalog (iceberg.db beside a SQLite catalog file; the same
    PostgreSQL database, whose iceberg_* tables do not collide with siltlake's)."""

    catalog_url: str | None = None
    catalog_name: str = "siltlake"
    namespace_prefix: str = ""
    snapshot_retention: int = Field(
        default=86400,
        description="seconds an Iceberg snapshot other than the current one is kept (Iceberg time "
        "travel); every commit rewrites the metadata of all kept snapshots, so this bounds its cost; siltlake's "
        "own time travel (reap.retention) is not shortened; 0: only the current snapshot",
    )

    @field_validator("snapshot_retention", mode="before")
    @classmethod
    def _retention(cls, value: Any) -> int:
        return parse_duration(value, "publish.iceberg.snapshot_retention")

    @field_validator("catalog_url")
    @classmethod
    def _catalog_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(
            ("sqlite:", "postgresql:", "postgresql+psycopg:", "postgres:", "http://", "https://")
        ):
            raise ValueError(
                f"{value!r} must be a sqlite:///, postgresql:// (SQL catalog) or http(s):// (REST catalog) URL"
            )
        return value or None

    @field_validator("catalog_name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", value):
            raise ValueError(f"{value!r} must be 1 to 64 characters of A-Z, a-z, 0-9 and _")
        return value

    @field_validator("namespace_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return check_name_prefix(value)


class PublishConfig(Section):
    interval: int = Field(default=60, description="seconds between publish runs of `silt publish`")
    targets: list[str] = Field(default_factory=list, description="external catalogs: 'hive', 'iceberg', 'glue'")
    hive: HiveTargetConfig = Field(default_factory=HiveTargetConfig)
    glue: GlueTargetConfig = Field(default_factory=GlueTargetConfig)
    iceberg: IcebergTargetConfig = Field(default_factory=IcebergTargetConfig)
    in_process_rewrite_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        description="a delete or overwrite of a partition whose files total at most "
        "this many bytes runs in the command's own process (pyarrow; a delete's predicate on DuckDB when it "
        "translates faithfully), without Spark; 0: always Spark",
    )

    @field_validator("targets", mode="before")
    @classmethod
    def _targets(cls, value: Any) -> Any:
        # SILTLAKE_PUBLISH__TARGETS=hive,other: environment values are strings.
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    @field_validator("interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> int:
        return parse_duration(value, "publish.interval")


class ReapConfig(Section):
    retention: int = Field(default=7 * 86400, description="seconds a superseded version stays readable (time travel)")
    grace: int = Field(default=3 * 86400, description="seconds before an object no catalog row names is an orphan")
    interval: int = Field(default=3600, description="seconds between reap runs in `silt run`")
    full_sweep_interval: int = Field(
        default=86400,
        description="seconds between full sweeps: a run lists the "
        "whole instance key when no full sweep completed within this; other runs "
        "list only what changed since the last run",
    )
    change_slack: int = Field(
        default=3600,
        description="seconds an incremental reap looks back before the last "
        "run for changes: covers clock skew between hosts and a writer that commits "
        "a while after the time it records",
    )
    request_id_retention: int = Field(
        default=7 * 86400,
        description="seconds reap keeps the request ids of "
        "committed writes: a retry with the same id within it changes nothing, "
        "one after it is applied again",
    )

    @field_validator(
        "retention", "grace", "interval", "full_sweep_interval", "change_slack", "request_id_retention", mode="before"
    )
    @classmethod
    def _durations(cls, value: Any, info: ValidationInfo) -> int:
        return parse_duration(value, f"reap.{info.field_name}")


class DerivedConfig(Section):
    interval: int = Field(default=60, description="seconds between checks of derived tables' triggers in `silt run`")
    build_timeout: AtLeastOne = Field(
        default=600, description="seconds without a heartbeat before a running build counts as lost"
    )
    heartbeat_interval: AtLeastOne = 30

    @field_validator("interval", "build_timeout", "heartbeat_interval", mode="before")
    @classmethod
    def _durations(cls, value: Any, info: ValidationInfo) -> int:
        return parse_duration(value, f"derived.{info.field_name}")

    @model_validator(mode="after")
    def _heartbeat_within_timeout(self) -> DerivedConfig:
        check_heartbeat(
            "derived", self.heartbeat_interval, "build_timeout", self.build_timeout, "running builds count as lost"
        )
        return self


class SqlConfig(Section):
    """Bounds on user SQL (docs/design.md "Hostile input"); a query past one stops with an error naming it."""

    timeout: int = Field(default=30 * 60, description="seconds a `silt sql` query may run (DuckDB or Spark); 0: none")
    write_timeout: int = Field(
        default=4 * 3600,
        description="seconds the SQL of a derived build, `upsert --sql` or "
        "`delete`/`update --where` may run, then it stops and nothing is written; 0: none",
    )
    duckdb_memory_limit: str = Field(
        default="50%",
        pattern=r"(?i)^\s*\d+(\.\d+)?\s*(%|[KMGT]i?B|bytes)\s*$",
        description="DuckDB's memory_limit for user SQL: '4GB', or '50%' of the host's",
    )

    @field_validator("timeout", "write_timeout", mode="before")
    @classmethod
    def _durations(cls, value: Any, info: ValidationInfo) -> int:
        return parse_duration(value, f"sql.{info.field_name}")


class ObserveConfig(Section):
    history_interval: int = Field(
        default=60,
        ge=0,
        description="seconds between the metric history samples the daemons take for `silt dashboard` (0: none)",
    )
    history_retention: int = Field(default=14 * 86400, description="seconds reap keeps metric history samples")
    freshness_window: int = Field(
        default=900, gt=0, description="seconds of newly visible objects the freshness histogram of /metrics covers"
    )

    @field_validator("history_interval", "history_retention", "freshness_window", mode="before")
    @classmethod
    def _durations(cls, value: Any, info: ValidationInfo) -> int:
        return parse_duration(value, f"observe.{info.field_name}")


class TablesConfig(Section):
    """The deployment's values of the settings a table inherits when neither it nor its schema sets them
    (docs/design.md "Settings inherited"); unset: the setting's default. Read as `silt table set` reads them."""

    merge_mode: Literal["auto", "deep", "shallow"] | None = None
    merged_object_size: int | str | None = Field(default=None, description="bytes, or e.g. 64MiB")
    ttl_days: int | None = None
    codec: Literal["zstd", "snappy", "gzip", "none"] | None = None
    merge_interval: int | str | None = Field(default=None, description="e.g. 12h")

    def given(self) -> dict[str, str]:
        return {key: str(value) for key, value in self.model_dump().items() if value is not None}


class Config(Section):
    instance_key: str | None = None
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    stream: StreamConfig = Field(default_factory=StreamConfig)
    merge: MergeConfig = Field(default_factory=MergeConfig)
    publish: PublishConfig = Field(default_factory=PublishConfig)
    reap: ReapConfig = Field(default_factory=ReapConfig)
    derived: DerivedConfig = Field(default_factory=DerivedConfig)
    sql: SqlConfig = Field(default_factory=SqlConfig)
    observe: ObserveConfig = Field(default_factory=ObserveConfig)
    tables: TablesConfig = Field(default_factory=TablesConfig)
    source: str = Field(default="embedded defaults", exclude=True)

    @model_validator(mode="after")
    def _notifications_need_an_object_store(self) -> Config:
        if self.stream.notifications and not self.storage.staging_root.startswith("s3://"):
            raise ValueError(
                f"stream.notifications reads S3 event notifications, but storage.staging_root "
                f"{self.storage.staging_root!r} is no s3:// root: unset stream.notifications "
                "(a local root is listed from its cursor) or stage on S3"
            )
        return self

    @field_validator("instance_key")
    @classmethod
    def _instance_key(cls, value: str | None) -> str | None:
        if value is not None and not INSTANCE_KEY.match(value):
            raise ValueError("instance_key must be 4-32 characters of a-z and 0-9")
        return value


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    """SILTLAKE_CATALOG__URL=... sets catalog.url; SILTLAKE_INSTANCE_KEY sets instance_key."""
    nested: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in (ENV_PREFIX + "CONFIG", DEBUG_VARIABLE):
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        target = nested
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    return nested


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> Config:
    """Load the configuration.

    The file is `path`, else $SILTLAKE_CONFIG, else ./siltlake.toml if it exists; with none,
    the embedded defaults apply. Environment variables override file values.
    """
    environ = dict(os.environ if environ is None else environ)
    explicit = path or environ.get(ENV_PREFIX + "CONFIG")
    file = Path(explicit) if explicit else Path(CONFIG_FILE)
    data: dict[str, Any] = {}
    source = "embedded defaults"
    if file.exists():
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{file} is not valid TOML: {exc}") from None
        source = str(file)
    elif explicit:
        raise ConfigError(f"configuration file {file} does not exist")
    overrides = _env_overrides(environ)
    if overrides:
        source += " + environment"
    try:
        config = Config.model_validate(_merge(data, overrides))
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration ({source}): {describe_validation_error(exc)}") from None
    config.source = source
    return config
