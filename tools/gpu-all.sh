#!/usr/bin/env bash
# Everything the engine issue must show on the GPU, in one device call (see tools/gpu-session.sh):
#   bash tools/gpu-all.sh
# Each step has its own time limit so one slow step cannot cost the others; logs under $OUT.
NO_TESTS=1 . tools/gpu-session.sh
export COLUMNS=150 CUDA_AGENT_CACHE_DIR=/tmp/cuda-agent-cache
step() { local name=$1 limit=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1; echo "rc=$?" >> "$OUT/$name.txt"; tail -n "${TAIL:-25}" "$OUT/$name.txt"; }
TAIL=6 step doctor 120 cuda-agent doctor
step engine-bench 120 python bench/engine_bench.py
for f in examples/*.cu; do TAIL=12 step "optimize-$(basename "$f" .cu)" 75 cuda-agent optimize "$f"; done
left=$(( ${BUDGET_S:-560} - SECONDS ))
step pytest-gpu "$left" python -m pytest -p no:cacheprovider -m gpu -q -x ${PYTEST_ARGS:-}
