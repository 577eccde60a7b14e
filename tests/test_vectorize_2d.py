"""Vector loads and stores along the rows of 2-D element-wise kernels (vectorize_rows.py): what the rewrite
produces, that it compiles (real NVRTC) and its launch resolves, that it runs every element exactly once
without touching memory past a buffer's ends (the kernels run on the CPU, every thread in turn, under
AddressSanitizer), and that it stays away from kernels that read neighbours or transpose."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.transforms.vectorize_rows import propose_vectorize_rows
from cuda_agent.agent.spec import complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.plan import LaunchPlan

from tests.test_transforms import FILES, ROOT, assert_compiles, target_of

BIAS_RELU = ROOT / "bench" / "kernels" / "bias_relu_fp16.cu"

SPEC_2D = """\
/* cuda-agent
[sizes]
rows = 1024
cols = 4096
[args]
{args}
rows = {{ role = "scalar", dtype = "int32", value = "rows" }}
cols = {{ role = "scalar", dtype = "int32", value = "cols" }}
[launch]
block = [16, 16]
grid = ["ceil_div(cols, block.x)", "ceil_div(rows, block.y)"]
[verify]
sizes = [{{ rows = 333, cols = 1001 }}]
*/
"""

# y += a x + b, element-wise (y read and written, so a column run twice would show), through a local index.
AXPB = (
    SPEC_2D.format(
        args='x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }\n'
        'b = { role = "input", dtype = "float32", shape = ["rows", "cols"] }\n'
        'y = { role = "inout", dtype = "float32", shape = ["rows", "cols"] }'
    )
    + """\
__global__ void axpb(const float* x, const float* b, float* y, int rows, int cols)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = threadIdx.x + blockIdx.x * blockDim.x;  // fast axis
    if (row >= rows || col >= cols) return;
    int idx = row * cols + col;  // flat index
    // scale, shift, accumulate
    y[idx] += 2.5f * x[idx] + b[idx];
}
"""
)


# Odd columns scaled by a per-row factor, the rest left as they were; the work on the guard's line.
ODD_COLUMNS = SPEC_2D.format(
    args='x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }\n'
    'scale = { role = "input", dtype = "float32", shape = ["rows"] }\n'
    'y = { role = "inout", dtype = "float32", shape = ["rows", "cols"] }'
) + (
    "__global__ void odd_columns(const float* x, const float* scale, float* y, int rows, int cols)\n{\n"
    "    int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "    if (row < rows && col < cols)"
    " if (col % 2) y[(size_t)row * cols + col] = x[(size_t)row * cols + col] * scale[row];\n"
    "}\n"
)  # fmt: skip


def bias_relu() -> KernelTarget:
    target = load_targets(BIAS_RELU).find("bias_relu")
    assert target is not None and target.spec is not None
    return target


def launches(target: KernelTarget, candidate: Candidate) -> list[LaunchPlan]:
    """The candidate's launch at the benchmark size and each verify size (re-read from its source)."""
    again = load_targets(target.path, candidate.source).find(target.kernel.name)
    assert again is not None and again.spec is not None and again.spec.launch == candidate.launch
    spec = again.spec
    return [resolve(spec, complete_sizes(spec, sizes))[1] for sizes in (spec.sizes, *spec.verify_sizes)]


# -- the bench kernel ----------------------------------------------------------------------------------


def test_bias_relu_16_byte_vectors_with_a_scalar_path() -> None:
    target = bias_relu()
    sixteen, eight = propose_vectorize_rows(target)
    assert sixteen.description == (
        "8-wide 16-byte loads and stores along rows (half ×8), scalar path for unaligned rows"
    )
    assert (
        eight.description
        == "4-wide 8-byte loads and stores along rows (half ×4), scalar path for unaligned rows"
    )
    assert sixteen.proposer == "vectorize-rows"
    assert sixteen.launch is not None and eight.launch is not None
    assert sixteen.launch.grid == ("ceil_div(cols, 8 * block.x)", "ceil_div(rows, block.y)")
    assert eight.launch.grid == ("ceil_div(cols, 4 * block.x)", "ceil_div(rows, block.y)")
    assert sixteen.launch.block == eight.launch.block == (32, 8)
    body = sixteen.source.split("int rows, int cols)\n{\n")[1]
    assert body == (
        "    int col = (blockIdx.x * blockDim.x + threadIdx.x) * 8;\n"
        "    int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "    // 8 columns a thread; 16-byte loads and stores when the rows and buffers are aligned for them\n"
        "    bool aligned = cols % 8 == 0 && (((unsigned long long)x | (unsigned long long)bias | "
        "(unsigned long long)y) & 15) == 0;\n"
        "    if (row < rows && col < cols) {\n"
        "        if (aligned) {\n"
        "            alignas(16) half x8[8];\n"
        "            alignas(16) half bias8[8];\n"
        "            alignas(16) half y8[8];\n"
        "            *reinterpret_cast<uint4*>(x8) = *reinterpret_cast<const uint4*>(&x[row * cols + col]);\n"
        "            *reinterpret_cast<uint4*>(bias8) = *reinterpret_cast<const uint4*>(&bias[col]);\n"
        "            #pragma unroll\n"
        "            for (int j = 0; j < 8; ++j) {\n"
        "                float v = __half2float(x8[j]) + __half2float(bias8[j]);\n"
        "                y8[j] = __float2half(v > 0.0f ? v : 0.0f);\n"
        "            }\n"
        "            *reinterpret_cast<uint4*>(&y[row * cols + col]) = *reinterpret_cast<const uint4*>(y8);\n"
        "        } else {  // rows not aligned for 16-byte access: one column at a time\n"
        "            for (int c = col; c < cols && c < col + 8; ++c) {\n"
        "                float v = __half2float(x[row * cols + c]) + __half2float(bias[c]);\n"
        "                y[row * cols + c] = __float2half(v > 0.0f ? v : 0.0f);\n"
        "            }\n"
        "        }\n"
        "    }\n"
        "}\n"
    )
    assert (
        "alignas(8) half x4[4];" in eight.source
        and "reinterpret_cast<const uint2*>(&bias[col])" in eight.source
    )
    for candidate in (sixteen, eight):
        assert_compiles(target, candidate)
    # 16384 x 8192 and 333 x 1001, 32 x 8 threads: x covers the columns once, 8 (or 4) to a thread.
    assert [p.grid for p in launches(target, sixteen)] == [(32, 2048, 1), (4, 42, 1), (4, 1, 1)]
    assert [p.grid for p in launches(target, eight)] == [(64, 2048, 1), (8, 42, 1), (8, 1, 1)]


@pytest.mark.gpu
def test_bias_relu_candidates_verify_on_the_gpu() -> None:
    """At 16384 x 8192 every row takes the vector path; at 333 x 1001 every row takes the scalar one."""
    from cuda_agent.agent.engine import Engine, EngineSettings

    target = bias_relu()
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        baseline = engine.baseline(target)
        assert baseline.usable, baseline.error
        results = engine.evaluate(baseline, propose_vectorize_rows(target))
    assert all(r.verified for r in results), [(r.candidate.description, r.status, r.reason) for r in results]


# -- a float kernel: early return, a local index ---------------------------------------------------------


def test_float_kernel_with_a_local_index(tmp_path: Path) -> None:
    target = target_of(tmp_path, AXPB)
    four, two = propose_vectorize_rows(target)
    assert four.description.startswith("4-wide 16-byte loads and stores along rows (float ×4)")
    assert two.description.startswith("2-wide 8-byte loads and stores along rows (float ×2)")
    body = four.source.split("int rows, int cols)\n{\n")[1]
    assert body == (
        "    int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "    int col = (threadIdx.x + blockIdx.x * blockDim.x) * 4;  // fast axis\n"
        "    // 4 columns a thread; 16-byte loads and stores when the rows and buffers are aligned for them\n"
        "    bool aligned = cols % 4 == 0 && (((unsigned long long)x | (unsigned long long)b | "
        "(unsigned long long)y) & 15) == 0;\n"
        "    if (row >= rows || col >= cols) return;\n"
        "    if (aligned) {\n"
        "        int idx = row * cols + col;  // flat index\n"
        "        alignas(16) float x4[4];\n"
        "        alignas(16) float b4[4];\n"
        "        alignas(16) float y4[4];\n"
        "        *reinterpret_cast<uint4*>(x4) = *reinterpret_cast<const uint4*>(&x[idx]);\n"
        "        *reinterpret_cast<uint4*>(b4) = *reinterpret_cast<const uint4*>(&b[idx]);\n"
        "        *reinterpret_cast<uint4*>(y4) = *reinterpret_cast<const uint4*>(&y[idx]);\n"
        "        #pragma unroll\n"
        "        for (int j = 0; j < 4; ++j) {\n"
        "            // scale, shift, accumulate\n"
        "            y4[j] += 2.5f * x4[j] + b4[j];\n"
        "        }\n"
        "        *reinterpret_cast<uint4*>(&y[idx]) = *reinterpret_cast<const uint4*>(y4);\n"
        "    } else {  // rows not aligned for 16-byte access: one column at a time\n"
        "        for (int c = col; c < cols && c < col + 4; ++c) {\n"
        "            int idx = row * cols + c;  // flat index\n"
        "            // scale, shift, accumulate\n"
        "            y[idx] += 2.5f * x[idx] + b[idx];\n"
        "        }\n"
        "    }\n"
        "}\n"
    )
    for candidate in (four, two):
        assert_compiles(target, candidate)
    # 1024 x 4096 and 333 x 1001 in 16 x 16 blocks.
    assert [p.grid for p in launches(target, four)] == [(64, 64, 1), (16, 21, 1)]
    assert [p.grid for p in launches(target, two)] == [(128, 64, 1), (32, 21, 1)]


def test_per_row_values_conditional_stores_and_column_uses(tmp_path: Path) -> None:
    """`scale[row]` stays as written; `y`, stored under a condition, is loaded first so the columns the
    kernel leaves alone are written back unchanged; other uses of `col` get the column's offset."""
    target = target_of(tmp_path, ODD_COLUMNS)
    four = propose_vectorize_rows(target)[0]
    body = four.source.split("int rows, int cols)\n{\n")[1]
    assert body == (
        "    int col = (blockIdx.x * blockDim.x + threadIdx.x) * 4;\n"
        "    int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "    // 4 columns a thread; 16-byte loads and stores when the rows and buffers are aligned for them\n"
        "    bool aligned = cols % 4 == 0 && (((unsigned long long)x | (unsigned long long)y) & 15) == 0;\n"
        "    if (row < rows && col < cols) {\n"
        "        if (aligned) {\n"
        "            alignas(16) float x4[4];\n"
        "            alignas(16) float y4[4];\n"
        "            *reinterpret_cast<uint4*>(x4) = "
        "*reinterpret_cast<const uint4*>(&x[(size_t)row * cols + col]);\n"
        "            *reinterpret_cast<uint4*>(y4) = "
        "*reinterpret_cast<const uint4*>(&y[(size_t)row * cols + col]);\n"
        "            #pragma unroll\n"
        "            for (int j = 0; j < 4; ++j) {\n"
        "                if ((col + j) % 2) y4[j] = x4[j] * scale[row];\n"
        "            }\n"
        "            *reinterpret_cast<uint4*>(&y[(size_t)row * cols + col]) = "
        "*reinterpret_cast<const uint4*>(y4);\n"
        "        } else {  // rows not aligned for 16-byte access: one column at a time\n"
        "            for (int c = col; c < cols && c < col + 4; ++c) {\n"
        "                if (c % 2) y[(size_t)row * cols + c] = x[(size_t)row * cols + c] * scale[row];\n"
        "            }\n"
        "        }\n"
        "    }\n"
        "}\n"
    )  # fmt: skip
    assert_compiles(target, four)


def test_a_store_in_both_branches_of_an_if_is_not_loaded_first(tmp_path: Path) -> None:
    """Every column is stored whichever branch runs: `y` needs no load (the odd-columns kernel above keeps
    some columns as they were, so there it does)."""
    source = ODD_COLUMNS.replace(
        " if (col % 2) y[(size_t)row * cols + col] = x[(size_t)row * cols + col] * scale[row];\n",
        " {\n        if (col % 2) y[(size_t)row * cols + col] = x[(size_t)row * cols + col] * scale[row];\n"
        "        else y[(size_t)row * cols + col] = 0.0f;\n    }\n",
    )
    target = target_of(tmp_path, source)
    four = propose_vectorize_rows(target)[0]
    assert "*reinterpret_cast<const uint4*>(&x[" in four.source
    assert "*reinterpret_cast<const uint4*>(&y[" not in four.source
    assert_compiles(target, four)


# -- kernels it must leave alone -----------------------------------------------------------------------

FLOAT_2D = SPEC_2D.format(
    args='x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }\n'
    'y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }'
)


@pytest.mark.parametrize(
    "work",
    [
        "y[row * cols + col] = x[row * cols + col + 1];",  # the right-hand neighbour
        "y[row * cols + col] = x[(row + 1) * cols + col];",  # the row below
        "y[col * rows + row] = x[row * cols + col];",  # a transpose
        "y[col] = x[row * cols + col];",  # a per-column write (a race), where only reads are per-column
        "y[row] = x[row * cols + col];",
        "y[row * cols + col]++;",
        "y[row * cols + col] = *(x + row * cols + col);",  # pointer arithmetic
        "y[row * cols + col] = x[row * cols + col] + threadIdx.x;",  # thread identity
        "int k = col; y[row * cols + k] = x[row * cols + k];",  # an index through a plain local
    ],
)
def test_not_applied_to_other_accesses(tmp_path: Path, work: str) -> None:
    source = FLOAT_2D + (
        "__global__ void k2d(const float* x, float* y, int rows, int cols)\n{\n"
        "    int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
        f"    if (row < rows && col < cols) {{\n        {work}\n    }}\n}}\n"
    )
    assert propose_vectorize_rows(target_of(tmp_path, source)) == []


def test_not_applied_to_the_bench_transposes_and_stencils() -> None:
    for path in ("bench/kernels/transpose_naive.cu", "bench/kernels/jacobi2d.cu", "examples/transpose.cu"):
        for target in load_targets(ROOT / path).targets:
            assert propose_vectorize_rows(target) == [], path


def test_not_applied_to_mixed_element_sizes(tmp_path: Path) -> None:
    source = SPEC_2D.format(
        args='x = { role = "input", dtype = "float16", shape = ["rows", "cols"] }\n'
        'y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }'
    ) + (
        "#include <cuda_fp16.h>\n"
        "__global__ void widen(const half* x, float* y, int rows, int cols)\n{\n"
        "    int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "    if (row < rows && col < cols) y[row * cols + col] = __half2float(x[row * cols + col]);\n}\n"
    )
    assert propose_vectorize_rows(target_of(tmp_path, source)) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_candidate_on_the_examples_compiles_and_round_trips(path: Path) -> None:
    for target in load_targets(path).targets:
        if target.spec is None:
            continue
        for candidate in propose_vectorize_rows(target):
            assert_compiles(target, candidate)
            launches(target, candidate)


# -- every element once, nothing out of bounds: the kernels on the CPU ------------------------------------

# Enough of CUDA for element-wise kernels to build as C++ (half is the compiler's _Float16), and a count of
# the column groups that took the vector path (the rewrite's `#pragma unroll` line is replaced by it).
HOST_CUDA = """\
#include <cstdio>
#include <cstdlib>
#include <cstring>
#define __global__
typedef _Float16 half;
static inline float __half2float(half h) { return (float)h; }
static inline half __float2half(float f) { return (half)f; }
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct Index { unsigned x, y, z; };
static Index threadIdx, blockIdx, blockDim, gridDim;
static long vector_groups = 0;
"""


def host_program(target: KernelTarget, candidate: Candidate) -> str:
    """A program that runs the original and the candidate, every thread in turn, on buffers of exactly the
    spec's sizes (`offset` elements into their allocation, to misalign them) filled alike, and prints
    whether every output matches bit for bit. Arguments: offset, then for each kernel its grid and block
    (x, y), then each buffer's element count and each scalar's value."""

    def kernel(namespace: str, source: str) -> str:
        lines = [line for line in source.splitlines() if not line.startswith("#include")]
        return f"namespace {namespace} {{\n" + "\n".join(lines) + "\n}\n"

    parameters = target.kernel.parameters
    setup, arguments = [], []
    position = 10
    for p in parameters:
        if not p.is_pointer:
            arguments.append(f"atol(argv[{position}])")
            position += 1
            continue
        arguments.append(p.name)
        setup.append(
            f"long {p.name}_n = atol(argv[{position}]);\n"
            f"{p.type}* {p.name}_o = ({p.type}*)malloc(sizeof({p.type}) * ({p.name}_n + offset)) + offset;\n"
            f"{p.type}* {p.name}_c = ({p.type}*)malloc(sizeof({p.type}) * ({p.name}_n + offset)) + offset;\n"
            f"for (long k = 0; k < {p.name}_n; ++k)\n"
            f"    {p.name}_o[k] = {p.name}_c[k] = ({p.type})(float)((k * 7919 + {position}) % 2001 / 100.0);"
        )
        position += 1
    outputs = [a.name for a in target.spec.outputs] if target.spec else []
    checks = [f"if (memcmp({n}_o, {n}_c, sizeof(*{n}_o) * {n}_n)) {{ puts(\"mismatch {n}\"); return 1; }}"
              for n in outputs]  # fmt: skip

    def run(namespace: str, first: int, suffix: str) -> str:
        call = ", ".join(a if a.startswith("atol") else f"{a}_{suffix}" for a in arguments)
        g, b = f"argv[{first}]", f"argv[{first + 2}]"
        return (
            f"gridDim = {{(unsigned)atol({g}), (unsigned)atol(argv[{first + 1}]), 1}};\n"
            f"blockDim = {{(unsigned)atol({b}), (unsigned)atol(argv[{first + 3}]), 1}};\n"
            "for (unsigned by = 0; by < gridDim.y; ++by) for (unsigned bx = 0; bx < gridDim.x; ++bx)\n"
            "for (unsigned ty = 0; ty < blockDim.y; ++ty) for (unsigned tx = 0; tx < blockDim.x; ++tx) {\n"
            "    blockIdx = {bx, by, 0}; threadIdx = {tx, ty, 0};\n"
            f"    {namespace}::{target.kernel.name}({call});\n"
            "}\n"
        )

    return (
        HOST_CUDA
        + kernel("original", target.source)
        + kernel("candidate", candidate.source.replace("#pragma unroll", "++vector_groups;"))
        + "int main(int argc, char** argv) {\nlong offset = atol(argv[1]);\n"
        + "\n".join(setup)
        + "\n"
        + run("original", 2, "o")
        + run("candidate", 6, "c")
        + "\n".join(checks)
        + '\nprintf("%ld\\n", vector_groups);\nreturn 0;\n}\n'
    )


def run_on_the_cpu(
    executable: Path, target: KernelTarget, candidate: Candidate, sizes: dict[str, int], offset: int
) -> int:
    """The number of column groups that took the vector path; fails on any mismatch or bad access."""
    spec = target.spec
    assert spec is not None and candidate.launch is not None
    problem, original = resolve(spec, sizes)
    _, rewritten = resolve(replace(spec, launch=candidate.launch), sizes)
    argv = [str(offset)]
    for plan in (original, rewritten):
        argv += [str(plan.grid[0]), str(plan.grid[1]), str(plan.block[0]), str(plan.block[1])]
    for argument in problem.arguments:  # in signature order
        argv.append(str(argument.numel if argument.is_buffer else int(argument.distribution.value or 0)))
    result = subprocess.run(
        [str(executable), *argv], capture_output=True, text=True, env={"ASAN_OPTIONS": "detect_leaks=0"}
    )
    assert result.returncode == 0, (sizes, offset, result.stdout, result.stderr[-2000:])
    return int(result.stdout)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the kernels on the CPU")
@pytest.mark.parametrize("kernel", ["bias_relu", "axpb", "odd_columns"])
def test_every_element_once_and_nothing_out_of_bounds(tmp_path: Path, kernel: str) -> None:
    """Outputs bit for bit the original's (an inout accumulated twice, or a column left out, would show),
    at sizes with and without whole vectors in a row, with buffers aligned and misaligned."""
    sources = {"axpb": AXPB, "odd_columns": ODD_COLUMNS}
    target = bias_relu() if kernel == "bias_relu" else target_of(tmp_path, sources[kernel])
    for candidate in propose_vectorize_rows(target):
        width = int(candidate.description.split("-wide")[0])
        program = tmp_path / "run.cpp"
        program.write_text(host_program(target, candidate))
        executable = tmp_path / "run"
        built = subprocess.run(
            ["g++", "-std=c++17", "-O1", "-w", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-o", str(executable), str(program)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert built.returncode == 0, built.stderr[-3000:]
        for rows, cols in ((333, 1001), (37, 1024), (5, 8), (3, 4), (7, 3), (2, 1), (9, 8 * width + 4)):
            sizes = {"rows": rows, "cols": cols}
            aligned_rows = rows * (cols // width) if cols % width == 0 else 0
            # Aligned buffers: whole rows in vectors when cols is a multiple of the width.
            assert run_on_the_cpu(executable, target, candidate, sizes, offset=0) == aligned_rows
            # Buffers one element off alignment: every column on the scalar path.
            assert run_on_the_cpu(executable, target, candidate, sizes, offset=1) == 0
