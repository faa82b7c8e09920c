#!/usr/bin/env bash
# Wheels of the harness's libraries that a GPU machine's image may lack (webdataset and its braceexpand,
# lmdb, simplejpeg), for Python 3.12 on x86-64 Linux, into one folder (default .gpu-wheels/ in the repository
# root, kept out of git through .git/info/exclude). Run it where there is network; on the GPU machine
# scripts/gpu_check.sh installs from that folder what does not import (into a temporary folder on PYTHONPATH,
# never into the machine's own environment). Usage: bash scripts/gpu/fetch_wheels.sh [DIR] [PYTHON_VERSION]
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${1:-.gpu-wheels}
PY=${2:-3.12}
if [ "$DIR" = .gpu-wheels ] && [ -d .git ] && ! grep -qx '/.gpu-wheels/' .git/info/exclude 2>/dev/null; then
  echo '/.gpu-wheels/' >> .git/info/exclude
fi
python -m pip download --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$DIR" "webdataset>=1.0.2,<2" braceexpand "lmdb>=3.0,<4" "simplejpeg>=1.8,<2"
ls -l "$DIR"
