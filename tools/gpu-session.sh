#!/usr/bin/env bash
# Run on the GPU machine (the device tool), from the repository root, with `.whl` carried (made here by
# `bash tools/gpu-wheels.sh`):
#   bash tools/gpu-session.sh [pytest args...]          # install, then the GPU tests
#   NO_TESTS=1 . tools/gpu-session.sh                   # install only, into this shell
# Makes a venv that also sees the image's torch/cupy, installs our wheels and the project editable (as CI
# does), offline. Logs go under $OUT.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# The image's python3 is itself a venv (/opt/torch/.venv): --system-site-packages on top of it would see
# only the base interpreter's packages, so point a .pth file at the image venv's site-packages instead.
image_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
python3 -m venv /tmp/venv
venv_site=$(/tmp/venv/bin/python -c 'import site; print(site.getsitepackages()[0])')
echo "$image_site" > "$venv_site/image-packages.pth"
. /tmp/venv/bin/activate
python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl
python -m pip install -q --no-index --no-deps --no-build-isolation --no-compile -e . >/dev/null
python -c 'import cupy, torch, pytest, cuda_agent.sandbox.client; print("imports ok", cupy.__version__, torch.__version__)'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${NO_TESTS:-0}" != 1 ]; then
  set -o pipefail
  python -m pytest -p no:cacheprovider -m gpu "$@" 2>&1 | tee "$OUT/pytest-gpu.log"
fi
