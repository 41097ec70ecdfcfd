"""`make demo S3=1`: the demo's storage roots in a bucket of a local S3 endpoint (moto's server, a development
dependency) on 127.0.0.1, reached exactly as an S3 bucket on AWS is: `s3://` roots, `[storage.s3]`'s endpoint
override, credentials from the AWS environment variables."""

from __future__ import annotations

import logging
import os
import socket

BUCKET = "siltlake-demo"


def start_local_s3() -> str:
    """Start the endpoint, create the bucket, point this process's configuration at it; returns the endpoint.
    Called before Spark starts, so Spark's Python workers inherit the same AWS settings."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        raise SystemExit(
            "make demo S3=1 needs moto's server (a development dependency): "
            "pip install 'moto[server]' (make installs it with the dev extra)"
        ) from None
    import pyarrow.fs as pafs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False).start()  # a daemon thread: ends with us
    endpoint = f"127.0.0.1:{port}"
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "demo",
            "AWS_SECRET_ACCESS_KEY": "demo",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",  # never ask an instance metadata service for credentials
            "SILTLAKE_STORAGE__ROOT": f"s3://{BUCKET}/lake",
            "SILTLAKE_STORAGE__STAGING_ROOT": f"s3://{BUCKET}/staging",
            "SILTLAKE_STORAGE__S3__ENDPOINT_OVERRIDE": endpoint,
            "SILTLAKE_STORAGE__S3__SCHEME": "http",
        }
    )
    pafs.S3FileSystem(
        endpoint_override=endpoint, scheme="http", region="us-east-1", allow_bucket_creation=True
    ).create_dir(BUCKET)
    return endpoint
