"""Loop macros (`CUDA_KERNEL_LOOP(i, n) { ... }`, Caffe's and the layer libraries' grid-stride loop):
read as the `for` they stand for, from the file's own `#define` or, where the header is not here, from the
well-known definitions; the spec comes from that reading and describes the kernel as written, and the
rewrites are made on it (their candidates carry the loop written out). The gpu-marked test runs them."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.search import _first_round, interleave
from cuda_agent.agent.spec.loop_macros import loop_macros_written_out
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import needs_compiler, shown

LOOP = """#define CUDA_KERNEL_LOOP(i, n) \\
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; \\
       i < (n); \\
       i += blockDim.x * gridDim.x)
"""
# A layer's forward pass in Caffe's style: a channel's bias added over (num, channels, spatial).
BIAS_FORWARD = """
__global__ void BiasForward(const int n, const float* in, const float* bias, const int bias_dim,
                            const int inner_dim, float* out) {
  CUDA_KERNEL_LOOP(index, n) {
    const int bias_index = (index / inner_dim) % bias_dim;
    out[index] = in[index] + bias[bias_index];
  }
}
"""
# Two loops, and an argument with commas and parentheses of its own.
TWO_LOOPS = """
__global__ void clip_both(const int n, float* a, float* b, const int m) {
  CUDA_KERNEL_LOOP(i, min(n, m)) {
    a[i] = fmaxf(a[i], 0.0f);
  }
  CUDA_KERNEL_LOOP(j, n) {
    b[j] = fminf(b[j], 1.0f);
  }
}
"""


def target_of(source: str, name: str) -> KernelTarget:
    target = load_targets(Path("layer.cu"), source).find(name)
    assert target is not None
    return target


@pytest.mark.parametrize("defined", [True, False], ids=["the file's #define", "a header not here"])
def test_a_kernel_loop_macro_is_read_as_its_loop(defined: bool) -> None:
    target = target_of((LOOP if defined else "") + BIAS_FORWARD, "BiasForward")
    assert target.spec is not None, target.note
    assert target.spec.inference_note.endswith("read with its loop macros written out")
    shapes = {a.name: a.shape for a in target.spec.arguments if a.role != "scalar"}
    assert shapes == {"in": ("n",), "bias": ("bias_dim",), "out": ("n",)}
    assert target.spec.launch.grid == ("ceil_div(n, block.x)",)
    assert target.spec.sizes["n"] >= 1 << 20  # the loop is the threads: not n iterations a thread


def test_uses_are_written_out_on_their_own_lines_with_their_arguments() -> None:
    source = LOOP + TWO_LOOPS
    (kernel,) = find_kernels(source)
    written = loop_macros_written_out(kernel, source)
    assert written is not None and written.count("\n") == source.count("\n")  # diagnostics keep lines
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (min(n, m)); i += " in written
    assert (
        "for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < (n); j += blockDim.x * gridDim.x) {"
        in written
    )
    # a kernel without one is left alone, and so is a call of another function-like macro
    plain = "#define SQ(x) ((x) * (x))\n__global__ void k(float* y, int n) { y[0] = SQ(n); }\n"
    (other,) = find_kernels(plain)
    assert loop_macros_written_out(other, plain) is None


@needs_compiler
def test_the_first_round_is_made_on_the_loop_written_out_and_compiles() -> None:
    target = target_of(LOOP + BIAS_FORWARD, "BiasForward")
    proposers = {name: p for name, p in PROPOSERS.items() if name != "llm"}
    candidates = interleave(_first_round(target, proposers, []))
    assert candidates
    for candidate in candidates:
        assert "for (int index = blockIdx.x * blockDim.x + threadIdx.x; index < (n);" in candidate.source
        result = compile_kernel(device_source(candidate.source), "BiasForward", flags=candidate.flags)
        assert result.ok, (candidate.description, [d.message for d in result.diagnostics])


@pytest.mark.gpu
def test_a_loop_macro_kernel_runs_and_its_rewrites_verify_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        two_loops = TWO_LOOPS.replace("min(n, m)", "n").replace(", const int m", "")
        for source, name in ((LOOP + BIAS_FORWARD, "BiasForward"), (LOOP + two_loops, "clip_both")):
            target = target_of(source, name)
            assert target.spec is not None, target.note
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            proposers = {n: p for n, p in PROPOSERS.items() if n != "llm"}
            results = engine.evaluate(baseline, interleave(_first_round(target, proposers, []))[:6])
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
