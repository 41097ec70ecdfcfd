"""What a stream round did: the report the driver fills in and the ordered commit adds to."""

from __future__ import annotations

from dataclasses import dataclass, field

from siltlake.stream.notifications import NotificationTally


@dataclass(frozen=True)
class DroppedFields:
    """What one staging object's rows dropped: values of fields that are no column of its table."""

    uri: str
    table: str
    values: int  # field values dropped, over all its rows
    fields: int  # distinct field names
    names: tuple[str, ...]  # the most dropped, a few


@dataclass
class StreamReport:
    listed: int = 0
    swept: int = 0  # of those, files a local root's rolling sweep read (docs/design.md, "Discovery reads what is new")
    remembered: int = 0  # of those, names in changed directories a daemon's record accounted for: not `stat`ed
    registered: int = 0
    processed: int = 0
    records_in: int = 0
    records_loaded: int = 0
    bad_records: int = 0
    live_objects: int = 0
    delayed_objects: int = 0
    bytes_written: int = 0
    skipped_duplicates: int = 0  # decoded here but committed first by another process: dropped
    redelivered: int = 0  # staging objects put again after they were registered: ignored
    expired: int = 0  # listed objects that arrived before the expiry watermark: skipped (stream.staging_retention)
    notified: int = 0  # objects S3 event notifications named that the catalog did not know (stream.notifications)
    notifications: NotificationTally | None = None  # what the notification queue delivered; None without one
    listing_waits: float | None = None  # a round that read only its queue: seconds until its listing is due
    changed_reputs: list[tuple[str, int, int]] = field(default_factory=list)  # (uri, loaded size, new size)
    # Files written in place (stream/appends.py): tails of appended files registered as new deliveries, files
    # found changed other than by appending (uri, why: reported once, not loaded), and local files still being
    # written when the round ended (how many, how long the oldest has waited).
    appended: int = 0
    rewritten: list[tuple[str, str]] = field(default_factory=list)
    unsettled: int = 0
    unsettled_seconds: float = 0.0
    unknown: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    bad_samples: list[tuple[str, str]] = field(default_factory=list)
    error_files: list[str] = field(default_factory=list)
    # Values of fields that are no column of their table, dropped from loaded rows (unknown_fields = "ignore").
    dropped_fields: int = 0
    dropped_by_object: list[DroppedFields] = field(default_factory=list)
    peak_task_rss_bytes: int = 0
    seconds: float = 0.0
    spark_start_seconds: float = 0.0
    waves: int = 0  # waves run, on this host's worker processes or as Spark stages
    local_waves: int = 0  # waves small enough to run on this host's worker processes (stream.in_driver_bytes)

    def checkpoint(self) -> tuple[dict, dict[str, int]]:
        """What restore() needs to undo later changes: the counts, and the length of each list (lists only grow)."""
        values = dict(vars(self))
        return values, {name: len(value) for name, value in values.items() if isinstance(value, list)}

    def restore(self, checkpoint: tuple[dict, dict[str, int]]) -> None:
        values, lengths = checkpoint
        for name, value in values.items():
            if name in lengths:
                del getattr(self, name)[lengths[name] :]
            else:
                setattr(self, name, value)
