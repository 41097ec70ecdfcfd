"""Object storage: one code path over pyarrow file systems (local, S3); keys are siltlake.storage.keys's."""

from __future__ import annotations

import builtins
import functools
import os
import posixpath
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote, unquote, urlsplit

from siltlake.errors import ConfigError
from siltlake.storage.accounted import AccountedNames
from siltlake.storage.confined import UnsafeKey, open_regular_file
from siltlake.storage.localwalk import ChangedListing, ObjectInfo, SweptListing, arrival_ns, sweep_slice, walk_changed

if TYPE_CHECKING:  # pyarrow is imported on first use: commands that only read the catalog never load it
    import pyarrow.fs as pafs

__all__ = ["ChangedListing", "ObjectInfo", "S3Options", "Storage", "SweptListing", "UnsafeKey", "for_engine"]

# RFC 3986 path characters besides letters, digits and -._~: keys made of these appear in URIs unchanged.
URI_SAFE = "/!$&'()*+,;=:@"
# Keys of only these characters (quote's always-safe ones and URI_SAFE) are their own quoted form: a listing of
# millions of keys skips quote()'s encoding and per-call work for each.
_UNQUOTED = re.compile(r"[A-Za-z0-9_.~/!$&'()*+,;=:@-]*")


@dataclass(frozen=True)
class S3Options:
    """How s3:// URIs are reached (config's storage.s3): one S3FileSystem per options and bucket per process.
    Credentials are not here: the AWS SDK takes them from its usual settings."""

    endpoint_override: str | None = None
    scheme: str = "https"
    region: str | None = None
    max_attempts: int = 10
    request_timeout: float | None = None
    connect_timeout: float | None = None


def _s3_split(uri: str) -> tuple[str, str]:
    """(bucket, path inside the file system: bucket/key) of an s3:// URI, percent-decoded as pyarrow does."""
    parts = urlsplit(uri)
    if not parts.netloc:
        raise ConfigError(f"{uri!r} names no bucket (write s3://bucket/prefix)")
    return parts.netloc, (parts.netloc + unquote(parts.path)).rstrip("/")


def s3_endpoint(options: S3Options, bucket: str) -> tuple[str | None, str, str]:
    """(endpoint or None for AWS's own, scheme, region) of a bucket under these options: the endpoint from the
    options, else from the AWS SDKs' environment (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL); the region from the
    options, else the environment's (with an endpoint), else asked of AWS."""
    import pyarrow.fs as pafs

    region = options.region
    endpoint, scheme = options.endpoint_override, options.scheme
    environment = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint is None and environment:  # the AWS SDKs' setting, which pyarrow's constructor does not read
        parts = urlsplit(environment if "://" in environment else f"https://{environment}")
        endpoint, scheme = parts.netloc, parts.scheme
    if region is None and endpoint:
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    if region is None:
        try:
            region = pafs.resolve_s3_region(bucket)
        except Exception as exc:  # pyarrow raises OSError and others for unknown buckets and no network
            raise ConfigError(
                f"the region of bucket {bucket!r} cannot be found ({exc}); set storage.s3.region"
            ) from None
    return endpoint, scheme, region


@functools.lru_cache(maxsize=64)
def _s3_filesystem(options: S3Options, bucket: str) -> pafs.FileSystem:
    """The S3 file system of a bucket (cached: a task rebuilding a Storage must not make a client, and on AWS
    ask the bucket's region, per object)."""
    import pyarrow.fs as pafs

    endpoint, scheme, region = s3_endpoint(options, bucket)
    extra: dict[str, object] = {
        name: value
        for name, value in (("request_timeout", options.request_timeout), ("connect_timeout", options.connect_timeout))
        if value is not None
    }
    if endpoint:
        extra.update(endpoint_override=endpoint, scheme=scheme)
    # allow_delayed_open: an object smaller than one part is one PutObject, not a three-request multipart upload.
    return pafs.S3FileSystem(
        region=region,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(options.max_attempts),
        allow_delayed_open=True,
        **extra,
    )


# The S3 settings of the last Storage made (or unpickled in a Spark task) with settings: what s3:// URIs that
# come without a Storage (a load's input files and error files) are opened with. One deployment per process.
_process_s3: S3Options | None = None


def open_filesystem(uri: str, s3: S3Options | None = None) -> tuple[pafs.FileSystem, str]:
    """(file system, path) of any URI; s3:// through the given S3 settings (else this process's deployment's),
    others through pyarrow."""
    if uri.startswith("s3://"):
        bucket, path = _s3_split(uri)
        return _s3_filesystem(s3 or _process_s3 or S3Options(), bucket), path
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(uri)


def _resolve(root: str, s3: S3Options | None) -> tuple[pafs.FileSystem | None, str, str]:
    """(file system, base path inside it, canonical root URI); a local root's file system comes on first use."""
    if root.startswith("s3://") and "?" not in root:
        try:
            filesystem, base = open_filesystem(root, s3 or S3Options())  # a root never takes the process's
        except ConfigError:
            raise
        except Exception as exc:  # pyarrow raises several types for bad options and missing credentials
            raise ConfigError(f"storage root {root!r} cannot be opened: {exc}") from None
        return filesystem, base, root.rstrip("/")
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
    s3: S3Options | None = field(default=None, repr=False, compare=False)
    _fs: pafs.FileSystem | None = field(default=None, init=False, repr=False, compare=False)
    _base: str = field(default="", init=False, repr=False, compare=False)
    _made: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._fs, self._base, self.root = _resolve(self.root, self.s3)
        self._remember_s3()

    def _remember_s3(self) -> None:
        global _process_s3
        if self.s3 is not None:
            _process_s3 = self.s3

    def __getstate__(self) -> dict:
        return {"root": self.root, "s3": self.s3}

    def __setstate__(self, state: dict) -> None:
        self.root = state["root"]
        self.s3 = state.get("s3")
        self._made = set()
        self._fs, self._base, _ = _resolve(self.root, self.s3)
        self._remember_s3()

    @property
    def is_object_store(self) -> bool:
        """Whether the root is an object store (no directories, no rename: a move is a copy and a delete)."""
        return self.root.startswith("s3://")

    def open_uri(self, uri: str):  # a binary file object or pyarrow input stream
        """Open one of this storage's objects (a staging object's) by its URI, for reading. On a local root the
        open itself checks the object (confined.open_regular_file): a key swapped after it was listed is
        refused (UnsafeKey), whatever it was swapped for. An S3 URI opens with this storage's S3 options."""
        if uri.startswith(self.root + "/") and self.is_local:
            # Decoded here, not by pyarrow (which wants UTF-8): a name that is not UTF-8 opens too.
            key = self.key_in_uri(uri)
            if ".." in key.split("/"):
                raise UnsafeKey(f"the URI {uri!r} decodes to a path with '..' segments; refused")
            self.path(key)  # refuses an unsafe key by its own name
            return open_regular_file(self._base, key)
        filesystem, path = open_filesystem(uri, self.s3)
        # pyarrow percent-decodes the URI: a stored URI (registered before keys were encoded) must not climb out.
        if ".." in path.split("/"):
            raise UnsafeKey(f"the URI {uri!r} decodes to a path with '..' segments; refused")
        if self.is_local:
            raise UnsafeKey(f"the URI {uri!r} lies outside the root {self.root}; refused")
        return filesystem.open_input_stream(path, compression=None)

    @property
    def is_local(self) -> bool:
        """Whether the root is a local directory (where links, FIFOs and devices can stand in for objects)."""
        import pyarrow.fs as pafs

        return isinstance(self.filesystem, pafs.LocalFileSystem)

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
            raise UnsafeKey(
                f"object key {key!r} is absolute, has a '..' segment or a NUL byte: refused, so that "
                f"nothing is read or written outside {self.root}"
            )
        return posixpath.join(self._base, key)

    def leaving_root(self, keys: Iterable[str]) -> set[str]:
        """Of these keys, those that are, or lie under, a symbolic link resolving outside the root (local roots
        only: object stores have no links). Each directory is resolved once and each file only lstat'ed unless it is
        a link, not every path component of every file. Reads open through storage/confined.py, which holds
        against a link swapped in after this check."""
        if not self.is_local:
            return set()
        base = os.path.realpath(self._base)
        inside = base.rstrip("/") + "/"
        resolved: dict[str, str] = {}
        leaving = set()
        for key in keys:
            directory, _, name = key.rpartition("/")
            real_directory = resolved.get(directory)
            if real_directory is None:
                real_directory = resolved[directory] = os.path.realpath(self.path(directory))
            path = posixpath.join(real_directory, name)
            if os.path.islink(path):
                path = os.path.realpath(path)
            if path != base and not path.startswith(inside):
                leaving.add(key)
        return leaving

    def uri(self, key: str) -> str:
        """The object's URI as pyarrow opens it (file:///..., s3://...): what the catalog stores.

        The key is percent-encoded like the root: pyarrow decodes a URI when it opens it, so a key named
        "%2e%2e%2f..." must stay that name (not become "../"), and keys with spaces or non-ASCII must open."""
        if not key:
            return self.root
        if _UNQUOTED.fullmatch(key):
            return f"{self.root}/{key}"
        # A local name that is not UTF-8 reaches Python with its bytes kept as surrogates (os.fsdecode): its URI
        # encodes those bytes, and key_in_uri decodes them back, so the object opens under its own name.
        return f"{self.root}/{quote(key.encode('utf-8', 'surrogateescape'), safe=URI_SAFE)}"

    def key_in_uri(self, uri: str) -> str:
        """The key of one of this storage's URIs (uri()'s inverse, bytes that are not UTF-8 included)."""
        return unquote(uri[len(self.root) + 1 :], errors="surrogateescape")

    def engine_uri(self, key: str) -> str:
        """The URI for Spark, whose Hadoop S3 connector reads s3a://, not s3://."""
        return for_engine(self.uri(key))

    def key_of(self, path: str) -> str:
        return _key_under(path, self._base, self._base.rstrip("/") + "/")

    def ensure_root(self) -> None:
        """Create a file system root; an object store's bucket must exist (siltlake never creates buckets)."""
        if not self.is_object_store:
            self.filesystem.create_dir(self._base, recursive=True)
            return
        import pyarrow.fs as pafs

        bucket = self._base.split("/", 1)[0]
        if self.filesystem.get_file_info(bucket).type != pafs.FileType.Directory:
            raise ConfigError(
                f"bucket {bucket!r} of storage root {self.root} does not exist (or these credentials "
                "cannot see it): create it first; siltlake never creates buckets"
            )

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every file under a prefix, recursively; a missing prefix lists nothing."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.path(prefix), recursive=True, allow_not_found=True)
        base, under = self._base, self._base.rstrip("/") + "/"
        file = pafs.FileType.File
        try:
            listed = [
                ObjectInfo(_key_under(info.path, base, under), info.size or 0, info.mtime)
                for info in self.filesystem.get_file_info(selector)
                if info.type == file
            ]
        except UnicodeDecodeError:  # a local name that is not UTF-8, which pyarrow cannot give as text
            if not self.is_local:
                raise
            top = self.path(prefix)
            listed = [
                ObjectInfo(_key_under(posixpath.join(top, info.key), base, under), info.size, info.mtime)
                for info in walk_changed(top, 0).objects
            ]  # the same files and keys, names as os gives them
        yield from listed

    def list_changed(self, since_ns: int, accounted: AccountedNames | None = None) -> ChangedListing:
        """The files of a local root that may have appeared since since_ns (storage/localwalk.py, walk_changed)."""
        return walk_changed(self._base, since_ns, accounted)

    def sweep(self, after: str | None, limit: int, unchanged_before_ns: int | None = None) -> SweptListing:
        """A slice of the rolling sweep of a local root (storage/localwalk.py, sweep_slice)."""
        return sweep_slice(self._base, after, limit, unchanged_before_ns)

    def arrival_ns(self, key: str) -> int | None:
        """When a local file arrived in the root, as list_changed judges it: max(mtime, ctime) in nanoseconds,
        a symbolic link's own times included (a new link to an old file is a new object); None once gone."""
        try:
            path = self.path(key)
            found = os.stat(path)
            own = os.lstat(path)
        except (OSError, UnsafeKey):
            return None
        return arrival_ns(found, own)

    def subdirectories(self, prefix: str = "") -> builtins.list[str]:  # `list` here is the method above
        """Names of the directories (key prefixes) directly under a prefix."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.path(prefix), recursive=False, allow_not_found=True)
        return sorted(
            posixpath.basename(info.path)
            for info in self.filesystem.get_file_info(selector)
            if info.type == pafs.FileType.Directory
        )

    def info(self, key: str) -> ObjectInfo | None:
        import pyarrow.fs as pafs

        found = self.filesystem.get_file_info(self.path(key))
        if found.type != pafs.FileType.File:
            return None
        return ObjectInfo(key, found.size or 0, found.mtime)

    def exists(self, key: str) -> bool:
        return self.info(key) is not None

    def size(self, key: str) -> int:
        """The size of an object that must be there (one just written, or listed by a manifest): a missing one is
        a FileNotFoundError naming it."""
        info = self.info(key)
        if info is None:
            raise FileNotFoundError(f"{self.uri(key)}: no such object")
        return info.size

    def open_input(self, key: str) -> BinaryIO:
        return self.filesystem.open_input_stream(self.path(key), compression=None)

    def open_input_file(self, key: str):  # a seekable pyarrow file
        return self.filesystem.open_input_file(self.path(key))

    def open_output(self, key: str) -> BinaryIO:
        path = self.path(key)
        return self._in_directory(path, lambda: self.filesystem.open_output_stream(path, compression=None))

    @property
    def writes_are_atomic(self) -> bool:
        """Whether an object appears whole or not at all (an object store's PUT, or the completion of its
        multipart upload): then writing at the final key needs no temporary key and move."""
        return self.is_object_store

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write through a temporary key and move into place, so readers never see a partial object (an
        object store writes in place: one request instead of five)."""
        self.path(key)  # an unsafe key is refused by its own name, not by its temporary one's
        if self.writes_are_atomic:
            with self.open_output(key) as out:
                out.write(data)
            return
        temporary = f"{key}.{uuid.uuid4().hex}.tmp"
        with self.open_output(temporary) as out:
            out.write(data)
        self.move(temporary, key)

    def read_bytes(self, key: str) -> bytes:
        if self._fs is None:  # a local root not opened through pyarrow yet: a manifest read needs no pyarrow
            with open(self.path(key), "rb") as local:
                return local.read()
        with self.open_input(key) as stream:
            return stream.read()

    def _in_directory(self, path: str, write: Callable[[], Any]) -> Any:
        """Run `write`, which needs the directory of `path`: made first on a file system unless made here before
        (a task writes many objects into one), and again if it went meanwhile (a run's temporary prefix deleted)."""
        if self.is_object_store:  # no directories: nothing to ask or write
            return write()
        directory = posixpath.dirname(path)
        for known in (directory in self._made, False):
            if not known:
                self.filesystem.create_dir(directory, recursive=True)
                self._made = self._made if len(self._made) < 10_000 else set()  # a daemon's runs each have one
                self._made.add(directory)
            try:
                return write()
            except FileNotFoundError:
                if not known:  # the second pass always makes the directory first: this ends the loop
                    raise

    def move(self, source: str, target: str) -> None:
        """Rename on a file system; on an object store a server-side copy, then a delete of the source. The
        copy is idempotent (the same bytes at the same key), so a move retried after a failure in between
        only finds the source gone: that is taken as done when the target exists."""
        if not self.is_object_store:
            self._in_directory(self.path(target), lambda: self.filesystem.move(self.path(source), self.path(target)))
            return
        try:
            self.filesystem.copy_file(self.path(source), self.path(target))
        except OSError:  # pyarrow reports a missing source as a plain OSError (NoSuchKey)
            if self.info(source) is not None:
                raise
            if self.info(target) is None:
                raise FileNotFoundError(f"cannot move {self.uri(source)}: it does not exist") from None
            return  # a retried move whose copy and delete were done
        self.delete(source)

    def place(self, temporary: str, target: str) -> None:
        """Put a run's temporary object at its final key. A file system renames it. An object store copies it
        server-side and leaves the temporary where it is: the run deletes its whole temporary prefix at its end
        in batches of a thousand keys (reap takes a dead run's), instead of three requests per object (pyarrow's
        delete asks the key's type first and rewrites the parent "directory" marker after)."""
        if not self.is_object_store:
            self.move(temporary, target)
            return
        self.filesystem.copy_file(self.path(temporary), self.path(target))

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


def _key_under(path: str, base: str, under: str) -> str:
    """posixpath.relpath(path, base) (under: base and a '/'), sliced off without relpath's cost where that is the
    same; paths relpath would normalise ('.', '..', empty segments) and paths elsewhere take relpath itself."""
    if path.startswith(under):
        key = path[len(under) :]
        if key and "//" not in key and "/." not in key and not key.startswith(("/", ".")) and not key.endswith("/"):
            return key
    return posixpath.relpath(path, base)


def for_engine(uri: str) -> str:
    """A stored object URI as Spark reads it (s3:// becomes s3a://)."""
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri
