"""The dashboard page and the HTTP server behind `silt dashboard`, `silt run --metrics-port` and the daemons'
`--metrics-port`: GET / (the page), /metrics (Prometheus), /healthz. Read-only: every other method is
refused; whatever changes state stays in the CLI.

The page is one self-contained HTML document: inline CSS and server-drawn SVG, no script, and a
Content-Security-Policy that forbids the browser any fetch.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Sequence
from html import escape
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from siltlake.catalog import DERIVED_PARTITION_STATES, PARTITION_STATES
from siltlake.clock import parse_time, utcnow
from siltlake.deployment import Deployment
from siltlake.hosts import local_host
from siltlake.httpd import MAX_CONNECTIONS, REQUEST_TIMEOUT, BoundedHandler, BoundedServer
from siltlake.logs import event
from siltlake.observe.charts import Series, line_chart
from siltlake.observe.metrics import registry_for

log = logging.getLogger(__name__)

DEFAULT_HOURS = 24
# The periods the page links to, from a quarter of an hour (a daemon's recent rounds) to a week.
WINDOWS = ((0.25, "15m"), (1, "1h"), (6, "6h"), (24, "24h"), (168, "7d"))
MAX_HOURS = 24 * 90
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ccc}
.meta{color:#666;font-size:12px} .charts{display:flex;flex-wrap:wrap;gap:8px}
.chart{background:#fff;border:1px solid #ddd} .chart .title{font-size:12px;font-weight:600;fill:#222}
.chart .axis{font-size:10px;fill:#666} .chart .legend{font-size:11px} .chart .frame{fill:none;stroke:#ccc}
.chart .grid{stroke:#eee} .chart .empty{font-size:12px;fill:#999} .none{color:#666}
table{border-collapse:collapse;background:#fff;font-size:13px} td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top} td.n{text-align:right} .bad{color:#b00} .reason{max-width:70ch;
overflow-wrap:anywhere}
"""


def _points(samples: list[dict], column: str) -> list[tuple[dt.datetime, float | None]]:
    return [(row["sample_time"], None if row[column] is None else float(row[column])) for row in samples]


def _table(headers: list[str], rows: Sequence[Sequence[object]], cls: str, empty: str) -> str:
    if not rows:  # an empty state is news, not an alarm: none of the table's classes (.bad is red)
        return f'<p class="none">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{value:,}</td>' if isinstance(value, int) else f"<td>{escape(str(value))}</td>"
            for value in row
        )
        + "</tr>"
        for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _period(hours: float) -> str:
    minutes = round(hours * 60)
    if minutes < 120:
        return f"{minutes} minutes"
    return f"{hours:g} hours" if hours < 48 else f"{hours / 24:g} days"


def render_page(deployment: Deployment, hours: float = DEFAULT_HOURS, now: dt.datetime | None = None) -> str:
    """The dashboard as one HTML document."""
    catalog, config = deployment.catalog, deployment.config
    pinned = "" if now is None else f"&at={now:%Y-%m-%dT%H:%M:%S}Z"  # the period links keep a given end
    now = now or utcnow()
    start = now - dt.timedelta(hours=hours)
    history = catalog.observations.history(start)
    status = catalog.merge_queue.status(now, config.merge.job_timeout, local_host())
    staging = {row["table"]: row for row in catalog.observations.staging()}
    failures = catalog.observations.recent_failures()
    unknown = catalog.staging.unknown()
    interval = config.observe.history_interval
    sampling = f"samples every {interval}s" if interval else "no new samples: observe.history_interval is 0"
    sections = []
    derived = {record.qualified_name for record in catalog.derived.list()}
    for row in status:
        table = row["table"]
        samples = history.get(table, [])
        charts = (
            []
            if table in derived
            else [
                line_chart(
                    "backlog",
                    table,
                    "Backlog: pending staging objects",
                    [Series("pending_objects", "pending", _points(samples, "pending_objects"))],
                    start=start,
                    end=now,
                ),
                line_chart(
                    "freshness",
                    table,
                    "Freshness: put to visible",
                    [
                        Series("freshness_p50_seconds", "p50", _points(samples, "freshness_p50_seconds")),
                        Series("freshness_p99_seconds", "p99", _points(samples, "freshness_p99_seconds")),
                    ],
                    unit="s",
                    start=start,
                    end=now,
                ),
                line_chart(
                    "debt",
                    table,
                    "Small-file debt: unmerged objects",
                    [Series("unmerged_objects", "unmerged", _points(samples, "unmerged_objects"))],
                    start=start,
                    end=now,
                ),
                line_chart(
                    "throughput",
                    table,
                    f"Merge throughput: objects per {interval}s",
                    [Series("merged_objects", "merged", _points(samples, "merged_objects"))],
                    start=start,
                    end=now,
                ),
            ]
        )
        parts, jobs = row["partitions"], row["jobs"]
        current = staging.get(table, {})
        states = DERIVED_PARTITION_STATES if table in derived else PARTITION_STATES
        state_rows = [["partitions", *(parts[s] for s in states)]]
        summary = (
            f"{current.get('pending', 0):,} pending staging objects, {row['unmerged_objects']:,} unmerged "
            f"small objects, merge jobs: {jobs['scheduled'] + jobs['due']} waiting, {jobs['running']} running, "
            f"{jobs['stale']} stale, {jobs['failed']} failed; {current.get('records_loaded', 0):,} records "
            f"loaded, {current.get('bad_records', 0):,} bad"
        )
        if table in derived:  # built from its sources by `silt derived build`: no staging, stream or merge
            summary = (
                f"a derived table, rebuilt from its sources by `silt derived build` (`silt derived show "
                f"{table}`); the stream and merge charts do not apply"
            )
        sections.append(
            f'<section class="table" data-table="{escape(table)}"><h2>{escape(table)}</h2>'
            f'<p class="summary">{escape(summary)}</p><div class="charts">{"".join(charts)}</div>'
            f"<h3>Partitions by state</h3>" + _table(["", *states], state_rows, "partitions", "") + "</section>"
        )
    if not status:
        sections.append('<p class="none">no tables; create one with <code>silt table create</code></p>')
    failure_rows = [[f"{f['time']:%Y-%m-%d %H:%M:%S}", f["kind"], f["table"], f["what"], f["reason"]] for f in failures]
    unknown_rows = [[f"{u.detect_time:%Y-%m-%d %H:%M:%S}", u.uri, u.table_name or "-", u.reason] for u in unknown[:50]]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="refresh" content="{max(interval, 30)}">'
        f"<title>siltlake: {escape(deployment.instance_key)}</title><style>{STYLE}</style></head><body>"
        f'<h1>siltlake</h1><p class="meta">instance {escape(deployment.instance_key)}, catalog '
        f"{escape(catalog.masked_url)}; at {now:%Y-%m-%d %H:%M:%S} UTC, the last {_period(hours)} ({sampling}; "
        + " ".join(
            f'<a href="?hours={h:g}{pinned}">{label}</a>' if h != hours else f"<b>{label}</b>" for h, label in WINDOWS
        )
        + "); "
        + f'<a href="/metrics">/metrics</a>; a read-only page, reloaded every {max(interval, 30)}s</p>'
        + "".join(sections)
        + "<h2>Recent failures</h2>"
        + _table(
            ["time (UTC)", "kind", "table", "what", "reason"],
            failure_rows,
            "failures bad",
            "no failed merge attempts or failing staging objects",
        )
        + f"<h2>Unknown objects ({len(unknown):,})</h2>"
        + _table(["detected (UTC)", "object", "table", "reason"], unknown_rows, "unknown", "no unknown objects")
        + "</body></html>"
    )


class BadParameter(ValueError):
    """A query parameter the page cannot use: answered 400 with this message."""


def hours_parameter(query: str) -> float:
    """The `hours` of a query string: a finite number from 0.1 to MAX_HOURS, else BadParameter."""
    given = parse_qs(query).get("hours", [str(DEFAULT_HOURS)])[0]
    try:
        hours = float(given)
    except ValueError:
        hours = math.nan
    if not 0.1 <= hours <= MAX_HOURS:  # nan and infinities fail this too
        raise BadParameter(f"hours must be a number from 0.1 to {MAX_HOURS}, not {given[:40]!r}")
    return hours


def at_parameter(query: str) -> dt.datetime | None:
    """The `at` of a query string (the end of the period shown, ISO-8601; default now), else BadParameter."""
    given = parse_qs(query).get("at", [""])[0]
    if not given:
        return None
    try:
        return parse_time(given)
    except ValueError as exc:
        raise BadParameter(f"at: {exc}") from None


class _Handler(BoundedHandler):
    server: ObserveServer

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        headers = [("Cache-Control", "no-store")]
        if content_type.startswith("text/html"):
            headers.append(("Content-Security-Policy", CSP))
        self.send_body(code, body, content_type, headers)

    def do_GET(self) -> None:  # http.server's name
        url = urlsplit(self.path)
        try:
            if url.path == "/metrics" and self.server.metrics:
                self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
            elif url.path == "/" and self.server.dashboard:
                page = render_page(self.server.deployment, hours_parameter(url.query), at_parameter(url.query))
                self._send(200, page.encode(), "text/html; charset=utf-8")
            elif url.path == "/healthz":
                self._send(200, b"ok\n", "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
        except BadParameter as exc:
            self._send(400, f"{exc}\n".encode(), "text/plain; charset=utf-8")
        except Exception as exc:  # one failed page must not end the server
            reference = self.failed(exc)  # the details (SQL and its parameters among them) stay in the log
            self._send(
                503,
                f"siltlake could not read its catalog for {url.path}; the server's log says why "
                f"(http.failed reference={reference})\n".encode(),
                "text/plain; charset=utf-8",
            )

    do_HEAD = do_GET

    def _read_only(self) -> None:
        self._send(405, b"read-only: change things with the silt command\n", "text/plain; charset=utf-8")

    do_POST = do_PUT = do_DELETE = do_PATCH = _read_only


class ObserveServer(BoundedServer):
    """The HTTP server on its own daemon thread; close() stops it. Its bounds are httpd.BoundedServer's: at most
    max_connections at once, and a request's headers within request_timeout."""

    log = log  # the events under this module's logger, as before the server was shared

    def __init__(
        self,
        deployment: Deployment,
        host: str,
        port: int,
        *,
        dashboard: bool,
        metrics: bool = True,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.deployment = deployment
        self.dashboard = dashboard
        self.metrics = metrics
        self.registry = registry_for(deployment)
        super().__init__((host, port), _Handler, max_connections=max_connections, request_timeout=request_timeout)

    def start(self) -> ObserveServer:
        super().start()
        event(log, "http.listening", url=self.url, dashboard=self.dashboard, metrics=self.metrics)
        return self
