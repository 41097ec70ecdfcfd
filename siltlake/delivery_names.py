"""The grammar of a later delivery's URI: `<uri>#offset=<start>-<end>` and its flags. The stream writes these
names and the catalog reads their ends, generations and advances; both parse them here, one way."""

from __future__ import annotations

from dataclasses import dataclass

OFFSET_MARK = "#offset="


@dataclass(frozen=True)
class DeliveryName:
    """What a delivery URI says: `<uri>#offset=<start>-<end>[;g=<generation>;f=<device:inode>][;h=<crc>:<length>]
    [;a=<position id>:<end>:<read end>][;last][;cont][;plain]`. The generation keeps two files that had the same
    name apart; `h`: the CRC-32 of the file's first `length` bytes when it was registered (a new file that took a
    deleted one's inode is told from it); `a`: a copy's rest whose registration moved its original's position
    (delivery_uri); `last`: the file is rotated away or done, its trailing fragment is its last record; `cont`:
    its first line continues a fragment an earlier delivery took as final (read again from the line's start);
    `plain`: the offsets count the decompressed bytes of a gzip file (a rotated, compressed copy's part that was
    not loaded from the file it copies)."""

    base: str
    start: int = 0
    end: int | None = None
    generation: str | None = None
    identity: str | None = None
    last: bool = False
    continues: bool = False
    plain: bool = False
    head: tuple[int, int] | None = None  # (CRC-32, length) of the file's first bytes
    advances: tuple[int, int, int] | None = None  # (position id, end, read end)

    @property
    def registered_end(self) -> int:
        """The end the delivery was registered to; its start when it names none."""
        return self.start if self.end is None else self.end


def parse_delivery(uri: str) -> DeliveryName:
    """The parts of a delivery URI. A stored URI never holds '#' of its own (keys are percent-encoded), so
    '#offset=' marks a later delivery of the same file; a URI without it is a first delivery (start 0, no end)."""
    base, mark, rest = uri.partition(OFFSET_MARK)
    if not mark:
        return DeliveryName(uri)
    span, *flags = rest.split(";")
    start, _, end = span.partition("-")
    fields = dict(flag.partition("=")[::2] for flag in flags)
    crc, _, length = (fields.get("h") or "").partition(":")
    advances = fields.get("a")
    return DeliveryName(
        base,
        int(start),
        int(end) if end else None,
        fields.get("g") or None,
        fields.get("f") or None,
        "last" in fields,
        "cont" in fields,
        "plain" in fields,
        (int(crc), int(length)) if length else None,
        _three_ints(advances) if advances else None,
    )


def _three_ints(text: str) -> tuple[int, int, int]:
    first, second, third = (int(value) for value in text.split(":"))
    return first, second, third


def delivery_uri(
    uri: str,
    start: int,
    end: int | None = None,
    *,
    generation: str | None = None,
    identity: str | None = None,
    last: bool = False,
    continues: bool = False,
    plain: bool = False,
    head: tuple[int | None, int | None] | None = None,
    advances: tuple[int, int, int] | None = None,
) -> str:
    """A later delivery's URI: `<uri>#offset=<start>-<end>` and its flags (DeliveryName). The end (the size it was
    registered at) keeps it unique: a delivery that consumed nothing (half a line) leaves the next one starting at
    the same offset; the generation keeps the deliveries of another file that had the name apart. `advances`
    (position id, end, read end): a copy's rest whose registration moved its original's position from `start`
    to `end` (its read end was `read end`): a delivery that reads nothing moves it back (positions.release_pending)."""
    out = f"{uri}{OFFSET_MARK}{start}" + (f"-{end}" if end is not None else "")
    if generation:
        out += f";g={generation}"
    if identity:
        out += f";f={identity}"
    if head is not None and head[0] is not None and head[1]:
        out += f";h={head[0]}:{head[1]}"
    if advances is not None:
        out += ";a=" + ":".join(str(value) for value in advances)
    return out + "".join(f";{flag}" for flag, on in (("last", last), ("cont", continues), ("plain", plain)) if on)
