"""A block F times smaller whose threads each stand for F of the original's (rewrite:block-coarsen), on
CPU: offered for kernels whose threads each do one element's work between top-level barriers, whatever
the spelling of the thread's position; not offered where a thread's lanes or a value carried across a
barrier would change meaning. The gpu-marked test checks the results and the gain on the H200."""

from __future__ import annotations

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import block_coarsen, shared_loop
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_promote import outside, then
from tests.test_rewrite_warp_per_output import _target, body_of, needs_compiler, shown

SPEC = """/* cuda-agent
[sizes]
n = "1 << 24"
[args]
x = { role = "input", dtype = "float32", shape = ["n"] }
partial = { role = "output", dtype = "float32", shape = ["ceil_div(n, 512)"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [512]
grid = ["ceil_div(n, block.x)"]
[verify]
sizes = [{ n = 10_007 }]
oracle = { partial = "torch.nn.functional.pad(x.abs(), (0, (-n) % 512)).reshape(-1, 512).amax(1)" }
*/
"""

# The largest magnitude of each block's 512 values, as a first draft writes it: the block's size read
# through blockDim.x, the position in two steps, an early way out for the last block's missing values
# kept as a ternary, thread 0 folding the shared values after the barrier.
BLOCK_MAX = (
    SPEC
    + """__global__ void block_absmax(const float* x, float* partial, int n) {
    extern __shared__ float vals[];
    const int local = threadIdx.x;
    const int base = blockIdx.x * blockDim.x;
    const int i = base + local;
    vals[local] = (i < n) ? fabsf(x[i]) : 0.0f;   // padding counts as 0
    __syncthreads();
    if (0 == local) {
        float best = 0.0f;
        for (int t = 0; t < blockDim.x; t++) best = fmaxf(best, vals[t]);
        partial[blockIdx.x] = best;
    }
}"""
).replace('grid = ["ceil_div(n, block.x)"]', 'grid = ["ceil_div(n, block.x)"]\nshared_bytes = "4 * block.x"')


def coarsened(target, factor: int) -> str:
    candidates = block_coarsen.propose(target)
    (candidate,) = [c for c in candidates if f"work of {factor} " in c.description]
    result = compile_kernel(device_source(candidate.source), target.kernel.name)
    assert result.ok, [d.message for d in result.diagnostics]
    return body_of(candidate, target.kernel.name)


@needs_compiler
def test_a_block_sum_of_one_square_a_thread_becomes_four_a_thread() -> None:
    target = outside("sumsq_blocks")
    (four, two) = block_coarsen.propose(target)
    assert four.launch is not None and four.launch.block == (64,)
    assert four.launch.grid == ("ceil_div(n, 256)",)
    assert two.launch is not None and two.launch.block == (128,)
    body = coarsened(target, 4)
    assert "for (int e = 0; e < 4; ++e) {" in body
    assert "int i = blockIdx.x * THREADS + vthread;" in body and "squares[vthread] = v * v;" in body
    assert body.count("__shared__ float squares[THREADS];") == 1
    # thread 0's sum runs once, after the one barrier, and the smaller block may then share it
    assert "if (threadIdx.x == 0) {" in body and body.count("__syncthreads();") == 1
    (shared,) = shared_loop.propose(then(target, four))  # with its own, smaller block
    assert compile_kernel(device_source(shared.source), "sumsq_blocks").ok


@needs_compiler
def test_the_blocks_size_read_through_blockdim_is_the_original_blocks() -> None:
    target = _target(BLOCK_MAX, "block_absmax")
    (four, _) = block_coarsen.propose(target)
    assert four.launch is not None and four.launch.grid == ("ceil_div(n, (block.x * 4))",)
    assert four.launch.shared_bytes == "4 * (block.x * 4)"  # still 512 values
    body = coarsened(target, 4)
    assert "const int local = vthread;" in body
    assert "const int base = blockIdx.x * (blockDim.x * 4);" in body
    assert "for (int t = 0; t < (blockDim.x * 4); t++)" in body
    assert "// padding counts as 0" in body
    # the positions thread 0's phase reads are declared again there, outside the loop
    tail = body.split("__syncthreads();")[1]
    assert "const int local = threadIdx.x;" in tail and "for (int e" not in tail


@needs_compiler
def test_a_position_made_from_another_is_declared_again_with_it() -> None:
    # thread 0's phase reads i, which is made from base and local: all three are declared again there
    source = BLOCK_MAX.replace("partial[blockIdx.x] = best;", "partial[blockIdx.x] = i < n ? best : 0.0f;")
    tail = coarsened(_target(source, "block_absmax"), 4).split("__syncthreads();")[1]
    assert tail.index("const int local") < tail.index("const int base") < tail.index("const int i = base")


@pytest.mark.parametrize(
    "change",
    [
        ("__syncthreads();\n    if (0 == local) {", "if (n > 0) __syncthreads();\n    if (0 == local) {"),
        ("vals[local] = (i < n)", "float m = __shfl_xor_sync(~0u, 1.0f, 1);\n    vals[local] = (i < n)"),
        ("extern __shared__ float vals[];", "extern __shared__ volatile float vals[];"),
        ("partial[blockIdx.x] = best;", "partial[blockIdx.x] = best + x[i];"),  # i is not a position here
    ],
)
def test_not_offered_where_merged_threads_would_change_meaning(change: tuple[str, str]) -> None:
    source = BLOCK_MAX.replace(*change)
    assert source != BLOCK_MAX
    if change[1].endswith("best + x[i];"):
        source = source.replace("const int i = base + local;", "int i = base + local;\n    i += 0;")
    assert block_coarsen.propose(_target(source, "block_absmax")) == []


def test_a_kernel_without_a_barrier_is_left_to_the_grid_transforms() -> None:
    source = BLOCK_MAX.replace("__syncthreads();", "")
    assert block_coarsen.propose(_target(source, "block_absmax")) == []


@pytest.mark.gpu
def test_coarsened_blocks_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in (outside("sumsq_blocks"), _target(BLOCK_MAX, "block_absmax")):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            candidates = block_coarsen.propose(target)
            both = [*candidates, *shared_loop.propose(then(target, candidates[0]))]
            results = engine.evaluate(baseline, both)
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert max(r.speedup or 0 for r in results) > 1.15, seen


def test_a_kernel_with_an_inferred_spec_gets_it_written_out_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # No spec in the file: the candidate's launch is written above the kernel as the inferred spec,
    # once, so that the file re-reads (applied by the user, or taken further by the search).
    from cuda_agent.agent.optimize import PROPOSERS
    from cuda_agent.agent.targets import load_targets

    source = """#define LEVELS 256
__global__ void tally(const unsigned char* pixels, int count, unsigned int* levels)
{
    __shared__ unsigned int mine[LEVELS];
    if (threadIdx.x < LEVELS) mine[threadIdx.x] = 0;
    __syncthreads();
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < count) atomicAdd(&mine[pixels[p]], 1u);
    __syncthreads();
    if (threadIdx.x < LEVELS) atomicAdd(&levels[threadIdx.x], mine[threadIdx.x]);
}
"""
    path = tmp_path / "tally.cu"
    path.write_text(source)
    (target,) = load_targets(path).targets
    assert target.spec is not None and target.spec.inferred
    candidates = PROPOSERS[block_coarsen.PROPOSER](target)
    assert candidates
    for candidate in candidates:
        assert candidate.source.count("/* cuda-agent") == 1
        again = load_targets(path, candidate.source)
        assert not again.spec_errors and again.find("tally").spec.launch == candidate.launch  # type: ignore[union-attr]
