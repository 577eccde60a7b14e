"""The block-scan idiom on CPU: Hillis-Steele loops recognised (or not) from the tree, the rewrite
compiled with NVRTC, everything but the loop kept byte for byte, the launch unchanged."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.idioms import block_scan
from cuda_agent.agent.spec import complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.nvrtc import nvrtc_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "kernels" / "scan_segmented.cu"
needs_compiler = pytest.mark.skipif(nvrtc_unavailable_reason() is not None, reason="NVRTC is not installed")

SPEC = """/* cuda-agent
[sizes]
n = 1_048_576
[args]
{x} = {{ role = "input", dtype = "{dtype}", shape = ["n"] }}
{y} = {{ role = "output", dtype = "{dtype}", shape = ["n"] }}
{n} = {{ role = "scalar", dtype = "int32", value = "n" }}
[launch]
block = [{block}]
grid = ["{grid}"]
[verify]
sizes = [{{ n = 100_003 }}]
*/
"""


def _target(source: str, name: str = "k") -> KernelTarget:
    target = load_targets(Path(f"{name}.cu"), source).find(name)
    assert target is not None and target.spec is not None, target and target.note
    return target


def _spec(dtype: str, block: int, x: str = "x", y: str = "y", n: str = "n", grid: str = "") -> str:
    return SPEC.format(x=x, y=y, n=n, dtype=dtype, block=block, grid=grid or "ceil_div(n, block.x)")


def _rewrite(target: KernelTarget, loop_start: str, after_loop: str) -> Candidate:
    """The one candidate: compiled, with the original launch, the file the same outside the loop."""
    candidates = block_scan.propose(target)
    assert len(candidates) == 1, f"{target.kernel.name} was not recognised"
    (candidate,) = candidates
    spec, source = target.spec, target.source
    assert spec is not None and candidate.launch == spec.launch and candidate.block == spec.launch.block
    assert candidate.source.startswith(source[: source.index(loop_start)])
    assert candidate.source.endswith(source[source.index(after_loop) :])
    again = load_targets(target.path, candidate.source).find(target.kernel.name)
    assert again is not None and again.kernel.parameters == target.kernel.parameters
    result = compile_kernel(device_source(candidate.source), target.kernel.name, flags=candidate.flags)
    assert result.ok, ([d.message for d in result.diagnostics], candidate.source)
    launched = replace(spec, launch=candidate.launch)
    for sizes in [spec.sizes, *(complete_sizes(spec, s) for s in spec.verify_sizes)]:
        resolve(launched, sizes)
    assert candidate.source.count("__shfl_up_sync") == 2 and "<<= 1) {\n" in candidate.source
    return candidate


@needs_compiler
def test_the_segmented_scan_benchmark_becomes_a_shuffle_scan() -> None:
    target = load_targets(BENCH).find("scan_segmented")
    assert target is not None
    candidate = _rewrite(target, "for (int offset", "    if (i < n) y[i] = buf[t];")
    assert "offset" not in candidate.source[candidate.source.index("__global__") :]
    assert "__shared__ float warp_totals[32];" in candidate.source
    assert "float value = buf[t];" in candidate.source and "buf[t] = value;" in candidate.source
    assert candidate.description == (
        "warp-shuffle block scan (5 shuffle steps a warp, 3 barriers; was 10 steps with 20 barriers)"
    )
    assert candidate.assumptions  # float sums in another order


@needs_compiler
def test_block_dim_bound_other_names_and_an_int_buffer() -> None:
    # The user's `lane` and `warp` push the rewrite's own locals to fresh names.
    kernel = """
__global__ void k(const int* in, int* out, int count)
{
    __shared__ int scratch[256];
    const unsigned lane = threadIdx.x;
    const int warp = blockIdx.x;
    const int g = warp * blockDim.x + lane;
    scratch[lane] = g < count ? in[g] : 0;
    __syncthreads();
    for (int stride = 1; stride < blockDim.x; stride *= 2) {
        int prev = (lane >= stride) ? scratch[lane - stride] : 0;
        __syncthreads();
        scratch[lane] = scratch[lane] + prev;
        __syncthreads();
    }
    if (g < count) out[g] = scratch[lane];
}"""
    target = _target(_spec("int32", 256, x="in", y="out", n="count") + kernel)
    candidate = _rewrite(target, "for (int stride", "    if (g < count) out[g]")
    assert "int value = scratch[lane];" in candidate.source and "scratch[lane] = value;" in candidate.source
    assert "const unsigned lane_ = threadIdx.x % 32, warp_ = threadIdx.x / 32;" in candidate.source
    assert ": 0;" in candidate.source and not candidate.assumptions
    assert "was 8 steps with 16 barriers" in candidate.description


@needs_compiler
def test_if_form_with_thread_idx_and_a_macro_bound() -> None:
    kernel = """
#define LOG_THREADS 9
#define THREADS (1 << LOG_THREADS)  // one element a thread

__global__ void k(const double* x, double* y, int n)
{
    __shared__ double part[THREADS];
    int i = blockIdx.x * THREADS + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0.0;
    __syncthreads();
#pragma unroll
    for (unsigned d = 1; d < THREADS; d <<= 1) {
        double left = 0.0;
        if (threadIdx.x >= d) {
            left = part[threadIdx.x - d];
        }
        __syncthreads();
        part[threadIdx.x] += left;
        __syncthreads();
    }
    if (i < n) y[i] = part[threadIdx.x];
}"""
    target = _target(_spec("float64", 512) + kernel)
    candidate = _rewrite(target, "#pragma unroll", "    if (i < n) y[i]")
    assert "#pragma unroll" not in candidate.source and "__syncthreads();\n    {\n" in candidate.source
    assert "double value = part[threadIdx.x];" in candidate.source
    assert ": 0.0;" in candidate.source and "was 9 steps with 18 barriers" in candidate.description


@needs_compiler
def test_scan_inside_a_block_uniform_loop_over_segments() -> None:
    kernel = """
constexpr int kSeg = 128;

__global__ void k(const unsigned int* x, unsigned int* y, int n)
{
    __shared__ unsigned int acc[kSeg];
    const int t = threadIdx.x;
    for (int base = blockIdx.x * kSeg; base < n; base += gridDim.x * kSeg) {
        acc[t] = base + t < n ? x[base + t] : 0u;
        __syncthreads();
        for (int o = 1; o < kSeg; o = o * 2) {
            unsigned int left = o <= t ? acc[t - o] : 0u;
            __syncthreads();
            acc[t] = left + acc[t];
            __syncthreads();
        }
        if (base + t < n) y[base + t] = acc[t];
    }
}"""
    target = _target(_spec("uint32", 128, grid="min(ceil_div(n, block.x), 1056)") + kernel)
    candidate = _rewrite(target, "for (int o = 1", "        if (base + t < n)")
    assert "unsigned int value = acc[t];" in candidate.source and ": 0u;" in candidate.source


def _bench_kernel(old: str, new: str) -> str:
    source = BENCH.read_text()
    assert old in source
    return source.replace(old, new)


@pytest.mark.parametrize(
    "source",
    [
        # the bound (SEG = 1024) is not the block's thread count
        _bench_kernel("block = [1024]", "block = [512]"),
        # the body stores the neighbour instead of adding it: not a scan
        _bench_kernel("buf[t] += left;", "buf[t] = left;"),
        # only half the block runs the loop: the barriers are not reached by every thread
        _bench_kernel(
            "    for (int offset = 1; offset < SEG; offset <<= 1) {",
            "    if (threadIdx.x < 512)\n    for (int offset = 1; offset < SEG; offset <<= 1) {",
        ),
        # threads past the end leave before the loop
        _bench_kernel("    buf[t] = i < n", "    if (i >= n) return;\n    buf[t] = i < n"),
        # a bound that is a parameter, not a compile-time constant
        _bench_kernel("offset < SEG;", "offset < n;"),
        # reads two to the left
        _bench_kernel("buf[t - offset]", "buf[t - offset - 1]"),
        # the index is not the thread's
        _bench_kernel("int t = threadIdx.x;", "int t = threadIdx.x ^ 1;"),
        # SEG is 2 * 256 + 256 = 768 as written (a macro's text is substituted, not its value)
        _bench_kernel("#define SEG 1024", "#define HALF 256 + 256\n#define SEG (2 * HALF)"),
        # SEG is defined twice
        _bench_kernel("#define SEG 1024", "#define SEG 1024\n#undef SEG\n#define SEG 1024"),
    ],
)
def test_loops_that_are_not_a_whole_block_scan_are_left_alone(source: str) -> None:
    target = load_targets(Path("scan.cu"), source).find("scan_segmented")
    assert target is not None and target.spec is not None
    assert block_scan.propose(target) == []


def test_a_scan_of_a_global_array_is_left_alone() -> None:
    kernel = """
__global__ void k(const float* x, float* y, int n)
{
    int t = threadIdx.x;
    for (int offset = 1; offset < blockDim.x; offset <<= 1) {
        float left = t >= offset ? y[t - offset] : 0.0f;
        __syncthreads();
        y[t] += left;
        __syncthreads();
    }
}"""
    assert block_scan.propose(_target(_spec("float32", 256) + kernel)) == []


@needs_compiler
def test_if_form_without_braces_and_a_literal_bound() -> None:
    kernel = """
__global__ void k(const float* x, float* y, int n)
{
    __shared__ float s[64];
    int tid = threadIdx.x, i = blockIdx.x * 64 + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int step = 1; step < 64; step += step) {
        float add = 0.0f;
        if (step <= tid) add = s[tid - step];
        __syncthreads();
        s[tid] = add + s[tid];
        __syncthreads();
    }
    if (i < n) y[i] = s[tid];
}"""
    candidate = _rewrite(_target(_spec("float32", 64) + kernel), "for (int step", "    if (i < n) y[i]")
    assert (
        "float value = s[tid];" in candidate.source
        and "was 6 steps with 12 barriers" in candidate.description
    )
