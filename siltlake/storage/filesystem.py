"""Object storage: one code path over pyarrow file systems (local, S3); keys are siltlake.storage.keys's."""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import quote

from siltlake.errors import ConfigError, SiltError

if TYPE_CHECKING:  # pyarrow is imported on first use: commands that only read the catalog never load it
    import pyarrow.fs as pafs

__all__ = ["ObjectInfo", "Storage", "UnsafeKey", "for_engine"]

# RFC 3986 path characters besides letters, digits and -._~: keys made of these appear in URIs unchanged.
URI_SAFE = "/!$&'()*+,;=:@"


class UnsafeKey(SiltError, ValueError):
    """An object key that would reach outside its storage root."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str          # relative to the storage root, '/'-separated
    size: int
    mtime: dt.datetime | None


def _resolve(root: str) -> tuple[pafs.FileSystem | None, str, str]:
    """(file system, base path inside it, canonical root URI); a local root's file system comes on first use."""
    if "://" in root:
        import pyarrow.fs as pafs

        try:
            filesystem, base = pafs.FileSystem.from_uri(root)
        except Exception as exc:  # pyarrow raises several types for bad URIs and missing credentials
            raise ConfigError(f"storage root {root!r} cannot be opened: {exc}") from None
        return filesystem, base.rstrip("/"), root.rstrip("/")
    path = Path(root).expanduser().resolve()
    return None, path.as_posix(), path.as_uri()


@dataclass
class Storage:
    """Objects under one root URI. Picklable: Spark tasks rebuild the file system from the URI."""

    root: str
    _fs: pafs.FileSystem | None = field(default=None, init=False, repr=False, compare=False)
    _base: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._fs, self._base, self.root = _resolve(self.root)

    def __getstate__(self) -> dict:
        return {"root": self.root}

    def __setstate__(self, state: dict) -> None:
        self.root = state["root"]
        self._fs, self._base, _ = _resolve(self.root)

    @property
    def filesystem(self) -> pafs.FileSystem:
        if self._fs is None:
            import pyarrow.fs as pafs

            self._fs = pafs.LocalFileSystem()
        return self._fs

    def path(self, key: str) -> str:
        """Path of a key inside the file system (what pyarrow calls take); a key never leaves the root."""
        if not key:
            return self._base
        if key.startswith("/") or "\0" in key or ".." in key.split("/"):
            raise UnsafeKey(f"object key {key!r} is absolute, has a '..' segment or a NUL byte: refused, so that "
                            f"nothing is read or written outside {self.root}")
        return posixpath.join(self._base, key)

    def leaves_root(self, key: str) -> bool:
        """Whether the key is, or lies under, a symbolic link that resolves outside the root (local roots only:
        object stores have no links)."""
        import pyarrow.fs as pafs

        if not isinstance(self.filesystem, pafs.LocalFileSystem):
            return False
        base = os.path.realpath(self._base)
        return os.path.commonpath([base, os.path.realpath(self.path(key))]) != base

    def uri(self, key: str) -> str:
        """The object's URI as pyarrow opens it (file:///..., s3://...): what the catalog stores.

        The key is percent-encoded like the root: pyarrow decodes a URI when it opens it, so a key named
        "%2e%2e%2f..." must stay that name (not become "../"), and keys with spaces or non-ASCII must open."""
        return f"{self.root}/{quote(key, safe=URI_SAFE)}" if key else self.root

    def engine_uri(self, key: str) -> str:
        """The URI for Spark, whose Hadoop S3 connector reads s3a://, not s3://."""
        return for_engine(self.uri(key))

    def key_of(self, path: str) -> str:
        return posixpath.relpath(path, self._base)

    def ensure_root(self) -> None:
        self.filesystem.create_dir(self._base, recursive=True)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every file under a prefix, recursively; a missing prefix lists nothing."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.path(prefix), recursive=True, allow_not_found=True)
        for info in self.filesystem.get_file_info(selector):
            if info.type == pafs.FileType.File:
                yield ObjectInfo(self.key_of(info.path), info.size or 0, info.mtime)

    def subdirectories(self, prefix: str = "") -> list[str]:
        """Names of the directories (key prefixes) directly under a prefix."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.path(prefix), recursive=False, allow_not_found=True)
        return sorted(posixpath.basename(info.path) for info in self.filesystem.get_file_info(selector)
                      if info.type == pafs.FileType.Directory)

    def info(self, key: str) -> ObjectInfo | None:
        import pyarrow.fs as pafs

        found = self.filesystem.get_file_info(self.path(key))
        if found.type != pafs.FileType.File:
            return None
        return ObjectInfo(key, found.size or 0, found.mtime)

    def exists(self, key: str) -> bool:
        return self.info(key) is not None

    def open_input(self, key: str) -> BinaryIO:
        return self.filesystem.open_input_stream(self.path(key), compression=None)

    def open_input_file(self, key: str):  # noqa: ANN201 - a seekable pyarrow file
        return self.filesystem.open_input_file(self.path(key))

    def open_output(self, key: str) -> BinaryIO:
        self.filesystem.create_dir(posixpath.dirname(self.path(key)), recursive=True)
        return self.filesystem.open_output_stream(self.path(key), compression=None)

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write through a temporary key and move into place, so readers never see a partial object."""
        self.path(key)  # an unsafe key is refused by its own name, not by its temporary one's
        temporary = f"{key}.{uuid.uuid4().hex}.tmp"
        with self.open_output(temporary) as out:
            out.write(data)
        self.move(temporary, key)

    def read_bytes(self, key: str) -> bytes:
        with self.open_input(key) as stream:
            return stream.read()

    def move(self, source: str, target: str) -> None:
        self.filesystem.create_dir(posixpath.dirname(self.path(target)), recursive=True)
        self.filesystem.move(self.path(source), self.path(target))

    def delete(self, key: str, missing_ok: bool = True) -> None:
        try:
            self.filesystem.delete_file(self.path(key))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def delete_prefix(self, prefix: str) -> None:
        import pyarrow.fs as pafs

        if self.filesystem.get_file_info(self.path(prefix)).type == pafs.FileType.Directory:
            self.filesystem.delete_dir(self.path(prefix))


def for_engine(uri: str) -> str:
    """A stored object URI as Spark reads it (s3:// becomes s3a://)."""
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri
