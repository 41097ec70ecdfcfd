"""A deployment: its configuration, catalog, storage roots and instance key, opened together."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from siltlake.catalog import Catalog
from siltlake.catalog.inherited import parse_settings
from siltlake.clock import utcnow
from siltlake.config import Config, load_config
from siltlake.errors import CatalogError, CatalogUnreachable, SiltError
from siltlake.storage.filesystem import S3Options, Storage
from siltlake.storage.keys import instance_marker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class InstanceKeyRefused(SiltError):
    """Nothing may be written or deleted under the instance key: another catalog owns it, or nothing proves
    that this deployment's catalog does."""


@dataclass(frozen=True)
class KeyOwner:
    """Whose the instance key is, by its `_instance.json`, judged from this deployment's catalog.

    state: "missing" (no marker), "ours", "other" (another catalog's id; or, in a marker written before
    catalog ids, another database's URL or one that cannot be opened), "copy" (this catalog's id but another
    database: this catalog is a copy of the one named), "unopenable" (this catalog's id under a URL that
    cannot be opened from here)."""

    state: str
    marker: str  # the marker's URI
    catalog: str = ""  # the catalog URL the marker names
    catalog_id: str | None = None  # the catalog id it names (None: written before catalog ids)
    detail: str = ""  # why the named catalog could not be opened

    def refusal(self, action: str, key: str) -> str:
        """The one-line refusal for `action` (e.g. "stream") under key, saying what to do next."""
        named = self.catalog or "(unreadable marker)"
        if self.state == "missing":
            return (
                f"refusing to {action}: {self.marker} is missing, so nothing proves instance key {key!r} is "
                f"this deployment's; run `silt init` to write it, then {action} again"
            )
        if self.state == "copy":
            return (
                f"refusing to {action}: instance key {key!r} belongs to another deployment's catalog {named} "
                f"({self.marker}), of which this catalog is a copy, and writing or reaping here would "
                "destroy that deployment's objects; give this deployment its own catalog and instance key "
                "(`silt init` a new one)"
            )
        if self.state == "unopenable":
            return (
                f"refusing to {action}: instance key {key!r} is marked ({self.marker}) as the key of {named}, "
                f"which has this catalog's id but cannot be opened from here ({self.detail}); if this catalog "
                "was moved from there, run `silt init --claim`; if it is the same database under another "
                "URL, configure that URL"
            )
        return (
            f"refusing to {action}: instance key {key!r} belongs to another deployment's catalog {named} "
            f"({self.marker}); give this deployment another instance_key, or, only after checking that the "
            f"catalog at {named} is really gone, run `silt init --claim`"
        )


def _named_url(value: object) -> str:
    """The catalog URL a marker names (markers written before catalog ids hold `Catalog(<url>)`)."""
    text = str(value or "")
    if text.startswith("Catalog(") and text.endswith(")"):
        return text[len("Catalog(") : -1]
    return text


@dataclass
class Deployment:
    config: Config
    catalog: Catalog = field(init=False)
    lake: Storage = field(init=False)
    staging: Storage = field(init=False)
    _spark: SparkSession | None = field(default=None, init=False, repr=False)
    # Other URLs of this catalog's own database, seen in markers: checked once per process.
    _same_database_as: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        self.catalog = Catalog(self.config.catalog.url)
        self.catalog.tables.deployment_settings = parse_settings(self.config.tables.given(), "config [tables]")
        s3 = S3Options(**self.config.storage.s3.model_dump())
        self.lake = Storage(self.config.storage.root, s3)
        self.staging = Storage(self.config.storage.staging_root, s3)

    @classmethod
    def open(cls, config: Config | None = None) -> Deployment:
        return cls(config or load_config())

    def init(self, claim: bool = False) -> str:
        """Create or upgrade the catalog, create the storage roots, register this instance key.

        A key whose `_instance.json` names another catalog is refused. claim=True takes it over (after
        moving a catalog, or when its catalog is gone), except while that catalog can be opened and still
        registers the key as its own."""
        self.catalog.upgrade()
        self.lake.ensure_root()
        self.staging.ensure_root()
        key = self.config.instance_key
        if key is None:
            try:
                key = self.catalog.instances.self_key()
            except CatalogError:  # no key registered yet: this is the first init
                key = secrets.token_hex(4)
        owner = self.key_owner(key)
        if owner.state not in ("missing", "ours"):
            if not claim:
                raise InstanceKeyRefused(owner.refusal("initialise", key))
            self._check_claimable(key, owner)
        self.catalog.instances.register(key, self.lake.root, is_self=True)
        self.catalog.tables.apply_deployment_settings()
        catalog_id = self.catalog.instances.ensure_catalog_id()
        if claim or owner.state != "ours" or owner.catalog_id != catalog_id:
            self.lake.write_bytes(
                instance_marker(key),
                json.dumps(
                    {
                        "instance_key": key,
                        "catalog": self.catalog.masked_url,
                        "catalog_id": catalog_id,
                        "created": utcnow().isoformat(),
                    }
                ).encode(),
            )
        self.__dict__.pop("instance_key", None)
        return key

    def _check_claimable(self, key: str, owner: KeyOwner) -> None:
        """Refuse to take the key over while the catalog its marker names is reachable and registers it."""
        try:
            named = Catalog.look_at(owner.catalog, like=self.catalog)
        except CatalogUnreachable:
            return
        try:
            registered, _ = named.instances.registered_self()
        except CatalogUnreachable:
            return
        finally:
            named.close()
        if registered == key:
            raise InstanceKeyRefused(
                f"refusing to claim instance key {key!r}: its catalog {owner.catalog} is reachable and still "
                "registers the key as its own, so that deployment is alive and reaping here would delete its "
                "objects; give this deployment another instance_key"
            )

    def key_owner(self, key: str) -> KeyOwner:
        """Whose the key is by its marker (one small read; opens the named catalog only when the marker names
        another URL with this catalog's id, or with none)."""
        marker_key = instance_marker(key)
        uri = self.lake.uri(marker_key)
        try:
            data = json.loads(self.lake.read_bytes(marker_key))
        except FileNotFoundError:
            return KeyOwner("missing", uri)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return KeyOwner("other", uri)
        named, named_id = _named_url(data.get("catalog")), data.get("catalog_id")
        if named_id is not None and named_id != self.catalog.instances.catalog_id():
            return KeyOwner("other", uri, named, named_id)
        if named == self.catalog.masked_url or named in self._same_database_as:
            return KeyOwner("ours", uri, named, named_id)
        # This catalog's id (or, in a marker written before catalog ids, no id) under another URL: this very
        # database reached another way, or another database (a copy, or another deployment's catalog).
        try:
            other = Catalog.look_at(named, like=self.catalog)
        except CatalogUnreachable as exc:
            return KeyOwner("other" if named_id is None else "unopenable", uri, named, named_id, str(exc))
        try:
            same = self.catalog.same_database(other)
        except CatalogUnreachable as exc:
            return KeyOwner("other" if named_id is None else "unopenable", uri, named, named_id, str(exc))
        finally:
            other.close()
        if not same:
            return KeyOwner("other" if named_id is None else "copy", uri, named, named_id)
        self._same_database_as.add(named)
        return KeyOwner("ours", uri, named, named_id)

    def check_instance(self, action: str) -> str:
        """Refuse (InstanceKeyRefused) unless the instance key provably belongs to this deployment's catalog:
        the catalog registers it as its own and its `_instance.json` names this catalog. Reap calls it before
        deleting anything, writers before the first write of a run. Returns the key."""
        key = self.instance_key
        own = self.catalog.instances.self_key()
        if own != key:
            raise InstanceKeyRefused(
                f"refusing to {action}: the configured instance_key {key!r} is not this catalog's key {own!r}; "
                "remove instance_key from the configuration or set it to the catalog's key"
            )
        owner = self.key_owner(key)
        if owner.state != "ours":
            raise InstanceKeyRefused(owner.refusal(action, key))
        return key

    @cached_property
    def instance_key(self) -> str:
        if self.config.instance_key is not None:
            return self.config.instance_key
        return self.catalog.instances.self_key()

    def spark(self) -> SparkSession:
        if self._spark is None:
            from siltlake.spark import hive_session_conf, spark_session

            extra = None
            if "hive" in self.config.publish.targets:  # Hive support is fixed when the session starts
                extra = hive_session_conf(self.config.publish.hive)
            self._spark = spark_session(self.config.spark, extra)
        from siltlake.spark import bound_session

        return bound_session(self._spark)  # jobs of a time-bounded command carry its tag

    def use_spark(self, session: SparkSession) -> None:
        """Run on a session the caller owns (tests, notebooks); it gets siltlake's locked settings."""
        from siltlake.spark import lock_session

        self._spark = lock_session(session)

    def close(self) -> None:
        self.catalog.close()
