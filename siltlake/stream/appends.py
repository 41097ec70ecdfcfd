"""Files written in place and appended to, on a local staging root (docs/design.md, "Files written in place and
appended to"): a listed file still being written waits until it settles; a registered file that grew by whole
records has its tail registered as a new delivery from where the last one stopped; one that changed other than
by appending is reported, once, and never loaded again."""

from __future__ import annotations

import datetime as dt
import os
import zlib
from dataclasses import dataclass, field

from siltlake.catalog.positions import PositionState
from siltlake.clock import UtcBound, to_naive_utc, utcnow
from siltlake.deployment import Deployment
from siltlake.storage.filesystem import ObjectInfo, UnsafeKey
from siltlake.stream.tails import FINGERPRINT_BYTES, delivery_uri, file_identity


class LookAgain:
    """_judge's answer for a file to judge again later (a delivery of it in flight, or it could not be read now):
    it is watched, so each round looks at it by key; the rolling sweep passes over a file whose times have not
    changed since its last completed pass (docs/design.md, "What a pass looks up"), so it would not bring it back.
    Not a string: a string answer is a reason the file changed other than by appending."""


LOOK_AGAIN = LookAgain()


@dataclass
class Settling:
    """What the settle filter let through, and what still waits."""

    ready: list[ObjectInfo]
    waiting: int = 0
    oldest_seconds: float = 0.0  # how long the longest-waiting file has waited
    settles_in: float | None = None  # seconds until the next waiting file would settle, if it is not written again
    looked: set[str] = field(default_factory=set)  # keys of waiting and watched files looked at by key


@dataclass
class Growth:
    appended: int = 0  # tails registered as new deliveries
    rewritten: list[tuple[str, str]] = field(default_factory=list)  # (uri, why), reported this round
    handled: set[str] = field(default_factory=set)  # URIs judged here (not plain re-puts)


def settle(deployment: Deployment, listed: list[ObjectInfo], watched: bool = True) -> Settling:
    """Hold back the listed files of a local root written less than stream.settle_time ago, and add the files
    waiting from earlier rounds that settled since, and the watched files (seen written in place) that changed
    size. A file still changing after stream.settle_limit is let through: its delivery stops at its last whole
    record. Object stores write atomically: nothing waits. With watched=False the waiting and watched files are
    not looked at (a round's sweep slice: the round's walk did, and the slice leaves out their keys)."""
    staging = deployment.staging
    config = deployment.config.stream
    if not staging.is_local:
        return Settling(listed)
    positions = deployment.catalog.positions
    now = utcnow()
    waiting = {item.uri: item for item in positions.waiting(staging.root)} if watched else {}
    listed_keys = {info.key for info in listed}
    first_listed = set(listed_keys)
    candidates = list(listed)
    gone: list[str] = []
    for item in waiting.values():
        if item.key not in listed_keys:
            info = _look(deployment, item.key)
            if info is None:
                gone.append(item.uri)
            else:
                candidates.append(info)
                listed_keys.add(item.key)
    since = now - dt.timedelta(seconds=config.full_listing_interval)
    for position in positions.watched(staging.root, since) if watched else []:
        if position.key in listed_keys:
            continue
        info = _look(deployment, position.key)
        if info is not None and info.size != position.read_end:
            candidates.append(info)
            listed_keys.add(position.key)
    result = Settling([], looked=listed_keys - first_listed)
    hold: list[tuple[str, str, int, dt.datetime]] = []
    taken: list[tuple[str, str]] = []
    # A file no earlier round held back and last written before this is ready as it is: a daily check pass brings
    # every file of the root here, and most of a listing is such files.
    settled_before = UtcBound(now - dt.timedelta(seconds=config.settle_time))
    held_keys = {item.key for item in waiting.values()}
    for info in candidates:
        mtime = info.mtime
        if info.key not in held_keys and (not config.settle_time or mtime is not None
                                          and mtime <= settled_before.like(mtime)):
            result.ready.append(info)
            continue
        changed = to_naive_utc(info.mtime) if info.mtime is not None else now
        age = (now - changed).total_seconds()
        uri = staging.uri(info.key)
        first_seen = waiting[uri].first_seen if uri in waiting else now
        if (not config.settle_time or age >= config.settle_time
                or (now - first_seen).total_seconds() >= config.settle_limit):
            result.ready.append(info)
            if uri in waiting:
                taken.append((uri, info.key))
            continue
        hold.append((uri, info.key, info.size, changed))
        result.oldest_seconds = max(result.oldest_seconds, (now - first_seen).total_seconds())
        settles_in = config.settle_time - age
        result.settles_in = settles_in if result.settles_in is None else min(result.settles_in, settles_in)
    result.waiting = len(hold)
    if hold:
        positions.wait(staging.root, hold, now)
    if taken:
        positions.watch(staging.root, taken, now)  # seen written in place: its growth is looked for by key
    if taken or gone:
        positions.stop_waiting([uri for uri, _ in taken] + gone)
    return result


def _look(deployment: Deployment, key: str) -> ObjectInfo | None:
    try:
        return deployment.staging.info(key)
    except (OSError, UnsafeKey):
        return None


def take_growth(deployment: Deployment, resized: dict[str, ObjectInfo],
                fresh: list[tuple[str, ObjectInfo, dt.datetime | None]]) -> Growth:
    """Judge registered local files listed with another size than they were registered at ({uri: listing}):
    register the tail of each that grew by appending, report each that changed otherwise. Of the `fresh`
    (unregistered) listings, those whose file has a position are judged the same way: their first delivery's
    row was pruned (stream.staging_retention) while the file kept growing, and it must not load from 0 again."""
    growth = Growth()
    catalog = deployment.catalog
    # A fresh listing is judged only when its file has a consumed position: one lookup, not three, for the
    # rest (a backlog's million new files).
    unregistered = [uri for uri, _, _ in fresh if uri not in resized]
    consumed = catalog.positions.consumed(unregistered) if unregistered else set()
    candidates = dict(resized)
    candidates.update((uri, info) for uri, info, _ in fresh if uri in consumed)
    if not candidates:
        return growth
    now = utcnow()
    later: list[tuple[str, str]] = []
    for uri, state in catalog.positions.states(list(candidates)).items():
        if uri not in resized and (state.position is None or state.position.consumed_end is None):
            continue  # a new file (maybe watched since it waited to settle): registered as usual
        info = candidates[uri]
        verdict = _judge(deployment, uri, info, state)
        if verdict is LOOK_AGAIN:
            later.append((uri, info.key))
        if verdict is None or verdict is LOOK_AGAIN:
            growth.handled.add(uri)
            continue
        position = state.position
        if isinstance(verdict, str):
            start = position.consumed_end if position is not None and position.consumed_end is not None else 0
            table_id = position.table_id if position is not None and position.table_id else state.table_id
            if catalog.positions.mark_rewritten(deployment.staging.root, uri, info.key, verdict,
                                                unknown_uri=delivery_uri(uri, start), size=info.size,
                                                table_id=table_id, now=now):
                growth.rewritten.append((uri, verdict))
            growth.handled.add(uri)
            continue
        assert position is not None and position.consumed_end is not None
        table_id = position.table_id or state.table_id
        if table_id is None:  # pragma: no cover - a position is recorded with its table
            continue
        send_time = to_naive_utc(info.mtime) if info.mtime is not None else None
        tail = delivery_uri(uri, position.consumed_end, info.size)
        growth.appended += catalog.positions.register_tail(position, tail, table_id, info.size, send_time, now)
        growth.handled.add(uri)
    if later:
        catalog.positions.watch(deployment.staging.root, later, now)
    return growth


def _judge(deployment: Deployment, uri: str, info: ObjectInfo,
           state: PositionState) -> str | bool | LookAgain | None:
    """True: the file grew by appending, its tail is due; a string: why it changed other than by appending
    (LOOK_AGAIN: a delivery of it is in flight, or it cannot be read now); None: nothing to do (reported
    already, set aside, or nothing was added past what was read)."""
    position = state.position
    if position is None or position.consumed_end is None:
        if position is not None and position.state != "appending":
            return None  # reported already
        if state.unknown:
            return None  # set aside as unknown: `silt unknown replay` reads the file again whole
        if state.processed is not True:
            return LOOK_AGAIN  # its first delivery is not committed yet
        return (f"is now {info.size:,} bytes but was loaded at {state.size or 0:,}, and it cannot be appended to "
                "(it is compressed, was unreadable, or was loaded before appends were followed): its new bytes are "
                "NOT loaded; put new data under a new key")
    if position.state != "appending":
        return None
    if position.pending_uri is not None:
        return LOOK_AGAIN
    assert position.read_end is not None
    if info.size == position.read_end:
        return None
    if info.size < position.read_end:
        return (f"shrank from {position.read_end:,} to {info.size:,} bytes after {position.consumed_end:,} "
                "were loaded (truncated or rewritten in place); nothing more of it is loaded: put new data under "
                "a new key")
    found = _identity_and_fingerprint(deployment, info.key, position.consumed_end)
    if found is None:
        return LOOK_AGAIN  # gone or unreadable now
    identity, fingerprint = found
    if position.file_identity is not None and identity != position.file_identity:
        return (f"was replaced by another file (device:inode {position.file_identity} is now {identity}) after "
                f"{position.consumed_end:,} bytes were loaded; nothing more of it is loaded")
    if position.fingerprint is not None and fingerprint != position.fingerprint:
        return (f"changed before offset {position.consumed_end:,}, which was already loaded (rewritten in place, "
                "not appended to); nothing more of it is loaded: put new data under a new key")
    return True


def _identity_and_fingerprint(deployment: Deployment, key: str, end: int) -> tuple[str, int] | None:
    try:
        with deployment.staging.open_uri(deployment.staging.uri(key)) as file:
            stat = os.fstat(file.fileno())
            start = max(0, end - FINGERPRINT_BYTES)
            return file_identity(stat), zlib.crc32(os.pread(file.fileno(), end - start, start))
    except (OSError, UnsafeKey):
        return None
