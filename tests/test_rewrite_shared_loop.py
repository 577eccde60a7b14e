"""A loop thread 0 runs alone while its block waits, shared by the block (rewrite:shared-loop), on CPU:
offered wherever the `if` on thread 0 is reached by the whole block and its loops' bounds and loads are
the block's alike, whatever the spelling; not offered where the block's threads would read another
thread's values, race, or could not all reach the combine. The gpu-marked test checks the results and
the gain on the H200."""

from __future__ import annotations

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import shared_loop
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_promote import outside
from tests.test_rewrite_warp_per_output import _target, body_of, needs_compiler, shown

ROW_SPEC = """/* cuda-agent
[sizes]
rows = 4096
cols = 4096
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [256]
grid = ["rows"]
[verify]
oracle = { y = "torch.softmax(x, dim=1)" }
*/
"""

# A block per row whose thread 0 finds the row's maximum and its sum of exponentials, then the block
# writes the row: two loops, the second reading the first's result.
SOFTMAX = (
    ROW_SPEC
    + """__global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    __shared__ float row_max;
    __shared__ float row_sum;
    int row = blockIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int c = 0; c < cols; c++) m = fmaxf(m, in[c]);
        float s = 0.0f;
        for (int c = 0; c < cols; c++) {
            s += expf(in[c] - m);
        }
        row_max = m;
        row_sum = s;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        y[(size_t)row * cols + c] = expf(in[c] - row_max) / row_sum;
}"""
)


# The course exercise's block sum: every thread stores its element, then thread 0 adds them up.
BLOCK_SUM = """/* cuda-agent
[sizes]
n = "1 << 24"
[args]
x = { role = "input", dtype = "float32", shape = ["n"] }
partial = { role = "output", dtype = "float32", shape = ["n // 256"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [256]
grid = ["n // 256"]
[verify]
sizes = [{ n = 9472 }]
oracle = { partial = "x.reshape(-1, 256).sum(1)" }
reduction = 256
*/
__global__ void block_sum(const float* x, float* partial, int n) {
    __shared__ float cache[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cache[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    if (tid == 0) {
        float sum = 0.0f;
        for (int j = 0; j < blockDim.x; j++) sum += cache[j];
        partial[blockIdx.x] = sum;
    }
}"""


@needs_compiler
def test_a_shared_array_a_barrier_completed_is_summed_by_the_block() -> None:
    (candidate,) = shared_loop.propose(_target(BLOCK_SUM, "block_sum"))
    body = body_of(candidate, "block_sum")
    assert "for (int j = tid; j < blockDim.x; j += blockDim.x) sum += cache[j];" in body
    assert "if (tid == 0) {\n        partial[blockIdx.x] = sum;" in body
    assert compile_kernel(device_source(candidate.source), "block_sum").ok


def test_not_offered_where_a_moved_local_is_declared_again_after_the_if() -> None:
    # thread 0's `float sum` would join the block's scope, beside the later `float sum` every thread reads
    again = BLOCK_SUM.replace(
        "        partial[blockIdx.x] = sum;\n    }\n}",
        "        cache[0] = sum;\n    }\n    __syncthreads();\n"
        "    float sum = cache[0];\n    partial[blockIdx.x] = sum;\n}",
    )
    assert again != BLOCK_SUM
    assert shared_loop.propose(_target(again, "block_sum")) == []


@pytest.mark.parametrize(
    "change",
    [
        ("    __syncthreads();\n    if (tid == 0)", "    if (tid == 0)"),  # no barrier: stores unfinished
        (
            "    __syncthreads();\n    if",
            "    __syncthreads();\n    cache[tid] *= 2.0f;\n    if",
        ),  # stored since
    ],
)
def test_a_shared_array_not_settled_by_a_barrier_is_left_to_thread_0(change: tuple[str, str]) -> None:
    old, new = change
    assert old in BLOCK_SUM
    assert shared_loop.propose(_target(BLOCK_SUM.replace(old, new), "block_sum")) == []


@needs_compiler
def test_the_scan_carry_is_summed_by_the_whole_block() -> None:
    target = outside("scan_blocks")
    (candidate,) = shared_loop.propose(target)
    body = body_of(candidate, "scan_blocks")
    assert "for (int j = tid; j < start; j += blockDim.x) before += in[j];" in body
    assert "__shfl_xor_sync" in body and "__shared__ float before_part[32];" in body
    assert "    if (tid == 0) {\n        carry = before;\n    }" in body  # thread 0 still writes it
    assert any("reassociated" in a for a in candidate.assumptions)
    assert candidate.launch == target.spec.launch if target.spec else False
    assert compile_kernel(device_source(candidate.source), "scan_blocks").ok


@needs_compiler
def test_a_row_normaliser_of_two_loops_is_shared_after_a_block_uniform_return() -> None:
    (candidate,) = shared_loop.propose(_target(SOFTMAX, "softmax_rows"))
    body = body_of(candidate, "softmax_rows")
    assert "for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);" in body
    assert "for (int c = threadIdx.x; c < cols; c += blockDim.x) {\n        s += expf(in[c] - m);" in body
    assert body.index("m = fmaxf(m, other)") < body.index("float s = 0.0f;")  # every thread has m
    assert "if (threadIdx.x == 0) {\n        row_max = m;\n        row_sum = s;\n    }" in body
    assert "loop c shared by the block's 256 threads" in candidate.description
    assert compile_kernel(device_source(candidate.source), "softmax_rows").ok


@pytest.mark.parametrize("condition", ["!threadIdx.x", "0 == threadIdx.x", "(threadIdx.x == 0)", "t == 0"])
def test_every_spelling_of_thread_zero(condition: str) -> None:
    kernel = SOFTMAX.replace("if (threadIdx.x == 0)", f"int t = threadIdx.x;\n    if ({condition})")
    assert shared_loop.propose(_target(kernel, "softmax_rows")), condition


@pytest.mark.parametrize(
    "change",
    [
        # the loop reads by thread: another thread's element
        ("m = fmaxf(m, in[c]);", "m = fmaxf(m, in[c + threadIdx.x]);"),
        # a value that differs between threads, through a local
        ("(size_t)row * cols;", "(size_t)row * cols + threadIdx.x % 4;"),
        # not every thread reaches the combine: a return that depends on the thread
        ("if (row >= rows) return;", "if (threadIdx.x >= cols) return;"),
        # thread 0 reads what the kernel writes: another thread's store may not be visible yet
        ("m = fmaxf(m, in[c]);", "m = fmaxf(m, y[c]);"),
        # the loop stores: a store thread 0 made once would be made by every thread
        ("s += expf(in[c] - m);", "s += expf(in[c] - m); y[c] = 0.0f;"),
        # an else: the other threads have their own work there
        ("        row_sum = s;\n    }", "        row_sum = s;\n    } else { row_max = 0.0f; }"),
    ],
)  # fmt: skip
def test_not_offered_where_threads_would_differ_or_race(change: tuple[str, str]) -> None:
    old, new = change
    assert old in SOFTMAX
    assert shared_loop.propose(_target(SOFTMAX.replace(old, new), "softmax_rows")) == []


def test_what_follows_a_store_stays_with_thread_0() -> None:
    kernel = SOFTMAX.replace("        float s = 0.0f;", "        row_max = m;\n        float s = 0.0f;")
    (candidate,) = shared_loop.propose(_target(kernel, "softmax_rows"))
    body = body_of(candidate, "softmax_rows")
    assert "for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);" in body
    assert (
        "    if (threadIdx.x == 0) {\n        row_max = m;\n        float s = 0.0f;\n        for (int c = 0;"
        in body
    )


def test_not_offered_for_a_two_dimensional_block() -> None:
    kernel = SOFTMAX.replace("block = [256]", "block = [32, 8]").replace(
        'grid = ["rows"]', 'grid = ["rows", "1"]'
    )
    assert shared_loop.propose(_target(kernel, "softmax_rows")) == []


@pytest.mark.gpu
def test_shared_loops_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    # the scan's thread 0 walks up to the whole array; the row's only its row, twice. A block's 256
    # shared values are few: there the combine's barriers cost about what they save (measured slower on
    # the H200), and only the verdict is checked.
    expected = {"scan_blocks": 5.0, "softmax_rows": 1.2, "block_sum": None}
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        targets = (outside("scan_blocks"), _target(SOFTMAX, "softmax_rows"), _target(BLOCK_SUM, "block_sum"))
        for target in targets:
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, shared_loop.propose(target))
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            least = expected[target.kernel.name]
            if least is not None:
                assert results[0].status == "faster" and (results[0].speedup or 0) > least, seen
