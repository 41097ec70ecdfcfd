"""Find new staging objects under the staging root and register each once, with its table."""

from __future__ import annotations

import datetime as dt
import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

from siltlake.catalog import DiscoveryCursor, Redelivery, TableRecord
from siltlake.clock import UtcBound, from_nanoseconds, to_naive_utc, to_nanoseconds, utcnow
from siltlake.defbase import IDENTIFIER
from siltlake.deployment import Deployment
from siltlake.globs import key_filter
from siltlake.storage.accounted import AccountedNames
from siltlake.storage.filesystem import ObjectInfo
from siltlake.storage.localwalk import ChangedListing
from siltlake.stream.appends import settle, take_growth
from siltlake.stream.discover_s3 import list_new
from siltlake.stream.notifications import NotificationTally, listing_turn, take_notified
from siltlake.streamconfig import key_pattern_shape

# Control characters, backslashes (a path separator elsewhere) and percent-escapes (which decode into
# other characters, e.g. %2e%2e%2f into ../) are refused in staging keys.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]|%[0-9A-Fa-f]{2}")


@dataclass(frozen=True)
class KeyMapping:
    table: TableRecord | None
    reason: str | None  # why the key maps to no table


def is_in_flight(key: str) -> bool:
    """Shippers upload under hidden or temporary names first; those are not staging objects yet."""
    name = key.rpartition("/")[2]  # posixpath.basename, without its per-call overhead on every listed key
    return name.startswith((".", "_")) or name.endswith((".tmp", "._COPYING_", ".part"))


def map_key(key: str, pattern: re.Pattern[str], tables: dict[tuple[str, str], TableRecord]) -> KeyMapping:
    """The table a staging key belongs to, or why it belongs to none."""
    segments = key.split("/")
    if key.startswith("/") or "" in segments or "." in segments or ".." in segments or _UNSAFE.search(key):
        return KeyMapping(
            None,
            f"unsafe key {key!r}: empty, '.' or '..' segments, control characters, "
            "backslashes and percent-escapes are refused",
        )
    match = pattern.match(key)
    if match is None:
        shape = key_pattern_shape(pattern.pattern)
        return KeyMapping(None, f"key does not match stream.key_pattern (expected {shape})")
    date = _key_date(match)
    if date is not None:
        return KeyMapping(
            None, f"key {key!r} has the impossible date {date}; a staging key's YYYY/MM/DD must be a calendar date"
        )
    schema_name, table_name = match.group("schema"), match.group("table")
    if not IDENTIFIER.match(schema_name) or not IDENTIFIER.match(table_name):
        return KeyMapping(None, f"key names {schema_name!r}.{table_name!r}, which is not a valid table name")
    table = tables.get((schema_name, table_name))
    if table is None:
        return KeyMapping(
            None, f"no table {schema_name}.{table_name}; create it with `silt table create`, then `silt unknown replay`"
        )
    return KeyMapping(table, None)


def _key_date(match: re.Match[str]) -> str | None:
    """The key's year/month/day as written when they are no calendar date (2026/13/45, 2026/02/30); else None.
    Patterns without the three groups carry no date."""
    if not _DATE_GROUPS.issubset(match.re.groupindex):
        return None
    parts = match.group("year", "month", "day")
    if None in parts or _is_calendar_date(*parts):
        return None
    return "/".join(parts)


_DATE_GROUPS = frozenset(("year", "month", "day"))


@functools.lru_cache(maxsize=4096)
def _is_calendar_date(year: str, month: str, day: str) -> bool:
    """Memoised: a listing's keys share a few days, and a check pass maps millions of them."""
    try:
        dt.date(int(year), int(month), int(day))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class SweepSlice:
    """A local round's slice of the rolling sweep, left for later (discover(sweep=False)): the root's cursor as the
    round read it, the file system's clock before its walk, and the keys the walk found or looked at by key (the
    slice leaves them out: each is looked up once a round)."""

    cursor: DiscoveryCursor
    started_ns: int
    walked: frozenset[str]


@dataclass
class Discovery:
    listed: int = 0  # file entries listed: the whole root on a full listing, else changed directories and the sweep
    registered: int = 0
    unknown: int = 0
    redelivered: int = 0  # registered objects put again since: ignored (a key is processed once)
    changed: list[Redelivery] = field(default_factory=list)  # of those, put again with another size
    looked_up: int = 0  # listed URIs asked of the catalog (those that may be new)
    full_listing: bool = True  # whether the whole root was listed (else only what changed since the cursor)
    # Listed objects that arrived before the root's expiry watermark: their rows may be pruned, so they are
    # skipped unasked (never registered, never loaded again).
    expired: int = 0
    # Files written in place (stream/appends.py): tails registered as new deliveries, files changed other than
    # by appending (reported once), local files still being written (waiting to settle) and how long the
    # oldest has waited, and seconds until the next of them would settle.
    appended: int = 0
    rewritten: list[tuple[str, str]] = field(default_factory=list)
    unsettled: int = 0
    unsettled_seconds: float = 0.0
    settles_in: float | None = None
    list_requests: int = 0  # an object store's LIST requests (the local walk counts none)
    # A local root's rolling sweep (docs/design.md, "Discovery reads what is new"): files its slice read this
    # round (counted in listed too), and whether the slice ended a pass (a completed full listing).
    swept: int = 0
    sweep_unchanged: int = 0  # of those, files not looked up: unchanged since the last completed full listing
    sweep_completed: bool = False
    sweep_pending: SweepSlice | None = None  # a slice left for sweep_slice() (discover(sweep=False))
    looked_by_key: set[str] = field(default_factory=set)  # keys of waiting and watched files looked at by key
    # Of the walk's entries, names a daemon's record of its earlier rounds accounted for: not `stat`ed
    # (docs/design.md, "A round costs what is new in a changed directory").
    remembered: int = 0
    # Objects under the root that S3 event notifications named and the catalog did not know (stream.notifications)
    notified: int = 0
    notifications: NotificationTally | None = None  # what the queue delivered; None without a queue
    # An object store round that did not list (its queue named what is new): seconds until its listing is due
    listing_waits: float | None = None

    def add_sweep(self, swept: Discovery) -> None:
        """Count in the round's sweep slice (sweep_slice()): its files were not listed by the walk."""
        self.fold(swept)
        self.unsettled += swept.unsettled
        self.unsettled_seconds = max(self.unsettled_seconds, swept.unsettled_seconds)
        if swept.settles_in is not None:
            self.settles_in = swept.settles_in if self.settles_in is None else min(self.settles_in, swept.settles_in)

    def fold(self, other: Discovery, *, same_listing: bool = False) -> None:
        """Count another pass's report into this one. Work done (registrations, redeliveries, tails, lookups,
        the sweep) adds up; what was seen adds up too, unless the other pass repeated this one's listing
        (`silt stream --once` waiting to settle lists the same objects again): then the larger count stands."""
        for name in (
            "registered",
            "unknown",
            "redelivered",
            "looked_up",
            "appended",
            "swept",
            "sweep_unchanged",
            "notified",
            "remembered",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.changed = other.changed + self.changed
        self.rewritten = other.rewritten + self.rewritten
        seen = max if same_listing else (lambda mine, theirs: mine + theirs)
        self.listed = seen(self.listed, other.listed)
        self.expired = seen(self.expired, other.expired)
        self.sweep_completed = self.sweep_completed or other.sweep_completed
        self.notifications = other.notifications or self.notifications


def discover(
    deployment: Deployment,
    accounted: AccountedNames | None = None,
    *,
    sweep: bool = True,
    registered: Callable[[], None] | None = None,
) -> Discovery:
    """Register the staging objects not seen before (each URI once, ever).

    A local root is listed whole on its first round; later rounds read the directories and files that changed
    since the root's cursor, plus a slice of stream.sweep_files_per_round files of a rolling sweep of the whole
    root (docs/design.md, "Discovery reads what is new"). An object store's root is listed from per-prefix
    cursors plus a slice of a rolling sweep (stream/discover_s3.py; docs/design.md, "Discovery on an object
    store"). `accounted` is a daemon's record of the names its completed rounds listed in a local root's
    directories: only names not in it are `stat`ed, and a completed round updates it. With sweep=False a local
    round's sweep slice is not read: it is the report's `sweep_pending`, for sweep_slice() (a stream round reads
    it while its first stage runs). `registered` is called each time new objects are registered while more are
    still to be (a round starts its first wave on them)."""
    staging = deployment.staging
    catalog = deployment.catalog
    config = deployment.config.stream
    # The file system's clock, read before the walk: what is put after this moment has a ctime past it.
    started = time.time_ns()
    cursor = catalog.discovery.get(staging.root)
    if staging.is_object_store:
        return _discover_object_store(deployment, cursor)
    full = not staging.is_local or cursor is None or config.full_listing_interval == 0
    # A walk of what changed (not full): the cursor it started from, what it listed, and the files it took.
    walk: tuple[DiscoveryCursor, ChangedListing, list[ObjectInfo]] | None = None
    if full:
        listed = [info for info in staging.list() if not is_in_flight(info.key)]
        fresh = _unexpired(deployment, listed, cursor.expired_before if cursor is not None else None)
        report = _register(deployment, fresh, registered=registered)
        report.listed, report.expired = len(listed), len(listed) - len(fresh)
    else:
        assert cursor is not None
        changed = staging.list_changed(to_nanoseconds(cursor.cursor_time), accounted)
        walked = [info for info in changed.objects if not is_in_flight(info.key)]
        if accounted is not None:
            walked += _modified(deployment, accounted.take_modified(), {info.key for info in walked})
        report = _register(deployment, walked, registered=registered)
        report.listed, report.full_listing, report.remembered = changed.entries, False, changed.remembered
        walk = (cursor, changed, walked)
    # Only once every object found is registered (or recorded unknown): a round that fails before leaves the
    # cursor where it was, and the next round looks again. A remote root other than an object store is listed
    # whole every round (its cursor is not read), but its full listing time bounds the expiry watermark; a local
    # root's completed sweep pass moves that time to the pass's start.
    catalog.discovery.advance(
        staging.root,
        from_nanoseconds(started - config.listing_margin * 1_000_000_000),
        from_nanoseconds(started) if full else None,
    )
    if walk is not None:
        walked_from, changed, walked = walk
        if accounted is not None:  # every name the walk listed is accounted for now
            accounted.keep(changed.directories, started, config.late_window * 1_000_000_000)
        pending = SweepSlice(walked_from, started, frozenset(info.key for info in walked) | report.looked_by_key)
        if sweep:
            report.add_sweep(sweep_slice(deployment, pending))
        else:
            report.sweep_pending = pending
    return report


def _modified(deployment: Deployment, paths: list[str], walked: set[str]) -> list[ObjectInfo]:
    """The files inotify saw written to in place (IN_MODIFY, IN_CLOSE_WRITE) that the walk did not list: an append
    does not change its directory, and the round judges the file's growth now rather than at the sweep's pass."""
    staging = deployment.staging
    base = staging.path("").rstrip("/") + "/"
    found = []
    for path in paths:
        key = path[len(base) :] if path.startswith(base) else None
        if key is None or key in walked or is_in_flight(key):
            continue
        try:
            info = staging.info(key)
        except (OSError, ValueError):
            continue
        if info is not None:
            found.append(info)
    return found


def sweep_slice(deployment: Deployment, pending: SweepSlice) -> Discovery:
    """Read and register a local round's slice of the rolling sweep: what the walk cannot see (an in-place rewrite
    or append in an unchanged directory) is found within one pass, as a whole listing every
    full_listing_interval found it. The sweep's position moves only once what the slice found is registered."""
    config = deployment.config.stream
    cursor = pending.cursor
    unchanged_before = _unchanged_before(cursor, deployment)
    swept = deployment.staging.sweep(
        cursor.sweep_after,
        config.sweep_files_per_round,
        None if unchanged_before is None else to_nanoseconds(unchanged_before),
    )
    sweeping = [info for info in swept.objects if not is_in_flight(info.key) and info.key not in pending.walked]
    fresh = _unexpired(deployment, sweeping, cursor.expired_before)
    report = _register(deployment, fresh, watched=False)  # the round's walk looked at the watched files
    report.full_listing = False
    report.listed = report.swept = len(swept.objects) + swept.unchanged
    report.expired, report.sweep_unchanged = len(sweeping) - len(fresh), swept.unchanged
    report.sweep_completed = swept.complete
    deployment.catalog.discovery.advance_sweep(
        deployment.staging.root,
        cursor.sweep_started,
        None if swept.complete else swept.last_key,
        from_nanoseconds(pending.started_ns),
        checked=unchanged_before is None,
    )
    return report


def _unchanged_before(cursor: DiscoveryCursor | None, deployment: Deployment) -> dt.datetime | None:
    """The time before which what the sweep's current pass lists arrived unchanged since a completed listing
    looked it up, so is not looked up again: the last completed full listing's start less the listing margin,
    and on an object store a second more (S3's LastModified is whole seconds; docs/design.md, "Discovery reads
    what is new"). None, every object looked up, on a root's first passes and
    once stream.sweep_check_interval has passed since the start of the last listing that looked every object
    up: a local file moved in without a new ctime (the walk misses it on a file system that sets none) is
    still found."""
    config = deployment.config.stream
    if cursor is None or cursor.checked_time is None or config.sweep_check_interval == 0:
        return None
    pass_started = cursor.sweep_started or utcnow()
    if (pass_started - cursor.checked_time).total_seconds() >= config.sweep_check_interval:
        return None
    return cursor.full_listing_time - dt.timedelta(
        seconds=config.listing_margin + (1 if deployment.staging.is_object_store else 0)
    )


def _discover_object_store(deployment: Deployment, cursor: DiscoveryCursor | None) -> Discovery:
    """Register what the queue of stream.notifications names, then, when the listing is due (every round without
    a queue), what the object store's cursors and sweep list; then record the cursors (a round that fails
    before leaves them where they were, and the next lists the same keys again)."""
    expired_before = cursor.expired_before if cursor is not None else None
    notified = _register_notified(deployment, expired_before)
    turn = listing_turn(deployment, cursor, notified.notifications)
    if not turn.due:  # the queue named what is new; the listing that finds what it missed waits its interval
        notified.listing_waits = turn.waits
        return notified
    found = list_new(deployment, cursor, _unchanged_before(cursor, deployment), turn.sweep_rounds)
    listed = [info for info in found.objects if not is_in_flight(info.key)]
    fresh = _unexpired(deployment, listed, expired_before)
    report = _register(deployment, fresh)
    report.listed, report.expired = len(listed), len(listed) - len(fresh)
    report.full_listing, report.list_requests = found.full, found.requests
    report.swept, report.sweep_unchanged = found.swept, found.sweep_unchanged
    report.listed += found.sweep_unchanged
    found.advance(deployment.catalog, deployment.staging.root, deployment.config.stream.listing_margin)
    report.fold(notified)
    return report


def _unexpired(
    deployment: Deployment, listed: list[ObjectInfo], expired_before: dt.datetime | None
) -> list[ObjectInfo]:
    """The listed objects that arrived at or after the expiry watermark. Reap may have pruned the rows of older
    ones, so they are not asked of the catalog: a pruned key still lying in the root is not loaded again. The
    arrival is an object store's LastModified (the mtime listed), a local file's max(mtime, ctime): a file moved
    in keeps an old mtime, but its ctime is the move's, so it is new."""
    if expired_before is None:
        return listed
    staging = deployment.staging
    fresh = []
    bound = UtcBound(expired_before)
    for info in listed:
        mtime = info.mtime
        if mtime is None or mtime >= bound.like(mtime):
            fresh.append(info)  # the arrival is at least the mtime
            continue
        if staging.is_local:
            arrival = staging.arrival_ns(info.key)
            if arrival is None or from_nanoseconds(arrival) >= expired_before:
                fresh.append(info)
    return fresh


def readmit(deployment: Deployment, uris: list[str]) -> int:
    """Register now the forgotten unknown objects (`silt unknown replay`) still in the staging root, so that the
    next round streams them: a listing would not (a full one skips those that arrived before the expiry
    watermark; a walk does not look at an unchanged file whose name a record of names holds, which only the
    rolling sweep reaches, within a pass). Returns how many were registered (others may be unknown again)."""
    staging = deployment.staging
    prefix = staging.root + "/"
    listed = []
    for uri in uris:
        if not uri.startswith(prefix):
            continue
        try:
            info = staging.info(unquote(uri[len(prefix) :]))
        except (OSError, ValueError):  # an unsafe key (refused by Storage.path) or one no longer readable
            continue
        if info is not None and not is_in_flight(info.key):
            listed.append(info)
    # Only what the replay names: the waiting and watched files are a stream round's to look at.
    return _register(deployment, listed, watched=False).registered if listed else 0


# New objects registered per transaction: a stream round's first wave starts once the first are in, while the
# rest are marked and registered (stream/runner.py).
REGISTER_CHUNK = 500


def _register(
    deployment: Deployment,
    listed: list[ObjectInfo],
    watched: bool = True,
    registered: Callable[[], None] | None = None,
) -> Discovery:
    """Register, of these listed objects, those the catalog does not know; count the known ones put again. With
    watched, the local files waiting to settle and those watched for growth are looked at too (once a round).
    New objects are registered REGISTER_CHUNK at a time; `registered` is called after each chunk but the last."""
    staging = deployment.staging
    catalog = deployment.catalog
    settling = settle(deployment, listed, watched)  # a local file still being written waits (stream/appends.py)
    listed = settling.ready + [
        info for info in settling.due.values() if info.key not in {ready.key for ready in settling.ready}
    ]
    report = Discovery(
        listed=len(listed),
        looked_up=len(listed),
        unsettled=settling.waiting,
        unsettled_seconds=settling.oldest_seconds,
        settles_in=settling.settles_in,
        looked_by_key=settling.looked,
    )
    if not listed:
        return report
    # Each URI is built (quoted) once: an idle round over a long history lists every object ever put.
    uris = [staging.uri(info.key) for info in listed]
    send_times = [to_naive_utc(info.mtime) if info.mtime is not None else None for info in listed]
    resized: dict[str, int] | None = {} if staging.is_local else None
    # A local name put again may hold another file (a rotation shifted one in): its put is taken only once
    # judged, so that a round killed or told to look again before it decides leaves it for the next listing.
    known, redelivered = catalog.staging.sort_listed(
        list(zip(uris, send_times, (info.size for info in listed), strict=True)), resized, take=resized is None
    )
    fresh = [
        (uri, info, send_time)
        for uri, info, send_time in zip(uris, listed, send_times, strict=True)
        if uri not in known
    ]
    chunks = [fresh[start : start + REGISTER_CHUNK] for start in range(0, len(fresh), REGISTER_CHUNK)] or [[]]
    for number, chunk in enumerate(chunks):
        notes: list[dict] = []
        if resized is not None and number == 0:
            # A local file that changed size is appended to or rewritten: judged by its position, not a re-put.
            by_uri = dict(zip(uris, listed, strict=True))
            judged = {uri: by_uri[uri] for uri in resized}
            judged.update((uri, info) for uri, info in settling.due.items() if uri not in judged)
            growth = take_growth(deployment, judged, chunk, {put.uri: by_uri[put.uri] for put in redelivered})
            taken = catalog.staging.take_puts([put for put in redelivered if put.uri not in growth.later])
            redelivered = [put for put in taken if put.uri not in growth.handled]
        elif resized is not None:
            growth = take_growth(deployment, {}, chunk)
        if resized is not None:
            report.appended += growth.appended
            report.rewritten += growth.rewritten
            notes = growth.notes
            chunk = [item for item in chunk if item[0] not in growth.handled]
        report.registered += _register_fresh(deployment, chunk, notes, report)
        if registered is not None and number < len(chunks) - 1:
            registered()
    report.redelivered = len(redelivered)
    report.changed = [put for put in redelivered if put.changed]
    return report


def _register_fresh(
    deployment: Deployment,
    fresh: list[tuple[str, ObjectInfo, dt.datetime | None]],
    notes: list[dict],
    report: Discovery,
) -> int:
    """Register new objects (uri, listing, send time) under their tables, or record them unknown (counted on
    `report`): how many were registered. `notes`: the identities of new local files (stream/rotation.py)."""
    # stream.include / stream.exclude choose the new files taken; after the growth judged above, so that a file
    # already followed is followed under an excluded name too (a rotated log's unread tail).
    admitted = key_filter(deployment.config.stream.include, deployment.config.stream.exclude)
    if admitted is not None:
        fresh = [item for item in fresh if admitted.admits(item[1].key)]
    if not fresh:
        return 0
    staging = deployment.staging
    catalog = deployment.catalog
    pattern = re.compile(deployment.config.stream.key_pattern)
    tables = catalog.tables.by_key_names()
    rows = []
    leaving = staging.leaving_root(info.key for _, info, _ in fresh)
    for uri, info, send_time in fresh:
        mapping = map_key(info.key, pattern, tables)
        if mapping.table is not None and mapping.table.definition.kind == "derived":
            mapping = KeyMapping(
                None,
                f"{mapping.table.qualified_name} is a derived table, built from its query: it takes no staging objects",
            )
        if info.key in leaving:
            mapping = KeyMapping(
                None, f"key {info.key!r} is a symbolic link that leads out of the staging root; refused"
            )
        if mapping.table is None:
            report.unknown += catalog.staging.record_unknown(uri, mapping.reason or "unmapped", size=info.size)
        else:
            rows.append((uri, mapping.table.id, info.size, send_time))
    registering = {row[0] for row in rows}
    return catalog.staging.register(rows, staging.root, [note for note in notes if note["uri"] in registering])


def _register_notified(deployment: Deployment, expired_before: dt.datetime | None) -> Discovery:
    """Register the objects that S3 event notifications on the queue of stream.notifications named, as listed
    ones are (docs/design.md, "Notifications from an SQS queue"); the listing still runs and catches any
    notification lost or never sent."""
    found = Discovery(full_listing=False)
    if not deployment.config.stream.notifications:
        return found

    def register(objects: list[ObjectInfo]) -> None:
        settled = [info for info in objects if not is_in_flight(info.key)]
        fresh = _unexpired(deployment, settled, expired_before)
        found.fold(_register(deployment, fresh))
        found.notified += len(objects)
        found.expired += len(settled) - len(fresh)

    found.notifications = take_notified(deployment, register)
    return found
