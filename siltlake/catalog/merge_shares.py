"""Fair shares of the merge queue (docs/design.md "Merge", Fairness): which due job a claim takes next.

The levels an operator names (merge.fair_shares: schema, then table) each keep a turn: the number of the last job
given to a schema or table, from one counter over the whole queue. A claim takes, at each level in order, the
schema (then the table within it) whose last turn is the oldest, never-served first and ties by its oldest job, and
gives it that table's oldest due job. A level served goes behind every level waiting, so while a schema has a job it
may take, every other schema is served at most once before it: a backlog of many tables in one schema never holds
another schema's job longer than one job of each of the other schemas."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence

from sqlalchemy.engine import Connection

from siltlake.catalog import merge_statements as statements
from siltlake.catalog import schema as s

FAIR_LEVELS = ("schema", "table")
_COUNTER = ("", "")  # the merge_shares row holding the last turn handed out


def _names(row, levels: Sequence[str]) -> tuple[str, ...]:  # a candidate row
    return tuple(row.schema_name if level == "schema" else str(row.table_id) for level in levels)


class FairOrder:
    """The claim's candidates (oldest schedule first) handed out level by level, least recently served first.

    Iterating gives each candidate once, in that order; `served` records that the one given was claimed (its levels
    go to the back). One not served only leaves its table's next candidate next in line."""

    def __init__(self, c: Connection, candidates: Sequence, levels: Sequence[str]) -> None:
        self._levels = tuple(levels)
        self._leaves: dict[tuple[str, ...], deque] = {}
        for position, row in enumerate(candidates):
            path = _names(row, self._levels)
            leaf = self._leaves.get(path)
            if leaf is None:
                leaf = self._leaves[path] = deque()
            leaf.append((position, row, path))
        keys = {(level, name) for path in self._leaves for level, name in zip(self._levels, path, strict=True)}
        self._turns: dict[tuple[str, str], int] = {}
        self._served: set[tuple[str, str]] = set()
        # One schema and one table due: the order is the same whatever the turns, and the claim neither reads nor
        # writes them. The level served keeps an older turn, which gives it at most one job ahead of another
        # later: the bound holds.
        self._contested = len(keys) > len(self._levels)
        if self._contested:
            names = sorted({name for _, name in keys} | {""})
            rows = c.execute(statements.share_turns(), {"names": names}).all()
            self._turns = {
                (row.level, row.name): row.last_turn
                for row in rows
                if (row.level, row.name) in keys or (row.level, row.name) == _COUNTER
            }
        self._counter = self._turns.pop(_COUNTER, 0)
        self._path: tuple[str, ...] = ()

    def __iter__(self) -> Iterator:
        """Candidates in fair order until none is left; the caller says of each whether it was served."""
        while self._leaves:
            path = self._pick()
            _, row, self._path = self._leaves[path].popleft()
            if not self._leaves[path]:
                del self._leaves[path]
            yield row

    def _pick(self) -> tuple[str, ...]:
        paths = list(self._leaves)
        for depth, level in enumerate(self._levels):
            oldest: dict[tuple[str, ...], int] = {}
            for path in paths:
                group = path[: depth + 1]
                oldest[group] = min(oldest.get(group, self._leaves[path][0][0]), self._leaves[path][0][0])
            # min calls it at once, within this turn: `level` is this turn's.
            best = min(oldest, key=lambda group: (self._turns.get((level, group[-1]), 0), oldest[group]))
            paths = [path for path in paths if path[: depth + 1] == best]
        return min(paths, key=lambda path: self._leaves[path][0][0])

    def served(self) -> None:
        """The candidate given last was claimed."""
        if not self._contested:
            return
        self._counter += 1
        for level, name in zip(self._levels, self._path, strict=True):
            self._turns[(level, name)] = self._counter
            self._served.add((level, name))

    def save(self, c: Connection, upsert: Callable[..., None]) -> None:
        """Write the turns of the levels served, and the counter (in the claim's transaction)."""
        if not self._served:
            return
        rows = [
            {"level": level, "name": name, "last_turn": self._turns[(level, name)]}
            for level, name in sorted(self._served)
        ]
        rows.append({"level": _COUNTER[0], "name": _COUNTER[1], "last_turn": self._counter})
        upsert(c, s.merge_shares, ("level", "name"), rows, ("last_turn",))
