"""Following local files by identity through rotation (docs/design.md, "Files written in place and appended to"):
a new name whose file is a followed file (same device:inode, same first bytes) takes over its position; a new file
whose first bytes and the bytes before a position's consumed end match that position's file in the same
directory is a copy of bytes already loaded (logrotate's `copytruncate` copy, `delaycompress`'s later `.gz`), and
only what it holds past that end loads; a file at a known name that is another file, or the same file truncated,
starts from offset 0 under a new generation."""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from siltlake.catalog.position_rows import Position, new_generation
from siltlake.clock import utcnow
from siltlake.delivery_names import delivery_uri, parse_delivery
from siltlake.deployment import Deployment
from siltlake.storage.filesystem import ObjectInfo
from siltlake.stream.identity import (
    HEAD_BYTES,
    FileMark,
    begins_with,
    content_at,
    head_matches,
    mark_of,
    prefix_crcs,
)

# Positions whose file is followed: read by its deliveries ("appending"), or a copy whose bytes were all loaded from
# the file it copies ("copy"); both are found again by identity when their file is renamed.
FOLLOWED = ("appending", "copy")


@dataclass(frozen=True)
class Recognised:
    """What recognise did with a file at a name: its position moved to the name (its growth is judged next), it
    must be looked at again (a delivery of the file it is in flight, or the file it copies still holds unread
    bytes), or it was handled as a copy (`registered`: deliveries registered for its bytes that were not loaded)."""

    moved: bool = False
    later: bool = False
    registered: int = 0


@dataclass
class Followed:
    """What follow_fresh did with the fresh listings it recognised."""

    handled: set[str] = field(default_factory=set)  # URIs not to register as new objects
    moved: dict[str, ObjectInfo] = field(default_factory=dict)  # renamed files: judged for growth under their name
    appended: int = 0  # deliveries registered (a copy's part that was not loaded)
    later: list[tuple[str, str]] = field(default_factory=list)  # (uri, key) to look at again
    # The identities of the others, new files: noted as they are registered (catalog.staging.register)
    notes: list[dict] = field(default_factory=list)


@dataclass
class Known:
    """The positions that may follow the files of some marks: by device:inode, and by their first KiB."""

    same_file: dict[str, list[Position]] = field(default_factory=dict)
    same_head: dict[int, list[Position]] = field(default_factory=dict)
    prefixes: dict[str, dict[int, int]] = field(default_factory=dict)  # a short file's path: its line prefixes
    short_head: dict[int, list[Position]] = field(default_factory=dict)
    # Nothing loaded yet, a delivery from their start in flight: what it loads decides what a copy of them is
    reading_from_start: list[Position] = field(default_factory=list)
    # By directory, the first bytes of registered files judged after the fresh ones in the same listing
    # (follow_fresh's `judged`): one of them may be followed anew from its start (truncated and written again)
    judged_heads: dict[str, list[bytes]] = field(default_factory=dict)


def known_for(deployment: Deployment, marks: dict[str, FileMark]) -> Known:
    """The positions of files that have these marks' ({path: mark}) identities, or whose first full KiB they
    have, or (a file shorter than a KiB) whose whole head one of its line prefixes is (one statement however
    many marks)."""
    positions = deployment.catalog.positions
    root = deployment.staging.root
    known = Known()
    identities = sorted({mark.identity for mark in marks.values()})
    full = {mark.head_crc for mark in marks.values() if mark.head_length == HEAD_BYTES}
    # Every file's line prefixes within its first KiB: a copy of a file consumed short of a KiB may have grown
    # past it since (its position's head is the bytes it had then)
    known.prefixes = {path: prefix_crcs(mark.head) for path, mark in marks.items() if mark.head_length}
    short = {crc for prefixes in known.prefixes.values() for crc in prefixes}
    if not identities and not full and not short:
        return known
    for position in positions.related(root, identities, sorted(full | short)):
        if position.file_identity in identities:
            known.same_file.setdefault(position.file_identity or "", []).append(position)
        if (
            position.head_length == 0
            and position.consumed_end == 0
            and position.pending_uri is not None
            and parse_delivery(position.pending_uri).end != 0  # one that reads no bytes loads nothing
        ):
            known.reading_from_start.append(position)
        if position.compressed or position.head_length is None or position.head_crc is None:
            continue
        if position.head_length == HEAD_BYTES and position.head_crc in full:
            known.same_head.setdefault(position.head_crc, []).append(position)
        elif 0 < position.head_length < HEAD_BYTES and position.head_crc in short:
            known.short_head.setdefault(position.head_crc, []).append(position)
    return known


def follow_fresh(
    deployment: Deployment,
    fresh: list[tuple[str, ObjectInfo, dt.datetime | None]],
    now: dt.datetime,
    judged: Mapping[str, ObjectInfo] | None = None,
) -> Followed:
    """Recognise, among unregistered local files, renamed followed files and copies of loaded bytes. A symbolic
    link is neither: a link made to a file (inside the root) is a new object of its own, as it always was.
    `judged`: the registered files ({uri: listing}) the same listing judges next (stream/appends.py take_growth)."""
    staging = deployment.staging
    followed = Followed()
    marks: dict[str, tuple[ObjectInfo, FileMark, dt.datetime | None]] = {}
    empty: dict[str, tuple[ObjectInfo, FileMark]] = {}
    for uri, info, send_time in fresh:
        path = staging.path(info.key)
        if os.path.islink(path):
            continue  # a new link is another name for a file, not its rename: an ordinary new object
        mark = mark_of(path)
        if mark is not None and mark.head_length:
            marks[uri] = (info, mark, send_time)
        elif mark is not None:
            empty[uri] = (info, mark)
    # An empty file is no rename or copy of loaded bytes, but is noted too: should its first delivery find it gone,
    # the file that takes the name next is told from it (stream/appends.py _taken_since)
    followed.notes = _notes(empty)
    if not marks:
        return followed
    known = known_for(deployment, {staging.path(info.key): mark for info, mark, _ in marks.values()})
    known.judged_heads = _restarting_heads(
        deployment, judged or {}, {posixpath.dirname(info.key) for info, _, _ in marks.values()}
    )
    for uri, (info, mark, send_time) in marks.items():
        found = recognise(deployment, uri, info, mark, send_time, now, known)
        if found is None:
            continue
        followed.handled.add(uri)
        if found.later:
            followed.later.append((uri, info.key))
        elif found.moved:
            followed.moved[uri] = info
        followed.appended += found.registered
    followed.notes += _notes(
        {uri: (info, mark) for uri, (info, mark, _) in marks.items() if uri not in followed.handled}
    )
    return followed


def _notes(files: Mapping[str, tuple[ObjectInfo, FileMark]]) -> list[dict]:
    """What is noted of new files as they are registered (catalog positions.note_files)."""
    return [
        dict(
            uri=uri,
            key=info.key,
            file_identity=mark.identity,
            head_crc=mark.head_crc,
            head_length=mark.head_length,
            compressed=mark.compressed,
        )
        for uri, (info, mark) in files.items()
    ]


def recognise(
    deployment: Deployment,
    uri: str,
    info: ObjectInfo,
    mark: FileMark,
    send_time: dt.datetime | None,
    now: dt.datetime,
    known: Known,
    replacing: Position | None = None,
    own_generations: bool = True,
    vacated: set[str] | None = None,
) -> Recognised | None:
    """The file now at `uri` (a name not registered, or one that held another file): a followed file renamed
    here (same device:inode and first bytes, and the bytes it was consumed to: its position moves here), a copy
    of bytes loaded from a followed file in the same directory, or neither (None: a new file). Without
    own_generations, the positions of the name's earlier files are no candidates for a rename. `vacated` gets
    the name a position moved from: what a caller read of that name's position before is stale."""
    path = deployment.staging.path(info.key)
    same = [
        position
        for position in known.same_file.get(mark.identity, [])
        if position.uri != uri and (own_generations or position.uri.partition("#")[0] != uri)
    ]
    registered = [
        position
        for position in same
        if "#" not in position.uri
        and position.consumed_end is None
        and position.state == "appending"
        and not _reused(deployment, position, mark)
        and head_matches(path, mark.compressed, position.head_length, position.head_crc)
    ]
    if registered and _first_delivery_pending(deployment, registered):
        return Recognised(later=True)  # registered under another name, renamed before its first delivery read it
    renamed = [
        position
        for position in same
        if position.state in FOLLOWED
        and position.consumed_end is not None
        and position.compressed == mark.compressed
        and position.table_id is not None
        and head_matches(path, mark.compressed, position.head_length, position.head_crc)
        and _holds_consumed(path, position)
    ]
    if renamed:
        # The one attached to a name first (a truncated file's older generations are detached), then the newest.
        position = min(renamed, key=lambda p: ("#" in p.uri, -p.change_time.timestamp()))
        if position.pending_uri is not None:
            return Recognised(later=True)  # its delivery in flight finds the file moved, or read it before
        assert position.table_id is not None
        moved = deployment.catalog.positions.move(
            position,
            uri,
            info.key,
            table_id=position.table_id,
            size=position.read_end or 0,
            send_time=send_time,
            now=now,
        )
        if moved and vacated is not None:
            vacated.add(position.uri)
        return Recognised(moved=moved, later=not moved)  # not moved: another process did; looked at again
    alike = list(known.same_head.get(mark.head_crc, [])) if mark.head_length == HEAD_BYTES else []
    # a copy of a file consumed to one of its line ends within its first KiB (its whole head then), whatever the
    # copy's length: the original may have grown past a KiB before it was copied; or of a file whose delivery is in
    # flight (a copy's rest: its head is the whole copy, its consumed end the rest's start), which it waits for
    alike += [
        position
        for crc, length in known.prefixes.get(path, {}).items()
        for position in known.short_head.get(crc, [])
        if position.head_length == length and (position.consumed_end in (0, length) or position.pending_uri is not None)
    ]
    directory = posixpath.dirname(info.key)
    if any(
        position.uri != uri and posixpath.dirname(position.key) == directory and position.state == "appending"
        for position in known.reading_from_start
    ):
        # A file in its directory of which nothing was loaded is being read from its start (a log that a round
        # found grown from empty): this one may be its copy, told once that delivery is in
        return Recognised(later=True)
    if any(head.startswith(mark.head) or mark.head.startswith(head) for head in known.judged_heads.get(directory, [])):
        # It begins as a registered file of its directory that this listing judges after it does: truncated and
        # written again, that file is followed anew from its start, and this one may be its copy (logrotate copies
        # before it truncates). Judged once that file's delivery is in.
        return Recognised(later=True)
    copied = [
        position
        for position in alike
        if position.uri != uri
        and posixpath.dirname(position.key) == directory
        and position.consumed_end is not None
        and position.table_id is not None
        and (position.fingerprint is not None or position.consumed_end == 0)
        and position.state in FOLLOWED
    ]
    return _follow_copy(deployment, uri, info, mark, send_time, copied, now, replacing) if copied else None


def _restarting_heads(
    deployment: Deployment, judged: Mapping[str, ObjectInfo], directories: set[str]
) -> dict[str, list[bytes]]:
    """By directory (of these), the first bytes of the judged registered files that their judging may follow anew
    from their start: nothing loaded of them yet, or shorter than they were loaded to, or no longer beginning with
    the bytes their position loaded. A file that grew from what it loaded is not (a copy of it is judged as always)."""
    listed = {uri: info for uri, info in judged.items() if posixpath.dirname(info.key) in directories}
    if not listed:
        return {}
    states = deployment.catalog.positions.states(list(listed))
    heads: dict[str, list[bytes]] = {}
    for uri, info in listed.items():
        mark = mark_of(deployment.staging.path(info.key))
        if mark is None or not mark.head:
            continue
        position = states[uri].position
        if (
            position is not None
            and position.consumed_end
            and position.head_length is not None
            and position.head_crc is not None
            and mark.size >= position.consumed_end
            and begins_with(mark.head, position.head_crc, position.head_length)
        ):
            continue
        heads.setdefault(posixpath.dirname(info.key), []).append(mark.head)
    return heads


def _reused(deployment: Deployment, position: Position, mark: FileMark) -> bool:
    """Whether a file with the device:inode a registered file had is another file that took its inode number:
    nothing is at the registered file's name any more, and this one was written after its position last changed
    (a file renamed keeps its mtime). The file system hands a deleted file's inode number to the next file it
    creates; the same first bytes (a shipper's files often begin alike) do not make it the same file."""
    if os.path.lexists(deployment.staging.path(position.key)):
        return False
    return dt.datetime.fromtimestamp(mark.mtime, dt.UTC).replace(tzinfo=None) > position.change_time


def _holds_consumed(path: str, position: Position) -> bool:
    """Whether a plain file holds the bytes a position of its device:inode and first bytes was consumed to (the
    CRC before the consumed end): a file that took a deleted file's inode number with the same first KiB does
    not. A gzip file's position may count decompressed bytes: its first bytes and identity confirm it."""
    if position.compressed or not position.consumed_end or position.fingerprint is None:
        return True
    content = content_at(path, False, position.consumed_end)
    return content is not None and content.crc_before == position.fingerprint


def _first_delivery_pending(deployment: Deployment, positions: list[Position]) -> bool:
    """Whether one of these names (each noted with the file's identity when it was registered) has its first
    delivery still in flight: its task may read the file or what took the name, and its commit says which."""
    states = deployment.catalog.positions.states([position.uri for position in positions])
    return any(state.processed is False and not state.unknown for state in states.values())


def _follow_copy(
    deployment: Deployment,
    uri: str,
    info: ObjectInfo,
    mark: FileMark,
    send_time: dt.datetime | None,
    copied: list[Position],
    now: dt.datetime,
    replacing: Position | None,
) -> Recognised | None:
    """A file with the first bytes of followed files in its directory is a copy of one when its content holds
    that file's bytes up to its consumed end (same CRC before it). All of it loaded: it is known and loads
    nothing. The original still holds the rest at its name (a copy taken before logrotate truncates it, or a
    backup): the rest is the original's to load; the copy is looked at again until it is loaded, or until the
    original no longer holds it (truncated, replaced, deleted): then the rest loads, once, from the copy, and the
    original's position moves past it."""
    staging = deployment.staging
    positions = deployment.catalog.positions
    path = staging.path(info.key)
    if any(original.pending_uri is not None for original in copied):
        # Where a delivery in flight stops decides what the copy holds more: the original's tail, or another
        # copy's rest (should that one read nothing, its original's position moves back: the rest is this one's)
        return Recognised(later=True)

    def skipped(original: Position, size: int, fingerprint: int | None, reason: str) -> Recognised:
        """A copy whose bytes were all loaded from `original`: known (state "copy"), loading nothing."""
        assert original.table_id is not None
        done = positions.skip_copy(
            staging.root,
            uri,
            info.key,
            table_id=original.table_id,
            identity=mark.identity,
            head_crc=mark.head_crc,
            head_length=mark.head_length,
            compressed=mark.compressed,
            size=size,
            fingerprint=fingerprint,
            send_time=send_time,
            now=now,
            replacing=replacing,
            reason=f"a copy of {original.key!r}{reason}",
        )
        return Recognised(later=not done)

    # The furthest consumed first; of those alike, one attached to a name (a copy renamed, holding the bytes)
    for original in sorted(copied, key=lambda position: (-(position.consumed_end or 0), "#" in position.uri)):
        assert original.consumed_end is not None and original.table_id is not None
        content = content_at(path, mark.compressed, original.consumed_end)
        whole = (
            content_at(path, False, content.length)
            if content is not None and content.crc_before is None and not mark.compressed
            else None
        )
        if whole is not None and _original_holds(deployment, original, path, False, whole.length):
            # Shorter than what was loaded, and the original still begins with its bytes: a copy being written
            # (logrotate copies, then truncates). Known, loading nothing; judged again as it grows.
            return skipped(
                original,
                whole.length,
                whole.crc_before,
                f" being written: its {whole.length:,} bytes were loaded from that file",
            )
        if content is None or content.crc_before != _loaded_crc(original):
            continue
        if content.length <= original.consumed_end:
            whole = None if mark.compressed else content_at(path, False, info.size)
            # Read a moment ago, so there; should it vanish meanwhile, this fails as it always has.
            assert mark.compressed or whole is not None
            return skipped(
                original,
                mark.size,
                None if whole is None else whole.crc_before,
                f": its {content.length:,} bytes were loaded from that file",
            )
        holds = _original_holds(deployment, original, path, mark.compressed, content.length)
        if holds is None:
            continue  # the original still holds what it loaded and then other bytes: this is no copy of it
        if holds:
            return Recognised(later=True)
        end = content_at(path, mark.compressed, content.length)
        assert end is not None and end.crc_before is not None
        delivery = delivery_uri(
            uri,
            original.consumed_end,
            content.length if mark.compressed else info.size,
            generation=new_generation(),
            identity=mark.identity,
            last=True,
            plain=mark.compressed,
            head=(mark.head_crc, mark.head_length),
            advances=(original.id, content.length, original.read_end or original.consumed_end),
        )
        started = positions.start_file(
            staging.root,
            uri,
            info.key,
            replacing=replacing,
            table_id=original.table_id,
            identity=mark.identity,
            head_crc=mark.head_crc,
            head_length=mark.head_length,
            compressed=mark.compressed,
            start=original.consumed_end,
            fingerprint=original.fingerprint,
            delivery=delivery,
            size=info.size,
            send_time=send_time,
            rotated=True,
            now=now,
            advance=(original, content.length, end.crc_before),
        )
        return Recognised(later=not started, registered=int(started))
    return None


def _loaded_crc(position: Position) -> int | None:
    """The CRC of the bytes before a position's consumed end: none before 0 (a file followed anew from 0 whose
    first delivery found it renamed, or truncated, has no fingerprint yet)."""
    return position.fingerprint if position.consumed_end else zlib.crc32(b"")


def _original_holds(
    deployment: Deployment, original: Position, copy_path: str, compressed: bool, length: int
) -> bool | None:
    """Whether the original file is still at its name, the same file with what it loaded unchanged, holding the
    copy's `length` bytes (the same CRC before that end as the copy): then they are its to load (True). None: it
    holds what it loaded but not the copy's bytes after it, so the other file only begins as it does. False: it
    was truncated, replaced, deleted or moved away since, and the copy is all that holds the bytes."""
    if "#" in original.uri:
        return False  # detached: its file was truncated, replaced or moved away
    path = deployment.staging.path(original.key)
    mark = mark_of(path)
    if mark is None or mark.identity != original.file_identity or mark.compressed:
        return False
    loaded = content_at(path, False, original.consumed_end or 0)
    if loaded is None or loaded.crc_before != _loaded_crc(original):
        return False  # truncated (copytruncate) since
    if mark.size < length:
        return None
    theirs = content_at(path, False, length)
    ours = content_at(copy_path, compressed, length)
    if theirs is None or ours is None:
        return False
    return True if theirs.crc_before == ours.crc_before else None


def restart(
    deployment: Deployment,
    uri: str,
    info: ObjectInfo,
    position: Position | None,
    mark: FileMark,
    send_time: dt.datetime | None,
    now: dt.datetime,
    start: int = 0,
    fingerprint: int | None = None,
) -> bool:
    """Follow the file now at a known name as a new file (another file took the name, or the file was truncated):
    its position starts at `start` (0) under a new generation; the one the name had is detached. stream.exclude
    does not apply at a known name: the file may be the successor of a followed file that no round saw at its own
    name (a delivery in flight there while logrotate rotated twice), and leaving it out would lose it silently."""
    table_id = position.table_id if position is not None and position.table_id else None
    if table_id is None:
        state = deployment.catalog.positions.states([uri])[uri]
        table_id = state.table_id
    if table_id is None:  # pragma: no cover - a known name has its table
        return False
    delivery = delivery_uri(
        uri,
        start,
        info.size,
        generation=new_generation(),
        identity=mark.identity,
        head=(mark.head_crc, mark.head_length),
    )
    return deployment.catalog.positions.start_file(
        deployment.staging.root,
        uri,
        info.key,
        replacing=position,
        table_id=table_id,
        identity=mark.identity,
        head_crc=mark.head_crc,
        head_length=mark.head_length,
        compressed=mark.compressed,
        start=start,
        fingerprint=fingerprint,
        delivery=delivery,
        size=info.size,
        send_time=send_time,
        rotated=False,
        now=now,
    )


def resume_file(deployment: Deployment, uri: str, offset: int) -> Position:
    """`silt staging resume`: follow a stopped file again from `offset`. SiltError when no position has the URI,
    the file is gone, or it is shorter than the offset."""
    from siltlake.errors import SiltError

    staging = deployment.staging
    positions = deployment.catalog.positions
    state = positions.states([uri])[uri]
    if state.position is None:
        raise SiltError(f"{uri} is no local staging file followed in place (`silt status` lists the stopped ones)")
    path = staging.path(state.position.key)
    mark = mark_of(path)
    content = content_at(path, False, offset) if mark is not None else None  # offsets count bytes as stored
    if mark is None or content is None:
        raise SiltError(f"{uri}: the file {path} cannot be read now; nothing changed")
    if content.crc_before is None:
        raise SiltError(
            f"{uri}: the file holds {content.length:,} bytes, fewer than the offset {offset:,}; nothing changed"
        )
    resumed = positions.resume(
        uri,
        offset=offset,
        identity=mark.identity,
        fingerprint=content.crc_before,
        head_crc=mark.head_crc,
        head_length=mark.head_length,
        compressed=mark.compressed,
        now=utcnow(),
    )
    assert resumed is not None
    return resumed
