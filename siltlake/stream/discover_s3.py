"""What an object store staging root holds that may be new, listed in proportion to what is new (docs/design.md,
"Discovery on an object store"): each stream prefix from its cursor, each recently written day from its own,
and a bounded slice of a rolling sweep of the whole root. stream/discover.py registers what this lists;
only then are the cursors recorded (ObjectStoreListing.advance)."""

from __future__ import annotations

import datetime as dt
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from siltlake.catalog import Catalog, DiscoveryCursor, PrefixCursor
from siltlake.clock import from_nanoseconds, to_naive_utc
from siltlake.deployment import Deployment
from siltlake.storage.filesystem import ObjectInfo
from siltlake.storage.s3listing import KeyListing, list_after

STREAM, RECENT = "stream", "recent"
LISTERS = 16  # LIST requests in flight at once: a round's requests wait on the network, not on this process


@dataclass
class ObjectStoreListing:
    """One round's listings: the objects they found (each key once) and the cursors to record once those are
    registered."""

    objects: list[ObjectInfo]
    requests: int
    full: bool  # every key of the root was listed (the root's first round): a completed full listing
    swept: int  # keys the rolling sweep listed
    started: dt.datetime  # the round's start, by this host's clock
    sweep_unchanged: int = 0  # of the swept keys, those not returned: put before the last completed pass started
    cursors: list[PrefixCursor] = field(default_factory=list)  # only those that moved or are new
    forget: dict[str, dt.datetime | None] = field(default_factory=dict)  # prefix -> unless a put since (None: at all)
    # (the pass's start, where it got to (None: the end), whether the pass returns every key it lists)
    sweep: tuple[dt.datetime | None, str | None, bool] | None = None

    def advance(self, catalog: Catalog, root: str, margin: float) -> None:
        """Record the round's cursors: its objects are registered. The root's own row first (a completed
        full listing's time with it), so that prefix cursors never exist without it."""
        catalog.discovery.advance(
            root, self.started - dt.timedelta(seconds=margin), self.started if self.full else None
        )
        if self.cursors or self.forget:
            catalog.discovery.advance_prefixes(root, self.cursors, self.forget)
        if self.sweep is not None:
            catalog.discovery.advance_sweep(root, self.sweep[0], self.sweep[1], self.started, checked=self.sweep[2])


def list_new(
    deployment: Deployment,
    cursor: DiscoveryCursor | None,
    unchanged_before: dt.datetime | None = None,
    sweep_rounds: int = 1,
) -> ObjectStoreListing:
    """List what the staging root may hold that is new; register nothing, record nothing. Keys the rolling sweep
    lists that were put before unchanged_before (None: none) are counted, not returned: a completed listing
    that started after their put returned them. The sweep lists sweep_rounds slices of
    stream.sweep_keys_per_round (the rounds between listings, when notifications name new objects)."""
    staging = deployment.staging
    config = deployment.config.stream
    started = from_nanoseconds(time.time_ns())
    window = _Window(
        re.compile(config.key_pattern),
        started - dt.timedelta(seconds=config.reorder_window + config.listing_margin),
        started - dt.timedelta(seconds=config.late_window),
    )
    known = {known.prefix: known for known in deployment.catalog.discovery.prefixes(staging.root)}
    full = not any(known.kind == STREAM for known in known.values())

    top = list_after(staging, delimiter=True)
    # The root's first level, and the streams found below it (a layout that nests them: <anything>/<schema>.<table>/).
    starts = {prefix: known[prefix].start_after if prefix in known else "" for prefix in top.prefixes}
    starts.update(
        {
            prefix: stream.start_after
            for prefix, stream in known.items()
            if stream.kind == STREAM and prefix not in starts and _is_nested(prefix)
        }
    )
    for prefix, recent in known.items():
        stream_prefix = _stream_of(prefix, starts)
        ahead = starts.get(stream_prefix) if stream_prefix is not None else None
        # A day the stream's cursor has not passed is listed by the stream's own listing.
        if (
            recent.kind == RECENT
            and _is_recent(recent.newest_put, window.recent_since)
            and ahead is not None
            and ahead > prefix
            and not ahead.startswith(prefix)
        ):
            starts[prefix] = recent.start_after
    sweep_after = cursor.sweep_after if cursor is not None else None
    with ThreadPoolExecutor(max(1, min(LISTERS, len(starts) + 1))) as pool:
        sweeping = (
            None
            if full
            else pool.submit(list_after, staging, "", sweep_after, max_keys=config.sweep_keys_per_round * sweep_rounds)
        )
        pending = {prefix: pool.submit(list_after, staging, prefix, start or None) for prefix, start in starts.items()}
        listings = {prefix: future.result() for prefix, future in pending.items()}
        sweep = sweeping.result() if sweeping is not None else None

    every = [top, *listings.values(), *([sweep] if sweep is not None else [])]
    found = ObjectStoreListing([], sum(listing.requests for listing in every), full, 0, started)
    seen: set[str] = set()
    for listing in every:
        for key, info in listing.objects:
            if key in seen:
                continue
            seen.add(key)
            if (
                listing is sweep
                and unchanged_before is not None
                and info.mtime is not None
                and to_naive_utc(info.mtime) < unchanged_before
            ):
                found.sweep_unchanged += 1
            else:
                found.objects.append(info)
    for prefix, listing in listings.items():
        found.cursors.extend(_moved(prefix, listing, known, starts[prefix], window))
    kept_since = started - dt.timedelta(seconds=config.staging_retention)
    for prefix, known_cursor in known.items():
        if known_cursor.kind == RECENT and not _is_recent(known_cursor.newest_put, window.recent_since):
            found.forget[prefix] = window.recent_since
        elif known_cursor.kind == STREAM and not _is_nested(prefix) and prefix not in starts:
            found.forget[prefix] = None  # gone from the root
        elif known_cursor.kind == STREAM and _is_nested(prefix) and not _is_recent(known_cursor.newest_put, kept_since):
            found.forget[prefix] = kept_since  # nothing put for the retention: what is there is never loaded
    if sweep is not None:
        found.swept = len(sweep.objects)
        found.sweep = (
            cursor.sweep_started if cursor is not None else None,
            None if sweep.complete else sweep.last_key,
            unchanged_before is None,
        )
    return found


@dataclass(frozen=True)
class _Window:
    pattern: re.Pattern[str]  # stream.key_pattern: where a key's stream and day prefixes end
    settled_before: dt.datetime  # keys put before it may pass a cursor (stream.reorder_window and the margin)
    recent_since: dt.datetime  # days with a put since are listed on their own (stream.late_window)


def _is_nested(prefix: str) -> bool:
    """Whether a stream prefix lies below the root's first level."""
    return prefix.find("/") < len(prefix) - 1


def _stream_of(prefix: str, streams: dict[str, str]) -> str | None:
    """The longest listed stream prefix a day prefix lies under."""
    return max((stream for stream in streams if prefix.startswith(stream) and stream != prefix), key=len, default=None)


def _is_recent(put: dt.datetime | None, since: dt.datetime) -> bool:
    return put is not None and put >= since


def _prefixes(key: str, listed: str, pattern: re.Pattern[str]) -> tuple[str, str | None]:
    """(stream prefix, day prefix) of a key: by stream.key_pattern, what precedes its year and what ends with its
    day (`web.access/` and `web.access/2026/01/02`, whatever the layout); for a key the pattern does not date,
    the prefix it was listed under and its parent directory (None when that is the listed prefix itself)."""
    match = pattern.match(key)
    if (
        match is not None
        and match.groupdict().get("year") is not None
        and match.groupdict().get("day") is not None
        and match.start("year") > 0
    ):
        return key[: match.start("year")], key[: match.end("day")]
    directory = key[: key.rfind("/") + 1]
    return listed, directory if len(directory) > len(listed) else None


def _moved(
    prefix: str, listing: KeyListing, known: dict[str, PrefixCursor], start: str, window: _Window
) -> list[PrefixCursor]:
    """The cursors a listing of `prefix` (from `start`) moves or creates: its own, those of the streams found
    below it (nested layouts), and those of the days under it that received a key within the late window.

    A cursor moves to the greatest key listed whose LastModified is before window.settled_before
    (stream.reorder_window, and the clock margin, before the round): a key sorting before it that is not
    listable yet, an upload still running, is found by the next listing if it started no later and takes less
    than the window."""
    own = known.get(prefix)
    kind = own.kind if own is not None else STREAM
    settled: dict[str, str] = {}  # the prefix, each stream and each day under it -> its greatest settled key
    newest: dict[str, dt.datetime] = {}  # the prefix, each stream and each day -> its greatest LastModified listed
    streams: set[str] = set()
    for key, info in listing.objects:
        put = to_naive_utc(info.mtime) if info.mtime is not None else None
        stream, day = _prefixes(key, prefix, window.pattern)
        if kind == STREAM and stream != prefix and stream.startswith(prefix):
            streams.add(stream)
        under = [prefix, *([stream] if stream.startswith(prefix) else []), *([day] if day is not None else [])]
        for name in under:
            if put is None or put <= window.settled_before:
                settled[name] = key  # listed in key order: the last is the greatest
            if put is not None and put > newest.get(name, put - _TICK):
                newest[name] = put
    moved = []
    put = newest.get(prefix) if kind == RECENT or _is_nested(prefix) else None
    after = max(settled.get(prefix, ""), own.start_after if own is not None else "")
    if own is None or after > own.start_after or _later(put, own.newest_put):
        moved.append(PrefixCursor(prefix, kind, after, put))
    if kind == RECENT:
        return moved
    days = {name for name, put in newest.items() if put >= window.recent_since} - streams - {prefix}
    for name in sorted(streams) + sorted(days):
        before = known.get(name)
        # New to the cursors: its keys up to the listing's start were listed by earlier rounds.
        after = max(before.start_after if before is not None else max(start, name), settled.get(name, ""))
        if before is None or after > before.start_after or _later(newest[name], before.newest_put):
            moved.append(PrefixCursor(name, STREAM if name in streams else RECENT, after, newest[name]))
    return moved


_TICK = dt.timedelta(microseconds=1)


def _later(put: dt.datetime | None, than: dt.datetime | None) -> bool:
    return put is not None and (than is None or put > than)
