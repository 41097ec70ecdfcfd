"""Inputs whose compressions differ: `silt guess` pins a compression only when every file has it, and a pinned
compression that a file contradicts is refused naming that file, never a decompressor's error or "a bug"."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml
import zstandard

from siltlake.deployment import Deployment
from siltlake.errors import ConfigError
from siltlake.load.config import parse_load_config
from siltlake.load.guess import guess
from siltlake.load.inputs import list_inputs, splits
from siltlake.load.task import open_source, records

from .merge_helpers import silt_in_process


def lines(first: int, count: int = 5) -> bytes:
    return "".join(
        json.dumps({"id": n, "time": f"2026-11-20T10:{n % 60:02d}:00Z"}) + "\n" for n in range(first, first + count)
    ).encode()


def mixed(directory: Path, plain_first: bool) -> Path:
    """a.jsonl(.gz), b.jsonl(.gz or plain), c.jsonl.zst: gzip, plain and zstd in one directory."""
    directory.mkdir()
    first, second = ("a.jsonl", "b.jsonl.gz") if plain_first else ("a.jsonl.gz", "b.jsonl")
    for name, data in ((first, lines(0)), (second, lines(5))):
        (directory / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (directory / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines(10)))
    return directory


def ids_read(config: dict) -> list[int]:
    """Every record of every input, read as a load task reads its file."""
    (job,) = parse_load_config(config).jobs.values()
    found = []
    for uri, _ in list_inputs(job.input.path):
        with open_source(uri, job.decoder.compression) as source:
            found += [record["id"] for _, record, _, reason in records(source, job) if reason is None]
    return sorted(found)


@pytest.mark.parametrize("plain_first", [True, False])
def test_guess_over_mixed_compressions_proposes_a_job_that_reads_every_file(tmp_path: Path, plain_first: bool) -> None:
    data = mixed(tmp_path / "data", plain_first)
    proposed = guess({"in": {"path": str(data / "*")}, "out": {"table": "web.mixed", "create": True}})
    assert proposed["decoder"] == {"compression": "auto"}
    assert ids_read(json.loads(json.dumps(proposed))) == list(range(15))

    (data / "b.jsonl.gz" if plain_first else data / "b.jsonl").unlink()  # one compression left: pinned as before
    (data / "c.jsonl.zst").unlink()
    alone = guess({"in": {"path": str(data / "*")}, "out": {"table": "web.mixed"}})
    assert alone["decoder"] == {"compression": "none" if plain_first else "gzip"}


# mtime=0: the same bytes, and the same test ids, in every pytest-xdist worker (which collect at different times).
@pytest.mark.parametrize(
    ("name", "data", "pinned", "said"),
    [
        ("plain.jsonl", lines(0), "gzip", "decoder.compression is gzip, but this file is not compressed"),
        (
            "packed.jsonl.gz",
            gzip.compress(lines(0), mtime=0),
            "none",
            "decoder.compression is none, but this file is gzip-compressed",
        ),
        (
            "packed.jsonl.gz",
            gzip.compress(lines(0), mtime=0),
            "zstd",
            "decoder.compression is zstd, but this file is gzip-compressed",
        ),
    ],
)
def test_a_pinned_compression_a_file_contradicts_is_refused_naming_the_file(
    tmp_path: Path, name: str, data: bytes, pinned: str, said: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=said) as refused, open_source(str(path), pinned):
        pass
    assert str(refused.value).startswith(f"{path}: ") and "set decoder.compression to auto" in str(refused.value)


def test_a_large_compressed_file_under_compression_none_is_refused_before_it_is_split(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl.gz"
    path.write_bytes(gzip.compress(lines(0, 40_000), compresslevel=0))
    assert path.stat().st_size > 1 << 20  # more than split_bytes: the file would be split
    config = parse_load_config(
        {
            "in": {"path": str(path), "split_bytes": 1 << 20},
            "decoder": {"compression": "none"},
            "parser": {
                "type": "jsonl",
                "columns": [{"name": "id", "type": "long"}, {"name": "time", "type": "timestamp"}],
            },
            "out": {"table": "web.big", "create": True, "time_column": "time"},
        }
    )
    (job,) = config.jobs.values()
    with pytest.raises(ConfigError, match=f"{path}: decoder.compression is none, but this file is gzip-compressed"):
        splits(job, str(path), path.stat().st_size)


@pytest.mark.parametrize("plain_first", [True, False])
def test_the_dry_run_of_a_guessed_job_over_mixed_files_reads_and_a_contradicted_pin_is_a_user_error(
    plain_deployment: Deployment, tmp_path: Path, monkeypatch, plain_first: bool
) -> None:
    data = mixed(tmp_path / "data", plain_first)
    silt = silt_in_process(plain_deployment, monkeypatch)
    seed, job = tmp_path / "seed.yml", tmp_path / "job.yml"
    seed.write_text(yaml.safe_dump({"in": {"path": str(data / "*")}, "out": {"table": "web.mixed", "create": True}}))
    silt("guess", str(seed), "-o", str(job))
    shown = silt("load", str(job), "--dry-run", "--rows", "3")
    assert "first 3 rows" in shown and "bug" not in shown

    config = yaml.safe_load(job.read_text())
    first = "a.jsonl" if plain_first else "a.jsonl.gz"
    config["decoder"]["compression"] = "gzip" if plain_first else "none"  # what the old guess pinned
    job.write_text(yaml.safe_dump(config))
    refused = " ".join(silt("load", str(job), "--dry-run", code=2).split())
    assert f"{data / first}: decoder.compression is" in refused and "bug" not in refused, refused
