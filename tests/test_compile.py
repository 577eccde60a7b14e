"""compile_kernel with the real NVRTC and the real nvcc: no GPU, no mocks of the compilers."""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cuda_agent.sandbox import compile as compile_module
from cuda_agent.sandbox.compile import Backend, compile_kernel
from cuda_agent.sandbox.cubin import cubin_entry_names
from cuda_agent.sandbox.nvcc import find_nvcc, sarif_results
from cuda_agent.sandbox.nvrtc import nvrtc_unavailable_reason
from cuda_agent.sandbox.plan import CompiledKernel
from cuda_agent.sandbox.ptxas_info import parse_resource_usage
from cuda_agent.sandbox.reports import CompileResult

needs_nvrtc = pytest.mark.skipif(nvrtc_unavailable_reason() is not None, reason="NVRTC is not installed")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
both_backends = pytest.mark.parametrize(
    "backend", [pytest.param("nvrtc", marks=needs_nvrtc), pytest.param("nvcc", marks=needs_nvcc)]
)

SAXPY = """\
__global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

NAMED_KERNELS = """\
#include <cuda_fp16.h>
namespace ops {
template <typename T, int BLOCK>
__global__ void scale(const T* x, T* y, int n) {
    __shared__ T tile[BLOCK];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : T(0);
    __syncthreads();
    if (i < n) y[i] = tile[threadIdx.x] * T(2);
}
}  // namespace ops
__global__ void relu(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
extern "C" __global__ void negate(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = -y[i];
}
"""


def _compiled(result: CompileResult) -> CompiledKernel:
    """The kernel of a successful result; the diagnostics when it is not."""
    assert result.ok, [f"{d.line}:{d.column} {d.message}" for d in result.diagnostics]
    assert result.kernel is not None
    return result.kernel


@needs_nvrtc
def test_good_kernel_compiles_with_nvrtc_and_reports_registers() -> None:
    result = compile_kernel(SAXPY, "saxpy")
    kernel = _compiled(result)
    assert result.backend == kernel.backend == "nvrtc"
    assert kernel.cubin.startswith(b"\x7fELF")
    assert kernel.arch == "sm_90"
    assert kernel.resources.registers is not None and kernel.resources.registers > 0
    assert kernel.resources.spill_store_bytes == 0
    assert kernel.resources.shared_bytes == 0
    assert len(kernel.source_sha256) == 64
    assert result.errors == ()
    # Compile time is recorded, and a small kernel is quick even on a slow CI machine.
    assert 0.0 < result.seconds < 5.0


@both_backends
@pytest.mark.parametrize(
    ("name", "expected_symbol"),
    [
        ("negate", "negate"),  # extern "C": the plain name
        ("relu", "_Z4reluPKfPfi"),  # C++ linkage: mangled
        ("ops::scale<float, 256>", "_ZN3ops5scaleIfLi256EEEvPKT_PS1_i"),  # template: instantiated by its name
        ("ops::scale<__half, 128>", None),
    ],
)
def test_name_expressions_give_the_loadable_symbol(
    backend: Backend, name: str, expected_symbol: str | None
) -> None:
    kernel = _compiled(compile_kernel(NAMED_KERNELS, name, backend=backend))
    assert kernel.backend == backend
    if expected_symbol is not None:
        assert kernel.lowered_name == expected_symbol
    # The symbol is an entry point of this cubin: what cuModuleGetFunction will be given.
    assert kernel.lowered_name.encode() in kernel.cubin
    assert kernel.lowered_name in cubin_entry_names(kernel.cubin)


@needs_nvrtc
def test_template_resources_belong_to_that_instantiation() -> None:
    small = _compiled(compile_kernel(NAMED_KERNELS, "ops::scale<float, 64>"))
    large = _compiled(compile_kernel(NAMED_KERNELS, "ops::scale<float, 512>"))
    assert small.resources.shared_bytes == 64 * 4
    assert large.resources.shared_bytes == 512 * 4


SYNTAX_ERROR = """\
__global__ void broken(float* y) {
    int i = threadIdx.x;
    y[i] = 1.0f
}
"""


@needs_nvrtc
def test_syntax_error_is_a_diagnostic_on_its_line_with_nvrtc() -> None:
    result = compile_kernel(SYNTAX_ERROR, "broken", filename="broken.cu", backend="nvrtc")
    assert not result.ok and result.kernel is None
    (error,) = result.errors
    assert (error.line, error.file) == (4, "broken.cu")  # EDG reports a missing ';' at the next token
    assert 'expected a ";"' in error.message
    assert error.column == 1  # read from the caret under NVRTC's echo of the line


@needs_nvcc
def test_syntax_error_has_line_and_column_from_nvcc() -> None:
    result = compile_kernel(SYNTAX_ERROR, "broken", filename="/home/me/broken.cu")
    assert not result.ok and result.backend == "nvcc"  # auto: NVRTC failed, nvcc failed: nvcc's SARIF
    (error,) = result.errors
    assert (error.line, error.column, error.file) == (4, 1, "/home/me/broken.cu")


@both_backends
def test_columns_count_code_points_and_tabs_alike(backend: Backend) -> None:
    source = '__global__ void k(float* y) {\n\tconst char* s = "é"; y[0] = undefined_name;\n}\n'
    (error,) = compile_kernel(source, "k", backend=backend).errors
    assert (error.line, error.column) == (2, source.splitlines()[1].index("undefined_name") + 1)


@needs_nvrtc
@needs_nvcc
def test_host_headers_and_infinity_fall_back_to_nvcc() -> None:
    source = """\
#include <cstdio>
#include <cmath>
#include <cfloat>
__global__ void clamp_inf(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && y[i] > FLT_MAX) y[i] = INFINITY;
    if (i == 0) printf("n=%d\\n", n);
}
"""
    result = compile_kernel(source, "clamp_inf")
    kernel = _compiled(result)
    assert result.backend == kernel.backend == "nvcc"
    assert kernel.lowered_name == "_Z9clamp_infPfi"
    assert kernel.resources.registers is not None
    assert 'cannot open source file "cstdio"' in result.log  # why NVRTC was not enough stays readable


@both_backends
def test_include_of_a_header_next_to_the_file(tmp_path: Path, backend: Backend) -> None:
    (tmp_path / "activation.cuh").write_text("__device__ inline float gelu(float x) { return x * 0.5f; }\n")
    source = '#include "activation.cuh"\n__global__ void act(float* y) { y[0] = gelu(y[0]); }\n'
    filename = str(tmp_path / "act.cu")
    result = compile_kernel(source, "act", filename=filename, include_dirs=[str(tmp_path)], backend=backend)
    assert _compiled(result).backend == backend


@both_backends
def test_error_inside_an_included_header_names_the_header(tmp_path: Path, backend: Backend) -> None:
    header = tmp_path / "bad.cuh"
    header.write_text("__device__ float f(float x) {\n  return x + nope;\n}\n")
    source = '#include "bad.cuh"\n__global__ void k(float* y) { y[0] = f(y[0]); }\n'
    result = compile_kernel(
        source, "k", filename=str(tmp_path / "k.cu"), include_dirs=[str(tmp_path)], backend=backend
    )
    (error,) = result.errors
    assert error.line == 2 and os.path.realpath(error.file or "") == os.path.realpath(header)


@both_backends
def test_too_much_static_shared_memory_is_a_ptxas_error(backend: Backend) -> None:
    source = """\
__global__ void hog(float* y) {
    __shared__ float s[100000];
    s[threadIdx.x] = y[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = s[(threadIdx.x * 7) % 100000];
}
"""
    result = compile_kernel(source, "hog", backend=backend)
    assert not result.ok
    (error,) = result.errors
    assert error.message.startswith("ptxas:") and "too much shared data" in error.message


@needs_nvrtc
def test_register_pressure_spills_are_reported() -> None:
    # 96 live values under a 32-register cap (__launch_bounds__(1024, 2)) must spill.
    source = """\
__global__ void __launch_bounds__(1024, 2) pressure(float* y, const int* idx) {
    float a[96];
#pragma unroll
    for (int i = 0; i < 96; ++i) a[i] = y[idx[i]];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 96; ++i) s += a[i] * a[95 - i] / (a[(i * 7) % 96] + 1.0f);
    y[threadIdx.x] = s;
}
"""
    resources = _compiled(compile_kernel(source, "pressure")).resources
    assert resources.registers == 32
    assert resources.spill_store_bytes and resources.spill_store_bytes > 0
    assert resources.spill_load_bytes and resources.spill_load_bytes > 0


@both_backends
def test_dynamically_indexed_local_array_lives_on_the_stack(backend: Backend) -> None:
    source = """\
__global__ void gather(float* y, const int* idx, int n) {
    float local[1024];
    for (int i = 0; i < 1024; ++i) local[i] = y[i * n];
    y[threadIdx.x] = local[idx[threadIdx.x] & 1023];
}
"""
    resources = _compiled(compile_kernel(source, "gather", backend=backend)).resources
    assert resources.stack_bytes is not None and resources.stack_bytes >= 4096


@needs_nvrtc
def test_flags_pass_through_and_nvcc_host_optimisation_is_accepted() -> None:
    flags = ("-O3", "--use_fast_math", "-lineinfo", "-maxrregcount=32", "-DSCALE=3.0f")
    source = "__global__ void k(float* y) { y[threadIdx.x] = __sinf(y[threadIdx.x]) * SCALE; }\n"
    kernel = _compiled(compile_kernel(source, "k", flags=flags))
    assert (
        kernel.backend == "nvrtc"
    )  # NVRTC rejects -O3 itself: it is dropped there, device code is -O3 anyway
    assert kernel.flags == flags


@needs_nvrtc
def test_warnings_are_reported_on_success() -> None:
    source = "__global__ void k(float* y) {\n    int unused;\n    y[0] = 1.0f;\n}\n"
    result = compile_kernel(source, "k", backend="nvrtc")
    _compiled(result)
    (warning,) = result.diagnostics
    assert (warning.severity, warning.line, warning.column) == ("warning", 2, 9)
    assert "unused" in warning.message


@both_backends
def test_unknown_kernel_name_is_an_error_not_an_exception(backend: Backend) -> None:
    result = compile_kernel(SAXPY, "sxapy", backend=backend)
    assert not result.ok
    assert result.errors and all("'sxapy'" in e.message and e.line is None for e in result.errors)


@both_backends
def test_a_device_function_is_not_a_kernel(backend: Backend) -> None:
    source = "__device__ __noinline__ float twice(float x) { return 2 * x; }\n"
    source += "__global__ void k(float* y) { y[0] = twice(y[0]); }\n"
    result = compile_kernel(source, "twice", backend=backend)
    assert not result.ok and result.errors
    assert "twice" in result.errors[-1].message


@needs_nvrtc
def test_virtual_arch_is_refused_clearly() -> None:
    result = compile_kernel(SAXPY, "saxpy", arch="compute_90", backend="nvrtc")
    assert not result.ok and "sm_90" in result.errors[0].message


@needs_nvcc
def test_nvcc_cleans_its_temporary_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _compiled(compile_kernel(SAXPY, "saxpy", backend="nvcc"))
    compile_kernel(SYNTAX_ERROR, "broken", backend="nvcc")
    assert list(tmp_path.iterdir()) == []


@needs_nvrtc
@needs_nvcc
def test_parallel_compiles_from_threads() -> None:
    sources = [SAXPY.replace("a * x[i]", f"{i}.0f * a * x[i]") for i in range(6)]
    sources += ["#include <cstdio>\n" + SAXPY] * 2  # these two go to nvcc, at the same time
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda source: compile_kernel(source, "saxpy"), sources))
    kernels = [_compiled(r) for r in results]
    assert [k.backend for k in kernels] == ["nvrtc"] * 6 + ["nvcc"] * 2
    assert len({k.cubin for k in kernels[:6]}) == 6


def test_no_compiler_at_all_is_one_clear_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    # The only test that hides the compilers: this machine has both, and the message is what is tested.
    monkeypatch.setattr(compile_module, "nvrtc_unavailable_reason", lambda: "NVRTC is not available (test)")
    monkeypatch.setattr(compile_module, "find_nvcc", lambda: None)
    result = compile_kernel(SAXPY, "saxpy")
    (error,) = result.diagnostics
    assert (
        not result.ok and "NVRTC is not available" in error.message and "nvcc was not found" in error.message
    )


# --- parsers, on crafted text -------------------------------------------------------------------


def test_sarif_results_survive_nvcc_missing_commas() -> None:
    # nvcc 13.0 printed exactly this shape: no comma between a result and the remark after it.
    log = (
        '{"version":"2.1.0","runs":[{"results":[{"ruleId":"EC177","level":"warning","message":{"text":"w"},'
        '"locations":[]}{"ruleId":"EC3709","level":"remark","message":{"text":"r"}}]}]}\nptxas info    : x\n'
    )
    assert [r["ruleId"] for r in sarif_results(log)] == ["EC177", "EC3709"]


def test_resource_usage_is_read_for_the_asked_entry_only() -> None:
    log = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1aPf' for 'sm_90'
ptxas info    : Function properties for _Z1aPf
ptxas         .     16 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Function properties for _Z6helperf
    64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""
    a = parse_resource_usage(log, "_Z1aPf")
    assert (a.registers, a.shared_bytes, a.stack_bytes, a.spill_store_bytes, a.spill_load_bytes) == (
        40,
        2048,
        16,
        4,
        8,
    )
    b = parse_resource_usage(log, "b")
    assert (b.registers, b.shared_bytes, b.stack_bytes) == (8, 0, 0)
    assert parse_resource_usage(log, "missing").registers is None


@pytest.mark.gpu
@both_backends
def test_lowered_names_load_and_run_on_the_gpu(tmp_path: Path, backend: Backend) -> None:
    import cupy
    import numpy as np

    n = 1000
    x = cupy.asarray(np.random.default_rng(0).standard_normal(n, dtype=np.float32))
    expected = {"negate": -x, "relu": cupy.maximum(x, 0), "ops::scale<float, 256>": 2 * x}
    for name, want in expected.items():
        kernel = _compiled(compile_kernel(NAMED_KERNELS, name, backend=backend))
        path = tmp_path / f"{backend}-{kernel.lowered_name}.cubin"
        path.write_bytes(kernel.cubin)
        function = cupy.RawModule(path=str(path)).get_function(kernel.lowered_name)
        y = x.copy()
        args = (y, np.int32(n)) if name == "negate" else (x, y, np.int32(n))
        function(((n + 255) // 256,), (256,), args)
        assert bool(cupy.all(y == want)), name


def test_resources_are_read_from_the_cubin_when_the_log_is_silent() -> None:
    """NVRTC 13.0 returns an empty log after its first program in a process (seen on the H200):
    registers and stack frame must still be reported, from the cubin's own records."""
    from cuda_agent.sandbox.cubin import resource_usage

    source = """
    extern "C" __global__ void local_array(const float* x, float* y, int n, int k) {
        float a[64];
        for (int j = 0; j < 64; ++j) a[j] = x[(threadIdx.x + j) % n];
        y[threadIdx.x] = a[k & 63] + a[(k + 5) & 63];
    }
    """
    result = compile_kernel(source, "local_array")
    assert result.ok and result.kernel is not None
    from_log = result.kernel.resources
    from_cubin = resource_usage(result.kernel.cubin, result.kernel.lowered_name)
    assert from_cubin.registers == from_log.registers and from_cubin.registers
    assert from_cubin.stack_bytes == from_log.stack_bytes == 256
    assert resource_usage(result.kernel.cubin, "no_such_kernel").registers is None
