"""Glob patterns over staging keys (stream.include and stream.exclude): which new files of a staging root the
stream takes, e.g. not the compressed copies logrotate leaves beside a live log (docs/design.md, "Include and
exclude patterns").

A pattern without a `/` is matched against the file's name (the key's last segment), one with a `/` against the
whole key relative to the root. `*` is any run of characters but `/`, `?` one character but `/`, `[...]` one of a
set (`[!...]` or `[^...]` none of it), `**` a whole segment standing for any number of directories, and `\\` makes
the next character plain."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def split_patterns(value: str) -> list[str]:
    """Patterns given as one string (an environment variable): separated by commas outside brackets."""
    patterns: list[str] = []
    current: list[str] = []
    in_set = False
    for char in value:
        if char == "," and not in_set:
            patterns.append("".join(current))
            current = []
            continue
        if char == "[":
            in_set = True
        elif char == "]":
            in_set = False
        current.append(char)
    patterns.append("".join(current))
    return [pattern.strip() for pattern in patterns if pattern.strip()]


def translate(pattern: str) -> str:
    """The regular expression (unanchored text) of a glob; ValueError naming what is wrong with it."""
    if not pattern:
        raise ValueError("an empty pattern matches nothing")
    if pattern.startswith("/"):
        raise ValueError(f"{pattern!r}: patterns are relative to the staging root (no leading '/')")
    parts: list[str] = []
    segments = pattern.split("/")
    for number, segment in enumerate(segments):
        last = number == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]*/)*")
            continue
        if "**" in segment:
            raise ValueError(f"{pattern!r}: '**' must be a whole segment (between slashes)")
        parts.append(_segment(pattern, segment) + ("" if last else "/"))
    return "".join(parts)


def _segment(pattern: str, segment: str) -> str:
    out, index = [], 0
    while index < len(segment):
        char = segment[index]
        index += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\":
            if index == len(segment):
                raise ValueError(f"{pattern!r} ends with a lone '\\'")
            out.append(re.escape(segment[index]))
            index += 1
        elif char == "[":
            start = index + (segment[index : index + 1] in ("!", "^"))
            start += segment[start : start + 1] == "]"  # a ']' first is one of the set
            end = segment.find("]", start)
            if end < 0:
                raise ValueError(f"{pattern!r}: '[' without its closing ']'")
            body = segment[index:end]
            negated = body[:1] in ("!", "^")
            body = body[1:] if negated else body
            if not body:
                raise ValueError(f"{pattern!r}: an empty set '[]'")
            escaped = body.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
            out.append(f"[^/{escaped}]" if negated else f"[{escaped}]")  # a segment holds no '/' to put in a set
            index = end + 1
        else:
            out.append(re.escape(char))
    return "".join(out)


def check_patterns(value: object, setting: str) -> list[str]:
    """The patterns of a setting (a list, or one string of comma-separated patterns), each checked."""
    if isinstance(value, str):
        value = split_patterns(value)
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'{setting} must be a list of glob patterns, e.g. ["*.gz", "*.[0-9]"]')
    for pattern in value:
        try:
            translate(pattern)
        except ValueError as exc:
            raise ValueError(f"{setting}: {exc}") from None
    return list(value)


@dataclass(frozen=True)
class _Matcher:
    names: re.Pattern[str] | None  # patterns without '/', against the last segment
    keys: re.Pattern[str] | None  # patterns with '/', against the whole key

    @classmethod
    def of(cls, patterns: Iterable[str]) -> _Matcher:
        names = [translate(p) for p in patterns if "/" not in p]
        keys = [translate(p) for p in patterns if "/" in p]
        return cls(
            re.compile("|".join(f"(?:{n})" for n in names) + r"\Z", re.DOTALL) if names else None,
            re.compile("|".join(f"(?:{k})" for k in keys) + r"\Z", re.DOTALL) if keys else None,
        )

    def matches(self, key: str) -> bool:
        if self.names is not None and self.names.match(key.rpartition("/")[2]):
            return True
        return self.keys is not None and self.keys.match(key) is not None


@dataclass(frozen=True)
class KeyFilter:
    """include (empty: every key) less exclude: exclude wins."""

    include: _Matcher | None
    exclude: _Matcher | None

    def admits(self, key: str) -> bool:
        if self.include is not None and not self.include.matches(key):
            return False
        return self.exclude is None or not self.exclude.matches(key)


@functools.lru_cache(maxsize=16)
def _filter(include: tuple[str, ...], exclude: tuple[str, ...]) -> KeyFilter | None:
    if not include and not exclude:
        return None
    return KeyFilter(_Matcher.of(include) if include else None, _Matcher.of(exclude) if exclude else None)


def key_filter(include: Sequence[str], exclude: Sequence[str]) -> KeyFilter | None:
    """The filter of a root's settings, compiled once; None when it takes every key."""
    return _filter(tuple(include), tuple(exclude))
