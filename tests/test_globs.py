"""stream.include and stream.exclude: glob patterns on staging keys choose the new files the stream takes
(siltlake/globs.py; docs/design.md, "Include and exclude patterns")."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from siltlake.config import load_config
from siltlake.errors import ConfigError
from siltlake.globs import key_filter, split_patterns
from siltlake.stream import stream_once

from .test_appends import deployment_with, lines

DAY = "f1.web.access/2026/11/20/"
LOGROTATE = ["*.gz", "*.[0-9]"]


def admitted(keys: list[str], include: list[str] = (), exclude: list[str] = ()) -> list[str]:
    checked = key_filter(list(include), list(exclude))
    assert checked is not None
    return [key for key in keys if checked.admits(key)]


def test_no_patterns_take_every_key() -> None:
    assert key_filter([], []) is None


def test_a_pattern_without_a_slash_matches_the_file_name_in_any_directory() -> None:
    keys = [DAY + "access.log", DAY + "access.log.1", DAY + "access.log.2.gz", "access.log.10", "a.gz/access.log"]
    assert admitted(keys, exclude=LOGROTATE) == [DAY + "access.log", "access.log.10", "a.gz/access.log"]
    assert admitted(keys, include=["access.log"]) == [DAY + "access.log", "a.gz/access.log"]


def test_a_pattern_with_a_slash_matches_the_whole_key_and_star_stays_in_its_segment() -> None:
    keys = ["web.access/2026/11/20/a.log", "web.access/a.log", "web.error/2026/11/20/a.log", "x/web.access/a.log"]
    assert admitted(keys, include=["web.access/*/*/*/*.log"]) == ["web.access/2026/11/20/a.log"]
    assert admitted(keys, include=["web.access/**/*.log"]) == keys[:2], "** is any number of directories, or none"
    assert admitted(keys, include=["**/web.access/*.log"]) == ["web.access/a.log", "x/web.access/a.log"]
    assert admitted(keys, include=["web.*"]) == [], "a '/' pattern is anchored at the root and * crosses no '/'"
    assert admitted(keys, include=["web.access/**"]) == keys[:2]


def test_exclude_wins_over_include() -> None:
    keys = ["w/access.log", "w/access.log.1", "w/error.log"]
    assert admitted(keys, include=["access.log*"], exclude=["*.[0-9]"]) == ["w/access.log"]


def test_sets_negation_and_escapes() -> None:
    keys = ["a.1", "a.x", "a.]", "a.*", "a./"]
    assert admitted(keys, include=["a.[!0-9]"]) == ["a.x", "a.]", "a.*"]
    assert admitted(keys, include=["a.[^0-9]"]) == ["a.x", "a.]", "a.*"]
    assert admitted(keys, include=["a.[]x]"]) == ["a.x", "a.]"], "a ']' first is one of the set"
    assert admitted(keys, include=["a.\\*"]) == ["a.*"]
    with pytest.raises(ValueError, match="without its closing"):
        key_filter(["d[/]a.log"], [])  # a set never holds '/': the segments are split first


def test_patterns_in_one_string_split_at_commas_outside_sets() -> None:
    assert split_patterns("*.gz, *.[0-9,]") == ["*.gz", "*.[0-9,]"]


def write_config(tmp_path: Path, stream: str) -> Path:
    path = tmp_path / "siltlake.toml"
    path.write_text(f"[stream]\n{stream}\n")
    return path


def test_the_settings_load_from_the_file_and_the_environment(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, 'exclude = ["*.gz", "*.[0-9]"]\ninclude = ["**/*.log*"]'), environ={})
    assert (config.stream.exclude, config.stream.include) == (LOGROTATE, ["**/*.log*"])
    config = load_config(write_config(tmp_path, ""), environ={"SILTLAKE_STREAM__EXCLUDE": "*.gz,*.[0-9]"})
    assert config.stream.exclude == LOGROTATE


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('exclude = ["/var/log/*.gz"]', "stream.exclude: '/var/log/*.gz': patterns are relative to the staging root"),
        ('include = ["access.[0-9"]', "stream.include: 'access.[0-9': '[' without its closing ']'"),
        ('exclude = ["a**b"]', "stream.exclude: 'a**b': '**' must be a whole segment"),
        ('exclude = [""]', "stream.exclude: an empty pattern matches nothing"),
        ('exclude = "*.gz"', None),  # one string is a comma-separated list, as from the environment
        ("exclude = 3", "stream.exclude must be a list of glob patterns"),
    ],
)
def test_a_bad_pattern_is_refused_naming_the_setting_and_the_pattern(
    tmp_path: Path, setting: str, message: str | None
) -> None:
    path = write_config(tmp_path, setting)
    if message is None:
        assert load_config(path, environ={}).stream.exclude == ["*.gz"]
        return
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert message in str(raised.value)


@pytest.mark.spark
def test_a_round_takes_only_the_files_the_patterns_admit(tmp_path: Path, catalog_url: str, spark) -> None:
    """Beside the live log, logrotate's rotated copies (one plain, one compressed) and a stray file are left:
    not loaded and not reported unknown. Without the settings every one of them is taken."""
    deployment = deployment_with(
        tmp_path, catalog_url, spark, full_listing_interval=0, exclude=LOGROTATE, include=["*.log*"]
    )
    try:
        root = Path(deployment.staging.path(DAY + "access.log")).parent
        root.mkdir(parents=True)
        (root / "access.log").write_bytes(lines(0, 4))
        (root / "access.log.1").write_bytes(lines(100, 3))
        (root / "access.log.2.gz").write_bytes(gzip.compress(lines(200, 2)))
        (root / "README.txt").write_bytes(b"not a log\n")
        report = stream_once(deployment)
        assert (report.registered, report.records_loaded, report.unknown) == (1, 4, [])
        assert stream_once(deployment).registered == 0, "left again by the next rounds"
        deployment.config.stream.exclude = deployment.config.stream.include = []
        everything = stream_once(deployment)
        assert (everything.registered, everything.records_loaded) == (3, 5)
        assert [uri.rpartition("/")[2] for uri, _ in everything.unknown] == ["README.txt"]
    finally:
        deployment.close()


def test_an_object_store_root_takes_only_the_keys_the_patterns_admit(moto_s3, s3_proxy, catalog_url: str) -> None:
    """The patterns apply to every listing: an S3 root's keys are filtered as a local root's names are."""
    from siltlake.stream.discover import discover

    from .test_s3_discovery import open_lake, put, registered

    lake = open_lake(moto_s3, s3_proxy, catalog_url, include=["host00.web.access/**"], exclude=["*.gz"])
    try:
        for key in (
            "host00.web.access/2026/01/01/a.jsonl",
            "host00.web.access/2026/01/01/a.jsonl.gz",
            "host01.web.access/2026/01/01/b.jsonl",
        ):
            put(lake, key)
        found = discover(lake)
        assert (found.registered, found.unknown) == (1, 0)
        assert list(registered(lake)) == ["host00.web.access/2026/01/01/a.jsonl"]
    finally:
        lake.close()
