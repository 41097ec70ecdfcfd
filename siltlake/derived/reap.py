"""The derived reaper (two phases, docs/design.md): refresh the active-build list, then delete this deployment's
builds that are neither active nor referenced by a retained version, and never another deployment's."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from siltlake.clock import to_naive_utc
from siltlake.deployment import Deployment
from siltlake.derived.build import build_lost
from siltlake.storage.filesystem import ObjectInfo
from siltlake.storage.keys import DERIVED_AREA, build_of, build_prefix, build_reg_key


@dataclass
class DerivedReapReport:
    deactivated: list[tuple[str, str]] = field(default_factory=list)  # (build, why it left the active list)
    lost: list[str] = field(default_factory=list)  # running builds whose builder is gone, marked failed
    deleted: list[tuple[str, str]] = field(default_factory=list)  # (build, why)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (build, why), for builds not active
    objects: int = 0
    bytes: int = 0

    def as_dict(self) -> dict:
        return {
            "deactivated": [{"build": b, "reason": r} for b, r in self.deactivated],
            "lost": self.lost,
            "deleted": [{"build": b, "reason": r} for b, r in self.deleted],
            "kept": [{"build": b, "reason": r} for b, r in self.kept],
            "objects": self.objects,
            "bytes": self.bytes,
        }


def reap_derived(
    deployment: Deployment, now: dt.datetime, *, grace: int, dry_run: bool = False, expiring: Collection[int] = ()
) -> DerivedReapReport:
    """Phase 1 drops from the active list the builds whose derived table is gone, whose objects are gone,
    whose persist_for expired, or that no partition shows any more; phase 2 deletes each build of the
    derived area that carries this deployment's reg_key and is not active, not running and not referenced
    by a retained version. A build of another registered deployment is kept, and so is one whose reg_key
    nobody registered (Looker drops those; siltlake will not delete what it cannot prove is its own).
    `expiring`: version row ids the same reap run deletes first (a dry run has not deleted them)."""
    catalog = deployment.catalog
    own = deployment.instance_key
    report = DerivedReapReport()
    view = catalog.derived.reap_view(expiring)
    by_id = {build.id: build for build in view.builds.values()}
    objects: dict[str, list[ObjectInfo]] = defaultdict(list)
    for info in deployment.lake.list(f"{DERIVED_AREA}/"):
        name = build_of(info.key)
        if name is not None:
            objects[name].append(info)

    # Phase 1: what is active now.
    active = set(view.active)
    leaving = []
    for build_id, expire_time in sorted(view.active.items()):
        build = by_id[build_id]
        if build.derived_id not in view.live_derived:
            why = "its derived table was dropped"
        elif build.name not in objects and build.dates_written:
            why = "its objects are gone"
        elif expire_time is not None and expire_time <= now:
            why = f"persist_for expired at {expire_time:%Y-%m-%d %H:%M:%S} UTC"
        elif build_id not in view.current:
            why = "a newer build replaced every date it held"
        else:
            continue
        leaving.append(build_id)
        report.deactivated.append((build.name, why))
    active -= set(leaving)
    lost = [b.id for b in view.builds.values() if b.status == "building" and build_lost(deployment, b, now)]
    report.lost = [by_id[b].name for b in lost]
    if not dry_run:
        catalog.derived.deactivate(leaving)
        # Only what the catalog moved to failed: a build that published since the snapshot is left alone.
        moved = catalog.derived.mark_lost(lost, now)
        lost = [b for b in lost if b in moved]
        report.lost = [by_id[b].name for b in lost]

    # Phase 2: what goes.
    foreign = catalog.instances.foreign()
    young_after = now - dt.timedelta(seconds=grace)
    for name, infos in sorted(objects.items()):
        reg_key = build_reg_key(name)
        row = view.builds.get(name)
        if reg_key != own:
            if reg_key is None:
                report.kept.append((name, "not a build name"))
            elif reg_key in foreign:
                report.kept.append((name, f"another deployment's build (reg_key {reg_key})"))
            else:
                report.kept.append((name, f"reg_key {reg_key} is not registered here: left alone"))
            continue
        if row is None:
            if any(info.mtime is None or to_naive_utc(info.mtime) > young_after for info in infos):
                report.kept.append((name, "no catalog row, inside the grace period"))
                continue
            why = "no catalog row names it (past the grace period)"
        elif row.id in active:
            continue
        elif row.status == "building" and row.id not in lost:
            report.kept.append((name, "being built (or it finished while reap ran)"))
            continue
        elif row.id in view.referenced:
            report.kept.append((name, "a retained version of its table references it"))
            continue
        else:
            why = {"failed": f"its build failed: {row.error}", "building": "its builder was lost"}.get(
                row.status, "no longer active and no retained version references it"
            )
        report.deleted.append((name, why))
        report.objects += len(infos)
        report.bytes += sum(info.size for info in infos)
        if not dry_run:
            deployment.lake.delete_prefix(build_prefix(name))
    return report
