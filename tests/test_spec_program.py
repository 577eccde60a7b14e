"""Specs from the program (agent/spec/program.py): the host code's launches say the sizes, the launch, the
scalars, the shapes and the instantiation; what it cannot say is a reason, and the signature-based
inference takes over. Each program is written the way such code is written: a main() with constants and
cudaMalloc, a launcher with a stream, #defines, dim3, templates, typedefs, argv with a default."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.spec import KernelSpec, resolve
from cuda_agent.agent.spec.program import infer_from_program
from cuda_agent.agent.targets import load_targets

RMSNORM = """\
#include <cstdio>
#define N_ROWS 8192
#define THREADS (128)
constexpr int kCols = 4096;
typedef float real;

__global__ void rmsnorm(const real* x, const real* w, real* y, int rows, int cols, float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.f;
    for (int c = 0; c < cols; ++c) s += x[r * cols + c] * x[r * cols + c];
    float inv = rsqrtf(s / cols + eps);
    for (int c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * inv * w[c];
}

void launch_rmsnorm(const float* x, const float* w, float* y, int rows, int cols, cudaStream_t stream) {
    const int threads = THREADS;
    dim3 grid((rows + threads - 1) / threads);
    rmsnorm<<<grid, threads, 0, stream>>>(x, w, y, rows, cols, 1e-6f);
}

int main() {
    const int rows = N_ROWS, cols = kCols;
    size_t bytes = (size_t)rows * cols * sizeof(float);
    float *d_x, *d_w, *d_y;
    cudaMalloc(&d_x, bytes);
    cudaMalloc((void**)&d_w, cols * sizeof(float));
    cudaMalloc(&d_y, bytes);
    launch_rmsnorm(d_x, d_w, d_y, rows, cols, 0);
    return 0;
}
"""


def inferred(source: str, kernel: str) -> tuple[KernelSpec | None, str]:
    (found,) = [k for k in find_kernels(source) if k.name == kernel]
    return infer_from_program(found, source)


def args(spec: KernelSpec) -> dict[str, tuple[str, str, tuple[str, ...], object]]:
    return {a.name: (a.role, a.dtype, a.shape, a.value) for a in spec.arguments}


def test_a_launcher_called_from_main_gives_the_programs_sizes_launch_and_scalars() -> None:
    """The inferred spec used 4096 × 4096, block 256, eps drawn in [0.5, 2) and gave w the shape [rows]."""
    spec, note = inferred(RMSNORM, "rmsnorm")
    assert spec is not None, note
    assert spec.sizes == {"rows": 8192, "cols": 4096}
    assert spec.launch.block == (128,) and spec.launch.grid == ("(rows + block.x - 1) // block.x",)
    assert args(spec) == {
        "x": ("input", "float32", ("rows * cols",), None),
        "w": ("input", "float32", ("cols",), None),  # from its cudaMalloc, not from a guess
        "y": ("output", "float32", ("rows * cols",), None),
        "rows": ("scalar", "int32", (), "rows"),
        "cols": ("scalar", "int32", (), "cols"),
        "eps": ("scalar", "float32", (), 1e-6),
    }
    assert "launch_rmsnorm() (called from main() at line 29) at line 19" in note
    _, launch = resolve(spec)
    assert launch.grid == (64, 1, 1) and launch.block == (128, 1, 1)
    # Tunable: a new block keeps the program's grid formula.
    assert resolve(spec, block=(512,))[1].grid == (16, 1, 1)


SGEMM = """\
#include <cuda_runtime.h>
template <int TILE>
__global__ void sgemm_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}

void run_sgemm(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream) {
    constexpr int tile = 32;
    dim3 block(tile, tile);
    dim3 grid((N + tile - 1) / tile, (M + tile - 1) / tile);
    sgemm_naive<tile><<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}

int main(int argc, char** argv) {
    int M = 2048, N = 2048, K = argc > 1 ? atoi(argv[1]) : 1024;
    float *A, *B, *C;
    cudaMalloc(&A, sizeof(float) * M * K);
    cudaMalloc(&B, sizeof(float) * K * N);
    cudaMalloc(&C, sizeof(float) * M * N);
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    run_sgemm(A, B, C, M, N, K, stream);
    run_sgemm(A, B, C, 512, 384, 256, stream);
    return 0;
}
"""


def test_a_template_kernel_takes_its_instantiation_from_the_launch_and_argv_its_default() -> None:
    """ "a template with a value parameter and no default: say which instantiation to run": the launch
    says it (`sgemm_naive<tile>` with `constexpr int tile = 32`)."""
    spec, note = inferred(SGEMM, "sgemm_naive")
    assert spec is not None, note
    assert spec.instantiate == "sgemm_naive<32>"
    assert spec.sizes == {"M": 2048, "N": 2048, "K": 1024}  # K: the program's default for argv[1]
    assert "the default of" in note
    assert spec.launch.block == (32, 32)
    assert spec.launch.grid == ("(N + 32 - 1) // 32", "(M + 32 - 1) // 32")
    assert args(spec)["A"][2] == ("M * K",) and args(spec)["C"][2] == ("M * N",)
    # The smaller second call is a verify size; the grid formula is the same.
    assert spec.verify_sizes == ({"M": 512, "N": 384, "K": 256},)


def test_a_launch_in_main_with_defines_dim3_and_a_typedef_of_half() -> None:
    source = """\
#include <cuda_fp16.h>
#define WIDTH 1920
#define HEIGHT 1080
#define BLOCK_X 32
#define BLOCK_Y 8
using pixel_t = __half;

__global__ void brighten(const pixel_t* in, pixel_t* out, int width, int height, float gain) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) out[y * width + x] = __float2half(__half2float(in[y * width + x]) * gain);
}

int main() {
    pixel_t *d_in, *d_out;
    const size_t pixels = (size_t)WIDTH * HEIGHT;
    cudaMalloc(&d_in, pixels * sizeof(pixel_t));
    cudaMalloc(&d_out, pixels * sizeof(pixel_t));
    const float gain = 1.25f;
    dim3 block(BLOCK_X, BLOCK_Y);
    dim3 grid((WIDTH + block.x - 1) / block.x, (HEIGHT + block.y - 1) / block.y);
    brighten<<<grid, block>>>(d_in, d_out, WIDTH, HEIGHT, gain);
    cudaDeviceSynchronize();
}
"""
    spec, note = inferred(source, "brighten")
    assert spec is not None, note
    assert spec.sizes == {"width": 1920, "height": 1080}
    assert spec.launch.block == (32, 8)
    assert spec.launch.grid == ("(width + block.x - 1) // block.x", "(height + block.y - 1) // block.y")
    assert args(spec)["in"] == ("input", "float16", ("width * height",), None)  # through `using`, sizeof
    assert args(spec)["gain"][3] == 1.25


def test_a_histogram_with_a_constant_sized_output_and_a_bytes_variable() -> None:
    source = """\
#define NUM_BINS 256
__global__ void histogram(const unsigned char* data, unsigned int* bins, int n) {
    __shared__ unsigned int local[NUM_BINS];
    for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}
int main() {
    const int n = 64 << 20;
    unsigned char* d_data; unsigned int* d_bins;
    size_t data_bytes = n;
    cudaMalloc(&d_data, data_bytes);
    cudaMalloc(&d_bins, NUM_BINS * sizeof(unsigned int));
    histogram<<<264, 256>>>(d_data, d_bins, n);
}
"""
    spec, note = inferred(source, "histogram")
    assert spec is not None, note
    assert spec.sizes == {"n": 64 << 20} and spec.launch.grid == ("264",)
    assert args(spec)["data"] == ("input", "uint8", ("n",), None)
    assert args(spec)["bins"][:3] == ("inout", "uint32", ("256",))


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("int n = atoi(argv[1]);", "read at run time"),
        ('int n; scanf("%d", &n);', "declared without a value"),
    ],
)
def test_sizes_the_program_does_not_state_are_a_reason(host: str, reason: str) -> None:
    source = f"""\
__global__ void twice(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}}
int main(int argc, char** argv) {{
    {host}
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, n * sizeof(float));
    twice<<<(n + 255) / 256, 256>>>(x, y, n);
}}
"""
    spec, why = inferred(source, "twice")
    assert spec is None and reason in why, why


def test_load_targets_prefers_the_program_and_falls_back_to_the_signature_with_the_reason(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rmsnorm.cu"
    path.write_text(RMSNORM)
    (target,) = load_targets(path).targets
    assert target.spec is not None and target.spec.sizes == {"rows": 8192, "cols": 4096}
    assert target.note.startswith("spec inferred from the launch in launch_rmsnorm()")
    # Sizes only known at run time: the signature's default sizes, saying why, and what the program does
    # state (its block, its grid over the sizes, the literal eps) kept.
    runtime = RMSNORM.replace("const int rows = N_ROWS, cols = kCols;", 'int rows = atoi("8"), cols = kCols;')
    path.write_text(runtime)
    (target,) = load_targets(path).targets
    assert target.spec is not None and target.spec.sizes == {"rows": 4096, "cols": 4096}
    assert "read at run time" in target.note and "the sizes are defaults" in target.note
    assert target.spec.launch.block == (128,)
    assert target.spec.launch.grid == ("(rows + block.x - 1) // block.x",)
    eps = target.spec.argument("eps")
    assert eps is not None and eps.value == 1e-6


def test_a_typedef_of_bfloat16_reaches_the_signature_inference(tmp_path: Path) -> None:
    """`typedef __nv_bfloat16 floatX` was not followed (the error suggested float32)."""
    path = tmp_path / "gelu.cu"
    path.write_text(
        "#include <cuda_bf16.h>\ntypedef __nv_bfloat16 floatX;\n"
        "__global__ void gelu(const floatX* x, floatX* y, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = x[i];\n}\n"
    )
    (target,) = load_targets(path).targets
    assert target.spec is not None, target.note
    assert {a.name: a.dtype for a in target.spec.arguments}["x"] == "bfloat16"


TRIES_BLOCKS = """\
#include <cuda_runtime.h>
__global__ void shift(const float* src, float* dst, int count, float by) {
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) dst[at] = src[at] + by;
}

void shift_on_device(const float* src, float* dst, int count, int threads) {
    int blocks = (count + threads - 1) / threads;
    shift<<<blocks, threads>>>(src, dst, count, 0.5f);
}

int main() {
    const int count = 1 << 22;
    float *src, *dst;
    cudaMalloc(&src, count * sizeof(float));
    cudaMalloc(&dst, count * sizeof(float));
    int tried[] = {64, 128, 256, 512};
    for (int t = 0; t < sizeof(tried) / sizeof(int); t++) {
        int threads = tried[t];
        shift_on_device(src, dst, count, threads);
    }
    return 0;
}
"""


def test_a_program_that_tries_its_blocks_in_a_counted_loop_gives_the_first_one() -> None:
    # llm.c's dev kernels are launched inside `for (int j = 0; j < n; j++) { int block_size =
    # block_sizes[j]; ... }`: the loop's counter is read as on its first iteration
    spec, note = inferred(TRIES_BLOCKS, "shift")
    assert spec is not None, note
    assert spec.sizes == {"count": 1 << 22} and spec.launch.block == (64,)
    assert "called from main()" in note


def test_a_rewrites_launch_leaves_a_programs_own_loop_over_blocks_as_written(tmp_path: Path) -> None:
    from dataclasses import replace

    from cuda_agent.agent.rewrite import write_launch

    path = tmp_path / "shift.cu"
    path.write_text(TRIES_BLOCKS)
    (target,) = load_targets(path).targets
    assert target.spec is not None
    written = write_launch(target, replace(target.spec.launch, block=(256,)))
    assert "shift<<<blocks, threads>>>" in written.text  # the program still tries its blocks
    assert any("tries several blocks itself (64, 128)" in note for note in written.notes), written.notes


HEADS = """\
#include <cuda_runtime.h>

__global__ void split_heads(const float* qkv, float* q, int B, int T, int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T * HS) return;
    int d = idx % HS, t = (idx / HS) % T, h = (idx / (HS * T)) % NH, b = idx / (HS * T * NH);
    q[idx] = qkv[(b * T + t) * 3 * NH * HS + h * HS + d];
}

__global__ void pad_rows(const float* logits, float* padded, int rows, int V, int Vp) {
    int r = blockIdx.x;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) padded[r * Vp + v] = v < V ? logits[r * V + v] : 0.0f;
}

void attention_prep(const float* qkv, float* q, int B, int T, int C, int NH) {
    const int hs = C / NH;
    int threads = 256;
    split_heads<<<(B * T * C + threads - 1) / threads, threads>>>(qkv, q, B, T, NH, hs);
}

int main() {
    int B = 4, T = 256, C = 768, NH = 12, V = 50257;
    int Vp = (V + 63) & ~63;
    float *qkv, *q, *logits, *padded;
    cudaMalloc(&qkv, B * T * 3 * C * sizeof(float));
    cudaMalloc(&q, B * T * C * sizeof(float));
    cudaMalloc(&logits, B * T * V * sizeof(float));
    cudaMalloc(&padded, B * T * Vp * sizeof(float));
    attention_prep(qkv, q, B, T, C, NH);
    pad_rows<<<B * T, 256>>>(logits, padded, B * T, V, Vp);
    return 0;
}
"""


def test_a_size_derived_from_earlier_ones_and_a_size_rounded_up_with_bitwise_operators() -> None:
    # the head size C / NH is read with NH already a size; the padded vocabulary (V + 63) & ~63
    heads, note = inferred(HEADS, "split_heads")
    assert heads is not None, note
    assert heads.sizes == {"B": 4, "T": 256, "NH": 12, "HS": 64}
    padded, note = inferred(HEADS, "pad_rows")
    assert padded is not None, note
    assert padded.sizes == {"rows": 1024, "V": 50257, "Vp": 50304}
    (extent,) = args(padded)["padded"][2]
    assert extent.endswith("* Vp")  # the buffer follows the padded size


PARTIALS = """\
#include <cuda_runtime.h>
int sm_count = 0;  // set from the device's properties at run time

void setup() {
    cudaDeviceProp props;
    cudaGetDeviceProperties(&props, 0);
    sm_count = props.multiProcessorCount;
}

__global__ void column_partials(const float* x, float* partials, int rows, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= 2 * C + 1) return;
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += x[r * (2 * C + 1) + c];
    partials[c] = s;
}

int main() {
    setup();
    int rows = 4096, C = 384;
    float *x, *partials, *per_sm;
    cudaMalloc(&x, rows * (2 * C + 1) * sizeof(float));
    cudaMalloc(&partials, (2 * C + 1) * sizeof(float));
    cudaMalloc(&per_sm, sm_count * (2 * C + 1) * sizeof(float));
    column_partials<<<(2 * C + 1 + 255) / 256, 256>>>(x, partials, rows, C);
    column_partials<<<sm_count, 256>>>(x, per_sm, rows, C);
    return 0;
}
"""


def test_an_allocation_keeps_its_factors_whole_and_a_global_set_at_run_time_has_no_value() -> None:
    (kernel,) = [k for k in find_kernels(PARTIALS) if k.name == "column_partials"]
    spec, note = infer_from_program(kernel, PARTIALS)
    assert spec is not None, note
    # `rows * (2 * C + 1) * sizeof(float)` is rows * (2 * C + 1) elements, not rows * 2 * C + 1
    extents = {a.name: a.shape for a in spec.arguments if a.shape}
    assert extents == {"x": ("rows * (2 * C + 1)",), "partials": ("2 * C + 1",)}
    # alone, the launch whose grid is sm_count, which setup() assigns: the program does not state it
    host = PARTIALS.replace(
        "    column_partials<<<(2 * C + 1 + 255) / 256, 256>>>(x, partials, rows, C);\n", ""
    )
    spec, note = infer_from_program(kernel, host)
    assert spec is None and "sm_count is a global the program sets at run time (line 7)" in note


DEDUCED = """\
#include <cuda_fp16.h>
template <typename Tin, typename Tout>
__global__ void widen(const Tin* x, Tout* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (Tout)(float)x[i];
}

void convert(const __half* x, float* y, int n) {
    widen<<<(n + 255) / 256, 256>>>(x, y, n);
}

int main() {
    int n = 1 << 20;
    __half* x;
    float* y;
    cudaMalloc(&x, n * sizeof(__half));
    cudaMalloc(&y, n * sizeof(float));
    convert(x, y, n);
    return 0;
}
"""


def test_template_types_the_launch_leaves_to_deduction_come_from_the_arguments_declared_types() -> None:
    spec, note = inferred(DEDUCED, "widen")
    assert spec is not None, note
    assert {a.name: a.dtype for a in spec.arguments if a.shape} == {"x": "float16", "y": "float32"}
    # two arguments deducing one parameter differently: it stays unknown
    clash = DEDUCED.replace("Tout* y", "Tin* y").replace("(Tout)", "(Tin)").replace(", typename Tout", "")
    spec, note = inferred(clash, "widen")
    assert spec is None and "the launch does not say what Tin (the type of x) is" in note


COLUMN_MAJOR = """\
#define IDX2C(i, j, ld) (((j) * (ld)) + (i))
#define BLOCK 16
__global__ void axpby_colmajor(const float* A, float* B, float alpha, float beta, int m, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    int j = blockIdx.y * BLOCK + threadIdx.y;
    if (i < m && j < n) B[IDX2C(i, j, m)] = alpha * A[IDX2C(i, j, m)] + beta * B[IDX2C(i, j, m)];
}
int main() {
    int m = 3000, n = 2000;
    float *dA, *dB;
    cudaMalloc((void**)&dA, m * n * sizeof(*dA));
    cudaMalloc((void**)&dB, m * n * sizeof(dB[0]));
    dim3 threads(BLOCK, BLOCK);
    dim3 grid((m + BLOCK - 1) / BLOCK, (n + BLOCK - 1) / BLOCK);
    axpby_colmajor<<<grid, threads>>>(dA, dB, 2.0f, 0.5f, m, n);
    cudaDeviceSynchronize();
}
"""


def test_an_allocation_sized_by_its_own_element_reads_the_declared_type() -> None:
    """cuBLAS-style code writes `sizeof(*dA)` or `sizeof(dB[0])` for the element: the pointer's declared
    type says how many bytes that is."""
    spec, note = inferred(COLUMN_MAJOR, "axpby_colmajor")
    assert spec is not None, note
    problem, launch = resolve(spec)
    assert {a.name: a.numel for a in problem.arguments if a.is_buffer} == {"A": 3000 * 2000, "B": 3000 * 2000}
    assert launch.grid[:2] == (188, 125) and spec.sizes == {"m": 3000, "n": 2000}


PARTIAL_SUMS = """\
#define MIN_OF(x, y) ((x) < (y) ? (x) : (y))
const int kElems = 40000;
const int kThreads = 128;
const int kBlocks = MIN_OF(64, (kElems + kThreads - 1) / kThreads);

__global__ void partial_sums(const float* v, float* partial) {
    __shared__ float buf[kThreads];
    float s = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kElems; i += blockDim.x * gridDim.x) s += v[i];
    buf[threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) buf[threadIdx.x] += buf[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}

int main() {
    float *d_v, *d_partial;
    cudaMalloc(&d_v, kElems * sizeof(float));
    cudaMalloc(&d_partial, kBlocks * sizeof(float));
    partial_sums<<<kBlocks, kThreads>>>(d_v, d_partial);
    cudaDeviceSynchronize();
}
"""


def test_a_function_like_macro_and_a_hand_written_min_are_followed() -> None:
    """`#define MIN_OF(x, y) ((x) < (y) ? (x) : (y))` in the grid's constant: expanded where it is
    called, its `a < b ? a : b` read as min(a, b)."""
    spec, note = inferred(PARTIAL_SUMS, "partial_sums")
    assert spec is not None, note
    problem, launch = resolve(spec)
    assert launch.grid[0] == 64 and launch.block[0] == 128
    assert {a.name: a.numel for a in problem.arguments if a.is_buffer} == {"v": 40000, "partial": 64}
