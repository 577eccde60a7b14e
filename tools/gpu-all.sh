#!/usr/bin/env bash
# Everything the engine must show on the GPU, in one device call (carry .whl; see tools/gpu-session.sh):
#   bash tools/gpu-all.sh
# Each step has its own time limit so one slow step cannot cost the others; logs under $OUT.
NO_TESTS=1 . tools/gpu-session.sh >/dev/null
export COLUMNS=150 CUDA_AGENT_CACHE_DIR=/tmp/cuda-agent-cache
log() { tee -a "$OUT/$1.txt"; }
run_limited() { local limit=$1; shift; timeout "$limit" "$@" 2>&1; echo "rc=$?"; }
{ run_limited 60 cuda-agent doctor; run_limited 150 python bench/engine_bench.py; } | log engine-bench
for f in examples/*.cu; do run_limited 90 cuda-agent optimize "$f"; done | log optimize-examples
{
  cp examples/elementwise.cu /tmp/elementwise.cu
  run_limited 90 cuda-agent optimize /tmp/elementwise.cu --write | tail -n 3
  diff -u examples/elementwise.cu /tmp/elementwise.cu
  for candidate in legit_grid_stride hardcoded_size cached_launch_counter input_mutation; do
    echo "=== compare original_scale_add ↔ $candidate"
    run_limited 60 cuda-agent compare tests/kernels/original_scale_add.cu "tests/kernels/adversarial/$candidate.cu"
  done
} | log compare
left=$(( ${BUDGET_S:-560} - SECONDS ))
run_limited "$left" python -m pytest -p no:cacheprovider -m gpu -q -rfEs ${PYTEST_ARGS:-} | log pytest-gpu
