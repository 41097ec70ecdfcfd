"""The Iceberg catalog a deployment publishes to: where it is and how it is opened, the names and paths of its
tables, the properties siltlake keeps on them, and commits retried when another writer's commit wins."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

from siltlake.catalog.core import normalise_url
from siltlake.errors import SiltError
from siltlake.storage.keys import iceberg_warehouse

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog as IcebergCatalog

    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment

TARGET = "iceberg"
RUN_PROPERTY = "siltlake.publish-run"
VERSION_PROPERTY = "siltlake.table-version"
VERSION_TIME_PROPERTY = "siltlake.version-time"
REAP_PROPERTY = "siltlake.reap"
TABLE_ID_PROPERTY = "siltlake.table-id"
INSTANCE_PROPERTY = "siltlake.instance"
VERSION_HINT = "version-hint.text"
MANAGED_PROPERTIES = {
    # Snapshot summaries list each changed partition's counts (`partitions.dt=...`) up to this many partitions.
    "write.summary.partition-limit": "100",
    # siltlake's reap deletes data files (siltlake's time travel may still need files no Iceberg snapshot lists):
    # an engine's expire_snapshots or remove_orphan_files must not.
    "gc.enabled": "false",
}
_CATALOGS: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], Any] = {}  # pyiceberg Catalogs
_CATALOGS_LOCK = threading.Lock()
# A commit that loses a race to another commit of the same table is decided again from the table the winner left;
# two runs over one table's versions lose at most once a version each.
COMMIT_ATTEMPTS = 10
T = TypeVar("T")


def catalog_uri(deployment: Deployment) -> str:
    """The Iceberg catalog's URL: publish.iceberg.catalog_url, else beside siltlake's own catalog."""
    configured = deployment.config.publish.iceberg.catalog_url
    if configured:
        return configured if configured.startswith(("http://", "https://")) else normalise_url(configured)
    url = normalise_url(deployment.config.catalog.url)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return f"sqlite:///{Path(url[len('sqlite:///') :]).with_name('iceberg.db')}"
    return url


def iceberg_path(deployment: Deployment, key: str) -> str:
    """The path Iceberg records for an object: its URI, not percent-encoded (Iceberg paths are plain text)."""
    return unquote(deployment.lake.uri(key))


def open_catalog(deployment: Deployment) -> IcebergCatalog:
    """The deployment's Iceberg catalog (one per URL in a process: a SQL catalog holds an engine)."""
    config = deployment.config.publish.iceberg
    uri = catalog_uri(deployment)
    warehouse = iceberg_path(deployment, iceberg_warehouse(deployment.instance_key))
    io = file_io_properties(deployment)
    cache_key = (uri, config.catalog_name, warehouse, tuple(sorted(io.items())))
    with _CATALOGS_LOCK:  # threads of one process (a publish run's, a test's runners) share one catalog
        if cache_key not in _CATALOGS:
            if uri.startswith(("http://", "https://")):
                from pyiceberg.catalog.rest import RestCatalog

                _CATALOGS[cache_key] = RestCatalog(config.catalog_name, uri=uri, warehouse=warehouse, **io)
            else:
                from pyiceberg.catalog.sql import SqlCatalog

                if uri.startswith("sqlite:///"):
                    Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
                try:
                    made = SqlCatalog(config.catalog_name, uri=uri, warehouse=warehouse, **io)
                except Exception:  # made again below; a failure that stays is raised there
                    # PyIceberg creates its catalog tables when it first finds them absent: another process doing
                    # the same at that moment makes this CREATE fail ("already exists"). Now they exist.
                    made = SqlCatalog(config.catalog_name, uri=uri, warehouse=warehouse, **io)
                _CATALOGS[cache_key] = made
        return _CATALOGS[cache_key]


def file_io_properties(deployment: Deployment) -> dict[str, str]:
    """PyIceberg's FileIO settings for the lake: on S3, pyarrow's S3 file system at storage.s3's endpoint and
    region (credentials from the usual AWS settings, as for siltlake's own reads and writes)."""
    if not deployment.lake.is_object_store:
        return {}
    s3 = deployment.config.storage.s3
    properties = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    if s3.endpoint_override:
        properties["s3.endpoint"] = f"{s3.scheme}://{s3.endpoint_override}"
    region = s3.region or (
        os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        if s3.endpoint_override
        else None
    )
    if region:
        properties["s3.region"] = region
    return properties


def identifier(deployment: Deployment, record: TableRecord) -> tuple[str, str]:
    prefix = deployment.config.publish.iceberg.namespace_prefix
    return prefix + record.definition.schema_name, record.definition.name


def retried_on_conflict(
    table_name: str,
    attempt: Callable[[], T],
    before_retry: Callable[[], object] | None = None,
) -> T:
    """`attempt()`, run again while another commit to the same Iceberg table beats it (another publish run or a reap
    at the same time). An attempt decides what to commit from the table as it reads it (`before_retry` re-reads it),
    so what the winner committed is never committed again; each loss means the winner made progress."""
    from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError

    for number in range(COMMIT_ATTEMPTS):
        try:
            if number and before_retry is not None:
                before_retry()
            return attempt()
        except (CommitFailedException, TableAlreadyExistsError, NoSuchTableError) as exc:
            lost = exc
    raise SiltError(
        f"Iceberg table {table_name}: another commit won the race {COMMIT_ATTEMPTS} times in a row "
        f"(another publish run or reap at work): {lost}; the next run resumes from what was committed"
    ) from lost


def object_key(deployment: Deployment, path: str) -> str:
    """The object key of an Iceberg path under the lake's root; anywhere else is an error."""
    key = lake_key(deployment, path)
    if key is None:
        raise SiltError(f"Iceberg data file {path} is not under the lake's root {deployment.lake.root}")
    return key


def lake_key(deployment: Deployment, path: str) -> str | None:
    """The object key of an Iceberg path under the lake's root (None: elsewhere)."""
    root = unquote(deployment.lake.root) + "/"
    return path[len(root) :] if path.startswith(root) else None
