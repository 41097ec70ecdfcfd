"""stream: staging objects become live and delayed small objects (DESIGN §2, seed 000's Prism Stream)."""

from siltlake.stream.discover import discover, map_key
from siltlake.stream.runner import Progress, StreamReport, stream_forever, stream_once

__all__ = ["Progress", "StreamReport", "discover", "map_key", "stream_forever", "stream_once"]
