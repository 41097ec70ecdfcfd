"""Soak harness (tests/test_soak.py in CI for about a minute, `make soak` for 10 minutes: SOAK_SECONDS).

A shipper writes staging objects at a steady rate for two tables while `silt stream`, `silt merge` and
`silt publish` daemons run. Every few seconds it samples each daemon's resident memory (the Python driver
and the Spark JVM apart) and the backlog: staging objects not yet streamed, small objects not yet merged,
merge jobs waiting or running, small objects no published version shows yet.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.clock import utcnow
from siltlake.config import load_config
from siltlake.deployment import Deployment

from .chaos import TABLES, chaos_env, create_tables
from .processes import Shipper, SiltProcess, kill_session, session_rss, successes, wait_until

MIB = 1024 * 1024
STREAM_INTERVAL = 2
PUBLISH_INTERVAL = 5


@dataclass
class Sample:
    seconds: float
    shipped: int  # staging objects written so far
    staging: int  # shipped, not yet streamed
    unmerged: int  # small objects above their partition's last merged bound
    jobs: int  # merge jobs due or running
    unpublished: int  # live small objects above their partition's newest version's watermark
    rss: dict[str, int] = field(default_factory=dict)  # "<daemon> <kind>" -> bytes


def backlog(deployment: Deployment, shipped: int) -> tuple[int, int, int, int]:
    so, st, v = s.small_objects, s.staging_objects, s.partition_versions
    with deployment.catalog.engine.connect() as c:
        streamed = c.execute(sa.select(sa.func.count()).where(st.c.processed_time.is_not(None))).scalar_one()
        watermark = (
            sa.select(sa.func.coalesce(sa.func.max(v.c.live_watermark), 0))
            .where(v.c.partition_id == so.c.partition_id)
            .scalar_subquery()
        )
        unpublished = c.execute(
            sa.select(sa.func.count()).where(so.c.delayed.is_(False), so.c.id > watermark)
        ).scalar_one()
    status = deployment.catalog.merge_queue.status(utcnow(), deployment.config.merge.job_timeout)
    unmerged = sum(t["unmerged_objects"] for t in status)
    jobs = sum(t["jobs"]["due"] + t["jobs"]["running"] + t["jobs"]["stale"] for t in status)
    return shipped - streamed, unmerged, jobs, unpublished


def thirds(values: list[float]) -> tuple[list[float], list[float]]:
    """The middle and the last third (the first third is warm-up: JVMs starting, the first backlog)."""
    third = len(values) // 3
    return values[third : 2 * third], values[2 * third :]


@dataclass
class SoakReport:
    seconds: float
    rate: float
    samples: list[Sample]

    def table(self) -> str:
        keys = sorted(self.samples[0].rss) if self.samples else []
        head = f"{'t s':>6} {'shipped':>7} {'staging':>7} {'unmerged':>8} {'jobs':>4} {'unpubl':>6} " + " ".join(
            f"{key:>14}" for key in keys
        )
        rows = [
            f"{x.seconds:6.0f} {x.shipped:7d} {x.staging:7d} {x.unmerged:8d} {x.jobs:4d} {x.unpublished:6d} "
            + " ".join(f"{x.rss[key] / MIB:12.0f}Mi" for key in keys)
            for x in self.samples
        ]
        return "\n".join([head, *rows])

    def summary(self) -> dict:
        result: dict = {"seconds": round(self.seconds), "objects_per_second": self.rate, "samples": len(self.samples)}
        for name in ("staging", "unmerged", "jobs", "unpublished"):
            values = [getattr(x, name) for x in self.samples]
            middle, last = thirds(values)
            result[f"{name}_max"] = max(values)
            result[f"{name}_mean_middle_third"] = round(statistics.mean(middle), 1)
            result[f"{name}_mean_last_third"] = round(statistics.mean(last), 1)
        for key in sorted(self.samples[0].rss):
            middle, last = thirds([x.rss[key] / MIB for x in self.samples])
            result[f"rss_mib {key} median_middle_third"] = round(statistics.median(middle))
            result[f"rss_mib {key} median_last_third"] = round(statistics.median(last))
            result[f"rss_mib {key} max"] = round(max(x.rss[key] for x in self.samples) / MIB)
        return result

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps({"summary": self.summary(), "samples": [asdict(x) for x in self.samples]}, indent=1) + "\n"
        )
        path.with_suffix(".txt").write_text(self.table() + "\n")


def soak(tmp_path: Path, url: str, seconds: float, *, rate: float = 4.0, every: float = 2.0) -> SoakReport:
    """Run the daemons under a steady load for `seconds` after they first commit; sample every `every` s."""
    env = chaos_env(tmp_path, url)
    deployment = Deployment(load_config(environ=env))
    deployment.init()
    create_tables(deployment, merge_batch_size=500, merged_object_size=1024 * 1024)
    shipper = Shipper(tmp_path / "staging", TABLES, [utcnow().date()], rate=rate, records=(20, 60), seed=1)
    daemons: list[SiltProcess] = []
    samples: list[Sample] = []
    try:
        daemons = [
            SiltProcess(tmp_path, "stream", env, "stream", "--interval", str(STREAM_INTERVAL)),
            SiltProcess(tmp_path, "merge", env, "merge"),
            SiltProcess(tmp_path, "publish", env, "publish", "--interval", str(PUBLISH_INTERVAL)),
        ]
        # The steady load starts once every daemon works (each JVM up), so start-up is not part of the trend.
        for name in TABLES:
            shipper.ship_one(name)
        wait_until(lambda: successes(deployment) > 0, daemons, 180, "the first merge commit")
        shipper.start()
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < seconds:
            for daemon in daemons:
                assert daemon.alive(), daemon.tail()
            staging, unmerged, jobs, unpublished = backlog(deployment, shipper.objects)
            rss = {}
            for daemon in daemons:
                for kind, value in session_rss(daemon.pid).items():
                    if value:
                        rss[f"{daemon.name} {kind}"] = value
            samples.append(Sample(elapsed, shipper.objects, staging, unmerged, jobs, unpublished, rss))
            time.sleep(max(0.0, started + len(samples) * every - time.monotonic()))
    finally:
        shipper.stop()
        for daemon in daemons:
            kill_session(daemon.pid)
            daemon.proc.wait(timeout=30)
        deployment.close()
    # Python workers come and go with tasks, and publish has no JVM: keep the figures every sample has.
    keys = set.intersection(*(set(x.rss) for x in samples))
    for sample in samples:
        sample.rss = {key: sample.rss[key] for key in sorted(keys)}
    return SoakReport(seconds, rate, samples)
