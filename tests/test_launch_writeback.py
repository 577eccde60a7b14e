"""A new launch is written back into the program in the user's own terms: the constant the block comes
from changes (`const int threads`, a dim3's components, a #define, an argv default), the grid and shared
memory are rewritten only where they would not follow, with the user's names; a constant that another
kernel's launch or device code also uses is left alone with a note. Every edited program compiles with
nvcc (host code included) with no warning the original did not have, and reads back with the launch that
was measured."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.rewrite import write_launch
from cuda_agent.agent.spec import LaunchSpec, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

RMSNORM = """
#include <cstdio>
#include <cuda_runtime.h>

__global__ void rmsnorm(const float* x, const float* w, float* y, int rows, int cols, float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float ss = 0.0f;
    for (int c = 0; c < cols; ++c) ss += x[(size_t)r * cols + c] * x[(size_t)r * cols + c];
    float inv = rsqrtf(ss / cols + eps);
    for (int c = 0; c < cols; ++c) y[(size_t)r * cols + c] = x[(size_t)r * cols + c] * inv * w[c];
}

int main() {
    const int rows = 8192, cols = 1024;
    const int threads = 128;
    float *x, *w, *y;
    cudaMalloc(&x, rows * cols * sizeof(float));
    cudaMalloc(&w, cols * sizeof(float));
    cudaMalloc(&y, rows * cols * sizeof(float));
    rmsnorm<<<(rows + threads - 1) / threads, threads>>>(x, w, y, rows, cols, 1e-6f);
    cudaDeviceSynchronize();
    printf("threads = %d\\n", threads);
    return 0;
}
"""

IMAGE = """
#include <cuda_runtime.h>
#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) return 1; } while (0)

__global__ void brighten(const float* in, float* out, int width, int height, float gain) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) out[y * width + x] = in[y * width + x] * gain;
}

void run_brighten(const float* in, float* out, int width, int height, cudaStream_t stream) {
    dim3 block(16, 16);
    dim3 grid((width + block.x - 1) / block.x, (height + block.y - 1) / block.y);
    brighten<<<grid, block, 0, stream>>>(in, out, width, height, 1.5f);
}

int main() {
    const int width = 3840, height = 2160;
    float *in, *out;
    CHECK(cudaMalloc(&in, width * height * sizeof(float)));
    CHECK(cudaMalloc(&out, width * height * sizeof(float)));
    run_brighten(in, out, width, height, 0);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
"""

DEFINES = """
#include <cuda_runtime.h>
#define N (1 << 22)
#define BLOCK_SIZE 256
#define TILE 128

__global__ void scale(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * in[i];
}

__global__ void tile_sum(const float* in, float* out, int n) {
    __shared__ float part[TILE];
    int i = blockIdx.x * TILE + threadIdx.x;
    part[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int k = 0; k < TILE; ++k) s += part[k];
        out[blockIdx.x] = s;
    }
}

int main() {
    float *in, *out, *sums;
    cudaMalloc(&in, N * sizeof(float));
    cudaMalloc(&out, N * sizeof(float));
    cudaMalloc(&sums, (N / TILE) * sizeof(float));
    scale<<<(N + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE>>>(in, out, N);
    tile_sum<<<N / TILE, TILE>>>(in, sums, N);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
"""

SHARED_THREADS = """
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

__global__ void square(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= x[i];
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    int threads = 256;
    float* x;
    cudaMalloc(&x, n * sizeof(float));
    int blocks = (n + threads - 1) / threads;
    add_one<<<blocks, threads>>>(x, n);
    square<<<blocks, threads>>>(x, n);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
"""

MATMUL = """
#include <cuda_runtime.h>
#include <math.h>
#define TILE_WIDTH 16
__global__ void MatrixMulKernel(float* M, float* N, float* P, int Width) {
    int Row = blockIdx.y * blockDim.y + threadIdx.y;
    int Col = blockIdx.x * blockDim.x + threadIdx.x;
    if ((Row < Width) && (Col < Width)) {
        float Pvalue = 0;
        for (int k = 0; k < Width; ++k) Pvalue += M[Row * Width + k] * N[k * Width + Col];
        P[Row * Width + Col] = Pvalue;
    }
}
void matmul(int n) {
    int size = n * n * sizeof(float);
    float *M_d, *N_d, *P_d;
    cudaMalloc((void**)&M_d, size);
    cudaMalloc((void**)&N_d, size);
    cudaMalloc((void**)&P_d, size);
    dim3 dimGrid(ceil(n / 16.0), ceil(n / 16.0), 1);
    dim3 dimBlock(TILE_WIDTH, TILE_WIDTH, 1);
    MatrixMulKernel<<<dimGrid, dimBlock>>>(M_d, N_d, P_d, n);
}
int main() {
    matmul(1024);
    return 0;
}
"""


def target_of(tmp_path: Path, text: str, kernel: str, name: str = "program.cu") -> KernelTarget:
    path = tmp_path / name
    path.write_text(text)
    found = load_targets(path).find(kernel)
    assert found is not None and found.spec is not None, found.note if found else kernel
    return found


def with_block(target: KernelTarget, block: tuple[int, ...]) -> tuple[str, tuple[str, ...]]:
    assert target.spec is not None
    written = write_launch(target, replace(target.spec.launch, block=block))
    return written.text, written.notes


def host_part(text: str) -> str:
    """The text without the spec comment written above the kernel (only the host edits are compared)."""
    start = text.find("/* cuda-agent")
    return text if start < 0 else text[:start] + text[text.index("*/", start) + 2 :].lstrip("\n")


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    old_lines, new_lines = host_part(old).splitlines(), host_part(new).splitlines()
    assert len(old_lines) == len(new_lines), "the host edit added or removed lines"
    return [(a.strip(), b.strip()) for a, b in zip(old_lines, new_lines, strict=True) if a != b]


def launch_read_back(tmp_path: Path, text: str, kernel: str) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The launch the edited program itself implies, at its benchmark size (the spec comment removed, so
    the host code is what is read)."""
    found = target_of(tmp_path, host_part(text), kernel, "read_back.cu")
    assert found.spec is not None
    _, launch = resolve(found.spec)
    return launch.block, launch.grid, launch.shared_bytes


def warnings_of(tmp_path: Path, text: str, name: str) -> set[str]:
    path = tmp_path / f"{name}.cu"
    path.write_text(text)
    done = subprocess.run(
        ["nvcc", "-arch=sm_90", "-c", "-Xcompiler", "-Wall", "-o", str(tmp_path / f"{name}.o"), str(path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    # A warning without its file name and line (an edit moves neither, but the names differ).
    return {line.split(": ", 1)[-1] for line in done.stderr.splitlines() if "warning" in line}


def test_the_block_changes_where_the_user_set_it_and_the_grid_follows(tmp_path: Path) -> None:
    original = target_of(tmp_path, RMSNORM, "rmsnorm")
    assert original.spec is not None and original.spec.launch.block == (128,)
    text, notes = with_block(original, (256,))
    assert notes == ()
    assert changed_lines(RMSNORM, text) == [("const int threads = 128;", "const int threads = 256;")]
    assert launch_read_back(tmp_path, text, "rmsnorm") == ((256, 1, 1), (32, 1, 1), 0)


def test_a_new_grid_is_written_with_the_users_names(tmp_path: Path) -> None:
    original = target_of(tmp_path, RMSNORM, "rmsnorm")
    assert original.spec is not None
    # One warp per row: 8 rows a block of 256, a grid that does not follow from the block by itself.
    launch = LaunchSpec((256,), ("ceil_div(rows, block.x // 32)",))
    written = write_launch(original, launch)
    assert written.notes == ()
    assert changed_lines(RMSNORM, written.text) == [
        ("const int threads = 128;", "const int threads = 256;"),
        (
            "rmsnorm<<<(rows + threads - 1) / threads, threads>>>(x, w, y, rows, cols, 1e-6f);",
            "rmsnorm<<<(rows + (threads / 32) - 1) / (threads / 32), threads>>>(x, w, y, rows, cols, 1e-6f);",
        ),
    ]
    assert launch_read_back(tmp_path, written.text, "rmsnorm") == ((256, 1, 1), (1024, 1, 1), 0)


def test_a_dim3_block_keeps_its_variable_and_the_grid_its_expressions(tmp_path: Path) -> None:
    original = target_of(tmp_path, IMAGE, "brighten")
    assert original.spec is not None and original.spec.launch.block[:2] == (16, 16)
    text, notes = with_block(original, (32, 8, 1))
    assert notes == ()
    assert changed_lines(IMAGE, text) == [("dim3 block(16, 16);", "dim3 block(32, 8);")]
    assert launch_read_back(tmp_path, text, "brighten") == ((32, 8, 1), (120, 270, 1), 0)


def test_a_define_that_only_the_launch_uses_changes_and_one_device_code_reads_does_not(
    tmp_path: Path,
) -> None:
    scale = target_of(tmp_path, DEFINES, "scale")
    text, notes = with_block(scale, (512,))
    assert notes == ()
    assert changed_lines(DEFINES, text) == [("#define BLOCK_SIZE 256", "#define BLOCK_SIZE 512")]
    # TILE sizes the kernel's shared array: it stays, and this launch alone gets the new block.
    tile_sum = target_of(tmp_path, DEFINES, "tile_sum")
    text, notes = with_block(tile_sum, (64,))
    assert changed_lines(DEFINES, text) == [
        ("tile_sum<<<N / TILE, TILE>>>(in, sums, N);", "tile_sum<<<N / 64, 64>>>(in, sums, N);")
    ]
    assert len(notes) == 1 and "TILE is also read by device code" in notes[0], notes


def test_a_block_shared_with_another_kernels_launch_is_given_to_this_launch_alone(tmp_path: Path) -> None:
    add_one = target_of(tmp_path, SHARED_THREADS, "add_one")
    text, notes = with_block(add_one, (512,))
    assert changed_lines(SHARED_THREADS, text) == [
        ("add_one<<<blocks, threads>>>(x, n);", "add_one<<<(n + 512 - 1) / 512, 512>>>(x, n);")
    ]
    assert len(notes) == 1 and "threads also sets the launch of square" in notes[0], notes


def test_a_dim3_of_one_define_for_two_axes_and_a_grid_declared_above_it(tmp_path: Path) -> None:
    """PMPP style: `dim3 dimGrid(ceil(n / 16.0), ...)` above `dim3 dimBlock(TILE_WIDTH, TILE_WIDTH, 1)`:
    the block's components change at the dim3, and the grid, declared before it, gets numbers."""
    original = target_of(tmp_path, MATMUL, "MatrixMulKernel")
    assert original.spec is not None and original.spec.launch.grid[:2] == (
        "ceil_div(Width, block.x)",
        "ceil_div(Width, block.y)",
    )
    text, _ = with_block(original, (32, 8, 1))
    assert changed_lines(MATMUL, text) == [
        (
            "dim3 dimGrid(ceil(n / 16.0), ceil(n / 16.0), 1);",
            "dim3 dimGrid((n + 32 - 1) / 32, (n + 8 - 1) / 8, 1);",
        ),
        ("dim3 dimBlock(TILE_WIDTH, TILE_WIDTH, 1);", "dim3 dimBlock(32, 8, 1);"),
    ]
    assert launch_read_back(tmp_path, text, "MatrixMulKernel") == ((32, 8, 1), (32, 128, 1), 0)


def test_an_argv_default_is_the_value_that_changes(tmp_path: Path) -> None:
    program = SHARED_THREADS.replace("    square<<<blocks, threads>>>(x, n);\n", "").replace(
        "int threads = 256;", "int threads = argc > 2 ? atoi(argv[2]) : 256;"
    )
    add_one = target_of(tmp_path, program, "add_one")
    text, notes = with_block(add_one, (1024,))
    assert notes == ()
    assert changed_lines(program, text) == [
        (
            "int threads = argc > 2 ? atoi(argv[2]) : 256;",
            "int threads = argc > 2 ? atoi(argv[2]) : 1024;",
        )
    ]


def test_a_launch_config_candidate_carries_the_host_edit(tmp_path: Path) -> None:
    original = target_of(tmp_path, RMSNORM, "rmsnorm")
    candidates = {c.block: c for c in PROPOSERS["launch-config"](original)}
    assert changed_lines(RMSNORM, candidates[(512,)].source) == [
        ("const int threads = 128;", "const int threads = 512;")
    ]


@needs_nvcc
@pytest.mark.parametrize(
    ("program", "kernel", "block"),
    [
        (RMSNORM, "rmsnorm", (512,)),
        (IMAGE, "brighten", (32, 8, 1)),
        (DEFINES, "scale", (128,)),
        (MATMUL, "MatrixMulKernel", (32, 8, 1)),
        (SHARED_THREADS, "add_one", (512,)),
    ],
)
def test_the_edited_program_compiles_with_no_new_warning(
    tmp_path: Path, program: str, kernel: str, block: tuple[int, ...]
) -> None:
    original = target_of(tmp_path, program, kernel)
    text, _ = with_block(original, block)
    assert text != program
    assert warnings_of(tmp_path, text, "edited") <= warnings_of(tmp_path, program, "original")


def test_a_block_the_program_sweeps_is_left_with_the_fastest_named(tmp_path: Path) -> None:
    """llm.c style: `for (int block_size : block_sizes)` around the launch. Rewriting the list (or the
    launch) would end the user's own sweep."""
    program = RMSNORM.replace(
        "    rmsnorm<<<(rows + threads - 1) / threads, threads>>>(x, w, y, rows, cols, 1e-6f);\n",
        "    int block_sizes[] = {128, 256, 512};\n"
        "    for (int block_size : block_sizes) {\n"
        "        rmsnorm<<<(rows + block_size - 1) / block_size, block_size>>>(x, w, y, rows, cols, 1e-6f);\n"
        "    }\n",
    )
    original = target_of(tmp_path, program, "rmsnorm")
    assert original.spec is not None and original.spec.launch.block == (128,)
    text, notes = with_block(original, (512,))
    assert changed_lines(program, text) == []
    assert len(notes) == 1 and "tries several blocks itself (128, 256, 512)" in notes[0], notes


def test_host_code_cut_anywhere_gives_a_file_or_a_note_never_a_traceback(tmp_path: Path) -> None:
    """Every prefix of the programs (host code that does not parse, a launch cut in half) is read and
    written back without an exception."""
    for program, kernel, block in ((RMSNORM, "rmsnorm", (256,)), (IMAGE, "brighten", (32, 8, 1))):
        start = program.index("int main") if "int main" in program else len(program) // 2
        for cut in range(start - 400, len(program), 37):
            path = tmp_path / "cut.cu"
            path.write_text(program[:cut])
            found = load_targets(path).find(kernel)
            if found is None or found.spec is None:
                continue
            written = write_launch(found, replace(found.spec.launch, block=block))
            assert isinstance(written.text, str) and all(isinstance(n, str) for n in written.notes)
