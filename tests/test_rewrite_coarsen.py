"""The coarsening rewrite on CPU: where a thread per output reads, in its loop, values that the outputs
along another launch axis read too (the input pixels every output channel of a convolution reads), each
thread computes 2, 4 or 8 consecutive values of that axis: the shared loads once, the rest per value,
each value checked against the axis's bound, the grid along the axis divided. Offered for the three
spellings of the axis (a global index along y, a plain `blockIdx.y`, the remainder of `blockIdx.z = n * K
+ k`), each candidate compiling; not offered where every load depends on the axis or where the values
could interfere. The gpu-marked test checks the results against the oracles on the H200 and prints the
times against the originals."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.proposers.rewrites import coarsen
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.test_idioms import _target, needs_compiler
from tests.test_rewrite_warp_per_output import body_of, check

KERNELS = Path(__file__).resolve().parents[1] / "bench" / "kernels"


def bench(name: str) -> KernelTarget:
    path = KERNELS / f"{name}.cu" if (KERNELS / f"{name}.cu").exists() else KERNELS / "outside" / f"{name}.cu"
    (target,) = load_targets(path).targets
    return target


# a 1x1 convolution, a thread per (output channel along y, pixel along x), a ReLU after the sum
POINTWISE = """/* cuda-agent
[sizes]
K = 64
C = 96
P = 16384
[args]
w = { role = "input", dtype = "float32", shape = ["K", "C"] }
x = { role = "input", dtype = "float32", shape = ["C", "P"] }
y = { role = "output", dtype = "float32", shape = ["K", "P"] }
K = { role = "scalar", dtype = "int32", value = "K" }
C = { role = "scalar", dtype = "int32", value = "C" }
P = { role = "scalar", dtype = "int32", value = "P" }
[launch]
block = [32, 8]
grid = ["ceil_div(P, block.x)", "ceil_div(K, block.y)"]
[verify]
sizes = [{ K = 13, C = 5, P = 301 }]
oracle = { y = "torch.relu(w @ x)" }
*/
__global__ void pointwise(const float* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                          int K, int C, int P)
{
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    const int oc = blockIdx.y * blockDim.y + threadIdx.y;
    if (oc < K && p < P) {
        const int row = oc * C;
        const float* __restrict__ w_row = w + row;
        float s = 0.0f;
        for (int c = 0; c < C; ++c)
            s += w_row[c] * x[c * P + p];
        y[oc * P + p] = s > 0.0f ? s : 0.0f;
    }
}
"""

# a 1-D convolution with a bank of filters, one filter per row of blocks (the local `f` is the filter)
FILTERS = """/* cuda-agent
[sizes]
n = 65536
taps = 15
filters = 24
[args]
x = { role = "input", dtype = "float32", shape = ["n + taps - 1"] }
w = { role = "input", dtype = "float32", shape = ["filters", "taps"] }
b = { role = "input", dtype = "float32", shape = ["filters"] }
y = { role = "output", dtype = "float32", shape = ["filters", "n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
taps = { role = "scalar", dtype = "int32", value = "taps" }
filters = { role = "scalar", dtype = "int32", value = "filters" }
[launch]
block = [256]
grid = ["ceil_div(n, block.x)", "filters"]
[verify]
sizes = [{ n = 1000, taps = 7, filters = 5 }]
oracle = { y = "F.conv1d(x.view(1, 1, -1), w.unsqueeze(1)).squeeze(0) + b.unsqueeze(1)" }
*/
__global__ void filter_bank(const float* x, const float* w, const float* b, float* y,
                            int n, int taps, int filters)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int f = blockIdx.y;  // one filter per row of blocks
    if (i >= n) return;
    float acc = b[f];
    for (int j = 0; j < taps; j++) acc += x[i + j] * w[f * taps + j];
    y[(size_t)f * n + i] = acc;
}
"""

# several signals through a bank of filters, blockIdx.y = signal * filters + filter taken apart
SIGNALS = """/* cuda-agent
[sizes]
S = 8
n = 16384
taps = 9
filters = 32
[args]
x = { role = "input", dtype = "float32", shape = ["S", "n + taps - 1"] }
w = { role = "input", dtype = "float32", shape = ["filters", "taps"] }
y = { role = "output", dtype = "float32", shape = ["S", "filters", "n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
taps = { role = "scalar", dtype = "int32", value = "taps" }
filters = { role = "scalar", dtype = "int32", value = "filters" }
[launch]
block = [128]
grid = ["ceil_div(n, block.x)", "S * filters"]
[verify]
sizes = [{ S = 3, n = 777, taps = 5, filters = 7 }]
oracle = { y = "F.conv1d(x.unsqueeze(1), w.unsqueeze(1))" }
*/
__global__ void signals(const float* x, const float* w, float* y, int n, int taps, int filters)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int s = blockIdx.y / filters;
    int k = blockIdx.y % filters;
    if (i < n) {
        const float* row = x + (size_t)s * (n + taps - 1);
        float acc = 0.0f;
        for (int j = 0; j < taps; ++j) {
            float v = row[i + j];
            acc = fmaf(v, w[k * taps + j], acc);
        }
        y[((size_t)s * filters + k) * n + i] = acc;
    }
}
"""

BATCHED_SPEC = """/* cuda-agent
[sizes]
B = 16
M = 4096
N = 256
[args]
A = { role = "input", dtype = "float32", shape = ["B", "M", "N"] }
v = { role = "input", dtype = "float32", shape = ["N"] }
y = { role = "output", dtype = "float32", shape = ["B", "M"] }
B = { role = "scalar", dtype = "int32", value = "B" }
M = { role = "scalar", dtype = "int32", value = "M" }
N = { role = "scalar", dtype = "int32", value = "N" }
[launch]
block = [128]
grid = ["ceil_div(M, block.x)", "B"]
[verify]
sizes = [{ B = 3, M = 130, N = 33 }]
oracle = { y = "A @ v" }
*/
"""

# a batch of matrices times one vector, a matrix per row of blocks: the vector is shared by the batch
BATCHED = (
    BATCHED_SPEC
    + """__global__ void batched_gemv(const float* A, const float* v, float* y, int B, int M, int N)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int batch = blockIdx.y;
    if (row >= M) return;
    const float* a = A + ((size_t)batch * M + row) * N;
    float sum = 0.0f;
    for (int j = 0; j < N; ++j) sum += a[j] * v[j];
    y[(size_t)batch * M + row] = sum;
}
"""
)


@needs_compiler
def test_the_convolution_computes_several_output_channels_a_thread() -> None:
    target = bench("conv2d")
    candidates = check(target, coarsen.propose)
    assert [c.launch.grid[2] for c in candidates if c.launch] == [
        "N * ceil_div(K, 2)", "N * ceil_div(K, 4)", "N * ceil_div(K, 8)"
    ]  # fmt: skip
    body = body_of(candidates[1], "conv2d_naive")
    # blockIdx.z, taken apart by / and %, now counts (n, a group of four values of k)
    assert "const int k_groups = (K + 3) / 4;" in body
    assert "int n = blockIdx.z / k_groups;" in body and "int k = blockIdx.z % k_groups * 4;" in body
    # the input pixel is read once for the four output channels, the weights per channel
    assert "const float x_plane_val = x_plane[in_row * W + in_col];" in body
    assert "if (k + f < K) acc[f] += x_plane_val * w_kc[f][i * KS + j];" in body
    assert "if (k + f < K) w_kc[f] = w + ((size_t)(k + f) * C + c) * KS * KS;" in body
    assert "if (k + f < K) acc[f] = bias[k + f];" in body  # the bias and the store per value
    assert "if (k + f < K) y[((size_t)n * K + (k + f)) * H * W + row * W + col] = acc[f];" in body
    assert "if (row >= H || col >= W) return;" in body and not candidates[1].assumptions


@needs_compiler
def test_a_matrix_product_computes_several_rows_a_thread() -> None:
    candidates = check(bench("matmul_naive"), coarsen.propose)
    assert candidates[2].launch is not None and candidates[2].launch.grid[1] == "ceil_div(M, block.y * 8)"
    body = body_of(candidates[2], "matmul")
    assert "int row = (blockIdx.y * blockDim.y + threadIdx.y) * 8;" in body
    assert "if (row < M && col < N) {" in body  # the bounds check holds for the first row of the eight
    assert "for (int k = 0; k < K; ++k) {" in body and "const float B_val = B[k * N + col];" in body
    assert "if (row + f < M) acc[f] += A[(row + f) * K + k] * B_val;" in body


@needs_compiler
def test_indices_declared_together_are_coarsened_like_indices_declared_apart() -> None:
    # `const int oc = ..., p = ...;`: the coarsened index's value is found in its own declarator
    together = POINTWISE.replace(
        "    const int p = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    const int oc = blockIdx.y * blockDim.y + threadIdx.y;",
        "    const int oc = blockIdx.y * blockDim.y + threadIdx.y,\n"
        "              p = blockIdx.x * blockDim.x + threadIdx.x;",
    )
    assert together != POINTWISE
    candidates = check(_target(together, "pointwise"), coarsen.propose)
    body = body_of(candidates[0], "pointwise")
    assert "const int oc = (blockIdx.y * blockDim.y + threadIdx.y) * 2," in body
    assert "if (oc + f < K) y[(oc + f) * P + p] = s[f] > 0.0f ? s[f] : 0.0f;" in body


@needs_compiler
def test_a_pointwise_convolution_along_y_keeps_its_epilogue_per_value() -> None:
    candidates = check(_target(POINTWISE, "pointwise"), coarsen.propose)
    body = body_of(candidates[0], "pointwise")
    assert "int row[2];" in body  # a `const int` local made an array that is filled in
    assert "const float* __restrict__ w_row[2];" in body and "if (oc + f < K) w_row[f] = w + row[f];" in body
    assert "if (oc + f < K) y[(oc + f) * P + p] = s[f] > 0.0f ? s[f] : 0.0f;" in body


@needs_compiler
def test_a_filter_bank_along_blockidx_y_takes_a_fresh_loop_name() -> None:
    candidates = check(_target(FILTERS, "filter_bank"), coarsen.propose)
    assert candidates[1].launch is not None and candidates[1].launch.grid[1] == "ceil_div(filters, 4)"
    body = body_of(candidates[1], "filter_bank")
    assert "int f = blockIdx.y * 4;" in body  # the kernel's own `f` is the filter: the loop takes `f_`
    assert "const float x_val = x[i + j];" in body
    assert "if (f + f_ < filters) acc[f_] += x_val * w[(f + f_) * taps + j];" in body


@needs_compiler
def test_a_split_block_number_along_y_shares_a_local_read_once() -> None:
    candidates = check(_target(SIGNALS, "signals"), coarsen.propose)
    assert candidates[0].launch is not None and candidates[0].launch.grid[1] == "S * ceil_div(filters, 2)"
    body = body_of(candidates[0], "signals")
    assert "int s = blockIdx.y / k_groups;" in body and "float v = row[i + j];" in body
    assert "row[i + j]" in candidates[0].description  # read once for the values: what it saves


@needs_compiler
def test_a_batched_gemv_reads_the_shared_vector_once() -> None:
    candidates = check(_target(BATCHED, "batched_gemv"), coarsen.propose)
    body = body_of(candidates[2], "batched_gemv")
    assert "const float* a[8];" in body and "const float v_val = v[j];" in body
    assert "if (batch + f < B) sum[f] += a[f][j] * v_val;" in body


def test_an_operator_defined_in_the_file_does_not_hide_the_rewrite() -> None:
    # an operator's definition has no plain name: it must not count as a call to every unnamed node
    operator = (
        "__device__ float2 operator+(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }\n"
    )
    source = BATCHED.replace("__global__", operator + "__global__", 1)
    assert source != BATCHED and len(coarsen.propose(_target(source, "batched_gemv"))) == 3


# the pointwise convolution over a batch along z: coarsening the batch would share the weights, which a
# warp's lanes read together anyway; coarsening the output channels shares the pixels, one a lane
BATCH_OF_IMAGES = """/* cuda-agent
[sizes]
N = 4
K = 64
C = 96
P = 16384
[args]
w = { role = "input", dtype = "float32", shape = ["K", "C"] }
x = { role = "input", dtype = "float32", shape = ["N", "C", "P"] }
y = { role = "output", dtype = "float32", shape = ["N", "K", "P"] }
N = { role = "scalar", dtype = "int32", value = "N" }
K = { role = "scalar", dtype = "int32", value = "K" }
C = { role = "scalar", dtype = "int32", value = "C" }
P = { role = "scalar", dtype = "int32", value = "P" }
[launch]
block = [32, 8]
grid = ["ceil_div(P, block.x)", "ceil_div(K, block.y)", "N"]
[verify]
sizes = [{ N = 3, K = 13, C = 5, P = 301 }]
oracle = { y = "torch.relu(w @ x)" }
*/
__global__ void pointwise(const float* w, const float* x, float* y, int N, int K, int C, int P)
{
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    const int oc = blockIdx.y * blockDim.y + threadIdx.y;
    const int b = blockIdx.z;
    if (oc < K && p < P) {
        float s = 0.0f;
        for (int c = 0; c < C; ++c) s += w[oc * C + c] * x[((size_t)b * C + c) * P + p];
        y[((size_t)b * K + oc) * P + p] = fmaxf(s, 0.0f);
    }
}
"""


@needs_compiler
def test_the_axis_whose_shared_loads_differ_across_the_lanes_is_chosen() -> None:
    (candidate, *_) = check(_target(BATCH_OF_IMAGES, "pointwise"), coarsen.propose)
    assert "values of oc, reading x[((size_t)b * C + c) * P + p] once" in candidate.description
    assert candidate.launch is not None and candidate.launch.grid[1:] == ("ceil_div(K, block.y * 2)", "N")


GEMV = (
    BATCHED_SPEC
    + "__global__ void batched_gemv(const float* A, const float* v, float* y, int B, int M, int N)\n"
)


@pytest.mark.parametrize(
    "kernel",
    [
        # every load depends on the batch: nothing to share
        """{ const int row = blockIdx.x * blockDim.x + threadIdx.x; const int batch = blockIdx.y;
    if (row >= M) return; float sum = 0.0f;
    for (int j = 0; j < N; ++j) sum += A[((size_t)batch * M + row) * N + j] * v[batch * N + j];
    y[(size_t)batch * M + row] = sum; }""",
        # every batch stores the same element: the outputs along the axis are not independent
        """{ const int row = blockIdx.x * blockDim.x + threadIdx.x; const int batch = blockIdx.y;
    if (row >= M) return; float sum = 0.0f;
    for (int j = 0; j < N; ++j) sum += A[((size_t)batch * M + row) * N + j] * v[j];
    y[row] = sum; }""",
        # the block number read again in the body, past the index the rewrite changes
        """{ const int row = blockIdx.x * blockDim.x + threadIdx.x; const int batch = blockIdx.y;
    if (row >= M) return; float sum = 0.0f;
    for (int j = 0; j < N; ++j) sum += A[((size_t)batch * M + row) * N + j] * v[j];
    y[(size_t)blockIdx.y * M + row] = sum; }""",
        # a per-value return: the values would have to leave together
        """{ const int row = blockIdx.x * blockDim.x + threadIdx.x; const int batch = blockIdx.y;
    if (row >= M) return; float sum = 0.0f;
    for (int j = 0; j < N; ++j) { if (A[(size_t)batch * M * N + j] == 0.0f) return; sum += v[j]; }
    y[(size_t)batch * M + row] = sum; }""",
        # the output read back at another batch's element: one value would see another's store
        """{ const int row = blockIdx.x * blockDim.x + threadIdx.x; const int batch = blockIdx.y;
    if (row >= M) return; float sum = 0.0f;
    for (int j = 0; j < N; ++j) sum += A[((size_t)batch * M + row) * N + j] * v[j];
    y[(size_t)batch * M + row] = sum + y[row]; }""",
    ],
)  # fmt: skip
def test_not_offered_where_nothing_is_shared_or_the_values_could_interfere(kernel: str) -> None:
    assert coarsen.propose(_target(GEMV + kernel, "batched_gemv")) == []


def test_not_offered_where_the_bounds_check_ties_the_axis_to_another_index() -> None:
    assert coarsen.propose(bench("covariance")) == []  # `j2 >= j1`: the check differs between the rows


def test_not_offered_where_a_macro_hides_the_axis() -> None:
    # `VB` reads `batch`: the statement names nothing per value, yet its load differs between them
    kernel = BATCHED.replace("sum += a[j] * v[j];", "sum += VB * v[j];").replace(
        "__global__", "#define VB A[((size_t)batch * M + row) * N + j]\n__global__"
    )
    assert coarsen.propose(_target(kernel, "batched_gemv")) == []


@pytest.mark.gpu
def test_coarsened_kernels_verify_against_their_oracles_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    targets = [
        bench("conv2d"),
        bench("matmul_naive"),
        _target(POINTWISE, "pointwise"),
        _target(FILTERS, "filter_bank"),
        _target(SIGNALS, "signals"),
        _target(BATCHED, "batched_gemv"),
        _target(BATCH_OF_IMAGES, "pointwise"),
    ]
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in targets:
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, coarsen.propose(target))
            seen = []
            for r in results:
                times = r.comparison and (r.comparison.baseline.median_ms, r.comparison.candidate.median_ms)
                timed = f"{times[0]:.3f} ms -> {times[1]:.3f} ms" if times else "not timed"
                print(f"{target.kernel.name}: {r.candidate.description}: {r.status}, {timed}")
                seen.append((r.candidate.description, r.status, r.reason))
            assert results and all(r.verified for r in results), seen
            if target.kernel.name == "conv2d_naive":  # the motivating case: 0.334 ms against torch's 0.200
                assert any(r.status == "faster" for r in results), seen
