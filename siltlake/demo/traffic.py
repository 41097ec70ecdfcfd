"""What the demo's web access log records look like: their fields, user agents, routes, daily traffic
curve, and the spellings of their event times."""

from __future__ import annotations

import itertools
import json
import math
import random
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = 1_000_000  # microseconds a second


# --------------------------------------------------------------------------------------------------
# record contents


_USER_AGENTS = [  # (weight, template); {name} picks one of _AGENT_PARTS[name]
    (
        30,
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/{chrome} Safari/537.36",
    ),
    (
        22,
        "Mozilla/5.0 (iPhone; CPU iPhone OS {ios} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/{safari} Mobile/15E148 Safari/604.1",
    ),
    (
        14,
        "Mozilla/5.0 (Linux; Android {android}; {model}) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/{chrome} Mobile Safari/537.36",
    ),
    (
        10,
        "Mozilla/5.0 (Macintosh; Intel Mac OS X {macos}) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/{safari} Safari/605.1.15",
    ),
    (8, "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:{firefox}.0) Gecko/20100101 Firefox/{firefox}.0"),
    (
        5,
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/{chrome} Safari/537.36 Edg/{chrome}",
    ),
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
    "sneakers",
    "umbrella",
    "rain+jacket",
    "gift",
    "coffee+beans",
    "東京+カフェ",
    "傘",
    "手袋",
    "マフラー",
    "セール",
    "backpack",
    "黒+スニーカー",
]
_ROUTE_KINDS = ["static", "api", "page", "search", "login", "health"]
_ROUTE_WEIGHTS = [40, 30, 18, 6, 3, 3]


def _circular_gauss(hour: float, centre: float, width: float) -> float:
    distance = abs(hour - centre)
    distance = min(distance, 24 - distance)
    return math.exp(-0.5 * (distance / width) ** 2)


def minute_cum_weights() -> list[float]:
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


class RecordMaker:
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
            path = rng.choice(
                [
                    "/",
                    "/products",
                    "/cart",
                    "/about",
                    "/help/shipping",
                    f"/products/{rng.randint(1, 4000)}",
                    f"/news/2026/{rng.randint(1, 60)}",
                ]
            )
            status = rng.choices([200, 301, 404, 500], cum_weights=[95, 97, 99.7, 100])[0]
            size = int(rng.lognormvariate(math.log(17_000), 0.45)) if status == 200 else 180
            latency = self._latency(42, 0.6)
        elif kind == "api":
            item = rng.randint(1, 4000)
            method, path = rng.choice(
                [
                    ("GET", f"/api/v1/items/{item}"),
                    ("GET", f"/api/v1/items?page={rng.randint(1, 40)}"),
                    ("GET", "/api/v1/cart"),
                    ("POST", "/api/v1/cart"),
                    ("DELETE", f"/api/v1/cart/items/{item}"),
                    ("POST", "/api/v1/orders"),
                    ("GET", f"/api/v1/orders/{rng.randint(50_000, 90_000)}"),
                    ("PUT", f"/api/v1/users/{user_id or 100_001}/settings"),
                    ("GET", "/api/v1/recommendations"),
                ]
            )
            ok = 201 if method == "POST" else 204 if method == "DELETE" else 200
            status = rng.choices([ok, 400, 401, 404, 429, 500, 503], cum_weights=[92, 94, 95.5, 98, 98.8, 99.6, 100])[0]
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


def utc(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def iso_utc(us: int) -> str:
    return utc(us).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class TimeWriter:
    """Chooses how a record spells its event time and returns the time the spelling means."""

    def __init__(self, rng: random.Random, zone: ZoneInfo):
        self.rng = rng
        self.zone = zone

    def value(self, us: int) -> tuple[str | int | float, int]:
        roll = self.rng.random()
        if roll < 0.75:
            return iso_utc(us), us
        if roll < 0.87:
            ms_us = us - us % 1000
            return utc(ms_us).astimezone(self.zone).isoformat(timespec="milliseconds"), ms_us
        if roll < 0.95:
            seconds = us // US
            return seconds, seconds * US
        ms = us // 1000
        return ms / 1000, ms * 1000


def local_midnight_us(day: date, zone: ZoneInfo) -> int:
    return int(datetime.combine(day, time(), tzinfo=zone).timestamp()) * US


def local_date(us: int, zone: ZoneInfo) -> str:
    return utc(us).astimezone(zone).date().isoformat()


def json_line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False)
