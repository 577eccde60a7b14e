"""The vector-loop rewrite on CPU: a strided loop whose threads start side by side and step past each
other takes 16 bytes of consecutive elements a step through one load or store per array, the original
body kept for the ends and for pointers not aligned for vectors; it is not offered where the elements
are not consecutive, are of several sizes, or the threads do not cover the range together. The
gpu-marked test verifies the rewrites against the originals on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import vector_loop, warp_per_output
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import ROW_SPEC, _target, needs_compiler, shown

OUTSIDE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside"


def outside(name: str) -> KernelTarget:
    (target,) = load_targets(OUTSIDE / f"{name}.cu").targets
    return target


def compiled(target: KernelTarget, candidate: Candidate) -> str:
    """The candidate's kernel body, after checking it compiles without a warning and keeps the launch."""
    assert candidate.launch is None and candidate.block == target.spec.launch.block  # type: ignore[union-attr]
    result = compile_kernel(device_source(candidate.source), target.kernel.name, flags=candidate.flags)
    assert result.ok and not result.diagnostics, [d.message for d in result.diagnostics]
    return candidate.source.split(f"void {target.kernel.name}(")[1]


@needs_compiler
def test_a_grid_stride_half_loop_takes_eight_elements_a_step() -> None:
    target = outside("gelu_fp16")
    (candidate,) = vector_loop.propose(target)
    body = compiled(target, candidate)
    # the alignment checked once, before the steps: the vector loop tests its bound alone, and unrolls
    assert "int i0 = (blockIdx.x * blockDim.x + threadIdx.x) * 8;" in body
    aligned = "if ((((unsigned long long)(&x[i0]) | (unsigned long long)(&y[i0])) & 15) == 0) {"
    steps = "#pragma unroll 4\n            for (; i0 + 8 <= n; i0 += (blockDim.x * gridDim.x) * 8) {"
    assert aligned in body and steps in body and body.index(aligned) < body.index(steps)
    assert "for (; i0 < n; i0 += (blockDim.x * gridDim.x) * 8) {" in body  # then what is left
    assert "*reinterpret_cast<uint4*>(x_v) = *reinterpret_cast<const uint4*>(&x[i0]);" in body
    assert "*reinterpret_cast<uint4*>(&y[i0]) = *reinterpret_cast<const uint4*>(y_v);" in body
    assert "y_v[8];\n            *reinterpret_cast" not in body  # a store-only array is not loaded
    assert "for (int i = i0; i < n && i < i0 + 8; ++i) {" in body  # the ends, as written


@needs_compiler
def test_a_block_stride_loop_over_a_row_through_pointer_locals() -> None:
    target = outside("silu_mul_bf16")
    (candidate,) = vector_loop.propose(target)
    body = compiled(target, candidate)
    assert "int i0 = threadIdx.x * 8;" in body and "for (; i0 + 8 <= d; i0 += (blockDim.x) * 8)" in body
    assert "(unsigned long long)(&out[(size_t)token * d + i0])) & 15) == 0" in body
    assert "out_v[e] = __float2bfloat16(silu(g) * u);" in body


@needs_compiler
def test_a_loop_split_across_a_block_is_vectorised_loop_by_loop() -> None:
    target = outside("rmsnorm_fp16")
    assert vector_loop.propose(target) == []  # a thread's own row: the threads do not step past each other
    block = next(c for c in warp_per_output.propose(target) if "one block per" in c.description)
    split = load_targets(target.path, block.source).find(target.kernel.name)
    assert split is not None
    (candidate,) = vector_loop.propose(split)
    body = compiled(split, candidate)
    first, second = body.split("float scale")
    assert "weight_v" not in first  # each loop loads only what it reads
    assert "x_row_v" in first and "out_row_v" in second and "weight_v" in second


STRIDED = "int c = threadIdx.x; c < cols; c += blockDim.x"


def kernel(body: str, loop: str = STRIDED) -> KernelTarget:
    """A row per block, its threads striding over the columns (or `loop` instead), running `body`."""
    source = ROW_SPEC.format(out_shape='["rows", "cols"]') + (
        "__global__ void k(const float* x, float* y, int rows, int cols)\n{\n"
        f"    int r = blockIdx.x;\n    for ({loop}) {{\n        {body}\n    }}\n}}\n"
    )
    return _target(source, "k")


@needs_compiler
def test_a_conditional_store_keeps_the_elements_it_does_not_write() -> None:
    target = kernel("if (x[r * cols + c] > 0) y[r * cols + c] = 1.0f;")
    (candidate,) = vector_loop.propose(target)
    body = compiled(target, candidate)
    assert "*reinterpret_cast<uint4*>(y_v) = *reinterpret_cast<const uint4*>(&y[r * cols + c0]);" in body


@needs_compiler
def test_an_element_read_only_within_its_own_bound_is_loaded_only_where_the_whole_vector_is() -> None:
    # the loop's range passes the last element the kernel may read (`j < limit`): the vector's last
    # element must be within that bound too, the body's local index written out in the check
    target = kernel("int j = r * cols + c;\n        y[j] = j < rows * cols - 3 ? x[j] : 0.0f;")
    (candidate,) = vector_loop.propose(target)
    body = compiled(target, candidate)
    assert "for (; c0 + 4 <= cols && (r * cols + c0) + 4 <= (rows * cols - 3); c0 += " in body
    assert "reinterpret_cast<const uint4*>(&x[(r * cols + c0)])" in body


# A dropout's byte mask beside the halves it keeps: 8 halves a step are 16 bytes, 8 mask bytes 8.
MASKED = """/* cuda-agent
[sizes]
rows = 4096
cols = 4096
[args]
y = { role = "output", dtype = "float16", shape = ["rows", "cols"] }
x = { role = "input", dtype = "float16", shape = ["rows", "cols"] }
keep = { role = "input", dtype = "uint8", shape = ["rows", "cols"], init = { dist = "integers", high = 2 } }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [256]
grid = ["rows"]
[verify]
sizes = [{ rows = 3, cols = 1001 }]
*/
#include <cuda_fp16.h>
__global__ void masked_scale(half* y, const half* x, const unsigned char* keep, int cols)
{
    const half* row = x + (size_t)blockIdx.x * cols;
    const unsigned char* kept = keep + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        y[(size_t)blockIdx.x * cols + c] = kept[c] ? __hmul(row[c], __float2half(2.0f)) : __float2half(0.0f);
}
"""


@needs_compiler
def test_narrower_elements_beside_wider_ones_take_fewer_bytes_a_step() -> None:
    (target,) = load_targets(Path("masked.cu"), MASKED).targets
    (candidate,) = vector_loop.propose(target)
    body = compiled(target, candidate)
    assert "int c0 = threadIdx.x * 8;" in body and "for (; c0 + 8 <= cols; c0 += (blockDim.x) * 8)" in body
    assert "alignas(8) unsigned char kept_v[8];" in body
    assert "*reinterpret_cast<uint2*>(kept_v) = *reinterpret_cast<const uint2*>(&kept[c0]);" in body
    assert "*reinterpret_cast<uint4*>(row_v) = *reinterpret_cast<const uint4*>(&row[c0]);" in body
    assert "((unsigned long long)(&kept[c0]) & 7)" in body  # each array its own alignment


@pytest.mark.parametrize(
    "body",
    [
        "y[r * cols + c] = x[r * cols + 2 * c];",  # every other element
        "y[r * cols + c] = x[c * rows + r];",  # down a column
        "y[r * cols + c] = x[r * cols + c]; if (x[r * cols + c] < 0) break;",  # an early exit
        "y[r * cols + c] = y[r * cols + c - 1] + x[r * cols + c];",  # reads another iteration's store
        # already 16 bytes a step, through a cast: the parameter's elements are not what is read
        "float4 v = ((const float4*)x)[r * cols + c]; y[r * cols + c] = v.x + v.y + v.z + v.w;",
    ],
)
def test_not_offered_where_the_elements_are_not_consecutive_and_independent(body: str) -> None:
    assert vector_loop.propose(kernel(body)) == []


def test_not_offered_for_a_thread_walking_its_own_row() -> None:
    assert vector_loop.propose(kernel("y[r * cols + c] = x[r * cols + c];", "int c = 0; c < cols; ++c")) == []


# An embedding's backward pass: a block per token adds its gradient row into the table row its id names.
EMBEDDING_BACKWARD = """
/* cuda-agent
[sizes]
tokens = 32768
dim = 1024
vocab = 2048
[args]
dtable = { role = "inout", dtype = "float32", shape = ["vocab", "dim"] }
dout = { role = "input", dtype = "float32", shape = ["tokens", "dim"] }
ids = { role = "input", dtype = "int32", shape = ["tokens"], init = { dist = "integers", high = "vocab" } }
dim = { role = "scalar", dtype = "int32", value = "dim" }
[launch]
block = [256]
grid = ["tokens"]
[verify]
sizes = [{ tokens = 301, dim = 77, vocab = 13 }]
reduction = "2 * tokens // vocab + 8"
*/
__global__ void embedding_backward(float* dtable, const float* dout, const int* ids, int dim)
{
    const float* g = dout + (size_t)blockIdx.x * dim;
    float* row = dtable + (size_t)ids[blockIdx.x] * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
        atomicAdd(&row[d], g[d]);
}
"""


def embedding_backward(old: str = "", new: str = "") -> KernelTarget:
    (target,) = load_targets(Path("embedding.cu"), EMBEDDING_BACKWARD.replace(old, new)).targets
    return target


@needs_compiler
def test_atomic_adds_along_the_loop_become_one_16_byte_atomic_a_step() -> None:
    target = embedding_backward()
    (candidate,) = vector_loop.propose(target)
    body = compiled(target, candidate)
    assert "alignas(16) float row_v[4] = {};" in body  # the step's sums, from zero
    assert "row_v[e] += g_v[e];" in body
    assert "atomicAdd(reinterpret_cast<float4*>(&row[d0]), *reinterpret_cast<const float4*>(row_v));" in body
    assert "atomicAdd(&row[d], g[d]);" in body  # the ends, as written
    # before sm_90 there are no 16-byte atomics: one an element, from the registers
    older = compile_kernel(device_source(candidate.source), target.kernel.name, arch="sm_80")
    assert older.ok, [d.message for d in older.diagnostics]


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (
            "float* dtable, const float* dout",
            "double* dtable, const double* dout",
            "no 16-byte double atomic",
        ),
        ("const float* g = dout", "const double* g = (const double*)dout", "elements of two sizes"),
        ("atomicAdd(&row[d], g[d]);", "if (atomicAdd(&row[d], g[d]) > 0) row[d] = 0;", "the old value read"),
        ("atomicAdd(&row[d], g[d]);", "{ atomicAdd(&row[d], g[d]); row[d] *= 2; }", "also stored plainly"),
        ("atomicAdd(&row[d], g[d]);", "atomicMax((int*)&row[d], 1);", "another atomic"),
    ],
)
def test_atomics_are_not_widened_unless_they_are_float_adds_alone(old: str, new: str, why: str) -> None:
    assert old in EMBEDDING_BACKWARD
    assert vector_loop.propose(embedding_backward(old, new)) == [], why


@pytest.mark.gpu
def test_vector_loops_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        masked = load_targets(Path("masked.cu"), MASKED).targets[0]
        for target in (outside("gelu_fp16"), outside("silu_mul_bf16"), embedding_backward(), masked):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, vector_loop.propose(target))
            seen = shown(baseline.target, results)
            assert all(r.verified for r in results) and any(r.status == "faster" for r in results), seen
