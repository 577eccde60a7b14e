"""The compile environment of a user's file, as users meet it: `cuda-agent check` run as a subprocess from
the file's folder or elsewhere, real nvcc and NVRTC, real compile_commands.json files, the installed torch.
No GPU is needed (check compiles and says there is none); on a GPU machine the same commands also run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cuda_agent.agent.compile_environment import (
    CompileEnvironment,
    compile_in,
    device_flags,
    environment_for,
    flag_problem,
    torch_build,
)
from cuda_agent.agent.device_source import device_source, includes_torch
from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.nvcc import find_nvcc
from cuda_agent.server.settings import ServerSettings, read_settings

ROOT = Path(__file__).resolve().parents[1]
TORCH_EXTENSION = ROOT / "tests" / "programs" / "torch_ext.cu"
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
pytestmark = needs_nvcc

# A kernel whose spec is inferred (1-D element-wise), so that `check` compiles it with or without a GPU.
SCALE = """\
#include "{header}"
__global__ void scale(float* x, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= {value};
}}
"""


def check(*args: str, cwd: Path, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`cuda-agent check ...` as a user runs it, from `cwd`, with a cache of its own (default: in `cwd`)."""
    env = dict(os.environ, COLUMNS="200", CUDA_AGENT_CACHE_DIR=str(cache or cwd / ".cache"))
    env.pop("CUDA_AGENT_RECORDED_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "cuda_agent", "check", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300, check=False,
    )  # fmt: skip


def output(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


# -- include folders --------------------------------------------------------------------------------------


def test_a_header_next_to_the_file_is_found_when_checked_from_its_own_folder(tmp_path: Path) -> None:
    """`cuda-agent check prog.cu` in prog.cu's folder: the include folder was `.`, which nvcc (in a temporary
    folder) and NVRTC resolved elsewhere."""
    (tmp_path / "helper.h").write_text("#define SCALE_BY 2.0f\n")
    (tmp_path / "prog.cu").write_text(SCALE.format(header="helper.h", value="SCALE_BY"))
    result = check("prog.cu", cwd=tmp_path)
    assert result.returncode == 0, output(result)
    assert "scale: compile" in result.stdout and "failed" not in result.stdout
    assert "No such file" not in output(result)


def test_a_header_in_another_folder_needs_an_include_folder(tmp_path: Path) -> None:
    source, include = tmp_path / "src", tmp_path / "include"
    source.mkdir()
    include.mkdir()
    (include / "scale_by.h").write_text("#define SCALE_BY 3.0f\n")
    (source / "prog.cu").write_text(SCALE.format(header="scale_by.h", value="SCALE_BY"))

    without = check("prog.cu", cwd=source)
    assert without.returncode == 1, output(without)
    assert "scale_by.h" in without.stdout and "failed" in without.stdout

    relative = check("prog.cu", "-I", "../include", cwd=source)  # resolved where it was typed
    assert relative.returncode == 0, output(relative)
    elsewhere = check("src/prog.cu", f"--include-dir={include}", cwd=tmp_path)
    assert elsewhere.returncode == 0, output(elsewhere)


def test_an_include_folder_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "prog.cu").write_text(SCALE.format(header="cuda_runtime.h", value="2.0f"))
    result = check("prog.cu", "-I", "no/such/folder", cwd=tmp_path)
    assert result.returncode == 2, output(result)
    assert "-I/--include-dir" in result.stderr and "no/such/folder" in result.stderr
    assert "no such folder" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "flag", ["-o", "-ofile.o", "-arch=sm_80", "--gpu-architecture=sm_80", "-c", "--cubin", "-ptx", "-x"]
)
def test_flags_that_would_break_the_harness_are_refused_with_the_reason(tmp_path: Path, flag: str) -> None:
    (tmp_path / "prog.cu").write_text(SCALE.format(header="cuda_runtime.h", value="2.0f"))
    result = check("prog.cu", f"--nvcc-flag={flag}", cwd=tmp_path)
    assert result.returncode == 2, output(result)
    assert "--nvcc-flag" in result.stderr and "is not allowed" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_macro_definition_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "prog.cu").write_text(SCALE.format(header="cuda_runtime.h", value="2.0f"))
    result = check("prog.cu", "-D", "2FAST=1", cwd=tmp_path)
    assert result.returncode == 2 and "-D/--define" in result.stderr, output(result)


def test_macros_from_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "prog.cu").write_text(
        "#ifndef TILE\n#error TILE must be defined\n#endif\n"
        + SCALE.format(header="cuda_runtime.h", value="TILE")
    )
    assert check("prog.cu", cwd=tmp_path).returncode == 1
    result = check("prog.cu", "-D", "TILE=32", "--define=UNUSED", cwd=tmp_path)
    assert result.returncode == 0, output(result)


CONSTEXPR_FROM_DEVICE = """\
constexpr float twice(float v) { return 2.0f * v; }  // a host function: device code may call it if relaxed
__global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]);
}
"""


def test_an_nvcc_flag_the_file_needs(tmp_path: Path) -> None:
    (tmp_path / "prog.cu").write_text(CONSTEXPR_FROM_DEVICE)
    without = check("prog.cu", cwd=tmp_path)
    assert without.returncode == 1 and '"twice"' in without.stdout, output(without)  # a host function
    result = check("prog.cu", "--nvcc-flag=--expt-relaxed-constexpr", cwd=tmp_path)
    assert result.returncode == 0, output(result)
    assert "compile nvcc" in result.stdout  # NVRTC does not take the flag: straight to nvcc


# -- compile_commands.json -------------------------------------------------------------------------------

NEEDS_TILE = """\
#include "tile.h"
static_assert(TILE == 32, "built with -DTILE=32");
__global__ void scale(float* x, int n) {
    int i = blockIdx.x * TILE_ROWS + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
"""


def project(tmp_path: Path, entries: list[dict[str, object]] | str, where: str = "build") -> Path:
    """A repository (a `.git` folder stops the search) with src/, include/tile.h and a database."""
    root = tmp_path / "repo"
    for folder in (root / ".git", root / "src", root / "include", root / where):
        folder.mkdir(parents=True, exist_ok=True)
    (root / "include" / "tile.h").write_text("#define TILE_ROWS (TILE * 8)\n")
    (root / "src" / "prog.cu").write_text(NEEDS_TILE)
    text = entries if isinstance(entries, str) else json.dumps(entries, indent=2)
    (root / where / "compile_commands.json").write_text(text)
    return root


def cmake_entry(root: Path, file: str) -> dict[str, object]:
    """An entry as CMake writes one for nvcc: flags of its own that must be dropped, around the ones kept."""
    return {
        "directory": str(root / "build"),
        "command": (
            "/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -DTILE=32 -I../include "
            '-isystem /usr/local/cuda/include -O3 -DNDEBUG "--generate-code=arch=compute_80,code=[sm_80]" '
            f"-Xcompiler=-fPIC -std=c++17 -x cu -c {root / 'src' / file} -o CMakeFiles/prog.dir/{file}.o "
            f"-MD -MT CMakeFiles/prog.dir/{file}.o -MF CMakeFiles/prog.dir/{file}.o.d"
        ),
        "file": str(root / "src" / file),
        "output": f"CMakeFiles/prog.dir/{file}.o",
    }


def test_compile_commands_json_gives_the_file_its_include_folders_and_macros(tmp_path: Path) -> None:
    root = project(tmp_path, [])
    assert check("src/prog.cu", cwd=root).returncode == 1  # no entry: TILE and tile.h are unknown

    (root / "build" / "compile_commands.json").write_text(json.dumps([cmake_entry(root, "prog.cu")]))
    result = check("prog.cu", cwd=root / "src")
    assert result.returncode == 0, output(result)
    assert "compile nvrtc" in result.stdout  # -Xcompiler and -isystem do not keep NVRTC from compiling it

    environment = environment_for(root / "src" / "prog.cu")
    assert environment.include_dirs == (str(root / "src"), str(root / "include"))
    assert environment.defines == ("-DTILE=32", "-DNDEBUG")
    assert environment.flags == ("-isystem=/usr/local/cuda/include", "-Xcompiler=-fPIC", "-std=c++17")
    assert environment.database == str(root / "build" / "compile_commands.json")


def test_an_arguments_entry_relative_to_its_directory_and_the_command_line_winning(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    entries = [
        {
            "directory": "build",  # relative to the database's folder
            "arguments": ["nvcc", "-I", "../include", "-DTILE=16", "-c", "../src/prog.cu", "-o", "prog.o"],
            "file": "../src/prog.cu",
        }
    ]
    root = project(tmp_path, entries, where=".")
    assert check("src/prog.cu", cwd=root).returncode == 1  # TILE == 16 fails the static_assert
    result = check("src/prog.cu", "-D", "TILE=32", cwd=root)  # the command line comes after the database
    assert result.returncode == 0, output(result)


def test_a_file_without_an_entry_takes_its_neighbours(tmp_path: Path) -> None:
    root = project(tmp_path, [])
    (root / "build" / "compile_commands.json").write_text(json.dumps([cmake_entry(root, "other.cu")]))
    result = check("src/prog.cu", cwd=root)
    assert result.returncode == 0, output(result)
    environment = environment_for(root / "src" / "prog.cu")
    assert environment.database is not None and "other.cu" in environment.database


def test_a_broken_compile_commands_json_is_a_warning_not_a_traceback(tmp_path: Path) -> None:
    root = project(tmp_path, '[{"directory": "/x", "file": ')
    result = check("src/prog.cu", "-D", "TILE=32", "-I", "include", cwd=root)
    assert result.returncode == 0, output(result)
    assert "compile_commands.json: not valid JSON" in result.stdout
    assert "Traceback" not in output(result)


def test_the_search_stops_at_the_repository_root(tmp_path: Path) -> None:
    root = project(tmp_path, [])
    (tmp_path / "compile_commands.json").write_text(json.dumps([cmake_entry(root, "prog.cu")]))  # above .git
    assert environment_for(root / "src" / "prog.cu").defines == ()


def test_device_flags_keep_what_matters_for_device_code() -> None:
    words = [
        "clang++", "-x", "cuda", "--cuda-gpu-arch=sm_90", "-Iinc", "-isystem/opt/x", "-DA", "-D", "B=2",
        "-UC", "--expt-extended-lambda", "-expt-relaxed-constexpr", "-use_fast_math", "-Xcompiler",
        "-fopenmp", "-gencode", "arch=compute_90,code=sm_90", "-MD", "-MF", "x.d", "-G", "-lineinfo",
        "k.cu", "-o", "k.o",
    ]  # fmt: skip
    environment = device_flags(words, "/work")
    assert environment == CompileEnvironment(
        ("/work/inc",),
        ("-DA", "-DB=2", "-UC"),
        ("-isystem=/opt/x", "--extended-lambda", "--expt-relaxed-constexpr", "--use_fast_math",
         "-Xcompiler=-fopenmp"),
    )  # fmt: skip


def test_settings_spec_and_command_line_flags_pass_their_checks() -> None:
    assert flag_problem("--use_fast_math") is None and flag_problem("-Xptxas=-v") is None
    assert "not allowed" in (flag_problem("-gencode=arch=compute_90,code=sm_90") or "")
    assert "include folders" in (flag_problem("-I/usr/include") or "")
    settings, problems = read_settings(
        {"includeDirs": ["include", ""], "defines": ["TILE=32"], "nvccFlags": ["--expt-relaxed-constexpr"]},
        ServerSettings(),
    )
    assert problems == []
    assert (settings.include_dirs, settings.defines, settings.nvcc_flags) == (
        ("include",), ("TILE=32",), ("--expt-relaxed-constexpr",),
    )  # fmt: skip
    kept, problems = read_settings({"nvccFlags": ["-o", "x"], "defines": "TILE"}, settings)
    assert kept == settings and len(problems) == 2
    assert "cudaAgent.nvccFlags" in problems[0] and "not allowed" in problems[0]


# -- PyTorch extensions ----------------------------------------------------------------------------------


def test_the_device_side_of_an_extension_leaves_torch_out_and_keeps_every_line() -> None:
    source = TORCH_EXTENSION.read_text()
    assert includes_torch(source) and not includes_torch(SCALE)
    device = device_source(source, without_torch=True)
    assert device.count("\n") == source.count("\n") and len(device.encode()) == len(source.encode())
    assert "torch/extension.h" not in device and "ATen/cuda" not in device and "PYBIND11_MODULE" not in device
    assert "__global__ void row_l2_normalize_kernel" in device and "#include <cuda_runtime.h>" in device


def test_the_pytorch_extension_of_the_corpus_compiles(tmp_path: Path) -> None:
    """tests/programs/torch_ext.cu, which tests/test_programs.py skips (its full nvcc build needs torch's
    CUDA headers): each kernel's device code, with or without torch installed."""
    source = TORCH_EXTENSION.read_text()
    environment = environment_for(TORCH_EXTENSION)
    for kernel in ("fused_bias_leaky_relu_kernel<float>", "fused_bias_leaky_relu_kernel<double>",
                   "row_l2_normalize_kernel"):  # fmt: skip
        start = time.perf_counter()
        result = compile_in(environment, source, kernel, filename=str(TORCH_EXTENSION), arch="sm_90")
        assert result.ok, [d.message for d in result.diagnostics]
        assert result.backend == "nvcc"
        print(f"{kernel}: {time.perf_counter() - start:.2f} s")
    result = check(
        str(TORCH_EXTENSION), "--kernel", "row_l2_normalize_kernel", cwd=ROOT / "tests", cache=tmp_path
    )
    assert result.returncode == 0, output(result)


EXTENSION_WITH_TORCH_TYPES = """\
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <vector>

namespace py = pybind11;
std::vector<torch::Tensor> gated_forward(torch::Tensor gates);

template <typename scalar_t>
__global__ void gated_kernel(const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> gates,
                             torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> out,
                             scalar_t* total) {
    const int n = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < gates.size(1)) {
        using acc_t = at::opmath_type<scalar_t>;
        const acc_t v = acc_t(1) / (acc_t(1) + ::exp(-static_cast<acc_t>(gates[n][c])));
        out[n][c] = static_cast<scalar_t>(v);
        gpuAtomicAdd(total, static_cast<scalar_t>(v));
    }
}

std::vector<torch::Tensor> gated_forward(torch::Tensor gates) {
    auto out = torch::empty_like(gates);
    auto total = torch::zeros({1}, gates.options());
    const dim3 blocks((gates.size(1) + 255) / 256, gates.size(0));
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(gates.scalar_type(), "gated", ([&] {
        gated_kernel<scalar_t><<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
            gates.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
            out.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(), total.data_ptr<scalar_t>());
    }));
    return {out, total};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &gated_forward, "gated forward (CUDA)"); }
"""


@needs_torch
def test_kernels_that_use_torch_types_compile_with_torchs_device_headers(tmp_path: Path) -> None:
    path = tmp_path / "gated.cu"
    path.write_text(EXTENSION_WITH_TORCH_TYPES)
    environment = environment_for(path)
    for kernel in ("gated_kernel<float>", "gated_kernel<at::Half>"):
        start = time.perf_counter()
        result = compile_in(environment, EXTENSION_WITH_TORCH_TYPES, kernel, filename=str(path), arch="sm_90")
        assert result.ok, [d.message for d in result.diagnostics]
        print(f"{kernel}: {time.perf_counter() - start:.2f} s")
    broken = EXTENSION_WITH_TORCH_TYPES.replace("out[n][c] = static_cast<scalar_t>(v);", "out[n][c] = w;")
    result = compile_in(environment, broken, "gated_kernel<float>", filename=str(path), arch="sm_90")
    assert [(d.line, d.message) for d in result.errors] == [(16, 'identifier "w" is undefined')]


HALF_ARITHMETIC = """\
#include <torch/extension.h>
#include <cuda_fp16.h>
__global__ void add_half(const __half* a, const __half* b, __half* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


def test_an_extension_is_read_as_torch_builds_it(tmp_path: Path) -> None:
    """torch's cpp_extension defines __CUDA_NO_HALF_OPERATORS__ and friends: `__half + __half` does not build
    there, so it must not compile here either; undefining them, as some projects do, lets it."""
    path = tmp_path / "half_ext.cu"
    path.write_text(HALF_ARITHMETIC)
    assert "-D__CUDA_NO_HALF_OPERATORS__" in torch_build().flags
    environment = environment_for(path)
    refused = compile_in(environment, HALF_ARITHMETIC, "add_half", filename=str(path), arch="sm_90")
    assert not refused.ok and refused.errors[0].line == 5
    undefined = environment_for(
        path, cli_flags=("-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__")
    )
    accepted = compile_in(undefined, HALF_ARITHMETIC, "add_half", filename=str(path), arch="sm_90")
    assert accepted.ok, [d.message for d in accepted.diagnostics]


def test_the_engine_compiles_with_its_settings_and_the_spec(tmp_path: Path) -> None:
    """Engine.compile, the one step every caller (check, optimize, compare, the server, the sanitizer) goes
    through: the settings' -I/-D, and a spec's include_dirs (relative to the file) and flags."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale_by.h").write_text("#define SCALE_BY 2.0f\n")
    path = tmp_path / "prog.cu"
    source = SCALE.format(header="scale_by.h", value="SCALE_BY * FACTOR")
    target = load_targets(path, source).find("scale")
    assert target is not None
    with Engine(EngineSettings(use_cache=False)) as engine:
        assert not engine.compile(target, source).ok
    settings = EngineSettings(use_cache=False, include_dirs=(str(tmp_path / "inc"),), defines=("FACTOR=3",))
    with Engine(settings) as engine:
        assert engine.compile(target, source).ok
    spec = '/* cuda-agent\nflags = ["-DFACTOR=3"]\ninclude_dirs = ["inc"]\n[sizes]\nn = 1024\n' + (
        '[args]\nx = { role = "inout", dtype = "float32", shape = ["n"] }\n'
        'n = { role = "scalar", dtype = "int32", value = "n" }\n[launch]\nblock = [256]\n'
        'grid = ["ceil_div(n, block.x)"]\n*/\n'
    )
    written = load_targets(path, spec + source)
    target = written.find("scale")
    assert target is not None and target.spec is not None, written.spec_errors
    with Engine(EngineSettings(use_cache=False)) as engine:
        result = engine.compile(target, spec + source)
        assert result.ok, [d.message for d in result.diagnostics]


async def test_the_servers_settings_reach_its_compiles(tmp_path: Path) -> None:
    """cudaAgent.includeDirs (relative: the workspace folder's) and cudaAgent.defines, as the server's
    backend applies them to the engine it compiles saved files with."""
    from cuda_agent.server.backend import Backend

    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale_by.h").write_text("#define SCALE_BY 2.0f\n")
    path = tmp_path / "prog.cu"
    targets = load_targets(path, SCALE.format(header="scale_by.h", value="SCALE_BY * FACTOR"))
    backend = Backend(EngineSettings(use_cache=False))
    try:
        before = await backend.compile_file(targets, lambda: True)
        assert any(p.severity == "error" for p in before.problems)
        await backend.use_compile_options(["inc"], ["FACTOR=3"], [], tmp_path)
        after = await backend.compile_file(targets, lambda: True)
        assert [p for p in after.problems if p.severity == "error"] == [] and "scale" in after.resources
    finally:
        backend.close()
