"""The publish targets a deployment names in `publish.targets`: built-in "hive", "glue" and "iceberg", and any a
plug-in registers (siltlake.publish.targets says what a target does)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from siltlake.errors import ConfigError

if TYPE_CHECKING:
    from siltlake.deployment import Deployment
    from siltlake.publish.targets import PublishTarget


_FACTORIES: dict[str, Callable[[Deployment], PublishTarget]] = {}


def register_target(name: str, factory: Callable[[Deployment], PublishTarget]) -> None:
    """Make `name` usable in publish.targets (a plug-in calls this when imported)."""
    _FACTORIES[name] = factory


def configured_targets(deployment: Deployment) -> list[PublishTarget]:
    targets = []
    for name in deployment.config.publish.targets:
        factory = _FACTORIES.get(name)
        if factory is None:
            raise ConfigError(
                f"publish.targets: unknown target {name!r}; known targets: {', '.join(sorted(_FACTORIES))}"
            )
        targets.append(factory(deployment))
    return targets


def _hive(deployment: Deployment) -> PublishTarget:
    from siltlake.publish.hive import HiveTarget

    return HiveTarget(deployment)


def _iceberg(deployment: Deployment) -> PublishTarget:
    from siltlake.publish.iceberg.target import IcebergTarget

    return IcebergTarget(deployment)


def _glue(deployment: Deployment) -> PublishTarget:
    from siltlake.publish.glue import GlueTarget

    return GlueTarget(deployment)


register_target("hive", _hive)
register_target("glue", _glue)
register_target("iceberg", _iceberg)
