"""Realistic sample data for the demo table ``web.access``.

``generate_sample`` writes staging objects the way log shippers do: many small gzip JSON-lines
objects, some Fluentd MessagePack objects, a few bad records inside otherwise good objects, and a
few objects that cannot be loaded at all. It returns a ``SampleSummary`` with the exact outcome a
correct load should produce.

Staging key layout, relative to the staging root::

    <shipper>.<schema>.<table>/YYYY/MM/DD/<server>-<seq>.jsonl.gz   (or .msgpack)

The date directories are the UTC date the object was shipped, not the event dates, so an object
in ``2026/11/19`` can hold events of the Tokyo date 2026-11-20.

What the summary expects from a load:

* good records: every record of a readable JSON-lines or MessagePack object of ``web.access``
  that has a parseable time and values of the declared types. Event times appear as ISO-8601 UTC
  strings (microseconds, ``Z``), ISO-8601 strings with the table's local offset (milliseconds),
  epoch seconds as integers and epoch seconds as floats with millisecond fractions. MessagePack
  records carry no ``time`` field: the Fluentd entry time is the event time.
* bad records (rejected one by one, the rest of the object still loads): a line that is not JSON,
  a line with ``"user_id": "abc"``, a line without ``time``.
* malformed objects (reported, and contributing no good and no bad records): a truncated gzip, a
  ``.jsonl.gz`` of random bytes, a gzip of plain text that is not JSON at all, a gzip of JSON lines
  in Shift_JIS (invalid UTF-8 on every line), and an object under ``<shipper>.web.nosuch/`` whose
  table does not exist.

Everything is deterministic given the seed; gzip headers carry no timestamp.

Records are made by siltlake.demo.traffic; benchmark inputs by siltlake.demo.bench_inputs.
"""

from __future__ import annotations

import gzip
import json
import random
import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import msgpack

from siltlake.demo.traffic import (
    US,
    RecordMaker,
    TimeWriter,
    iso_utc,
    json_line,
    local_date,
    local_midnight_us,
    minute_cum_weights,
    utc,
)

TABLE_TOML = """\
schema = "web"
name = "access"
time_column = "utc_event_time"
timezone = "Asia/Tokyo"
merge_interval = "0s"
[[columns]]
name = "utc_event_time"
type = "timestamp"
source = "time"
nullable = false
[[columns]]
name = "host"
type = "string"
[[columns]]
name = "user_id"
type = "bigint"
[[columns]]
name = "method"
type = "string"
[[columns]]
name = "path"
type = "string"
[[columns]]
name = "status"
type = "int"
[[columns]]
name = "bytes"
type = "bigint"
[[columns]]
name = "latency_ms"
type = "double"
[[columns]]
name = "user_agent"
type = "string"
"""

TABLE = "web.access"
TAG = "web.access"
MISSING_TABLE = "web.nosuch"
BAD_RECORD_RATE = 1 / 200
MSGPACK_OBJECT_RATE = 0.10
MSGPACK_TIMESTAMP_SHARE = 0.25  # of the MessagePack objects, the share using [time, record] entries


@dataclass
class SampleSummary:
    objects: int  # staging objects written, all kinds
    good_records: int  # records expected to be loaded
    bad_records: int  # records expected to be rejected as bad records
    malformed_objects: list[str] = field(default_factory=list)  # keys expected to be reported unreadable
    records_by_date: dict[str, int] = field(default_factory=dict)  # partition date -> expected good rows
    shipped: dict[str, datetime] = field(default_factory=dict)  # key -> when its shipper wrote it (UTC)


def write_table_definition(path: str | Path, partition_by: Sequence[str] = ()) -> None:
    """Write the demo table definition (TOML) for ``web.access`` to path; partitioned below dt by `partition_by`
    (docs/tables.md, "Partitions below the date") when given."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = TABLE_TOML
    if partition_by:  # a top-level key: before the [[columns]] tables
        text = text.replace("[[columns]]", f"partition_by = {json.dumps(list(partition_by))}\n[[columns]]", 1)
    path.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# object contents


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def event_time_ext(us: int) -> msgpack.ExtType:
    """Fluentd EventTime: ext type 0, big-endian uint32 seconds then uint32 nanoseconds."""
    return msgpack.ExtType(0, struct.pack(">II", us // US, (us % US) * 1000))


@dataclass
class _Object:
    key: str
    data: bytes
    shipped_us: int


@dataclass
class _Plan:
    shipper: str
    server: str
    seq: int
    times: list[int]  # event times, microseconds since the epoch, ascending
    shipped_us: int


def _date_dirs(us: int) -> str:
    return utc(us).strftime("%Y/%m/%d")


def staging_key(shipper: str, table: str, shipped_us: int, server: str, seq: int, suffix: str) -> str:
    return f"{shipper}.{table}/{_date_dirs(shipped_us)}/{server}-{seq:06d}.{suffix}"


class _SampleWriter:
    def __init__(self, seed: int, zone: ZoneInfo):
        self.rng = random.Random(seed)
        self.zone = zone
        self.records = RecordMaker(self.rng)
        self.times = TimeWriter(self.rng, zone)
        self.good = 0
        self.bad = 0
        self.by_date: Counter[str] = Counter()

    def _count_good(self, us: int) -> None:
        self.good += 1
        self.by_date[local_date(us, self.zone)] += 1

    def _bad_line(self, us: int, record: dict) -> str:
        kind = self.rng.randrange(4)
        if kind == 0:  # a line cut short: never valid JSON
            line = json_line({"time": iso_utc(us), **record})
            return line[: self.rng.randint(12, len(line) - 12)]
        if kind == 1:  # a stray text line from the application
            return (
                f"{utc(us):%Y/%m/%d %H:%M:%S} [error] 1742#1742: *{self.rng.randint(1, 10**7)} "
                "upstream timed out (110: Connection timed out) while reading response header"
            )
        if kind == 2:
            return json_line({"time": iso_utc(us), **record, "user_id": "abc"})
        return json_line(record)  # no time

    def jsonl_object(self, plan: _Plan) -> _Object:
        lines = []
        for us in plan.times:
            record = self.records.record(plan.server)
            if self.rng.random() < BAD_RECORD_RATE:
                lines.append(self._bad_line(us, record))
                self.bad += 1
                continue
            if record["user_id"] is None and self.rng.random() < 0.25:
                del record["user_id"]  # anonymous requests often omit the field altogether
            value, meant_us = self.times.value(us)
            lines.append(json_line({"time": value, **record}))
            self._count_good(meant_us)
        data = _gzip(("\n".join(lines) + "\n").encode("utf-8"))
        return _Object(
            staging_key(plan.shipper, TABLE, plan.shipped_us, plan.server, plan.seq, "jsonl.gz"), data, plan.shipped_us
        )

    def msgpack_object(self, plan: _Plan, timestamp_entries: bool) -> _Object:
        packer = msgpack.Packer()
        parts = []
        for us in plan.times:
            record = self.records.record(plan.server)
            if timestamp_entries:
                entry = [msgpack.Timestamp(us // US, (us % US) * 1000), record]
            else:
                entry = [TAG, event_time_ext(us), record]
            parts.append(packer.pack(entry))
            self._count_good(us)
        data = b"".join(parts)
        return _Object(
            staging_key(plan.shipper, TABLE, plan.shipped_us, plan.server, plan.seq, "msgpack"), data, plan.shipped_us
        )

    def _plain_lines(self, server: str, base_us: int, count: int) -> list[dict]:
        return [{"time": iso_utc(base_us + i * 250_000), **self.records.record(server)} for i in range(count)]

    def malformed_objects(self, shipper: str, server: str, first_seq: int, base_us: int) -> list[_Object]:
        """Objects nobody can load; they add nothing to the good or bad record counts."""
        rng = self.rng
        objects = []

        def key(offset: int, table: str = TABLE, seq: int | None = None) -> str:
            number = first_seq + offset if seq is None else seq
            return staging_key(shipper, table, base_us + offset * 60 * US, server, number, "jsonl.gz")

        text = "".join(json_line(r) + "\n" for r in self._plain_lines(server, base_us, 300)).encode()
        whole = _gzip(text)
        shipped = base_us + 5 * 60 * US  # all of them, a few minutes after the first
        objects.append(_Object(key(0), whole[: len(whole) * 3 // 5], shipped))  # truncated gzip

        noise = bytearray(rng.randbytes(4096))
        noise[0] = 0x8F  # neither the gzip magic nor the start of a JSON or MessagePack document
        objects.append(_Object(key(1), bytes(noise), shipped))  # named .jsonl.gz, not gzip

        access = []
        for i in range(120):  # a shipper pointed at the wrong file: combined log format text
            record = self.records.record(server)
            stamp = utc(base_us + i * US).astimezone(self.zone).strftime("%d/%b/%Y:%H:%M:%S %z")
            access.append(
                f'192.0.2.{rng.randint(1, 254)} - - [{stamp}] "{record["method"]} {record["path"]} '
                f'HTTP/1.1" {record["status"]} {record["bytes"]} "-" "{record["user_agent"]}"\n'
            )
        objects.append(_Object(key(2), _gzip("".join(access).encode()), shipped))

        shift_jis = []
        for i, record in enumerate(self._plain_lines(server, base_us, 150)):
            term = rng.choice(["東京", "カフェ", "傘", "手袋", "セール"])
            record["path"] = f"/search?q={term}&page={i % 3 + 1}"
            shift_jis.append(json_line(record) + "\n")
        objects.append(_Object(key(3), _gzip("".join(shift_jis).encode("shift_jis")), shipped))  # invalid UTF-8

        objects.append(_Object(key(4, table=MISSING_TABLE, seq=1), _gzip(text), shipped))  # unknown table
        return objects


def generate_sample(
    staging_root: str | Path,
    start: date,
    days: int = 2,
    servers: int = 4,
    objects_per_server_day: int = 40,
    records_per_object: int = 200,
    seed: int = 7,
    timezone: str = "Asia/Tokyo",
) -> SampleSummary:
    """Write sample staging objects for ``web.access`` under staging_root and describe the outcome.

    Event times cover the local days ``start`` .. ``start + days - 1`` in ``timezone`` with a daily
    traffic curve; each server's events are cut into objects of about ``records_per_object``
    records (more objects at busy hours, as a size-triggered shipper buffer would). Existing files
    under staging_root are left alone; files with the same keys are overwritten.
    """
    if days < 1 or servers < 1 or objects_per_server_day < 1 or records_per_object < 1:
        raise ValueError("days, servers, objects_per_server_day and records_per_object must be at least 1")
    root = Path(staging_root)
    zone = ZoneInfo(timezone)
    writer = _SampleWriter(seed, zone)
    rng = writer.rng
    per_day = objects_per_server_day
    minute_cum = minute_cum_weights()
    minutes = range(1440)
    server_names = [f"web{i + 1:02d}" for i in range(servers)]
    shippers = {name: f"fluentd{i % 2 + 1:02d}" for i, name in enumerate(server_names)}
    next_seq = dict.fromkeys(server_names, 1)

    plans: list[_Plan] = []
    for day in range(days):
        local_day = start + timedelta(days=day)
        midnight_us = local_midnight_us(local_day, zone)
        next_midnight_us = local_midnight_us(local_day + timedelta(days=1), zone)
        for server in server_names:
            sizes = [round(records_per_object * rng.uniform(0.8, 1.2)) or 1 for _ in range(per_day)]
            picked = rng.choices(minutes, cum_weights=minute_cum, k=sum(sizes))
            times = sorted(
                min(midnight_us + minute * 60 * US + rng.randrange(60 * US), next_midnight_us - 1) for minute in picked
            )
            cut = 0
            for size in sizes:
                chunk = times[cut : cut + size]
                cut += size
                shipped = chunk[-1] + rng.randrange(2 * US, 90 * US)
                plans.append(_Plan(shippers[server], server, next_seq[server], chunk, shipped))
                next_seq[server] += 1

    kinds = []
    for _ in plans:
        if rng.random() < MSGPACK_OBJECT_RATE:
            kinds.append("msgpack_ts" if rng.random() < MSGPACK_TIMESTAMP_SHARE else "msgpack_forward")
        else:
            kinds.append("jsonl")
    # make sure every kind shows up, however small the sample
    for kind, index in (("msgpack_forward", 1), ("msgpack_ts", 2)):
        if kind not in kinds and len(plans) > index:
            kinds[index] = kind

    objects: list[_Object] = []
    for plan, kind in zip(plans, kinds, strict=True):
        if kind == "jsonl":
            objects.append(writer.jsonl_object(plan))
        else:
            objects.append(writer.msgpack_object(plan, timestamp_entries=kind == "msgpack_ts"))

    first = server_names[0]
    noon_us = int(datetime.combine(start, time(12), tzinfo=zone).timestamp()) * US
    malformed = writer.malformed_objects(shippers[first], first, next_seq[first], noon_us)
    objects.extend(malformed)

    for obj in objects:
        path = root / obj.key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(obj.data)

    return SampleSummary(
        objects=len(objects),
        good_records=writer.good,
        bad_records=writer.bad,
        malformed_objects=sorted(obj.key for obj in malformed),
        records_by_date=dict(sorted(writer.by_date.items())),
        shipped={obj.key: utc(obj.shipped_us) for obj in objects},
    )
