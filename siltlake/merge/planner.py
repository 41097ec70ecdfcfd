"""Which small objects a merge job takes and which ranges it writes (docs/design.md, "Merge").

Pure planning, no I/O: the worker reads the catalog, plans here, writes objects, then commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SmallObject:
    id: int
    content_length: int
    row_count: int
    delayed: bool = False


@dataclass(frozen=True)
class MergedRange:
    """A committed range: its object holds the partition's small objects with lower < id <= upper."""

    lower: int
    upper: int
    content_length: int
    row_count: int


@dataclass(frozen=True)
class MergeLimits:
    merged_object_size: int = 128 * 1024 * 1024
    merge_batch_size: int = 2000
    max_rows: int | None = None
    # Keyed tables keep one range per partition, (0, U]: a later range could not remove a key an earlier
    # range's object holds, so only one object per partition lets a merged keyed partition be read
    # without merge-on-read. The open range is always extended; size and rows never start a new one.
    single_range: bool = False

    def __post_init__(self) -> None:
        if self.merged_object_size < 1 or self.merge_batch_size < 1:
            raise ValueError("merged_object_size and merge_batch_size must be positive")
        if self.max_rows is not None and self.max_rows < 1:
            raise ValueError("max_rows must be positive")


@dataclass
class PlannedRange:
    """One object to write: the open range extended, or a new range chained to the previous one."""

    lower: int
    upper: int
    extends: MergedRange | None
    objects: list[SmallObject] = field(default_factory=list)
    # Running totals of the objects taken (add): fits() asks for them once per candidate, and summing the list
    # each time made planning a 2,000-object job quadratic (60 ms of a 0.9 s merge).
    new_bytes: int = 0
    new_rows: int = 0

    def add(self, candidate: SmallObject) -> None:
        self.objects.append(candidate)
        self.new_bytes += candidate.content_length
        self.new_rows += candidate.row_count
        self.upper = candidate.id

    @property
    def content_length(self) -> int:
        """Estimated size of the written object: what it extends plus the new small objects."""
        return (self.extends.content_length if self.extends else 0) + self.new_bytes

    @property
    def row_count(self) -> int:
        return (self.extends.row_count if self.extends else 0) + self.new_rows

    def fits(self, candidate: SmallObject, limits: MergeLimits) -> bool:
        if not self.objects and self.extends is None:
            return True  # a new range always takes its first object, however large
        if limits.single_range:
            return True
        if self.content_length + candidate.content_length > limits.merged_object_size:
            return False
        return limits.max_rows is None or self.row_count + candidate.row_count <= limits.max_rows


@dataclass(frozen=True)
class MergePlan:
    ranges: tuple[PlannedRange, ...]
    continuing: bool  # objects were left for a follow-up job (merge_batch_size)
    needs_sentinel: bool  # the partition has no ranges yet: the (null, 0) row comes first

    @property
    def objects(self) -> list[SmallObject]:
        return [o for planned in self.ranges for o in planned.objects]

    @property
    def desired_version(self) -> int | None:
        """The partition's desired_manifest_version after this plan: the largest upper bound."""
        return self.ranges[-1].upper if self.ranges else None


def plan_merge(pending: Sequence[SmallObject], last_range: MergedRange | None, limits: MergeLimits) -> MergePlan:
    """Plan one job over a partition's unmerged small objects (ids above the last upper bound).

    Objects are taken in id order, at most merge_batch_size of them. The open (last) range is
    extended while its object stays within the limits; then new ranges start, each one's lower
    bound the previous upper bound (never with limits.single_range: keyed tables). Leftovers make the job
    continuing.
    """
    ordered = sorted(pending, key=lambda o: o.id)
    if last_range is not None and ordered and ordered[0].id <= last_range.upper:
        raise ValueError(f"small object {ordered[0].id} is already covered by the range ending at {last_range.upper}")
    taken = ordered[: limits.merge_batch_size]
    previous_upper = last_range.upper if last_range is not None else 0
    current = PlannedRange(last_range.lower, last_range.upper, extends=last_range) if last_range is not None else None
    planned: list[PlannedRange] = []
    for candidate in taken:
        if current is None or not current.fits(candidate, limits):
            if current is not None and current.objects:
                planned.append(current)
                previous_upper = current.upper
            current = PlannedRange(previous_upper, previous_upper, extends=None)
        current.add(candidate)
    if current is not None and current.objects:
        planned.append(current)
    return MergePlan(
        ranges=tuple(planned),
        continuing=len(ordered) > len(taken),
        needs_sentinel=last_range is None and bool(planned),
    )
