"""Arrow arrays made without pyarrow's conversion of Python values, which imports pandas the first time."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa

from siltlake.records.arrays import int64_range


def test_int64_range_is_numpys_arange_as_arrow() -> None:
    assert int64_range(0, 5).to_pylist() == [0, 1, 2, 3, 4]
    assert int64_range(2, 11, 3).to_pylist() == [2, 5, 8]
    assert int64_range(4, 4).to_pylist() == [] and int64_range(0, 1).type == pa.int64()


def test_int64_range_imports_no_pandas() -> None:
    code = (
        "import sys; from siltlake.records.arrays import int64_range; "
        "assert int64_range(0, 9, 2).to_pylist() == [0, 2, 4, 6, 8]; print('pandas' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
