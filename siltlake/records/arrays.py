"""Arrow arrays built without pyarrow's Python-object conversion: `pa.array` of a range or a NumPy array asks
whether pandas is installed and imports it (0.2 s) the first time, which a short command then pays."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def int64_range(start: int, stop: int, step: int = 1) -> pa.Array:
    """start, start + step, ... below stop, as an int64 array sharing NumPy's buffer."""
    values = np.arange(start, stop, step, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])
