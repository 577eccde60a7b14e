"""The project's own headers a kernel's file includes (agent/spec/headers.py, agent/analysis/
preprocessor.py): what they define reaches inference (the element type, the sizes the launch reads) and
the analysis (the loop bounds), in the `#if` branches the compile takes. Written the way benchmark
suites write them: a header of sizes and types behind include guards and dataset flags, the kernel and
its launch in the .cu file."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.agent.analysis import analysed
from cuda_agent.agent.analysis.preprocessor import taken_nodes
from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.proposers.rewrites import contraction, promote
from cuda_agent.agent.targets import load_targets

HEADER = """#ifndef MATVEC_SIZES_H
#define MATVEC_SIZES_H
#if !defined(SMALL_SET) && !defined(HUGE_SET)
#  define DEFAULT_SET
#endif
#ifdef SMALL_SET
#  define ROWS 256
#  define COLS 256
#else
#  define ROWS 2048
#  define COLS 1024
#endif
#ifdef FIXED_BOUNDS
#  define BOUND(fixed, given) fixed
#else
#  define BOUND(fixed, given) given
#endif
#ifndef ELEM
#  define ELEM float
#endif
#define TILE_X 32
#define TILE_Y 8
#endif
"""

KERNEL = """#include <cstdio>
#include "common/sizes.cuh"

__global__ void scale_rows(int rows, int cols, ELEM* m, ELEM* out, ELEM s)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < BOUND(ROWS, rows) && c < BOUND(COLS, cols)) {
        out[r * COLS + c] = s * m[r * COLS + c];
    }
}

int main()
{
    ELEM *m, *out;
    cudaMalloc(&m, sizeof(ELEM) * ROWS * COLS);
    cudaMalloc(&out, sizeof(ELEM) * ROWS * COLS);
    dim3 block(TILE_X, TILE_Y);
    dim3 grid((COLS + TILE_X - 1) / TILE_X, (ROWS + TILE_Y - 1) / TILE_Y);
    scale_rows<<<grid, block>>>(ROWS, COLS, m, out, 2.0f);
    return 0;
}
"""


def project(tmp_path: Path, header: str = HEADER, kernel: str = KERNEL) -> Path:
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "sizes.cuh").write_text(header)
    (tmp_path / "scale.cu").write_text(kernel)
    return tmp_path / "scale.cu"


def test_the_headers_types_and_sizes_give_the_launch_its_spec(tmp_path: Path) -> None:
    (target,) = load_targets(project(tmp_path)).targets
    assert target.spec is not None, target.note
    assert target.spec.sizes == {"rows": 2048, "cols": 1024}  # the default set, not SMALL_SET's
    assert {a.name: a.dtype for a in target.spec.arguments}["m"] == "float32"  # ELEM, through the header
    assert target.spec.launch.block == (32, 8)


def test_the_analysis_takes_the_branch_the_compile_takes(tmp_path: Path) -> None:
    (target,) = load_targets(project(tmp_path)).targets
    found = analysed(target)
    assert found is not None
    _, facts = found
    assert facts.guard is not None
    # BOUND(fixed, given) is `given` (FIXED_BOUNDS is defined nowhere), and COLS the default set's
    assert sorted((b.index, b.bound.text()) for b in facts.guard.bounds) == [("c", "cols"), ("r", "rows")]
    # the rows' stride is the header's COLS
    assert {a.offset.coefficient("threadIdx.y").text() for a in facts.accesses} == {"1024"}


def test_a_flag_defined_before_the_include_chooses_the_other_branch(tmp_path: Path) -> None:
    kernel = KERNEL.replace(
        '#include "common/sizes.cuh"', '#define FIXED_BOUNDS\n#include "common/sizes.cuh"'
    )
    (target,) = load_targets(project(tmp_path, kernel=kernel)).targets
    found = analysed(target)
    assert found is not None and found[1].guard is not None
    assert sorted(b.bound.text() for b in found[1].guard.bounds) == ["1024", "2048"]


def test_a_branch_the_run_cannot_decide_leaves_its_names_out(tmp_path: Path) -> None:
    header = HEADER.replace("#ifdef FIXED_BOUNDS", "#if SOME_LEVEL_NAME > 2").replace(
        "#ifndef MATVEC_SIZES_H", "#define SOME_LEVEL_NAME high_level\n#ifndef MATVEC_SIZES_H"
    )
    (target,) = load_targets(project(tmp_path, header=header)).targets
    found = analysed(target)
    assert found is not None and found[1].guard is not None
    # BOUND is defined two ways under a condition on a name that is not a number: not expanded
    assert all("BOUND" in b.bound.text() for b in found[1].guard.bounds)


def test_a_header_found_nowhere_or_a_system_header_is_not_read(tmp_path: Path) -> None:
    kernel = KERNEL.replace(
        '#include "common/sizes.cuh"', '#include "missing.cuh"\n#include <cuda_runtime.h>'
    )
    path = tmp_path / "scale.cu"
    path.write_text(kernel)
    (target,) = load_targets(path).targets
    assert target.spec is None and "ELEM" in target.note


def test_a_benchmark_style_matmul_through_its_header_is_tiled(tmp_path: Path) -> None:
    header = HEADER + "#define DEPTH 512\n"
    kernel = """#include "common/sizes.cuh"
__global__ void mm(int rows, int cols, int depth, ELEM* a, ELEM* b, ELEM* c)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < BOUND(ROWS, rows) && j < BOUND(COLS, cols)) {
        c[i * COLS + j] = 0;
        int k;
        for (k = 0; k < BOUND(DEPTH, depth); k++) c[i * COLS + j] += a[i * DEPTH + k] * b[k * COLS + j];
    }
}
int main()
{
    ELEM *a, *b, *c;
    cudaMalloc(&a, sizeof(ELEM) * ROWS * DEPTH);
    cudaMalloc(&b, sizeof(ELEM) * DEPTH * COLS);
    cudaMalloc(&c, sizeof(ELEM) * ROWS * COLS);
    dim3 block(TILE_X, TILE_Y);
    dim3 grid((COLS + TILE_X - 1) / TILE_X, (ROWS + TILE_Y - 1) / TILE_Y);
    mm<<<grid, block>>>(ROWS, COLS, DEPTH, a, b, c);
    return 0;
}
"""
    (target,) = load_targets(project(tmp_path, header=header, kernel=kernel)).targets
    assert target.spec is not None, target.note
    assert contraction.propose(target) or contraction.propose(
        load_targets(target.path, promote.propose(target)[0].source).targets[0]
    )


def test_taken_nodes_decide_ifdef_ifndef_if_and_elif() -> None:
    source = b"""#ifdef A
#define X 1
#else
#define X 2
#endif
#if defined(B) && !defined(C)
#define Y 1
#elif LEVEL >= 2
#define Y 3
#else
#define Y 4
#endif
#ifndef D
#define Z 5
#endif
"""
    taken = list(taken_nodes(parse_cuda(source).root_node, {"B": "", "C": "", "LEVEL": "3"}))
    spelled = [(text(n).split()[1], text(n).split()[2], certain) for n, certain in taken]
    assert spelled == [("X", "2", True), ("Y", "3", True), ("Z", "5", True)]
    unknown = list(taken_nodes(parse_cuda(source).root_node, {"LEVEL": "high"}))
    assert [(text(n).split()[1], certain) for n, certain in unknown][:3] == [
        ("X", True),
        ("Y", False),
        ("Y", False),
    ]
