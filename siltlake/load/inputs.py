"""What a load reads: the files a path, directory or glob names, and the tasks' splits of them."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.fs as pafs

from siltlake.errors import ConfigError
from siltlake.load.config import JobConfig
from siltlake.storage.filesystem import open_filesystem

DEFAULT_SPLIT_BYTES = 256 << 20


def _filesystem(path: str) -> tuple[pafs.FileSystem, str, str]:
    """(file system, path in it, URI prefix to rebuild URIs) for a local path or a URI."""
    if "://" in path:
        filesystem, inner = open_filesystem(path.split("*", 1)[0].split("?", 1)[0] or path)
        scheme = path.split("://", 1)[0]
        rest = path.split("://", 1)[1]
        if scheme == "file":
            return pafs.LocalFileSystem(), rest, "file://"
        bucket_prefix = f"{scheme}://"
        return filesystem, rest, bucket_prefix
    return pafs.LocalFileSystem(), str(Path(path).expanduser().absolute()), "file://"


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(out) + r"\Z")


def list_inputs(path: str) -> list[tuple[str, int]]:
    """(URI, size) of the files a path, directory or glob names, sorted; hidden and _ names skipped."""
    filesystem, inner, prefix = _filesystem(path)
    wild = any(char in inner for char in "*?[")
    if not wild:
        info = filesystem.get_file_info(inner)
        if info.type == pafs.FileType.File:
            return [(prefix + inner, info.size)]
        if info.type != pafs.FileType.Directory:
            raise ConfigError(f"in.path: {path} does not exist")
        base, regex = inner, None
    else:
        base = inner[: min(inner.find(c) for c in "*?[" if c in inner)].rsplit("/", 1)[0] or "/"
        regex = _glob_regex(inner)
    found = []
    for info in filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File or info.base_name.startswith((".", "_")):
            continue
        if regex is None or regex.match(info.path):
            found.append((prefix + info.path, info.size))
    return sorted(found)


def splits(job: JobConfig, uri: str, size: int) -> list[dict]:
    """One task per file, or one per split of a large uncompressed line-oriented file."""
    from siltlake.load.task import check_compression, detected_compression

    split = job.input.split_bytes
    if split is None and job.parser.type == "jsonl":
        split = DEFAULT_SPLIT_BYTES
    if (
        split is None
        or job.parser.type == "msgpack"
        or size <= split
        or job.decoder.compression not in ("auto", "none")
    ):
        return [{"uri": uri, "size": size}]
    filesystem, path = open_filesystem(uri)
    with filesystem.open_input_stream(path, compression=None) as stream:  # the bytes as stored
        head = stream.read(4)
    check_compression(uri, job.decoder.compression, head)  # splits read plain bytes: "none" must be true
    if job.decoder.compression == "auto" and detected_compression(head) != "none":
        return [{"uri": uri, "size": size}]
    return [
        {"uri": uri, "size": min(split, size - offset), "offset": offset, "length": min(split, size - offset)}
        for offset in range(0, size, split)
    ]
