"""Files written in place and appended to, on a local staging root (docs/design.md, "Files written in place and
appended to"): a listed file still being written waits until it settles; a registered file that grew by whole
records has its tail registered as a new delivery from where the last one stopped; one that changed other than
by appending is reported, once, and never loaded again."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

from siltlake.catalog.position_rows import Position, PositionState
from siltlake.clock import UtcBound, to_naive_utc, utcnow
from siltlake.delivery_names import delivery_uri
from siltlake.deployment import Deployment
from siltlake.storage.filesystem import ObjectInfo, UnsafeKey
from siltlake.stream.identity import FileMark, content_at, head_matches, mark_of
from siltlake.stream.rotation import FOLLOWED, Recognised, follow_fresh, known_for, recognise, restart


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
    due: dict[str, ObjectInfo] = field(default_factory=dict)  # watched files whose trailing fragment is final now


@dataclass
class Growth:
    appended: int = 0  # tails registered as new deliveries
    rewritten: list[tuple[str, str]] = field(default_factory=list)  # (uri, why), reported this round
    handled: set[str] = field(default_factory=set)  # URIs judged here (not plain re-puts)
    later: set[str] = field(default_factory=set)  # URIs judged, to judge again (LOOK_AGAIN): nothing decided yet
    notes: list[dict] = field(default_factory=list)  # the identities of new local files, noted as registered


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
    positions, waits = deployment.catalog.positions, deployment.catalog.waits
    now = utcnow()
    waiting = {item.uri: item for item in waits.waiting(staging.root)} if watched else {}
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
    result = Settling([])
    for position in positions.watched(staging.root, since) if watched else []:
        if position.key in listed_keys:
            continue
        info = _look(deployment, position.key)
        if info is None:
            continue
        if info.size != position.read_end:
            candidates.append(info)
            listed_keys.add(position.key)
        elif (
            position.consumed_end is not None
            and position.read_end is not None
            and position.consumed_end < position.read_end
            and position.pending_uri is None
            and _fragment_due(deployment, position, info.mtime.timestamp() if info.mtime else time.time())
        ):
            result.due[staging.uri(info.key)] = info  # its trailing fragment is final now: judged, not listed
    result.looked = listed_keys - first_listed
    hold: list[tuple[str, str, int, dt.datetime]] = []
    taken: list[tuple[str, str]] = []
    # A file no earlier round held back and last written before this is ready as it is: a daily check pass brings
    # every file of the root here, and most of a listing is such files.
    settled_before = UtcBound(now - dt.timedelta(seconds=config.settle_time))
    held_keys = {item.key for item in waiting.values()}
    for info in candidates:
        mtime = info.mtime
        if info.key not in held_keys and (
            not config.settle_time or mtime is not None and mtime <= settled_before.like(mtime)
        ):
            result.ready.append(info)
            continue
        changed = to_naive_utc(info.mtime) if info.mtime is not None else now
        age = (now - changed).total_seconds()
        uri = staging.uri(info.key)
        first_seen = waiting[uri].first_seen if uri in waiting else now
        if (
            not config.settle_time
            or age >= config.settle_time
            or (now - first_seen).total_seconds() >= config.settle_limit
        ):
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
        waits.wait(staging.root, hold, now)
    if taken:
        positions.watch(staging.root, taken, now)  # seen written in place: its growth is looked for by key
    if taken or gone:
        waits.stop_waiting([uri for uri, _ in taken] + gone)
    return result


def _look(deployment: Deployment, key: str) -> ObjectInfo | None:
    try:
        return deployment.staging.info(key)
    except (OSError, UnsafeKey):
        return None


def take_growth(
    deployment: Deployment,
    resized: dict[str, ObjectInfo],
    fresh: list[tuple[str, ObjectInfo, dt.datetime | None]],
    reput: dict[str, ObjectInfo] | None = None,
) -> Growth:
    """Judge registered local files listed with another size than they were registered at ({uri: listing}):
    register the tail of each that grew by appending, follow each that is another file now or was truncated from
    its start, report each that changed in a way that cannot be told from a rewrite. Of the `fresh` (unregistered)
    listings, renamed followed files and copies of loaded bytes are recognised (stream/rotation.py), and those whose
    file has a position are judged the same way: their first delivery's row was pruned
    (stream.staging_retention) while the file kept growing, and it must not load from 0 again. Of the `reput`
    (registered names with a newer mtime, the same size), those holding another file than their position's or
    another size than was read are judged too (_shifted_in): a rotation may shift a file into a name whose first
    file had its size, a truncated file may grow again to it; the same object put again is a redelivery."""
    growth = Growth()
    catalog = deployment.catalog
    now = utcnow()
    # A fresh listing is judged only when its file has a consumed position: one lookup, not three, for the
    # rest (a backlog's million new files).
    unregistered = [uri for uri, _, _ in fresh if uri not in resized]
    consumed = catalog.positions.consumed(unregistered) if unregistered else set()
    followed = follow_fresh(
        deployment,
        [item for item in fresh if item[0] not in consumed and item[0] not in resized],
        now,
        judged={**(reput or {}), **resized},
    )
    growth.handled |= followed.handled
    growth.notes = followed.notes
    growth.appended += followed.appended
    candidates = dict(resized)
    candidates.update((uri, info) for uri, info, _ in fresh if uri in consumed)
    candidates.update(followed.moved)
    reput_only = {uri: info for uri, info in (reput or {}).items() if uri not in candidates}
    candidates.update(reput_only)
    send_times = {uri: send_time for uri, _, send_time in fresh}
    later: list[tuple[str, str]] = list(followed.later)
    if not candidates:
        if later:
            catalog.positions.watch(deployment.staging.root, later, now)
        growth.later = {uri for uri, _ in later}
        return growth
    states = catalog.positions.states(list(candidates))
    shifted = _shifted_in(deployment, {uri: (states[uri].position, info) for uri, info in reput_only.items()})
    # Names a position moved away from while judging others (logrotate shifted access.log to .1, judged first):
    # their state is read again before they are judged, or the name's next file would wait a round.
    vacated: set[str] = set()
    for uri in list(states):
        if uri in vacated:
            states.update(catalog.positions.states([uri]))
        state = states[uri]
        if (
            uri in shifted
            and state.processed is False
            and not state.unknown
            and _taken_since(deployment.staging.path(candidates[uri].key), state.position)
        ):
            # Another file took a name whose first delivery is in flight: that delivery reads no other file (or
            # does, when it begins with the name's bytes), and its commit says which; the put is judged after it.
            # (The name's own file, rewritten in place, is read by that delivery: a redelivery, as always.)
            later.append((uri, candidates[uri].key))
            continue
        if (
            uri not in resized
            and uri not in followed.moved
            and not (uri in shifted and state.unknown)  # its first delivery found another file: this one is judged
            and (state.position is None or (state.position.consumed_end is None and state.position.state != "vacated"))
        ):
            continue  # a new file (maybe watched since it waited to settle): registered as usual
        if uri in reput_only and uri not in shifted:
            continue  # put again in place, as it was read: counted as such
        info = candidates[uri]
        send_time = send_times.get(uri) or (to_naive_utc(info.mtime) if info.mtime is not None else None)
        verdict = _judge(deployment, uri, info, state, send_time, now, vacated)
        if verdict is LOOK_AGAIN:
            later.append((uri, info.key))
        if isinstance(verdict, Restarted):
            growth.appended += verdict.registered
        if verdict is None or verdict is LOOK_AGAIN or isinstance(verdict, Restarted):
            growth.handled.add(uri)
            continue
        position = state.position
        if isinstance(verdict, str):
            start = position.consumed_end if position is not None and position.consumed_end is not None else 0
            table_id = position.table_id if position is not None and position.table_id else state.table_id
            if catalog.positions.mark_rewritten(
                deployment.staging.root,
                uri,
                info.key,
                verdict,
                unknown_uri=delivery_uri(uri, start),
                size=info.size,
                table_id=table_id,
                now=now,
            ):
                growth.rewritten.append((uri, verdict))
            growth.handled.add(uri)
            continue
        assert isinstance(verdict, Grew)
        position = verdict.position  # the file's own: it may have been renamed here just now
        assert position.consumed_end is not None
        table_id = position.table_id or state.table_id
        if table_id is None:  # pragma: no cover - a position is recorded with its table
            continue
        tail = delivery_uri(
            uri,
            position.consumed_end,
            info.size,
            generation=position.generation,
            identity=position.file_identity,
            head=(position.head_crc, position.head_length),
            last=verdict.last,
            plain=verdict.plain,
            continues=position.fragment_end is not None and position.fragment_end == position.consumed_end,
        )
        growth.appended += catalog.positions.register_tail(position, tail, table_id, info.size, send_time, now)
        growth.handled.add(uri)
    if later:
        catalog.positions.watch(deployment.staging.root, later, now)
    growth.later = {uri for uri, _ in later}
    return growth


def _shifted_in(deployment: Deployment, reputs: dict[str, tuple[Position | None, ObjectInfo]]) -> set[str]:
    """Of registered names listed again at the size they were registered at with a newer mtime, those to judge by
    their position: the name was vacated; its own file was truncated and grew back to that size (another size than
    was read, or the size that was read but no longer its first bytes); or another file took it that a rotation
    shifted in: a followed file (its device:inode and first bytes are another name's position's), or one whose
    first bytes differ from the name's file. A new inode with the name's first bytes that no other name follows is
    the object put again (a shipper uploads and renames into place): a redelivery, counted as such and not loaded.
    One statement for all of them."""
    judged: set[str] = set()
    others: dict[str, tuple[str, FileMark]] = {}
    for uri, (position, info) in reputs.items():
        if position is None or position.state not in ("appending", "copy", "vacated"):
            continue
        if position.state == "appending" and position.read_end is not None and info.size != position.read_end:
            judged.add(uri)
            continue
        path = deployment.staging.path(info.key)
        mark = mark_of(path)
        if mark is None:
            continue
        if position.state != "vacated" and position.file_identity in (None, mark.identity):
            # Its own file, judged when it no longer begins as it did: truncated (copytruncate while its delivery
            # was in flight) and written again to exactly the size that was read.
            if position.state == "appending" and not head_matches(
                path, mark.compressed, position.head_length, position.head_crc
            ):
                judged.add(uri)
            continue
        if position.state == "vacated" or not head_matches(
            path, mark.compressed, position.head_length, position.head_crc
        ):
            judged.add(uri)
        else:
            others[uri] = (path, mark)
    if others:
        identities = sorted({mark.identity for _, mark in others.values()})
        followed = deployment.catalog.positions.by_identity(deployment.staging.root, identities)
        for uri, (path, mark) in others.items():
            if any(
                position.uri != uri
                and position.file_identity == mark.identity
                and position.state in FOLLOWED
                and head_matches(path, mark.compressed, position.head_length, position.head_crc)
                for position in followed
            ):  # an inode number reused by another file has other first bytes
                judged.add(uri)
    return judged


@dataclass(frozen=True)
class Restarted:
    """_judge's answer for a file followed anew under its name (another file took it, or it was truncated)."""

    registered: int


@dataclass(frozen=True)
class Grew:
    """_judge's answer for a file whose tail is due, from its position's consumed end; `last`: its trailing
    fragment is its last record (rotated away and settled, or unchanged for stream.fragment_final_after)."""

    position: Position
    last: bool = False
    plain: bool = False  # a compressed copy's rest, counted in decompressed bytes


def _judge(
    deployment: Deployment,
    uri: str,
    info: ObjectInfo,
    state: PositionState,
    send_time: dt.datetime | None,
    now: dt.datetime,
    vacated: set[str],
    again: bool = True,
) -> str | Grew | LookAgain | Restarted | None:
    """Grew: the file grew by appending, or its trailing fragment is final: its tail is due; a string: why
    following it stopped (it changed in a way that cannot be told from a rewrite); Restarted: it is followed anew
    from its start, or as a copy; LOOK_AGAIN: a delivery of it is in flight, or it cannot be read now; None:
    nothing to do. `vacated` gets the names positions moved away from (recognise)."""
    position = state.position
    path = deployment.staging.path(info.key)
    if position is None or (position.consumed_end is None and position.state == "appending"):
        if position is not None and position.state != "appending":
            return None  # reported already
        if state.unknown and not _taken_since(path, position):
            return None  # set aside as unknown: `silt unknown replay` reads the file again whole
        if not state.unknown and state.processed is not True:
            return LOOK_AGAIN  # its first delivery is not committed yet
        if not state.unknown:
            return (
                f"is now {info.size:,} bytes but was loaded at {state.size or 0:,}, and it cannot be appended to "
                "(it was unreadable, or was loaded before appends were followed): its new bytes are NOT loaded; "
                "`silt staging resume` follows it again from an offset"
            )
        # Its first delivery found the file gone (renamed away by a rotation) and another file is at the name
        # now: judged below as a file that took a known name
        assert position is not None
    if position.state not in ("appending", "copy", "vacated"):
        return None  # stopped: reported already
    if position.pending_uri is not None:
        return LOOK_AGAIN

    mark = mark_of(path)
    if mark is None:
        return LOOK_AGAIN  # gone or unreadable now

    def recognised(replacing: Position | None, own_generations: bool = False) -> Recognised | None:
        """The file as a followed file renamed here or a copy of loaded bytes (stream/rotation.py), or neither."""
        known = known_for(deployment, {path: mark})
        return recognise(
            deployment, uri, info, mark, send_time, now, known, replacing, own_generations, vacated=vacated
        )

    def verdict(found: Recognised) -> str | Grew | LookAgain | Restarted | None:
        if found.moved and again:  # judged once more, on the position the rename moved to the name
            state = deployment.catalog.positions.states([uri])[uri]
            return _judge(deployment, uri, info, state, send_time, now, vacated, again=False)
        return LOOK_AGAIN if found.later or found.moved else Restarted(found.registered)

    if position.state == "vacated" or position.file_identity not in (None, mark.identity):
        # Another file is at the name: a followed file renamed here (logrotate shifts access.log.1 to .2 and
        # access.log to .1 between two rounds), a copy of loaded bytes, or a new file.
        found = recognised(position if position.state != "vacated" else None, own_generations=True)
        if found is not None:
            return verdict(found)
        return _replaced(deployment, uri, info, state, position, mark, send_time, now)
    if position.state == "copy" and (mark.compressed or mark.size <= (position.read_end or 0)):
        return None  # its bytes were loaded from the file it copies
    if position.state == "copy":
        # Listed while it was being written (logrotate copies, then truncates), grown since: a copy again
        found = recognised(position)
        if found is not None:
            return verdict(found)
        return (
            f"is now {info.size:,} bytes: it was a copy of bytes loaded from another file, the first "
            f"{position.read_end:,} of them, and what it holds now is no longer that file's: its new bytes are NOT "
            f"loaded; `silt staging resume {uri} --from-offset N` follows it from offset N"
        )
    assert position.read_end is not None and position.consumed_end is not None
    if (
        mark.compressed
        and position.compressed
        and position.rotated
        and position.generation is not None
        and position.consumed_end == position.read_end
        and (mark.size < position.consumed_end or _decompressed_before(path, position))
    ):
        # A compressed copy's rest whose delivery found it renamed before reading it: its position still counts
        # decompressed bytes; the rest is delivered again from there (`;plain`). A short copy may be larger
        # compressed than what was loaded of it: its decompressed bytes before the consumed end say so.
        return Grew(position, last=True, plain=True)
    truncated = (
        mark.size < position.read_end
        or mark.compressed != position.compressed
        or not head_matches(path, mark.compressed, position.head_length, position.head_crc)
    )
    # Nothing of it loaded yet, and grown: judged as a new file is (logrotate creates its copy empty, then writes
    # it; a listing in between registered the empty file, and what it holds now is a followed file's bytes).
    fresh = position.consumed_end == 0 and mark.size > position.read_end
    if truncated or fresh:  # copytruncate, or written again from its start, or its inode reused: new content
        # A followed file may have taken the name with the inode number of the file the position names (deleted
        # since): it is that file renamed, not this one truncated. The name's own earlier generations are no
        # candidates: a truncated file keeps its inode, and an empty earlier one's head matches any file.
        found = recognised(position)
        if found is not None:
            return verdict(found)
        if truncated:
            return Restarted(int(restart(deployment, uri, info, position, mark, send_time, now)))
    if mark.size == position.read_end:
        if position.consumed_end < position.read_end and _fragment_due(deployment, position, mark.mtime):
            return Grew(position, last=True)
        return None
    found_content = content_at(path, False, position.consumed_end)
    if found_content is None:
        return LOOK_AGAIN
    if position.fingerprint is not None and found_content.crc_before != position.fingerprint:
        return (
            f"changed before offset {position.consumed_end:,}, which was already loaded, while its first bytes "
            "and its device:inode stayed the same (rewritten in place, not appended to): nothing more of it is "
            f"loaded; `silt staging resume {uri} --from-offset N` follows it again from offset N"
        )
    return Grew(position)


def _decompressed_before(path: str, position: Position) -> bool:
    """Whether the gzip file's decompressed bytes before the position's consumed end are those it loaded."""
    assert position.consumed_end is not None
    content = content_at(path, True, position.consumed_end)
    return content is not None and content.crc_before is not None and content.crc_before == position.fingerprint


def _taken_since(path: str, position: Position | None) -> bool:
    """Whether the file at a registered name is another than the one noted when the name was registered."""
    if position is None or position.file_identity is None:
        return False
    mark = mark_of(path)
    return mark is not None and mark.identity != position.file_identity


def _replaced(
    deployment: Deployment,
    uri: str,
    info: ObjectInfo,
    state: PositionState,
    position: Position,
    mark: FileMark,
    send_time: dt.datetime | None,
    now: dt.datetime,
) -> str | Restarted:
    """Another file took the name and is no followed file nor a copy. One whose first bytes differ, or taking a
    name of which nothing was loaded (a vacated name, an empty file), is new from its start; one with the same
    first bytes that holds the loaded bytes and more (an atomic re-put of the file grown) goes on from the
    consumed end; one with the same first bytes whose loaded part differs or cannot be compared (gzip) stops."""
    path = deployment.staging.path(info.key)
    replacing = position if position.state != "vacated" else None
    if (
        position.state != "appending"
        or not position.consumed_end
        or not position.head_length
        or not head_matches(path, mark.compressed, position.head_length, position.head_crc)
    ):
        return Restarted(int(restart(deployment, uri, info, replacing, mark, send_time, now)))
    content = content_at(path, False, position.consumed_end) if not mark.compressed else None
    if content is not None and content.crc_before == position.fingerprint:
        return Restarted(
            int(
                restart(
                    deployment, uri, info, position, mark, send_time, now, position.consumed_end, position.fingerprint
                )
            )
        )
    return (
        f"is now {info.size:,} bytes but was loaded at {state.size or 0:,}: another file (device:inode "
        f"{mark.identity}, was {position.file_identity}) took its name with the same first bytes, and whether "
        "it holds what was loaded cannot be told: its new bytes are NOT loaded; `silt staging resume "
        f"{uri} --from-offset N` follows it from offset N"
    )


def _fragment_due(deployment: Deployment, position: Position, mtime: float) -> bool:
    """A trailing fragment is final once its file is rotated away and settled, or unchanged for
    stream.fragment_final_after."""
    config = deployment.config.stream
    age = time.time() - mtime
    bound = config.fragment_final_after if config.settle_time else 0
    return age >= bound or (position.rotated and age >= config.settle_time)
