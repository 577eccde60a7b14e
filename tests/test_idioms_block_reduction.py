"""The block-reduction idiom on CPU: a shared-memory tree reduction with one atomic per block becomes the
grid-stride, warp-shuffle reduction.

Every candidate compiles with NVRTC, keeps the file outside the body and resolves the launch it brings at
the benchmark and verify sizes; the GPU verifier proves the results next. Kernels that only look like a
tree reduction (per-block outputs, a scan, a reduced array read again) are left alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.idioms import IDIOM_PROPOSERS, block_reduction
from cuda_agent.agent.proposers.tree import RESIDENT_BLOCKS
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.test_idioms import _check, _target, needs_compiler

ROOT = Path(__file__).resolve().parents[1]
PROPOSER = block_reduction.PROPOSER
CAPPED_GRID = (f"min(ceil_div(n, block.x), {RESIDENT_BLOCKS})",)


SPEC = """/* cuda-agent
[sizes]
n = 16_777_216
[args]
{x} = {{ role = "input", dtype = "{dtype}", shape = ["n"] }}
{out} = {{ role = "inout", dtype = "{dtype}", shape = [1], init = "zeros" }}
{n} = {{ role = "scalar", dtype = "int32", value = "n" }}
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
{shared}
[verify]
sizes = [{{ n = 999_999 }}, {{ n = 100 }}]
reduction = "n"
*/
"""


def _reduction(
    kernel: str, *, x: str = "x", out: str = "total", n: str = "n", dtype: str = "float32"
) -> KernelTarget:
    shared = 'shared_bytes = "block.x * 4"' if "extern __shared__" in kernel else ""
    return _target(SPEC.format(x=x, out=out, n=n, dtype=dtype, shared=shared) + kernel, "k")


def _body(candidate: Candidate, target: KernelTarget) -> str:
    """The rewritten kernel body (the file around it is unchanged, `_check` makes sure)."""
    start = target.kernel.body_span.start_byte
    after = len(target.source) - target.kernel.span.end_byte
    return candidate.source[start : len(candidate.source) - after]


def _rewritten(target: KernelTarget) -> str:
    """The one candidate's body, checked to compile and to bring a capped grid, no dynamic shared memory."""
    _check(target, PROPOSER)
    (candidate,) = block_reduction.propose(target)
    assert candidate.launch is not None and candidate.launch.block == (256,)
    assert candidate.launch.grid == CAPPED_GRID
    assert candidate.launch.shared_bytes == "0"  # the per-warp slots are a static array
    body = _body(candidate, target)
    assert body.count("__shfl_down_sync") == 2 and body.count("__syncthreads()") == 1
    return body


@needs_compiler
def test_the_benchmark_kernel_becomes_a_grid_stride_warp_shuffle_sum() -> None:
    target = load_targets(ROOT / "bench" / "kernels" / "reduce_shared.cu").find("reduce_shared")
    assert target is not None and target.spec is not None and target.spec.launch.shared_bytes != "0"
    body = _rewritten(target)
    # Four elements a step with no bound check between them, then the tail one at a time.
    assert "unsigned int first = blockIdx.x * blockDim.x + threadIdx.x;" in body
    assert "const unsigned int i = first + k * stride;" in body
    assert "for (unsigned int i = first; i < n; i += stride)" in body
    assert body.count("acc += x[i];") == 2
    # The user's array is kept, as the per-warp slots; nothing interleaved or dynamic is left.
    assert "__shared__ float partial[32];" in body and "extern" not in body and "2 * s" not in body
    assert body.count("atomic") == 1 and "atomicAdd(total, acc);" in body
    (candidate,) = block_reduction.propose(target)
    assert candidate.assumptions == (
        "the elements are combined in another order (float sums: within the spec's tolerance)",
    )


@needs_compiler
def test_sequential_addressing_with_a_fixed_array_and_other_names() -> None:
    target = _reduction(
        """__global__ void k(const float* __restrict__ in, float* out, int len) {
  __shared__ float s[256];
  const int t = threadIdx.x;
  const int gid = blockIdx.x * blockDim.x + t;
  if (gid < len) {
    s[t] = in[gid];
  } else {
    s[t] = 0.0f;
  }
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] = s[t] + s[t + stride];
    __syncthreads();
  }
  if (t == 0) {
    atomicAdd(&out[0], s[0]);
  }
}""",
        x="in",
        out="out",
        n="len",
    )
    body = _rewritten(target)
    # The user's `stride` is taken: the loop's own gets another name.
    assert "const int gid = first + k * stride_;" in body and "gid < len; gid += stride_)" in body
    assert "acc += in[gid];" in body and "__shared__ float s[32];" in body
    assert "atomicAdd(&out[0], acc);" in body


@needs_compiler
def test_a_sum_of_squares_keeps_its_element_expression() -> None:
    target = _reduction(
        """__global__ void k(const float* x, float* total, int n)
{
    extern __shared__ float cache[];
    unsigned int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
    cache[threadIdx.x] = 0.0f;
    if (i < n) cache[tid] = x[i] * x[i];
    __syncthreads();
    for (unsigned int step = 1; step < 256; step <<= 1) {
        if ((tid & (2 * step - 1)) == 0) { cache[tid] += cache[tid + step]; }
        __syncthreads();
    }
    if (0 == tid) atomicAdd(total, cache[0]);
}"""
    )
    body = _rewritten(target)
    assert "acc += x[i] * x[i];" in body and "__shared__ float cache[32];" in body


@needs_compiler
def test_an_integer_maximum_with_its_identity_for_the_tail() -> None:
    target = _reduction(
        """__global__ void k(const int* x, int* total, int n)
{
    __shared__ int best[512];
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    best[threadIdx.x] = i >= n ? (-2147483647 - 1) : x[i];
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s /= 2) {
        if (threadIdx.x < s) best[threadIdx.x] = max(best[threadIdx.x + s], best[threadIdx.x]);
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicMax(total, best[0]);
}""",
        dtype="int32",
    )
    body = _rewritten(target)
    assert "acc = max(acc, static_cast<int>(x[i]));" in body and "atomicMax(total, acc);" in body
    (candidate,) = block_reduction.propose(target)
    assert candidate.assumptions == ()  # a maximum is exact in any order


BENCH = (ROOT / "bench" / "kernels" / "reduce_shared.cu").read_text()
INTERLEAVED_LOOP = """    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0 && tid + s < blockDim.x) {
            partial[tid] += partial[tid + s];
        }
        __syncthreads();
    }"""
FINAL = "    if (tid == 0) atomicAdd(total, partial[0]);"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # per-block partial sums to out[blockIdx.x], no atomic (another kernel finishes the sum)
        (FINAL, "    if (tid == 0) total[blockIdx.x] = partial[0];"),
        # an inclusive scan, not a reduction: each slot adds the one s below it
        (INTERLEAVED_LOOP, """    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        float before = tid >= s ? partial[tid - s] : 0.0f;
        __syncthreads();
        partial[tid] += before;
        __syncthreads();
    }"""),
        # the loop shifts the array instead of combining it
        ("partial[tid] += partial[tid + s];", "partial[tid] = partial[tid + s];"),
        # the tree stops halfway: slot 0 holds a partial sum of the block
        ("s < blockDim.x", "s < blockDim.x / 2"),
        # the reduced array is read again for another output
        (FINAL, FINAL + "\n    if (i < n) total[1 + i] = x[i] / partial[0];"),
        # the out-of-range threads add something: a sum with a tail is not a sum of the elements
        ("i < n ? x[i] : 0.0f", "i < n ? x[i] : 1.0f"),
        # every block sums the same first elements (the element does not follow the global index)
        ("i < n ? x[i] : 0.0f", "i < n ? x[tid] : 0.0f"),
        # the combining step does not match the atomic: a maximum tree added up
        ("partial[tid] += partial[tid + s];", "partial[tid] = fmaxf(partial[tid], partial[tid + s]);"),
    ],
)  # fmt: skip
def test_look_alikes_are_not_block_reductions(old: str, new: str) -> None:
    assert old in BENCH
    target = load_targets(Path("reduce_shared.cu"), BENCH.replace(old, new)).find("reduce_shared")
    assert target is not None and target.spec is not None
    assert block_reduction.propose(target) == []


def test_a_global_atomic_per_element_is_the_other_idiom() -> None:
    sum_atomic = load_targets(ROOT / "bench" / "kernels" / "sum_atomic.cu").find("sum_atomic")
    reduce_shared = load_targets(ROOT / "bench" / "kernels" / "reduce_shared.cu").find("reduce_shared")
    assert sum_atomic is not None and reduce_shared is not None
    assert block_reduction.propose(sum_atomic) == []
    assert IDIOM_PROPOSERS["idiom:atomic-reduction"](reduce_shared) == []
