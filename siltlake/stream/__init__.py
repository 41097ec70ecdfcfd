"""stream: staging objects become live and delayed small objects (docs/design.md, "Staging and stream")."""

from siltlake.stream.discover import discover, map_key
from siltlake.stream.report import StreamReport
from siltlake.stream.runner import Progress, stream_forever, stream_once

__all__ = ["Progress", "StreamReport", "discover", "map_key", "stream_forever", "stream_once"]
