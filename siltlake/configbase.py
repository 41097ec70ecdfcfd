"""What every config section shares: strict models, positive counts, and the heartbeat rule of the daemons."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

AtLeastOne = Annotated[int, Field(ge=1)]


class Section(BaseModel):
    """A config section: an unknown key is an error, not a silently ignored typo."""

    model_config = ConfigDict(extra="forbid")


def check_heartbeat(section: str, interval: int, timeout_name: str, timeout: int, otherwise: str) -> None:
    """A heartbeat at most half its timeout: one late beat must not make a live holder look dead."""
    if interval * 2 > timeout:
        raise ValueError(
            f"{section}.heartbeat_interval ({interval} s) must be at most half of "
            f"{section}.{timeout_name} ({timeout} s), or {otherwise}"
        )
