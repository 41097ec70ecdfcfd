"""`[stream]`: the stream daemon's settings, and the staging key layouts `stream.key_pattern` may name."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from siltlake.configbase import AtLeastOne, Section, check_heartbeat
from siltlake.defbase import parse_duration
from siltlake.globs import check_patterns

SQS_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}(?:\.fifo)?\Z")

# Staging keys look like `<anything>.<schema>.<table>/YYYY/MM/DD/<name>[.gz]` (a date-path layout).
_TABLE_DIRECTORY = r"^(?:.*/)?(?:[^/]*\.)?(?P<schema>[^/.]+)\.(?P<table>[^/.]+)/"
_DATE_DIRECTORIES = r"(?P<year>\d{4})/(?P<month>\d{2})/(?P<day>\d{2})/"
DEFAULT_KEY_PATTERN = _TABLE_DIRECTORY + _DATE_DIRECTORIES + r"(?P<name>[^/]+)$"

# stream.key_pattern may name one of these layouts instead of giving a regular expression (docs/shippers.md).
# Each names its table by a directory <schema>.<table> (a prefix before it allowed, and <anything>. before the
# schema: the last two dotted parts count), the layouts' own parts after it.
KEY_LAYOUTS = {
    # .../<schema>.<table>/YYYY/MM/DD/<name>
    "siltlake": (DEFAULT_KEY_PATTERN, "<anything>/<schema>.<table>/YYYY/MM/DD/<name>"),
    # .../<schema>.<table>/YYYY/MM/DD/HH/<name>
    "hourly": (
        _TABLE_DIRECTORY + _DATE_DIRECTORIES + r"(?P<hour>\d{2})/(?P<name>[^/]+)$",
        "<anything>/<schema>.<table>/YYYY/MM/DD/HH/<name>",
    ),
    # Fluentd out_s3: s3_object_key_format %{path}%{time_slice}_%{index}.%{file_extension}, path ending in
    # <schema>.<table>/, time_slice_format %Y%m%d%H (its default), %Y%m%d or %Y%m%d-%H.
    "fluentd_out_s3": (
        _TABLE_DIRECTORY + r"(?P<year>\d{4})(?P<month>\d{2})(?P<day>\d{2})(?:-?(?P<hour>\d{2}))?"
        r"_(?P<name>[^/]+)$",
        "<path: anything/<schema>.<table>/>YYYYMMDD[HH]_<index>.<extension>",
    ),
    # Fluent Bit s3: s3_key_format /<prefix>/$TAG/%Y/%m/%d/<anything>, the tag (or $TAG[n].$TAG[m]) being
    # <schema>.<table>; its default /fluent-bit-logs/$TAG/%Y/%m/%d/%H/%M/%S matches.
    "fluentbit_s3": (
        _TABLE_DIRECTORY + _DATE_DIRECTORIES + r"(?P<name>(?:[^/]+/)*[^/]+)$",
        "<anything>/<schema>.<table>/YYYY/MM/DD/<anything>",
    ),
    # Vector aws_s3: key_prefix "<schema>.<table>/date=%F/" (the default date=%F/ with the table before it).
    "vector_aws_s3": (
        _TABLE_DIRECTORY + r"date=(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})/?(?P<name>[^/]+)$",
        "<anything>/<schema>.<table>/date=YYYY-MM-DD/<name>",
    ),
}


def key_pattern_shape(pattern: str) -> str:
    """What keys of stream.key_pattern look like, for messages: a named layout's shape, else the expression."""
    for name, (regex, shape) in KEY_LAYOUTS.items():
        if pattern == regex:
            return f"{name}: {shape}"
    return pattern


class StreamConfig(Section):
    poll_interval: int = 10
    key_pattern: str = DEFAULT_KEY_PATTERN
    include: list[str] = Field(
        default_factory=list,
        description="glob patterns of the new files the stream takes "
        "from the staging root, on the key relative to it (a pattern without '/' on the file's "
        "name; '**' any directories); empty: every file (siltlake/globs.py)",
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="glob patterns of new files the stream leaves, "
        'e.g. ["*.gz"] beside logs logrotate compresses; wins over include. A file already '
        "followed is followed under any name it is renamed to",
    )
    max_objects_per_run: AtLeastOne = 100_000
    objects_per_wave: AtLeastOne = 512
    tasks_per_core: AtLeastOne = 4
    task_bytes: AtLeastOne = Field(
        default=16 * 1024 * 1024,
        description="staging bytes a Spark task is given "
        "at least, when a wave holds more objects than cores: small objects share "
        "tasks, so that a task's fixed cost does not dominate",
    )
    in_driver_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=0,
        description="staging bytes up to which a wave "
        "decodes on this host's worker processes, one per core, instead of as a Spark stage "
        "(a stage costs a few hundred ms, and Spark's start-up when none runs yet); 0: every "
        "wave on Spark",
    )
    batch_rows: AtLeastOne = 65536
    spill_bytes: AtLeastOne = 128 * 1024 * 1024
    wave_engine: Literal["auto", "host", "spark"] = Field(
        default="auto",
        description="where a wave over in_driver_bytes decodes: 'auto' on this host's worker processes unless "
        "spark.master is a cluster (then a Spark stage, which adds its cores), 'spark' always a Spark stage, "
        "'host' never",
    )
    group_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=0,
        description="staging bytes up to which the small objects of a wave's table decode together, one task "
        "writing one object per partition date for all of them (each object's rows one range of it, committed "
        "exactly once with it); objects of keyed tables, of parallel_decode_bytes or more, or that failed before "
        "decode alone; 0: every object alone",
    )
    parallel_decode_bytes: AtLeastOne = Field(
        default=32 << 20,
        description="staging bytes from which one object "
        "decodes on several threads of its task (its share of the wave's "
        "cores): decompression in one, blocks of lines in the others",
    )
    max_failures: AtLeastOne = Field(
        default=3,
        description="failed processing attempts of one staging object "
        "before it moves to unknown objects (storage and catalog outages never count)",
    )
    max_object_bytes: AtLeastOne = Field(
        default=16 << 30, description="bytes one staging object may decompress to; past it the object is unknown"
    )
    max_compression_ratio: float = Field(
        default=200,
        gt=1,
        description="decompressed bytes per compressed "
        "byte a gzip object may reach past its first 64 MiB; past it the "
        "object is unknown (gzip's best is about 1,000)",
    )
    claim_timeout: AtLeastOne = Field(
        default=300,
        description="seconds without a heartbeat before the staging "
        "objects a stream daemon claimed are taken over by another (a daemon gone "
        "on the same host: at once)",
    )
    heartbeat_interval: AtLeastOne = 30
    listing_margin: int = Field(
        default=5,
        description="seconds a round's discovery cursor stays behind the "
        "start of its listing (stream/discover.py): timestamp granularity, writes racing "
        "the walk, and on a network file system its clock's skew from this host's",
    )
    full_listing_interval: int = Field(
        default=3600,
        description="0: a local staging root is listed whole "
        "every round (a mount whose directory times cannot be trusted); else it "
        "is swept (stream.sweep_files_per_round), and this is how long a local "
        "file seen written in place is watched for growth after its last delivery",
    )
    sweep_files_per_round: AtLeastOne = Field(
        default=10000,
        description="files of a local staging root the "
        "rolling sweep reads per round besides the cursor walk: a pass "
        "over N files takes N / this many rounds, the horizon of in-place "
        "rewrites and of what the walk cannot see",
    )
    watch_directories: bool = Field(
        default=True,
        description="a stream daemon on a local staging root learns the "
        "names that arrive in the directories it has read from Linux's inotify and lists "
        "such a directory again only when a notification may have been missed (false: "
        "every changed directory is listed, as on a file system whose changes inotify "
        "does not see, such as a network mount written by other hosts)",
    )
    sweep_check_interval: int = Field(
        default=86400,
        ge=0,
        description="seconds between the sweep passes that look "
        "every file of a local staging root up in the catalog; the passes between "
        "look up only files whose mtime or ctime is past the last completed pass's "
        "start (0: every pass looks every file up, for a file system that does not set "
        "a file's ctime when it is renamed or linked)",
    )
    settle_time: int = Field(
        default=2,
        description="seconds a file of a local staging root must go unwritten "
        "(its mtime) before it is taken: a file being written in place is not read "
        "mid-flush (short: what grows later loads as an append); object stores (atomic "
        "PUTs) never wait",
    )
    settle_limit: int = Field(
        default=60,
        description="seconds a local file that never stops changing (a log "
        "appended to every second) waits at most: then it is taken up to its last whole "
        "record, and its growth after that as appends",
    )
    fragment_final_after: int = Field(
        default=21600,
        ge=0,
        description="seconds a local file must go unchanged "
        "before its trailing fragment (a last line without its newline, half a "
        "MessagePack item) is taken as its last record while it is still at its name "
        "(a file rotated away or compressed has it taken at once; with settle_time 0, "
        "always at once): a block-buffered writer may pause mid-line for minutes",
    )
    reorder_window: int = Field(
        default=300,
        ge=0,
        description="seconds an upload to an object store staging "
        "root may take (from its LastModified until it is listable) and still be found "
        "by its prefix's next listing when a key sorting after it was listed first; "
        "later ones wait for the sweep",
    )
    late_window: int = Field(
        default=86400,
        ge=0,
        description="seconds an object store staging day (a key's "
        "prefix up to its day, by stream.key_pattern) is listed on its own after it last "
        "received a key: new keys sorting after its others are found the next round, e.g. "
        "yesterday's last objects put late; on a local staging root, how long a stream "
        "daemon remembers the file names of a directory after it last changed (only names "
        "it has not seen there are stat'ed)",
    )
    sweep_keys_per_round: AtLeastOne = Field(
        default=2000,
        description="keys of an object store staging root "
        "the rolling sweep lists per round: a pass over N keys takes "
        "N / this many rounds, the horizon of what cursors miss",
    )
    staging_retention: AtLeastOne = Field(
        default=7 * 86400,
        description="staging objects whose arrival (put "
        "or move into the root) is older than this are never loaded again: "
        "reap prunes their catalog rows and listings skip them, so shippers "
        "and lifecycle rules must delete staging objects within it",
    )
    notifications: str | None = Field(
        default=None,
        description="an SQS queue of the staging bucket's S3 event "
        "notifications, read each round besides the listing: sqs://<queue-name> "
        "(its URL asked of the SQS endpoint) or the queue's URL; unset: listing "
        'only (docs/design.md, "Notifications from an SQS queue")',
    )
    notified_listing_interval: int = Field(
        default=60,
        ge=0,
        description="with stream.notifications set: "
        "seconds between the listings that find what no notification named "
        "(a lost or late one); the rounds between read the queue only, and a "
        "listing round's sweep slice grows by the rounds it waited. 0: list "
        "every round. A queue that cannot be read makes the round list",
    )

    @field_validator("notifications")
    @classmethod
    def _queue(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if value.startswith("sqs://"):
            if not SQS_QUEUE_NAME.match(value[len("sqs://") :].rstrip("/")):
                raise ValueError(
                    f"{value!r} does not name an SQS queue: write sqs://<queue-name> (1-80 letters, "
                    "digits, '-' and '_', optionally ending .fifo) or the queue's URL"
                )
            return value
        parts = urlsplit(value)
        segments = parts.path.strip("/").split("/")
        if (
            parts.scheme not in ("http", "https")
            or not parts.netloc
            or len(segments) != 2
            or not SQS_QUEUE_NAME.match(segments[1])
        ):
            raise ValueError(
                f"{value!r} is no SQS queue: write sqs://<queue-name> (its URL is asked of the "
                "endpoint) or the queue's URL, e.g. "
                "https://sqs.eu-west-1.amazonaws.com/123456789012/staging-events"
            )
        return value

    @field_validator(
        "poll_interval",
        "listing_margin",
        "full_listing_interval",
        "claim_timeout",
        "heartbeat_interval",
        "staging_retention",
        "settle_time",
        "settle_limit",
        "fragment_final_after",
        "reorder_window",
        "late_window",
        "sweep_check_interval",
        "notified_listing_interval",
        mode="before",
    )
    @classmethod
    def _interval(cls, value: Any, info: ValidationInfo) -> int:
        return parse_duration(value, f"stream.{info.field_name}")

    @model_validator(mode="after")
    def _heartbeat_within_timeout(self) -> StreamConfig:
        check_heartbeat(
            "stream",
            self.heartbeat_interval,
            "claim_timeout",
            self.claim_timeout,
            "live daemons' objects get decoded twice",
        )
        return self

    @field_validator("include", "exclude", mode="before")
    @classmethod
    def _globs(cls, value: Any, info: ValidationInfo) -> list[str]:
        return check_patterns(value, f"stream.{info.field_name}")

    @field_validator("key_pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if value in KEY_LAYOUTS:
            return KEY_LAYOUTS[value][0]
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        missing = {"schema", "table"} - set(compiled.groupindex)
        if missing:
            raise ValueError(
                f"pattern needs named groups (?P<schema>...) and (?P<table>...); missing {sorted(missing)} (or "
                f"name a layout: {', '.join(KEY_LAYOUTS)})"
            )
        return value
