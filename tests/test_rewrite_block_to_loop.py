"""A block that stores a value a thread in shared memory and combines them -> a thread per block looping
over those values (rewrite:block-to-loop), on CPU: the steps that combine the values are run for every
thread to find what they compute (agent/analysis/slot_tree.py), so halving, doubling, strided and
odd-sized trees and thread 0's own loop are all recognised, and anything that would not give the same
result is refused. The chain that makes it fast (split across a warp, then 16-byte loads) is checked to
compile; the gpu-marked test checks the results and the gain on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent import optimize
from cuda_agent.agent.analysis.slot_tree import run_steps
from cuda_agent.agent.analysis.values import file_definitions
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.proposers.rewrites import block_to_loop, vector_loop, warp_per_output
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_promote import chained, outside, then
from tests.test_rewrite_warp_per_output import _target, body_of, needs_compiler, shown

SPEC = """/* cuda-agent
[sizes]
n = "1 << 24"
[args]
src = { role = "input", dtype = "float32", shape = ["n"] }
block_sums = { role = "output", dtype = "float32", shape = ["ceil_div(n, 256)"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
[verify]
sizes = [{ n = 70_001 }]
oracle = { block_sums = "torch.nn.functional.pad(src, (0, (-n) % 256)).reshape(-1, 256).sum(1)" }
reduction = 256
*/
"""

# The first pass of a two-pass sum as course notes write it: a value a thread into shared memory, a
# halving tree with a barrier each step, thread 0 writes the block's total.
HALVING = """__global__ void partial_sums(const float* src, float* block_sums, int n) {
    __shared__ float cache[256];
    unsigned int lane_id = threadIdx.x;
    unsigned int gid = blockIdx.x * blockDim.x + threadIdx.x;
    cache[lane_id] = (gid < n) ? src[gid] : 0.0f;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half >>= 1) {
        if (lane_id < half) {
            cache[lane_id] += cache[lane_id + half];
        }
        __syncthreads();
    }
    if (lane_id == 0) block_sums[blockIdx.x] = cache[0];
}"""

# The same tree in three other spellings: doubling with a modulo, doubling with a strided index and the
# barrier first, and a while loop folding the upper half onto the lower (any block size).
TREES = {
    "modulo": """for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (lane_id % (2 * s) == 0) cache[lane_id] += cache[lane_id + s];
        __syncthreads();
    }""",
    "strided": """for (int s = 1; s < blockDim.x; s <<= 1) {
        __syncthreads();
        int k = 2 * s * lane_id;
        if (k < blockDim.x) cache[k] = cache[k] + cache[k + s];
    }
    __syncthreads();""",
    "folding": """int live = blockDim.x;
    while (live > 1) {
        int half = live / 2;
        if (lane_id < half) cache[lane_id] += cache[live - lane_id - 1];
        __syncthreads();
        live -= half;
    }""",
}
TREE = HALVING.split("    for (unsigned int half")[1].split("    if (lane_id == 0)")[0]
TREE = "    for (unsigned int half" + TREE


def halving(tree: str = TREE) -> str:
    return SPEC + HALVING.replace(TREE, "    " + tree.strip() + "\n")


def compiled(candidate, name: str) -> str:  # type: ignore[no-untyped-def]
    result = compile_kernel(device_source(candidate.source), name)
    assert result.ok, [d.message for d in result.diagnostics]
    return body_of(candidate, name)


@needs_compiler
def test_thread_zeros_loop_over_the_blocks_squares_becomes_one_threads_loop() -> None:
    target = outside("sumsq_blocks")
    (candidate,) = block_to_loop.propose(target)
    body = compiled(candidate, "sumsq_blocks")
    # one thread per original block, guarded by the original grid; the user's loop, its body first
    # computing what thread t stored, and no shared memory or barrier left
    assert "int block = blockIdx.x * blockDim.x + threadIdx.x;" in body
    assert "if (block >= ((n + 256 - 1) / 256)) return;" in body
    assert "for (int t = 0; t < THREADS; ++t) {" in body and "int i = block * THREADS + t;" in body
    assert "float slot = v * v;" in body and "total += slot;" in body and "sums[block] = total;" in body
    assert "__shared__" not in body and "__syncthreads" not in body
    assert candidate.launch is not None and candidate.launch.grid == ("ceil_div(ceil_div(n, 256), block.x)",)
    assert candidate.assumptions == ()  # the order of thread 0's loop is kept

    # then split across a warp's lanes and widened to 16-byte loads, within the last block's bound
    (warp, *_) = warp_per_output.propose(then(target, candidate))
    assert "for (int t = lane; t < THREADS; t += 32)" in compiled(warp, "sumsq_blocks")
    (vectors,) = vector_loop.propose(then(target, warp))
    body = compiled(vectors, "sumsq_blocks")
    assert "(block * THREADS + t0) + 4 <= (n)" in body and "reinterpret_cast<const uint4*>" in body


@needs_compiler
@pytest.mark.parametrize("spelling", ["halving", *TREES])
def test_a_tree_in_any_spelling_becomes_a_sum_over_the_blocks_values(spelling: str) -> None:
    source = SPEC + HALVING if spelling == "halving" else halving(TREES[spelling])
    target = _target(source, "partial_sums")
    (candidate,) = block_to_loop.propose(target)
    body = compiled(candidate, "partial_sums")
    assert "float block_sum = 0.0f;" in body and "for (int t = 0; t < 256; ++t) {" in body
    assert "unsigned int gid = block * 256 + t;" in body
    assert "float slot = (gid < n) ? src[gid] : 0.0f;" in body
    assert "block_sums[block] = block_sum;" in body and "cache" not in body.split("stored in cache")[1]
    assert candidate.assumptions and "added in order instead of pairwise" in candidate.assumptions[0]
    (warp, *_) = warp_per_output.propose(then(target, candidate))
    compiled(warp, "partial_sums")


@needs_compiler
def test_a_max_tree_keeps_its_combine_and_starts_from_minus_infinity() -> None:
    larger = "cache[lane_id] = fmaxf(cache[lane_id], cache[lane_id + half]);"
    source = halving(TREE.replace("cache[lane_id] += cache[lane_id + half];", larger))
    (candidate,) = block_to_loop.propose(_target(source, "partial_sums"))
    body = compiled(candidate, "partial_sums")
    assert "float block_max = __int_as_float(0xff800000);" in body
    assert "block_max = fmaxf(block_max, slot);" in body
    assert candidate.assumptions == ()  # a maximum does not depend on the order


@pytest.mark.parametrize(
    "change",
    [
        # a race: each thread adds its left neighbour's value, which that neighbour changes meanwhile
        (
            TREE,
            "for (int s = 1; s < blockDim.x; s *= 2) {\n"
            "        if (lane_id >= s) cache[lane_id] += cache[lane_id - s];\n"
            "        __syncthreads();\n"
            "    }\n",
        ),
        # a barrier only the active threads reach
        ("__syncthreads();\n    }", "}\n"),
        # the tree misses the upper half: thread 0 reads a partial sum
        ("half = blockDim.x / 2", "half = blockDim.x / 4"),
        # a thread's own loop before the barrier: the block already covers much work
        (
            "cache[lane_id] = (gid < n) ? src[gid] : 0.0f;",
            "float s = 0.0f; for (int k = gid; k < n; k += 65536) s += src[k]; cache[lane_id] = s;",
        ),
        # some threads store nothing: the original reads what an earlier kernel left in shared memory
        ("cache[lane_id] = (gid < n) ? src[gid] : 0.0f;", "if (gid < n) cache[lane_id] = src[gid];"),
        # the thread's slot read back in the first phase
        (
            "cache[lane_id] = (gid < n) ? src[gid] : 0.0f;",
            "cache[lane_id] = (gid < n) ? src[gid] : 0.0f; float mine = cache[lane_id];"
            " block_sums[gid] = mine;",
        ),
        # one atomic a block: the block-reduction idiom's case
        ("block_sums[blockIdx.x] = cache[0];", "atomicAdd(block_sums, cache[0]);"),
        # a value of the first phase read by thread 0 (another thread's, in the loop)
        ("block_sums[blockIdx.x] = cache[0];", "block_sums[blockIdx.x] = cache[0] + gid;"),
    ],
)
def test_not_offered_where_the_loop_would_not_compute_the_same(change: tuple[str, str]) -> None:
    source = (SPEC + HALVING).replace(*change)
    assert source != SPEC + HALVING
    assert block_to_loop.propose(_target(source, "partial_sums")) == []


@pytest.mark.parametrize("name", ["scan_blocks", "matmul_tiled", "row_argmax"])
def test_a_scan_a_tiled_product_and_a_kernel_without_shared_memory_are_left_alone(name: str) -> None:
    assert block_to_loop.propose(outside(name)) == []


def run_tree(steps: str, block: int, threads: frozenset[str] = frozenset({"tid"})):  # type: ignore[no-untyped-def]
    source = f"#define HALF 128\n__global__ void k() {{ {steps} }}"
    root = parse_cuda(source.encode()).root_node
    (kernel,) = [n for n in root.named_children if n.type == "function_definition"]
    body = kernel.child_by_field_name("body")
    assert body is not None
    return run_steps(list(body.named_children), "a", set(threads), block, file_definitions(root).constants)


def test_running_the_steps_finds_the_whole_blocks_combine_or_refuses() -> None:
    halving_steps = (
        "for (int s = HALF; s > 0; s >>= 1) { if (tid < s) a[tid] += a[tid + s]; __syncthreads(); }"
    )
    (first, *rest) = run_tree(halving_steps, 256)
    assert first.is_whole_block(256) and first.combine == "sum" and first.combiner == "+"
    assert not rest[0].is_whole_block(256)
    # 200 threads: the halving from 128 leaves slots 128..199 folded in, 0 holds them all once
    assert run_tree(halving_steps, 200) is None  # tid + s reaches past the block's slots
    folding = (
        "int c = blockDim.x; while (c > 1) { int h = c / 2;"
        " if (tid < h) a[tid] = max(a[tid], a[c - tid - 1]); __syncthreads(); c -= h; }"
    )
    result = run_tree(folding, 200)
    assert result is not None and result[0].is_whole_block(200) and result[0].combine == "max"
    # refused: a float literal, a parameter it does not know, mixed combines, a loop that never ends
    assert run_tree("if (tid == 0) a[0] = 0.0f;", 32) is None
    assert run_tree("if (tid < n) a[tid] += a[tid + 1];", 32) is None
    assert run_tree("if (tid == 0) { a[0] += a[1]; a[0] = fmaxf(a[0], a[2]); }", 32) is None
    assert run_tree("int s = 1; while (s > 0) { s = 1; }", 4) is None


SLIDES = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "holdout" / "reduce_slides.cu"


def slides() -> KernelTarget:
    (target,) = load_targets(SLIDES).targets
    return target


@needs_compiler
def test_a_kernel_that_cannot_count_its_blocks_gets_a_warp_for_each_on_the_same_grid() -> None:
    """`reduce0(g_idata, g_odata)` launched on `n // 256` blocks has no `n`: no thread could tell the last
    block, so the grid stays and each block is one warp whose lanes step through the 256 values."""
    (candidate,) = block_to_loop.propose(slides())
    assert candidate.launch is not None
    assert candidate.launch.block == (32,) and candidate.launch.grid == ("n // 256",)
    body = body_of(candidate, "reduce0")
    assert "int block = blockIdx.x;" in body and "if (block >=" not in body
    assert "for (int t = threadIdx.x; t < 256; t += blockDim.x) {" in body
    assert "block_sum += __shfl_down_sync(0xffffffffu, block_sum, offset);" in body
    assert "g_odata[block] = block_sum;" in body
    (vectors,) = chained(slides(), candidate, vector_loop.PROPOSER)  # then 16-byte loads
    for each in (candidate, vectors):
        assert compile_kernel(device_source(each.source), "reduce0").ok


@pytest.mark.gpu
def test_the_blocks_loop_split_across_warps_verifies_and_beats_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in (outside("sumsq_blocks"), _target(SPEC + HALVING, "partial_sums"), slides()):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            # as the search takes it (its launch written into its file): a step on a bare rewrite's file
            # that keeps the file's launch would run the warp-a-block body on the original's 256 threads
            (serial,) = optimize.PROPOSERS[block_to_loop.PROPOSER](target)
            if target.kernel.name == "reduce0":  # a warp a block already: only the 16-byte loads follow
                results = engine.evaluate(baseline, [serial, *chained(target, serial, vector_loop.PROPOSER)])
                seen = shown(baseline.target, results)
                assert results and all(r.verified for r in results), seen
                assert max(r.speedup or 0 for r in results) > 2.0, seen
                continue
            warps = chained(target, serial, warp_per_output.PROPOSER)
            vectors = [c for w in warps[:2] for c in chained(target, w, vector_loop.PROPOSER)]
            results = engine.evaluate(baseline, [serial, *warps, *vectors])
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert max(r.speedup or 0 for r in results) > 1.3, seen
