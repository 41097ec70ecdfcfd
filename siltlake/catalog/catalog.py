"""The catalog: its core (engine, transactions, migrations) and one object per concern, each speaking SQL."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from siltlake.catalog.core import CatalogCore
from siltlake.catalog.derived import Derived
from siltlake.catalog.discovery import DiscoveryCursors
from siltlake.catalog.external_sync import ExternalSync
from siltlake.catalog.instances import Instances
from siltlake.catalog.merge_queue import MergeQueue
from siltlake.catalog.observations import Observations
from siltlake.catalog.partitions import Partitions
from siltlake.catalog.positions import Positions
from siltlake.catalog.reaping import Reaping
from siltlake.catalog.requests import Requests
from siltlake.catalog.staging import Staging
from siltlake.catalog.tables import Tables
from siltlake.catalog.tags import Tags
from siltlake.catalog.version_reads import VersionReads
from siltlake.catalog.versions import Versions
from siltlake.catalog.waits import Waits
from siltlake.errors import CatalogUnreachable


class Catalog(CatalogCore):
    """One deployment's catalog. Create with a URL; call upgrade() (silt init) before use.

    Its operations are grouped by concern: catalog.tables, .staging, .partitions (and the stream's commit),
    .merge_queue, .versions (publishing), .version_reads (what readers see of versions), .reaping, .external_sync,
    .instances, .derived (derived tables), .observations (what metrics and the dashboard show), .discovery (where
    each staging root's discovery stands), .positions (files written in place and appended to), .waits (files
    waiting to settle), .requests (request ids of committed writes) and .tags (names of table versions)."""

    def __init__(self, url: str, *, echo: bool = False, connect_timeout: int | None = None) -> None:
        super().__init__(url, echo=echo, connect_timeout=connect_timeout)
        self.tables = Tables(self)
        self.staging = Staging(self)
        self.discovery = DiscoveryCursors(self)
        self.positions = Positions(self)
        self.waits = Waits(self)
        self.partitions = Partitions(self)
        self.merge_queue = MergeQueue(self)
        self.versions = Versions(self)
        self.version_reads = VersionReads(self)
        self.reaping = Reaping(self)
        self.external_sync = ExternalSync(self)
        self.instances = Instances(self)
        self.derived = Derived(self)
        self.observations = Observations(self)
        self.requests = Requests(self)
        self.tags = Tags(self)

    @classmethod
    def look_at(cls, masked_url: str, like: Catalog) -> Catalog:
        """Open the catalog a marker names, only to read who it is; CatalogUnreachable when it cannot be.

        A SQLite file that is gone is not created again. Markers hold no passwords: a PostgreSQL URL with
        `like`'s user is tried with `like`'s password."""
        if masked_url.startswith("sqlite:///"):
            path = masked_url[len("sqlite:///") :]
            if not Path(path).is_file():
                raise CatalogUnreachable(f"{path} does not exist")
            return cls(masked_url)
        try:
            url = make_url(masked_url)
            if url.password is not None:
                own = like.engine.url
                url = url.set(password=own.password if own.username == url.username else None)
            return cls(url.render_as_string(hide_password=False), connect_timeout=10)
        except (SQLAlchemyError, ImportError):
            raise CatalogUnreachable(f"{masked_url!r} is not a catalog URL siltlake can open") from None
