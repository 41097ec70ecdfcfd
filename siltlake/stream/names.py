"""A one-off stream run's record of names: what a daemon keeps in memory between rounds (storage/accounted.py),
read from the catalog before `silt stream --once` walks and stored back after, so that its walk too `stat`s only
the names of a changed directory that no completed round accounted for (docs/design.md, "A one-off run's record
of names")."""

from __future__ import annotations

import os

from siltlake.deployment import Deployment
from siltlake.storage.accounted import AccountedNames, DirectoryNames
from siltlake.storage.dirwatch import WatchedNames, inotify_available


class StoredNames(AccountedNames):
    """The catalog's record of a local staging root's names, read when the walk first needs it (a round whose walk
    reads no changed directory reads nothing); store() writes back the directories that changed."""

    def __init__(self, deployment: Deployment) -> None:
        super().__init__()
        self._discovery = deployment.catalog.discovery
        self._root = deployment.staging.root
        self._stored: dict[str, DirectoryNames] | None = None  # as read from the catalog; None: not read yet

    def _read(self) -> None:
        if self._stored is None:
            self._directories = self._discovery.recorded_names(self._root)
            self._stored = self.recorded()

    def files(self, path: str, found: os.stat_result) -> str | None:
        self._read()
        return super().files(path, found)

    def keep(self, walked: dict[str, DirectoryNames], now_ns: int, window_ns: int) -> None:
        if self._stored is None and all(seen.files is None for seen in walked.values()):
            return  # the walk read no directory: the stored record stands (what aged goes at a later round)
        self._read()
        super().keep(walked, now_ns, window_ns)

    def store(self) -> None:
        if self._stored is None:
            return
        current = self.recorded()
        changed = {path: known for path, known in current.items() if self._stored.get(path) != known}
        forgotten = self._stored.keys() - current.keys()
        if changed or forgotten:
            self._discovery.record_names(self._root, changed, forgotten)
        self._stored = current


def _walked(deployment: Deployment) -> bool:
    """Whether the staging root is walked by directory (a local one), where a record of names applies."""
    return deployment.staging.is_local and not deployment.staging.is_object_store


def stored_names(deployment: Deployment) -> StoredNames | None:
    """The stored record for a run's rounds when its staging root is walked (a local one); else None."""
    return StoredNames(deployment) if _walked(deployment) else None


def daemon_names(deployment: Deployment) -> AccountedNames:
    """A stream daemon's record for its rounds: kept current by inotify where it can be (stream.watch_directories,
    a local root on Linux), else the record of what its rounds listed."""
    if deployment.config.stream.watch_directories and _walked(deployment) and inotify_available():
        return WatchedNames()
    return AccountedNames()
