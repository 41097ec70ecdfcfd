#!/bin/sh
# Install siltlake from a built wheel into a virtual environment: the image's install step (Containerfile), and
# what tests/test_deploy.py runs in a clean venv where no container engine can build the image.
#   deploy/install.sh PREFIX WHEEL [EXTRAS]    e.g. deploy/install.sh /opt/siltlake dist/siltlake-0.1.0-py3-none-any.whl spark
set -eu
prefix=$1
wheel=$2
extras=${3-spark}  # an empty third argument: no extras (the read-only install)
python3 -m venv "$prefix"
"$prefix/bin/pip" install --no-cache-dir --quiet --upgrade pip
if [ -n "$extras" ]; then
    "$prefix/bin/pip" install --no-cache-dir --quiet "siltlake[$extras] @ file://$(realpath "$wheel")"
else
    "$prefix/bin/pip" install --no-cache-dir --quiet "$wheel"
fi
"$prefix/bin/silt" --version
