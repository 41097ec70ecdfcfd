"""Storage on the local S3 endpoint without Spark: configuration to pyarrow's S3 file system, listings that
page, a move that is a copy and a delete (idempotent), a missing bucket's one-line error."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from siltlake.config import Config
from siltlake.deployment import Deployment
from siltlake.errors import ConfigError
from siltlake.storage.filesystem import S3Options, Storage

from .s3_server import CountingProxy, MotoS3, s3_config


def storage(proxy: CountingProxy, bucket: str, prefix: str = "lake") -> Storage:
    return Storage(f"s3://{bucket}/{prefix}", S3Options(endpoint_override=proxy.endpoint, scheme="http"))


def test_a_listing_pages_a_thousand_keys_per_request(moto_s3: MotoS3, s3_proxy: CountingProxy) -> None:
    bucket = moto_s3.create_bucket()
    lake = storage(s3_proxy, bucket)
    keys = [f"k/dt=2026-11-20/obj-{n:05d}.parquet" for n in range(2345)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: lake.open_output(key).close(), keys[:40]))
    assert s3_proxy.reset()["PUT"] == 40, "one request per small object written, no directory markers"
    moto_s3.put_objects(bucket, [f"lake/{key}" for key in keys[40:]])  # the rest straight into moto's memory
    listed = [info.key for info in lake.list("k/")]
    assert sorted(listed) == keys
    assert s3_proxy.reset()["LIST"] == 3, "2345 keys: three pages of at most 1000"


def test_a_move_is_a_copy_and_a_delete_and_a_retried_move_is_done(moto_s3: MotoS3, s3_proxy: CountingProxy) -> None:
    lake = storage(s3_proxy, moto_s3.create_bucket())
    lake.write_bytes("a/tmp.bin", b"payload")
    assert [info.key for info in lake.list()] == ["a/tmp.bin"], "write_bytes leaves no temporary behind"
    lake.move("a/tmp.bin", "b/final.bin")
    assert lake.read_bytes("b/final.bin") == b"payload" and not lake.exists("a/tmp.bin")
    lake.move("a/tmp.bin", "b/final.bin")  # the retry of a move that copied and deleted: nothing to do
    assert lake.read_bytes("b/final.bin") == b"payload"
    with pytest.raises(FileNotFoundError):
        lake.move("a/never.bin", "b/other.bin")
    lake.write_bytes("c/tmp.bin", b"more")
    lake.place("c/tmp.bin", "c/final.bin")
    assert lake.read_bytes("c/final.bin") == b"more" and lake.exists("c/tmp.bin"), "place copies, the run deletes"
    lake.delete_prefix("c")
    assert not lake.exists("c/tmp.bin") and not lake.exists("c/final.bin")


def test_a_storage_pickles_with_its_s3_options(moto_s3: MotoS3, s3_proxy: CountingProxy) -> None:
    import pickle

    lake = storage(s3_proxy, moto_s3.create_bucket())
    lake.write_bytes("x.bin", b"1")
    copy = pickle.loads(pickle.dumps(lake))
    assert copy.s3 == lake.s3 and copy.read_bytes("x.bin") == b"1"
    assert copy.open_uri(lake.uri("x.bin")).read() == b"1"


def test_a_missing_bucket_is_a_one_line_error_at_init(tmp_path: Path, moto_s3: MotoS3, s3_proxy: CountingProxy) -> None:
    config = s3_config("no-such-bucket-here", s3_proxy.endpoint, f"sqlite:///{tmp_path / 'catalog.db'}")
    deployment = Deployment(config)
    try:
        with pytest.raises(ConfigError, match="bucket 'no-such-bucket-here' .* does not exist.*create it first"):
            deployment.init()
    finally:
        deployment.close()


def test_the_s3_settings_come_from_the_storage_s3_section() -> None:
    config = Config.model_validate(
        {
            "storage": {
                "root": "s3://b/lake",
                "s3": {
                    "endpoint_override": "127.0.0.1:9000",
                    "scheme": "http",
                    "region": "eu-west-1",
                    "max_attempts": 4,
                },
            }
        }
    )
    assert config.storage.s3.endpoint_override == "127.0.0.1:9000" and config.storage.s3.max_attempts == 4
    with pytest.raises(ValueError, match="scheme"):
        Config.model_validate({"storage": {"s3": {"scheme": "ftp"}}})
    assert Config.model_validate({}).storage.s3.max_attempts == 10


def test_without_storage_s3_the_endpoint_comes_from_the_aws_environment(moto_s3: MotoS3, monkeypatch) -> None:
    """AWS_ENDPOINT_URL_S3, the AWS SDKs' setting (which pyarrow's S3FileSystem constructor ignores)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://{moto_s3.endpoint}")
    bucket = moto_s3.create_bucket()
    lake = Storage(f"s3://{bucket}/lake")
    lake.ensure_root()
    lake.write_bytes("k.bin", b"through the environment")
    assert lake.read_bytes("k.bin") == b"through the environment" and [i.key for i in lake.list()] == ["k.bin"]
