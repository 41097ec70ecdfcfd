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

The module also has fast generators for benchmarks: ``write_jsonl_gz_objects`` (many objects of
about a given compressed size) and ``write_big_object`` (one huge object, streamed).
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import random
import struct
import zlib
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import msgpack

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

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = 1_000_000


@dataclass
class SampleSummary:
    objects: int  # staging objects written, all kinds
    good_records: int  # records expected to be loaded
    bad_records: int  # records expected to be rejected as bad records
    malformed_objects: list[str] = field(default_factory=list)  # keys expected to be reported unreadable
    records_by_date: dict[str, int] = field(default_factory=dict)  # partition date -> expected good rows
    shipped: dict[str, datetime] = field(default_factory=dict)  # key -> when its shipper wrote it (UTC)


def write_table_definition(path: str | Path) -> None:
    """Write the demo table definition (TOML) for ``web.access`` to path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TABLE_TOML, encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# record contents


_USER_AGENTS = [  # (weight, template); {name} picks one of _AGENT_PARTS[name]
    (30, "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
         "Chrome/{chrome} Safari/537.36"),
    (22, "Mozilla/5.0 (iPhone; CPU iPhone OS {ios} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
         "Version/{safari} Mobile/15E148 Safari/604.1"),
    (14, "Mozilla/5.0 (Linux; Android {android}; {model}) AppleWebKit/537.36 (KHTML, like Gecko) "
         "Chrome/{chrome} Mobile Safari/537.36"),
    (10, "Mozilla/5.0 (Macintosh; Intel Mac OS X {macos}) AppleWebKit/605.1.15 (KHTML, like Gecko) "
         "Version/{safari} Safari/605.1.15"),
    (8, "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:{firefox}.0) Gecko/20100101 Firefox/{firefox}.0"),
    (5, "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/{chrome} Safari/537.36 Edg/{chrome}"),
    (4, "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"),
    (2, "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"),
    (3, "SiltShop/{app} (iOS {ios_dotted}; {iphone})"),
    (2, "curl/{curl}"),
    (1, "python-requests/2.33.1"),
]
_AGENT_PARTS = {
    "chrome": ["142.0.7444.59", "142.0.7444.135", "141.0.7390.122", "140.0.7339.207", "142.0.7444.176"],
    "ios": ["19_1", "19_0_1", "18_7_2", "19_1_1", "18_6"],
    "safari": ["19.1", "19.0", "18.7", "18.6"],
    "android": ["16", "15", "14"],
    "model": ["Pixel 9", "Pixel 8a", "SM-S928B", "SO-51E", "SH-54D", "A302SH", "SC-52D", "Pixel 10 Pro"],
    "macos": ["15_6", "15_7_1", "14_7_8", "10_15_7"],
    "firefox": ["145", "144", "140"],
    "app": ["4.12.0", "4.12.1", "4.11.2", "4.10.0"],
    "ios_dotted": ["19.1", "19.0.1", "18.7.2"],
    "iphone": ["iPhone15,3", "iPhone16,1", "iPhone17,2", "iPhone14,5"],
    "curl": ["8.17.0", "8.5.0", "7.81.0"],
}


class _AgentParts(dict):
    def __init__(self, rng: random.Random):
        super().__init__()
        self.rng = rng

    def __missing__(self, name: str) -> str:
        value = self[name] = self.rng.choice(_AGENT_PARTS[name])
        return value


_HEALTH_AGENT = "ELB-HealthChecker/2.0"
_STATIC = [
    ("/static/js/app.3f9a1c7e.js", 248_113),
    ("/static/js/vendor.91be04d2.js", 611_502),
    ("/static/css/main.8b2e55a0.css", 53_870),
    ("/static/img/logo.svg", 6_214),
    ("/static/img/hero-winter.webp", 182_330),
    ("/static/fonts/NotoSansJP-Regular.woff2", 1_180_456),
    ("/favicon.ico", 15_086),
]
_SEARCH_TERMS = [
    "sneakers", "umbrella", "rain+jacket", "gift", "coffee+beans", "東京+カフェ", "傘", "手袋",
    "マフラー", "セール", "backpack", "黒+スニーカー",
]
_ROUTE_KINDS = ["static", "api", "page", "search", "login", "health"]
_ROUTE_WEIGHTS = [40, 30, 18, 6, 3, 3]


def _circular_gauss(hour: float, centre: float, width: float) -> float:
    distance = abs(hour - centre)
    distance = min(distance, 24 - distance)
    return math.exp(-0.5 * (distance / width) ** 2)


def _minute_cum_weights() -> list[float]:
    """Cumulative traffic weights for the 1440 minutes of a local day: a quiet night, a morning
    commute, lunch, an afternoon plateau and an evening peak."""
    weights = []
    for minute in range(1440):
        hour = minute / 60
        weights.append(
            0.10
            + 0.35 * _circular_gauss(hour, 8.5, 1.2)
            + 0.55 * _circular_gauss(hour, 12.4, 1.0)
            + 0.40 * _circular_gauss(hour, 15.5, 2.2)
            + 1.00 * _circular_gauss(hour, 21.3, 1.8)
        )
    return list(itertools.accumulate(weights))


class _RecordMaker:
    """Access log records (without time) with realistic distributions."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self._agents = [agent for _, agent in _USER_AGENTS]
        self._agent_cum = list(itertools.accumulate(weight for weight, _ in _USER_AGENTS))
        self._users = range(100_001, 100_001 + 20_000)
        self._user_cum = list(itertools.accumulate(1 / (rank + 1) ** 1.07 for rank in range(20_000)))
        self._kind_cum = list(itertools.accumulate(_ROUTE_WEIGHTS))

    def _user(self) -> int | None:
        if self.rng.random() < 0.3:
            return None
        return self.rng.choices(self._users, cum_weights=self._user_cum)[0]

    def _latency(self, median_ms: float, sigma: float) -> float:
        return round(self.rng.lognormvariate(math.log(median_ms), sigma), 3)

    def record(self, host: str) -> dict:
        rng = self.rng
        kind = rng.choices(_ROUTE_KINDS, cum_weights=self._kind_cum)[0]
        user_id = self._user()
        agent = rng.choices(self._agents, cum_weights=self._agent_cum)[0].format_map(_AgentParts(rng))
        method = "GET"
        if kind == "static":
            path, size = rng.choice(_STATIC)
            roll = rng.random()
            status, size = (200, size) if roll < 0.66 else (304, 0) if roll < 0.985 else (404, 162)
            latency = self._latency(1.8, 0.7)
        elif kind == "page":
            path = rng.choice(["/", "/products", "/cart", "/about", "/help/shipping",
                               f"/products/{rng.randint(1, 4000)}", f"/news/2026/{rng.randint(1, 60)}"])
            status = rng.choices([200, 301, 404, 500], cum_weights=[95, 97, 99.7, 100])[0]
            size = int(rng.lognormvariate(math.log(17_000), 0.45)) if status == 200 else 180
            latency = self._latency(42, 0.6)
        elif kind == "api":
            item = rng.randint(1, 4000)
            method, path = rng.choice([
                ("GET", f"/api/v1/items/{item}"), ("GET", f"/api/v1/items?page={rng.randint(1, 40)}"),
                ("GET", "/api/v1/cart"), ("POST", "/api/v1/cart"), ("DELETE", f"/api/v1/cart/items/{item}"),
                ("POST", "/api/v1/orders"), ("GET", f"/api/v1/orders/{rng.randint(50_000, 90_000)}"),
                ("PUT", f"/api/v1/users/{user_id or 100_001}/settings"), ("GET", "/api/v1/recommendations"),
            ])
            ok = 201 if method == "POST" else 204 if method == "DELETE" else 200
            status = rng.choices([ok, 400, 401, 404, 429, 500, 503],
                                 cum_weights=[92, 94, 95.5, 98, 98.8, 99.6, 100])[0]
            size = int(rng.lognormvariate(math.log(1_400), 0.9)) if status in (200, 201) else 96
            if status == 204:
                size = 0
            latency = self._latency(35, 0.75) * (8 if status >= 500 else 1)
            latency = round(latency, 3)
        elif kind == "search":
            path = f"/search?q={rng.choice(_SEARCH_TERMS)}&page={rng.choices([1, 2, 3], [8, 2, 1])[0]}"
            status = 200 if rng.random() < 0.995 else 504
            size = int(rng.lognormvariate(math.log(24_000), 0.5)) if status == 200 else 160
            latency = self._latency(120, 0.7) if status == 200 else 30_000.0
        elif kind == "login":
            if rng.random() < 0.4:
                path, status, size = "/login", 200, 7_315
            else:
                method, path = "POST", "/login"
                status, size = (302, 0) if rng.random() < 0.82 else (401, 412)
            latency = self._latency(90, 0.4)
        else:
            method = rng.choice(["GET", "HEAD"])
            path, status, size, user_id, agent = "/healthz", 200, 2, None, _HEALTH_AGENT
            latency = self._latency(0.35, 0.3)
        if method == "HEAD":
            size = 0
        return {
            "host": host,
            "user_id": user_id,
            "method": method,
            "path": path,
            "status": status,
            "bytes": size,
            "latency_ms": latency,
            "user_agent": agent,
        }


# --------------------------------------------------------------------------------------------------
# time values


def _utc(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _iso_utc(us: int) -> str:
    return _utc(us).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _TimeWriter:
    """Chooses how a record spells its event time and returns the time the spelling means."""

    def __init__(self, rng: random.Random, zone: ZoneInfo):
        self.rng = rng
        self.zone = zone

    def value(self, us: int) -> tuple[str | int | float, int]:
        roll = self.rng.random()
        if roll < 0.75:
            return _iso_utc(us), us
        if roll < 0.87:
            ms_us = us - us % 1000
            return _utc(ms_us).astimezone(self.zone).isoformat(timespec="milliseconds"), ms_us
        if roll < 0.95:
            seconds = us // _US
            return seconds, seconds * _US
        ms = us // 1000
        return ms / 1000, ms * 1000


def _local_midnight_us(day: date, zone: ZoneInfo) -> int:
    return int(datetime.combine(day, time(), tzinfo=zone).timestamp()) * _US


def _local_date(us: int, zone: ZoneInfo) -> str:
    return _utc(us).astimezone(zone).date().isoformat()


# --------------------------------------------------------------------------------------------------
# object contents


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def _json_line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False)


def event_time_ext(us: int) -> msgpack.ExtType:
    """Fluentd EventTime: ext type 0, big-endian uint32 seconds then uint32 nanoseconds."""
    return msgpack.ExtType(0, struct.pack(">II", us // _US, (us % _US) * 1000))


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
    return _utc(us).strftime("%Y/%m/%d")


def _key(shipper: str, table: str, shipped_us: int, server: str, seq: int, suffix: str) -> str:
    return f"{shipper}.{table}/{_date_dirs(shipped_us)}/{server}-{seq:06d}.{suffix}"


class _SampleWriter:
    def __init__(self, seed: int, zone: ZoneInfo):
        self.rng = random.Random(seed)
        self.zone = zone
        self.records = _RecordMaker(self.rng)
        self.times = _TimeWriter(self.rng, zone)
        self.good = 0
        self.bad = 0
        self.by_date: Counter[str] = Counter()

    def _count_good(self, us: int) -> None:
        self.good += 1
        self.by_date[_local_date(us, self.zone)] += 1

    def _bad_line(self, us: int, record: dict) -> str:
        kind = self.rng.randrange(4)
        if kind == 0:  # a line cut short: never valid JSON
            line = _json_line({"time": _iso_utc(us), **record})
            return line[: self.rng.randint(12, len(line) - 12)]
        if kind == 1:  # a stray text line from the application
            return (f"{_utc(us):%Y/%m/%d %H:%M:%S} [error] 1742#1742: *{self.rng.randint(1, 10**7)} "
                    "upstream timed out (110: Connection timed out) while reading response header")
        if kind == 2:
            return _json_line({"time": _iso_utc(us), **record, "user_id": "abc"})
        return _json_line(record)  # no time

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
            lines.append(_json_line({"time": value, **record}))
            self._count_good(meant_us)
        data = _gzip(("\n".join(lines) + "\n").encode("utf-8"))
        return _Object(_key(plan.shipper, TABLE, plan.shipped_us, plan.server, plan.seq, "jsonl.gz"), data,
                       plan.shipped_us)

    def msgpack_object(self, plan: _Plan, timestamp_entries: bool) -> _Object:
        packer = msgpack.Packer()
        parts = []
        for us in plan.times:
            record = self.records.record(plan.server)
            if timestamp_entries:
                entry = [msgpack.Timestamp(us // _US, (us % _US) * 1000), record]
            else:
                entry = [TAG, event_time_ext(us), record]
            parts.append(packer.pack(entry))
            self._count_good(us)
        data = b"".join(parts)
        return _Object(_key(plan.shipper, TABLE, plan.shipped_us, plan.server, plan.seq, "msgpack"), data,
                       plan.shipped_us)

    def _plain_lines(self, server: str, base_us: int, count: int) -> list[dict]:
        return [
            {"time": _iso_utc(base_us + i * 250_000), **self.records.record(server)} for i in range(count)
        ]

    def malformed_objects(self, shipper: str, server: str, first_seq: int, base_us: int) -> list[_Object]:
        """Objects nobody can load; they add nothing to the good or bad record counts."""
        rng = self.rng
        objects = []

        def key(offset: int, table: str = TABLE, seq: int | None = None) -> str:
            number = first_seq + offset if seq is None else seq
            return _key(shipper, table, base_us + offset * 60 * _US, server, number, "jsonl.gz")

        text = "".join(_json_line(r) + "\n" for r in self._plain_lines(server, base_us, 300)).encode()
        whole = _gzip(text)
        shipped = base_us + 5 * 60 * _US  # all of them, a few minutes after the first
        objects.append(_Object(key(0), whole[: len(whole) * 3 // 5], shipped))  # truncated gzip

        noise = bytearray(rng.randbytes(4096))
        noise[0] = 0x8F  # neither the gzip magic nor the start of a JSON or MessagePack document
        objects.append(_Object(key(1), bytes(noise), shipped))  # named .jsonl.gz, not gzip

        access = []
        for i in range(120):  # a shipper pointed at the wrong file: combined log format text
            record = self.records.record(server)
            stamp = _utc(base_us + i * _US).astimezone(self.zone).strftime("%d/%b/%Y:%H:%M:%S %z")
            access.append(f'192.0.2.{rng.randint(1, 254)} - - [{stamp}] "{record["method"]} {record["path"]} '
                          f'HTTP/1.1" {record["status"]} {record["bytes"]} "-" "{record["user_agent"]}"\n')
        objects.append(_Object(key(2), _gzip("".join(access).encode()), shipped))

        shift_jis = []
        for i, record in enumerate(self._plain_lines(server, base_us, 150)):
            term = rng.choice(["東京", "カフェ", "傘", "手袋", "セール"])
            record["path"] = f"/search?q={term}&page={i % 3 + 1}"
            shift_jis.append(_json_line(record) + "\n")
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
    minute_cum = _minute_cum_weights()
    minutes = range(1440)
    server_names = [f"web{i + 1:02d}" for i in range(servers)]
    shippers = {name: f"fluentd{i % 2 + 1:02d}" for i, name in enumerate(server_names)}
    next_seq = dict.fromkeys(server_names, 1)

    plans: list[_Plan] = []
    for day in range(days):
        local_day = start + timedelta(days=day)
        midnight_us = _local_midnight_us(local_day, zone)
        next_midnight_us = _local_midnight_us(local_day + timedelta(days=1), zone)
        for server in server_names:
            sizes = [round(records_per_object * rng.uniform(0.8, 1.2)) or 1 for _ in range(per_day)]
            picked = rng.choices(minutes, cum_weights=minute_cum, k=sum(sizes))
            times = sorted(
                min(midnight_us + minute * 60 * _US + rng.randrange(60 * _US), next_midnight_us - 1)
                for minute in picked
            )
            cut = 0
            for size in sizes:
                chunk = times[cut: cut + size]
                cut += size
                shipped = chunk[-1] + rng.randrange(2 * _US, 90 * _US)
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
    noon_us = int(datetime.combine(start, time(12), tzinfo=zone).timestamp()) * _US
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
        shipped={obj.key: _utc(obj.shipped_us) for obj in objects},
    )


# --------------------------------------------------------------------------------------------------
# benchmark inputs: fast, all records valid, ISO UTC times


_POOL_SIZE = 32_768


def _line_pool(seed: int):
    """A pyarrow string array of line tails: everything after the time value, newline included."""
    import pyarrow as pa

    rng = random.Random(seed)
    maker = _RecordMaker(rng)
    hosts = [f"web{i:02d}" for i in range(1, 9)]
    tails = []
    for _ in range(_POOL_SIZE):
        text = _json_line(maker.record(rng.choice(hosts)))
        tails.append('", ' + text[1:] + "\n")
    return pa.array(tails, pa.string())


def _time_parts(times_us) -> list:
    """ISO UTC spellings of ascending times as two string arrays: 'YYYY-MM-DDTHH:MM:SS.' and the
    six-digit fraction with 'Z'. Formatting each distinct second once is much faster than strftime."""
    import pyarrow as pa
    import pyarrow.compute as pc

    seconds = pc.divide(times_us, _US)  # integer division: times are positive
    fraction = pc.subtract(times_us, pc.multiply(seconds, _US))
    first, last = seconds[0].as_py(), seconds[-1].as_py()
    if last - first >= len(times_us):  # sparse times: format each one
        prefix = pc.strftime(seconds.cast(pa.timestamp("s", tz="UTC")), format="%Y-%m-%dT%H:%M:%S.")
    else:
        spelled = [_utc(second * _US).strftime("%Y-%m-%dT%H:%M:%S.") for second in range(first, last + 1)]
        prefix = pa.array(spelled, pa.string()).take(pc.subtract(seconds, first))
    return [
        prefix,
        pc.binary_join_element_wise(pc.utf8_lpad(pc.cast(fraction, pa.string()), 6, "0"), "Z", ""),
    ]


def _lines_buffer(pool, times_us, pick_seed: int):
    """Bytes of JSON lines, one per (ascending) time, the rest of each line from the pool, without a
    Python loop per line. Consecutive pool entries from a seeded start keep lines varied; the pool
    is far larger than the gzip window so repeats do not inflate the compression ratio."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(times_us)
    offset = random.Random(pick_seed).randrange(len(pool))
    tails = []
    while sum(len(t) for t in tails) < count:
        tails.append(pool[offset: offset + count - sum(len(t) for t in tails)])
        offset = 0
    tail = tails[0] if len(tails) == 1 else pa.concat_arrays(tails)
    lines = pc.binary_join_element_wise('{"time": "', *_time_parts(times_us), tail, "")
    offsets = lines.buffers()[1]
    first = struct.unpack_from("<i", offsets, 4 * lines.offset)[0]
    last = struct.unpack_from("<i", offsets, 4 * (lines.offset + count))[0]
    return lines.buffers()[2].slice(first, last - first)


def _spread_times(start_us: int, span_us: int, count: int, seed: int):
    """count ascending times over [start_us, start_us + span_us), evenly spaced with jitter."""
    import pyarrow as pa
    import pyarrow.compute as pc

    step = span_us / count
    base = pc.multiply(pa.array(range(count), pa.float64()), step)
    jitter = pc.multiply(pc.random(count, initializer=seed), step)
    offsets = pc.cast(pc.floor(pc.add(base, jitter)), pa.int64())
    return pc.add(offsets, start_us)


def _bytes_per_line(
    pool, compresslevel: int, seed: int, step_us: float, piece_lines: int | None = None
) -> float:
    """Compressed bytes per line with lines step_us apart, measured on a calibration run: one
    whole stream, or with piece_lines, one flushed piece as ``write_big_object`` makes them."""
    count = min(piece_lines or 20_000, 40_000)
    times = _spread_times(1_790_000_000 * _US, max(count, round(count * step_us)), count, seed)
    data = _lines_buffer(pool, times, seed)
    if piece_lines is None:
        return len(zlib.compress(data, compresslevel)) / count
    dictionary = bytes(_lines_buffer(pool, times[:200], seed + 1))[-32_768:]
    return len(_deflate_piece(data, dictionary, compresslevel, last=False)) / count


def _lines_for(target_bytes: int, span_us: int, pool, compresslevel: int, seed: int,
               piece_lines: int | None = None) -> int:
    """How many lines spread over span_us compress to about target_bytes (two calibration rounds:
    the spacing of the times changes how well they compress)."""
    lines = max(1, round(target_bytes / 25))
    for _ in range(2):
        per_line = _bytes_per_line(pool, compresslevel, seed, span_us / lines, piece_lines)
        lines = max(1, round(target_bytes / per_line))
    return lines


def _gzip_stream(level: int):
    return zlib.compressobj(level, zlib.DEFLATED, 31)


def write_jsonl_gz_objects(
    directory: str | Path,
    count: int,
    target_bytes: int,
    seed: int = 7,
    *,
    start: date = date(2026, 11, 20),
    days: int = 2,
    timezone: str = "Asia/Tokyo",
    workers: int = 2,
    compresslevel: int = 6,
) -> tuple[int, int]:
    """Write count valid gzip JSON-lines objects of about target_bytes compressed each.

    directory is a staging root: objects go to ``fluentd01.web.access/YYYY/MM/DD/<server>-<seq>.jsonl.gz``
    (UTC shipping date). Object i covers the i-th slice of the local days ``start`` ..
    ``start + days - 1``, so most objects touch one partition date. Records have the shape of
    the sample (ISO UTC times with microseconds). Returns (records, compressed bytes).
    """
    if count < 1 or target_bytes < 1:
        raise ValueError("count and target_bytes must be at least 1")
    root = Path(directory)
    pool = _line_pool(seed)
    zone = ZoneInfo(timezone)
    start_us = _local_midnight_us(start, zone)
    span_us = days * 86_400 * _US // count
    lines_per_object = _lines_for(target_bytes - 20, span_us, pool, compresslevel, seed)
    servers = 4

    def write(index: int) -> tuple[int, int]:
        object_start = start_us + index * span_us
        times = _spread_times(object_start, span_us, lines_per_object, seed * 1_000_003 + 2 * index)
        buffer = _lines_buffer(pool, times, seed * 1_000_003 + 2 * index + 1)
        stream = _gzip_stream(compresslevel)
        data = stream.compress(buffer) + stream.flush()
        server = f"web{index % servers + 1:02d}"
        shipped = object_start + span_us + 30 * _US
        path = root / _key("fluentd01", TABLE, shipped, server, index // servers + 1, "jsonl.gz")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return lines_per_object, len(data)

    with ThreadPoolExecutor(max(1, workers)) as pool_executor:
        results = list(pool_executor.map(write, range(count)))
    return sum(r for r, _ in results), sum(b for _, b in results)


def _deflate_piece(data, dictionary: bytes | None, level: int, last: bool) -> bytes:
    """Raw deflate of one piece of a larger stream, primed with the previous 32 KiB (as pigz does)."""
    if dictionary:
        stream = zlib.compressobj(level, zlib.DEFLATED, -15, zdict=dictionary)
    else:
        stream = zlib.compressobj(level, zlib.DEFLATED, -15)
    return stream.compress(data) + stream.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def write_big_object(
    path: str | Path,
    target_bytes: int,
    seed: int = 7,
    *,
    start: date = date(2026, 11, 20),
    timezone: str = "Asia/Tokyo",
    compresslevel: int = 6,
    chunk_lines: int = 65_536,
    workers: int = 2,
) -> tuple[int, int]:
    """Stream one gzip JSON-lines object (a single gzip member) of about target_bytes to path.

    Lines are made chunk by chunk and deflated in parallel pieces primed with the previous piece's
    last 32 KiB, so memory stays at a few chunks whatever the size and the output is one ordinary
    gzip stream. Events cover the local day ``start`` in order. Returns (records, compressed bytes).
    """
    if target_bytes < 1:
        raise ValueError("target_bytes must be at least 1")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pool = _line_pool(seed)
    total = _lines_for(target_bytes - 18, 86_400 * _US, pool, compresslevel, seed, chunk_lines)
    start_us = _local_midnight_us(start, ZoneInfo(timezone))
    step_us = 86_400 * _US / total
    crc = raw_size = records = chunk = 0
    dictionary: bytes | None = None
    pending: deque = deque()
    with open(path, "wb") as out, ThreadPoolExecutor(max(1, workers)) as executor:
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # gzip header: no name, no mtime
        while records < total:
            lines = min(chunk_lines, total - records)
            first_us = start_us + round(records * step_us)
            chunk_seed = seed * 1_000_003 + 2 * chunk
            times = _spread_times(first_us, max(1, round(lines * step_us)), lines, chunk_seed)
            buffer = _lines_buffer(pool, times, chunk_seed + 1)
            records += lines
            chunk += 1
            crc = zlib.crc32(buffer, crc)
            raw_size += buffer.size
            last = records >= total
            pending.append(executor.submit(_deflate_piece, buffer, dictionary, compresslevel, last))
            dictionary = bytes(buffer[max(0, buffer.size - 32_768):])
            while len(pending) > 2 * max(1, workers) or (last and pending):
                out.write(pending.popleft().result())
        out.write(struct.pack("<II", crc & 0xFFFFFFFF, raw_size & 0xFFFFFFFF))
        written = out.tell()
    return records, written
