"""The warp-per-output rewrite on CPU: where the analysis finds a thread per output looping over
independent iterations, each candidate compiles (NVRTC), keeps the signature and the file outside the body,
resolves its launch at every size, and splits the loop in the user's own text; where the results could
change it is not offered. Its results are verified on the GPU (the gpu-marked test below and the bench)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate, CandidateResult
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites.warp_per_output import propose
from cuda_agent.agent.spec import complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_idioms import _target, needs_compiler

ROOT = Path(__file__).resolve().parents[1]


def check(
    target: KernelTarget, proposer: Callable[[KernelTarget], list[Candidate]] = propose
) -> list[Candidate]:
    """Every candidate compiles, keeps the file outside the body and resolves its launch everywhere."""
    candidates = proposer(target)
    assert candidates, f"not split: {target.kernel.name}"
    kernel, spec = target.kernel, target.spec
    assert spec is not None
    for candidate in candidates:
        assert candidate.launch is not None and candidate.block == candidate.launch.block
        source = candidate.source
        signature = target.source[kernel.span.start_byte : kernel.body_span.start_byte]
        assert signature in source and source.endswith(target.source[kernel.span.end_byte :])
        result = compile_kernel(device_source(source), kernel.name, flags=candidate.flags)
        assert result.ok, (candidate.description, [d.message for d in result.diagnostics], source)
        launched = replace(spec, launch=candidate.launch)
        for sizes in [spec.sizes, *(complete_sizes(spec, s) for s in spec.verify_sizes)]:
            resolve(launched, sizes)
    return candidates


def shown(target: KernelTarget, results: list[CandidateResult]) -> list[tuple[str, str, str]]:
    """Each result as (change, status, why), printed with its speedup for the GPU session's log."""
    for r in results:
        print(f"{target.kernel.name}: {r.candidate.description}: {r.status} {r.speedup or 0:.2f}x")
    return [(r.candidate.description, r.status, r.reason) for r in results]


def body_of(candidate: Candidate, name: str = "k") -> str:
    return candidate.source.split(f"void {name}(")[1].split(")", 1)[1]


ROW_SPEC = """/* cuda-agent
[sizes]
rows = 8192
cols = 1024
[args]
x = {{ role = "input", dtype = "float32", shape = ["rows", "cols"] }}
y = {{ role = "output", dtype = "float32", shape = {out_shape} }}
rows = {{ role = "scalar", dtype = "int32", value = "rows" }}
cols = {{ role = "scalar", dtype = "int32", value = "cols" }}
[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]
[verify]
sizes = [{{ rows = 333, cols = 999 }}]
*/
"""

ROW_KERNELS = [
    ('["rows"]', """__global__ void k(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float s = 0.0f;
        for (int c = 0; c < cols; c++) s += x[r * cols + c];
        y[r] = s;
    }
}"""),
    ('["rows"]', """__global__ void k(const float* x, float* y, int rows, int cols) {
    const int row = threadIdx.x + blockIdx.x * blockDim.x;
    if (row >= rows) return;
    float m = x[(size_t)row * cols];
    for (int j = 1; j < cols; ++j) { m = fmaxf(x[(size_t)row * cols + j], m); }
    y[row] = m;
}"""),
    ('["rows", "cols"]', """__global__ void k(const float* x, float* y, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;
    float mean = 0.0f;
    for (int c = 0; c < cols; ++c) mean += in[c];
    mean /= cols;
    float var = 0.0f;
    for (int c = 0; c < cols; ++c) {
        float d = in[c] - mean;
        var = var + d * d;
    }
    float inv = rsqrtf(var / cols + 1e-5f);
    for (int c = 0; c < cols; ++c) out[c] = (in[c] - mean) * inv;
}"""),
]  # fmt: skip


@needs_compiler
@pytest.mark.parametrize(("out_shape", "kernel"), ROW_KERNELS)
def test_row_loops_become_one_warp_per_row(out_shape: str, kernel: str) -> None:
    target = _target(ROW_SPEC.format(out_shape=out_shape) + kernel, "k")
    candidate = check(target)[0]
    assert "__shfl_xor_sync" in candidate.source and "+= 32)" in candidate.source
    assert candidate.launch is not None and candidate.launch.grid == ("ceil_div(rows, block.x // 32)",)


@needs_compiler
def test_softmax_example_keeps_its_three_passes() -> None:
    target = load_targets(ROOT / "examples" / "softmax.cu").find("softmax")
    assert target is not None
    candidate = check(target)[0]
    assert candidate.source.count("c += 32") == 3 and candidate.source.count("__shfl_xor_sync") == 2


LINE_OF_BLOCKS_ROW_NORM = (ROOT / "tests" / "kernels" / "line_of_blocks_row_norm.cu").read_text()


@needs_compiler
def test_a_thread_per_row_on_a_line_of_blocks_becomes_a_warp_per_row() -> None:
    """`(blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x` under the spec's 1-D grid is the
    1-D index (blockIdx.y is 0 there): darknet's and Caffe's spelling gets the rewrites a plain index does."""
    target = _target(LINE_OF_BLOCKS_ROW_NORM, "row_unit_norm")
    assert target.spec is not None and target.spec.launch.grid == ("ceil_div(rows, block.x)",)
    candidate = check(target)[0]
    assert candidate.source.count("k += 32") == 3 and candidate.source.count("__shfl_xor_sync") == 2
    assert "blockIdx.y" not in candidate.source  # the index the rewrite writes is its own
    # a 2-D grid written in the spec: blockIdx.y is a second axis, not left out
    spec = """/* cuda-agent
[sizes]
rows = 4096
cols = 1024
[args]
cols = { role = "scalar", dtype = "int32", value = "cols" }
rows = { role = "scalar", dtype = "int32", value = "rows" }
in = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
floor_value = { role = "scalar", dtype = "float32", value = "0.001" }
out = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
[launch]
block = [256]
grid = ["8", "2"]
*/"""
    two_d = _target(spec + LINE_OF_BLOCKS_ROW_NORM, "row_unit_norm")
    assert propose(two_d) == []


@pytest.mark.parametrize(
    "kernel",
    [
        # a scan: each column reads the previous one's result
        """__global__ void k(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    y[r * cols] = x[r * cols];
    for (int c = 1; c < cols; ++c) y[r * cols + c] = y[r * cols + c - 1] + x[r * cols + c];
}""",
        # a running value carried between columns
        """__global__ void k(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float prev = 0.0f;
    for (int c = 0; c < cols; ++c) { y[r * cols + c] = x[r * cols + c] - prev; prev = x[r * cols + c]; }
}""",
    ],
)  # fmt: skip
def test_loops_that_carry_values_between_columns_are_not_split(kernel: str) -> None:
    target = _target(ROW_SPEC.format(out_shape='["rows", "cols"]') + kernel, "k")
    assert propose(target) == []


# -- outside-style kernels: 2-D owners, a batch axis, gathers, argmax -----------------------------------

ATTENTION = """/* cuda-agent
[sizes]
BH = 4
T = 256
D = 64
[args]
q = { role = "input", dtype = "float32", shape = ["BH", "T", "D"] }
k = { role = "input", dtype = "float32", shape = ["BH", "T", "D"] }
att = { role = "output", dtype = "float32", shape = ["BH", "T", "T"] }
T = { role = "scalar", dtype = "int32", value = "T" }
D = { role = "scalar", dtype = "int32", value = "D" }
[launch]
block = [16, 16]
grid = ["ceil_div(T, 16)", "ceil_div(T, 16)", "BH"]
[verify]
sizes = [{ BH = 3, T = 77, D = 40 }]
oracle = { att = "scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)" }
[verify.intermediates]
scores = "q @ k.mT / math.sqrt(D)"
*/
#include <math.h>
__global__ void scores(const float* q, const float* k, float* att, int T, int D)
{
    int t2 = blockIdx.x * blockDim.x + threadIdx.x;
    int t = blockIdx.y * blockDim.y + threadIdx.y;
    int bh = blockIdx.z;
    if (t >= T || t2 >= T) return;
    float* out = att + (size_t)bh * T * T + t * T;
    if (t2 > t) { out[t2] = -INFINITY; return; }
    const float* qt = q + (size_t)bh * T * D + t * D;
    const float* kt = k + (size_t)bh * T * D + t2 * D;
    float val = 0.0f;
    for (int i = 0; i < D; i++) val += qt[i] * kt[i];
    out[t2] = val * (1.0f / sqrtf((float)D));
}
"""


@needs_compiler
def test_attention_scores_get_a_group_per_score_and_keep_the_batch_axis() -> None:
    target = _target(ATTENTION, "scores")
    candidates = check(target)
    assert [c.launch.block for c in candidates if c.launch] == [
        (256, 1, 1), (128, 1, 1), (256, 1, 1), (256, 1, 1), (1024, 1, 1)
    ]  # fmt: skip
    warp, _, group, block, _ = candidates
    assert block.launch is not None and block.launch.grid == ("T * T", "1", "BH")
    assert "const int group = blockIdx.x;" in body_of(block, "scores")
    assert warp.launch is not None and warp.launch.grid == ("ceil_div(T * T, block.x // 32)", "1", "BH")
    body = body_of(warp, "scores")
    assert "int t2 = warp % T;" in body and "int t = warp / T;" in body and "int bh = blockIdx.z;" in body
    assert "for (int i = lane; i < D; i += 32) val += qt[i] * kt[i];" in body
    assert "__syncthreads" not in body and "__syncthreads" in body_of(block, "scores")
    assert "if (t2 > t) { if (lane == 0) out[t2] = -INFINITY; return; }" in body
    assert "if (lane == 0) out[t2] = val" in body
    # eight lanes a score: the shuffles name only the group, since a neighbouring group may have returned
    grouped = body_of(group, "scores")
    assert "__shfl_xor_sync(group_mask, val, offset, 8)" in grouped and "i += 8" in grouped
    assert any("reassociated" in a for a in warp.assumptions)


EMBEDDING = """/* cuda-agent
[sizes]
B = 4
T = 128
C = 768
V = 1000
[args]
out = { role = "output", dtype = "float32", shape = ["B", "T", "C"] }
inp = { role = "input", dtype = "int32", shape = ["B", "T"], init = { dist = "integers", high = "V" } }
wte = { role = "input", dtype = "float32", shape = ["V", "C"] }
wpe = { role = "input", dtype = "float32", shape = ["T", "C"] }
B = { role = "scalar", dtype = "int32", value = "B" }
T = { role = "scalar", dtype = "int32", value = "T" }
C = { role = "scalar", dtype = "int32", value = "C" }
[launch]
block = [256]
grid = ["ceil_div(B * T, block.x)"]
*/
__global__ void encoder(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int N = B * T;
    if (idx < N) {
        int b = idx / T;
        int t = idx % T;
        float* out_bt = out + b * T * C + t * C;
        int ix = inp[b * T + t];
        const float* wte_ix = wte + ix * C;
        const float* wpe_t = wpe + t * C;
        for (int i = 0; i < C; i++) {
            out_bt[i] = wte_ix[i] + wpe_t[i];
        }
    }
}
"""


@needs_compiler
def test_an_embedding_gather_splits_its_channel_loop() -> None:
    target = _target(EMBEDDING, "encoder")
    warp = check(target)[0]
    assert warp.launch is not None and warp.launch.grid == ("ceil_div(B * T, block.x // 32)",)
    body = body_of(warp, "encoder")
    assert "for (int i = lane; i < C; i += 32) {" in body and "__shfl" not in body
    assert not warp.assumptions  # copies and adds of one element each: nothing is reassociated


ARGMAX = """/* cuda-agent
[sizes]
rows = 512
cols = 1000
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
out = { role = "output", dtype = "int32", shape = ["rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [128]
grid = ["ceil_div(rows, 128)"]
*/
#define IDX(r, c, n) ((r) * (n) + (c))
__global__ void row_argmax(const float* x, int* out, int rows, int cols) {
    int r = threadIdx.x + blockIdx.x * blockDim.x;
    if (r > rows - 1) return;
    float best = x[IDX(r, 0, cols)];
    int arg = 0;
    for (int c = 1; c <= cols - 1; c++) {
        float v = x[IDX(r, c, cols)];
        if (v {cmp} best) {
            best = v;
            arg = c;
        }
    }
    out[r] = arg;
}
"""


@needs_compiler
@pytest.mark.parametrize(("cmp", "tie"), [(">", "other_at < arg"), (">=", "other_at > arg")])
def test_argmax_keeps_the_position_the_loop_would_keep_on_a_tie(cmp: str, tie: str) -> None:
    target = _target(ARGMAX.replace("{cmp}", cmp), "row_argmax")
    warp = check(target)[0]
    body = body_of(warp, "row_argmax")
    assert "for (int c = 1 + lane; c <= cols - 1; c += 32) {" in body
    assert f"if (other > best || (other == best && {tie})) {{" in body
    assert "if (lane == 0) out[r] = arg;" in body
    assert not warp.assumptions  # a max is exact in any order


GEMV = """/* cuda-agent
[sizes]
M = 1024
N = 512
[args]
A = { role = "input", dtype = "float32", shape = ["M", "N"] }
x = { role = "input", dtype = "float32", shape = ["N"] }
y = { role = "output", dtype = "float32", shape = ["M"] }
M = { role = "scalar", dtype = "int32", value = "M" }
N = { role = "scalar", dtype = "int32", value = "N" }
[launch]
block = [256]
grid = ["ceil_div(M, 256)"]
*/
__device__ int at(int i, int j, int n) { return i * n + j; }
"""


@pytest.mark.parametrize("reads_y", [False, True])
def test_a_two_d_block_the_kernel_never_reads_along_y_only_repeats_its_work(reads_y: bool) -> None:
    # PolyBench launches its one-index kernels with 32 x 8 blocks: the 8 threads along y of each column
    # compute the same output. The warps' own launch drops them; a kernel that reads threadIdx.y keeps it.
    kernel = """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { float s = 0; for (int j = 0; j < N; ++j) s += A[i * N + j] * x[j]; y[i] = s; }
}"""
    if reads_y:
        kernel = kernel.replace("y[i] = s;", "if (threadIdx.y == 0) y[i] = s;")
    source = GEMV.replace("block = [256]", "block = [32, 8]").replace(
        'grid = ["ceil_div(M, 256)"]', 'grid = ["ceil_div(M, 32)", "1"]'
    )
    candidates = propose(_target(source + kernel, "gemv"))
    assert bool(candidates) != reads_y
    assert all(c.launch is not None and c.launch.block[1:] in ((), (1,)) for c in candidates)


@needs_compiler
def test_a_row_major_gemv_through_a_helper_is_split() -> None:
    kernel = """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) {
        float sum = 0;
        for (int j = 0; j < N; ++j) sum += A[at(i, j, N)] * x[j];
        y[i] = sum;
    }
}"""
    assert "j += 32) sum += A[at(i, j, N)] * x[j];" in body_of(
        check(_target(GEMV + kernel, "gemv"))[0], "gemv"
    )


FMA_GEMV = (
    GEMV
    + """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) {
        float sum = 0;
        for (int j = 0; j < N; ++j) sum = fmaf(A[i * N + j], x[j], sum);
        y[i] = sum;
    }
}"""
)


def test_a_gemv_summing_with_fmaf_is_split() -> None:
    # `sum = fmaf(a, b, sum)` is a sum: each lane keeps the call, the lanes' partials are added
    body = body_of(check(_target(FMA_GEMV, "gemv"))[0], "gemv")
    assert "j += 32) sum = fmaf(A[i * N + j], x[j], sum);" in body


@pytest.mark.parametrize(
    "kernel",
    [
        # a column walk that neighbouring threads already read together: splitting would stride it
        """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < M) { float s = 0; for (int i = 0; i < N; ++i) s += A[i * M + j] * x[i]; y[j] = s; }
}""",
        # a sum that does not start from zero: each lane would add the start once more
        """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { float s = y[i]; for (int j = 0; j < N; ++j) s += A[i * N + j] * x[j]; y[i] = s; }
}""",
        # a sum accumulated over two loops: the second would start from the combined first
        """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { float s = 0; for (int j = 0; j < N; ++j) s += A[i * N + j];
        for (int j = 0; j < N; ++j) s += A[i * N + j] * x[j]; y[i] = s; }
}""",
        # two loops storing one array at places one apart: neighbouring lanes would write one element
        """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { for (int j = 0; j < N; ++j) y[i * N + j] = A[i * N + j];
        for (int j = 0; j < N - 1; ++j) y[i * N + j + 1] = x[j]; }
}""",
        # a store through a pointer the analysis cannot follow: it could be any element
        """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float* p = (i % 2) ? y : y + 1;
    if (i < M) { float s = 0; for (int j = 0; j < N; ++j) { s += A[i * N + j]; p[j] += 1.0f; } y[i] = s; }
}""",
        # an atomic whose old value is read: each lane would read its own
        """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { for (int j = 0; j < N; ++j) { float old = atomicAdd(&y[i], A[i * N + j]);
        if (old > 1e3f) y[i] = 0.0f; } }
}""",
        # the thread index read in the body: lanes would differ where the original threads agreed
        """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { float s = threadIdx.x; for (int j = 0; j < N; ++j) s += A[i * N + j]; y[i] = s; }
}""",
    ],
)  # fmt: skip
def test_not_offered_where_results_could_change_or_nothing_coalesces(kernel: str) -> None:
    assert propose(_target(GEMV + kernel, "gemv")) == []


@needs_compiler
def test_atomic_adds_in_a_rows_loop_are_split_like_its_stores() -> None:
    """The scatter-add of gradient rows, read as a thread a row: each iteration's add, done by the lane
    that takes the iteration, still happens once (the adds' order changes, as the original's threads'
    did)."""
    from cuda_agent.agent.optimize import PROPOSERS

    path = ROOT / "bench" / "kernels" / "outside" / "scatter_add.cu"
    (target,) = load_targets(path).targets
    by_row, _ = PROPOSERS["rewrite:row-loop"](target)
    rows = load_targets(path, by_row.source).find("scatter_add_rows")
    assert rows is not None
    body = body_of(check(rows)[0], "scatter_add_rows")
    assert "for (int c = lane; c < D; c += 32)" in body
    assert "atomicAdd(&dtable[row * D + c], dout[idx]);" in body


ONLINE_SOFTMAX = (
    ROW_SPEC.format(out_shape='["rows", "cols"]')
    + """#include <math.h>
__global__ void k(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        const float* in = x + (size_t)r * cols;
        float m = -INFINITY;
        float s = 0.0f;
        for (int c = 0; c < cols; c++) {
            float v = in[c];
            if (v > m) { s *= expf(m - v); m = v; }
            s += expf(v - m);
        }
        for (int c = 0; c < cols; c++) y[(size_t)r * cols + c] = expf(in[c] - m) / s;
    }
}
"""
)


@needs_compiler
def test_an_online_softmax_splits_both_passes_and_rescales_the_lanes_sums() -> None:
    warp = check(_target(ONLINE_SOFTMAX, "k"))[0]
    body = body_of(warp)
    assert body.count("c += 32") == 2
    assert "s = (m == joint ? s : s * expf(m - joint))" in body
    assert "+ (other == joint ? other_sum : other_sum * expf(other - joint));" in body


@pytest.mark.parametrize(
    ("kernel", "first_two"),
    [
        ("layernorm_forward", ["one warp", "one warp"]),  # 768 columns: a block a row would idle
        ("rmsnorm_fp16", ["one warp", "one block"]),  # 4096: either may win, both are chained at once
        ("cross_entropy", ["one block", "one warp"]),  # a 32000-word vocabulary: a block first
    ],
)
def test_the_candidates_chained_first_suit_the_rows_length(kernel: str, first_two: list[str]) -> None:
    (target,) = load_targets(ROOT / "bench" / "kernels" / "outside" / f"{kernel}.cu").targets
    described = [c.description for c in propose(target)[:2]]
    assert [" ".join(d.split()[:2]) for d in described] == first_two, described


# An online softmax spelled with the rescale in one branch and the plain add in the other, the sum a double.
BRANCHED_ONLINE = (
    ROW_SPEC.format(out_shape='["rows", "cols"]')
    + """
__global__ void k(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (size_t)r * cols;
    float top = -INFINITY;
    double total = 0.0;
    for (int c = 0; c < cols; ++c) {
        float v = row[c];
        float before = top;
        if (v > top) {
            top = v;
            total = total * expf(before - top) + expf(v - top);
        } else {
            total += expf(v - top);
        }
    }
    for (int c = 0; c < cols; ++c) y[(size_t)r * cols + c] = expf(row[c] - top) / total;
}
"""
)


@needs_compiler
def test_a_branched_online_softmax_splits_with_its_sums_partials_in_double() -> None:
    body = body_of(check(_target(BRANCHED_ONLINE, "k"))[0])
    assert body.count("c += 32") == 2
    assert "double other_sum = __shfl_xor_sync(0xffffffffu, total, offset);" in body


# A first pass the analysis does not take for a reduction: a moving average, each step on the last.
UNSEEN_FIRST_PASS = BRANCHED_ONLINE.replace(
    """        if (v > top) {
            top = v;
            total = total * expf(before - top) + expf(v - top);
        } else {
            total += expf(v - top);
        }""",
    """        top = 0.9f * before + 0.1f * v;""",
)


def test_a_loop_every_lane_would_repeat_in_full_is_not_left_whole() -> None:
    # splitting only the second pass made every lane redo the first: 0.12x on the H200 (a block a row)
    target = _target(UNSEEN_FIRST_PASS, "k")
    assert propose(target) == []
    # the same kernel with the first pass gone is split
    single = UNSEEN_FIRST_PASS.split("    for (int c = 0; c < cols; ++c) {")[0] + (
        "    for (int c = 0; c < cols; ++c) y[(size_t)r * cols + c] = expf(row[c] - top) / total;\n}\n"
    )
    assert propose(_target(single, "k"))


# A thread per channel summing a batch of planes (the mean of a batch norm): the outer loop walks with a
# stride, its one inner loop contiguously; the counters declared up front, as older C code does.
CHANNEL_MEAN = """
__global__ void channel_mean(const float *x, float *mean, int batch, int channels, int plane)
{
    int c = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    int b, p;
    float sum = 0.0f;
    for (b = 0; b < batch; ++b) {
        for (p = 0; p < plane; ++p) {
            sum += x[(b * channels + c) * plane + p];
        }
    }
    mean[c] = sum / (batch * plane);
}
"""


def test_a_batch_of_rows_splits_its_inner_loop_and_combines_after_the_outer() -> None:
    target = _target(CHANNEL_MEAN, "channel_mean")  # spec inferred: three sizes
    candidates = check(target)
    body = body_of(candidates[0], "channel_mean")
    assert "for (b = 0; b < batch; ++b)" in body and "for (p = lane; p < plane; p += 32)" in body
    # the lanes' partial sums are combined once, after the whole nest, and lane 0 stores
    combine = body.index("__shfl_xor_sync")
    assert body.index("for (b = 0") < body.index("for (p = lane") < combine < body.index("if (lane == 0)")
    assert body.count("__shfl_xor_sync") == 1


@pytest.mark.parametrize(
    "change",
    [
        # updated once a batch too: every lane would add it
        (
            "        for (p = 0; p < plane; ++p) {",
            "        sum += 1.0f;\n        for (p = 0; p < plane; ++p) {",
        ),
        # read once a batch outside the inner loop: kept whole, it would be read by every lane
        (
            "        for (p = 0; p < plane; ++p) {",
            "        sum += x[b];\n        for (p = 0; p < plane; ++p) {",
        ),
        # the threads already read neighbouring elements: nothing to coalesce
        ("x[(b * channels + c) * plane + p]", "x[(b * plane + p) * channels + c]"),
    ],
)
def test_a_nest_is_not_split_inside_where_the_lanes_would_repeat_work(change: tuple[str, str]) -> None:
    target = _target(CHANNEL_MEAN.replace(*change), "channel_mean")
    assert all("for (p = lane" not in body_of(c, "channel_mean") for c in propose(target))


@pytest.mark.gpu
def test_split_loops_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    targets = [
        _target(ATTENTION, "scores"),
        _target(EMBEDDING, "encoder"),
        _target(ARGMAX.replace("{cmp}", ">"), "row_argmax"),
        _target(ARGMAX.replace("{cmp}", ">="), "row_argmax"),
        _target(ONLINE_SOFTMAX, "k"),
        _target(FMA_GEMV, "gemv"),
        _target(CHANNEL_MEAN, "channel_mean"),
    ]
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in targets:
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target))
            assert all(r.verified for r in results), [
                (r.candidate.description, r.status, r.reason) for r in results
            ]
            assert any(r.status == "faster" for r in results), [
                (r.candidate.description, r.status) for r in results
            ]


MACRO_ROWS = (
    ROW_SPEC.format(out_shape='["rows"]')
    + """#define AT(r, c) x[(size_t)(r) * cols + (c)]
__global__ void k(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = -INFINITY;
    for (int c = 0; c < cols; c++) {
        if (AT(r, c) > m) m = AT(r, c);
    }
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += expf(AT(r, c) - m);
    y[r] = logf(s) + m;
}
"""
)


@needs_compiler
def test_a_row_read_through_a_macro_around_the_whole_load_is_split() -> None:
    """`#define AT(r, c) x[...]`: the loads are the macro's calls, each in its loop, and the maximum taken
    through it is a reduction like any other (a cross-entropy first draft's `LOGIT(b, v)`)."""
    first = check(_target(MACRO_ROWS, "k"))[0]
    body = body_of(first)
    assert body.count("for (int c = lane; c < cols; c += 32)") == 2
    assert "if (other > m) m = other;" in body and "if (lane == 0) y[r] = logf(s) + m;" in body
