"""The translation unit handed to NVRTC: host-only functions blanked, everything else byte-for-byte where
it was, so compile errors point at the user's own lines and columns."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source, replace_span
from cuda_agent.agent.kernels import Span, find_kernels

USER_FILE = """\
#include <cuda_fp16.h>
#define BLOCK 256
#define CUDA_CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) abort(); } while (0)

typedef float real;
struct Pair { float lo, hi; };
__constant__ float weights[16];
__device__ int error_count;

__host__ __device__ inline float clamp01(float v) { return v < 0 ? 0 : (v > 1 ? 1 : v); }

template <typename T>
__device__ T square(T v) { return v * v; }

// résumé: host helpers below → blanked
static float* alloc_device(size_t n) {
  float* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  return p;
}

__global__ void __launch_bounds__(BLOCK) normalize(const float* __restrict__ x, float* y, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = clamp01(square(x[i]) * weights[i % 16]);
}

template <typename T>
void launch_normalize(const T* x, T* y, int n, cudaStream_t stream) {
  normalize<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, n);
  CUDA_CHECK(cudaGetLastError());
}

extern "C" void c_entry(float* y, int n) { launch_normalize<float>(y, y, n, 0); }

extern "C" {
__global__ void fill(float* y, real value) { y[threadIdx.x] = value; }
int c_block_host(void) { return 7; }
}

namespace host_api {
__host__ void shutdown() { cudaDeviceReset(); }
}

int main() {
  float* x = alloc_device(1 << 20);
  c_entry(x, 1 << 20);
  CUDA_CHECK(cudaFree(x));
  return 0;
}
"""

HOST_FUNCTIONS = ("alloc_device", "launch_normalize", "c_entry", "c_block_host", "shutdown", "main")
KEPT_TEXT = (
    "#include <cuda_fp16.h>",
    "#define BLOCK 256",
    "#define CUDA_CHECK(call)",
    "typedef float real;",
    "struct Pair { float lo, hi; };",
    "__constant__ float weights[16];",
    "__device__ int error_count;",
    "__host__ __device__ inline float clamp01(float v)",
    "template <typename T>\n__device__ T square(T v)",
    "// résumé: host helpers below → blanked",
    'extern "C" {\n__global__ void fill',
    "namespace host_api {",
)


def test_host_functions_are_gone_and_device_code_stays() -> None:
    device = device_source(USER_FILE)
    for name in HOST_FUNCTIONS:
        assert name not in device, name
    assert "cudaMalloc" not in device and "cudaDeviceReset" not in device and "<<<" not in device
    for text in KEPT_TEXT:
        assert text in device, text
    # The `extern "C"` of a blanked function goes with it instead of attaching to the next declaration.
    assert device.count('extern "C"') == 1


def test_every_line_and_byte_column_is_preserved() -> None:
    device = device_source(USER_FILE)
    assert device.count("\n") == USER_FILE.count("\n")
    assert len(device.encode()) == len(USER_FILE.encode())
    for original, kept in zip(USER_FILE.splitlines(), device.splitlines(), strict=True):
        # Each line is either unchanged or entirely blank (no host line half-kept).
        assert kept == original or kept.strip() == "", (original, kept)


def test_kernels_keep_their_exact_ranges() -> None:
    device = device_source(USER_FILE)
    assert find_kernels(device) == find_kernels(USER_FILE)
    assert [k.name for k in find_kernels(device)] == ["normalize", "fill"]


def test_templated_host_function_goes_with_its_template_header() -> None:
    device = device_source(USER_FILE)
    header_line = USER_FILE.splitlines().index(
        "void launch_normalize(const T* x, T* y, int n, cudaStream_t stream) {"
    )
    assert device.splitlines()[header_line - 1] == " " * len("template <typename T>")


def test_unicode_before_a_kernel_on_the_same_line_keeps_byte_columns() -> None:
    source = "void h() { /* naïve → host */ } __global__ void k(float* x) { x[0] = 1; }\n"
    device = device_source(source)
    (before,) = find_kernels(source)
    (after,) = find_kernels(device)
    assert after == before
    assert device.encode()[after.name_span.start_byte : after.name_span.end_byte] == b"k"
    assert device.startswith(" " * len("void h() { /* naïve → host */ }".encode()) + " __global__")


def test_crlf_line_endings_survive() -> None:
    source = "int main() {\r\n  return 0;\r\n}\r\n__global__ void k(int* x) { *x = 1; }\r\n"
    device = device_source(source)
    assert device.count("\r\n") == 4
    assert device.endswith("__global__ void k(int* x) { *x = 1; }\r\n")


def test_host_only_explicitly_and_member_functions() -> None:
    source = """\
__host__ void host_only() {}
__host__ __device__ float both(float x) { return x; }
__device__ float dev(float x) { return x; }
struct Accumulator {
  float total = 0;
  __device__ void add(float v) { total += v; }
  void reset() { total = 0; }
};
"""
    device = device_source(source)
    assert "host_only" not in device
    assert "__host__ __device__ float both" in device and "__device__ float dev" in device
    # Members stay: blanking inside a class changes its layout and what device code may call.
    assert "void reset() { total = 0; }" in device


def test_functions_whose_qualifiers_come_from_macros_are_kept() -> None:
    # tree-sitter cannot expand HD; blanking a device function would break the compile, keeping a
    # host one costs nothing more than the original file.
    source = """\
#define HD __host__ __device__
#define KERNEL(name) __global__ void name(float* x)
HD float twice(float v) { return 2 * v; }
KERNEL(macro_kernel) { x[0] = twice(1.0f); }
void host() {}
"""
    device = device_source(source)
    assert "HD float twice(float v) { return 2 * v; }" in device
    assert "KERNEL(macro_kernel) { x[0] = twice(1.0f); }" in device
    assert "void host" not in device


def test_preprocessor_lines_inside_a_blanked_function_stay() -> None:
    source = """\
int main() {
#ifdef VERBOSE
  printf("starting\\n");
#define TILE 32
#else
#pragma unroll
  for (int i = 0; i < 2; ++i) {}
#endif
  return 0;
}
__global__ void k(float* x) { x[0] = TILE; }
"""
    lines = device_source(source).splitlines()
    assert lines[1] == "#ifdef VERBOSE"
    assert lines[3] == "#define TILE 32"  # later device code may use it
    assert lines[4] == "#else"
    assert lines[5].strip() == ""  # a pragma belongs to the code that went
    assert lines[7] == "#endif"
    assert all(lines[i].strip() == "" for i in (0, 2, 6, 8, 9))
    assert lines[10] == "__global__ void k(float* x) { x[0] = TILE; }"


def test_a_file_without_host_code_is_unchanged() -> None:
    source = "__global__ void k(float* x) { x[0] = 1; }\n__device__ float f() { return 1; }\n"
    assert device_source(source) == source


# -- compiling the result ------------------------------------------------------------------------------

NVRTC_FILE = """\
#define BLOCK 128
__device__ float relu(float v) { return v > 0.0f ? v : 0.0f; }

void launch(float* x, int n) {
  float* scratch;
  cudaMalloc(&scratch, n * sizeof(float));
  std::vector<float> host(n);
}

__global__ void apply(float* x, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) x[i] = relu(x[i]);
}
"""


def nvrtc_compile(source: str) -> tuple[bool, str]:
    """Compile with NVRTC (no GPU needed) and return (success, log)."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), b"user.cu", 0, [], [])
    try:
        (result,) = nvrtc.nvrtcCompileProgram(program, 1, [b"--gpu-architecture=compute_90"])
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = bytearray(size)  # never b" " * n: NVRTC would write into an interned bytes object
        nvrtc.nvrtcGetProgramLog(program, log)
        return result == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def test_nvrtc_rejects_the_host_code_and_accepts_the_device_source() -> None:
    ok, log = nvrtc_compile(NVRTC_FILE)
    assert not ok and "cudaMalloc" in log
    ok, log = nvrtc_compile(device_source(NVRTC_FILE))
    assert ok, log


def test_nvrtc_errors_point_at_the_users_line() -> None:
    broken = NVRTC_FILE.replace("x[i] = relu(x[i]);", "x[i] = relu(undefined_thing);")
    ok, log = nvrtc_compile(device_source(broken))
    assert not ok
    user_line = broken.splitlines().index("  if (i < n) x[i] = relu(undefined_thing);") + 1
    expected = rf'user\.cu\({user_line}\): error: identifier "undefined_thing" is undefined'
    assert re.search(expected, log), log


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_a_cubin_from_the_device_source(tmp_path: Path) -> None:
    path = tmp_path / "user.cu"
    path.write_text(device_source(USER_FILE), encoding="utf-8")
    build = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-o", str(tmp_path / "user.cubin"), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr


# -- replace_span --------------------------------------------------------------------------------------


def test_replace_a_kernel_body_after_unicode_text() -> None:
    source = "// ünïcödé ✓\n__global__ void k(float* x) { x[0] = 1; }\n__global__ void j() {}\n"
    kernel = find_kernels(source)[0]
    edited = replace_span(source, kernel.body_span, "{ x[0] = 2; /* ✓ */ }")
    assert edited.splitlines()[1] == "__global__ void k(float* x) { x[0] = 2; /* ✓ */ }"
    assert edited.replace("x[0] = 2; /* ✓ */", "x[0] = 1;") == source
    assert [k.name for k in find_kernels(edited)] == ["k", "j"]


def test_replace_an_empty_span_inserts() -> None:
    source = "// é\n__global__ void k() {}\n"
    start = find_kernels(source)[0].span
    insertion = Span(start.start_byte, start.start_byte, 1, 0, 1, 0)
    assert replace_span(source, insertion, "// spec\n") == "// é\n// spec\n__global__ void k() {}\n"


def test_replace_span_refuses_spans_outside_the_text_or_inside_a_character() -> None:
    with pytest.raises(ValueError, match="outside"):
        replace_span("abc", Span(2, 9, 0, 2, 0, 9), "x")
    with pytest.raises(ValueError, match="character boundaries"):
        replace_span("é", Span(1, 2, 0, 1, 0, 2), "x")  # the second byte of é
