"""A deployment: its configuration, catalog, storage roots and instance key, opened together."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from siltlake.catalog import Catalog
from siltlake.clock import utcnow
from siltlake.config import Config, load_config
from siltlake.errors import CatalogError
from siltlake.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class Deployment:
    config: Config
    catalog: Catalog = field(init=False)
    lake: Storage = field(init=False)
    staging: Storage = field(init=False)
    _spark: SparkSession | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.catalog = Catalog(self.config.catalog.url)
        self.lake = Storage(self.config.storage.root)
        self.staging = Storage(self.config.storage.staging_root)

    @classmethod
    def open(cls, config: Config | None = None) -> Deployment:
        return cls(config or load_config())

    def init(self, claim: bool = False) -> str:
        """Create or upgrade the catalog, create the storage roots, register this instance key.

        claim=True rewrites the key's `_instance.json` to name this catalog (after moving a catalog): reap
        refuses to run while it names another one."""
        self.catalog.upgrade()
        self.lake.ensure_root()
        self.staging.ensure_root()
        key = self.config.instance_key
        if key is None:
            try:
                key = self.catalog.self_instance_key()
            except CatalogError:  # no key registered yet: this is the first init
                key = secrets.token_hex(4)
        self.catalog.register_instance(key, self.lake.root, is_self=True)
        marker = f"{key}/_instance.json"
        if claim or not self.lake.exists(marker):
            self.lake.write_bytes(marker, json.dumps({
                "instance_key": key,
                "catalog": repr(self.catalog),
                "created": utcnow().isoformat(),
            }).encode())
        self.__dict__.pop("instance_key", None)
        return key

    @cached_property
    def instance_key(self) -> str:
        if self.config.instance_key is not None:
            return self.config.instance_key
        return self.catalog.self_instance_key()

    def spark(self) -> SparkSession:
        if self._spark is None:
            from siltlake.spark import spark_session

            extra = None
            if "hive" in self.config.publish.targets:  # Hive support is fixed when the session starts
                from siltlake.publish.hive import hive_session_conf

                extra = hive_session_conf(self.config.publish.hive)
            self._spark = spark_session(self.config.spark, extra)
        return self._spark

    def use_spark(self, session: SparkSession) -> None:
        """Run on a session the caller owns (tests, notebooks)."""
        self._spark = session

    def close(self) -> None:
        self.catalog.close()
