"""The corpus of realistic programs (tests/programs/): the spec inferred from each program, with no spec
written, against the spec a careful user wrote next to it (<name>.expected.toml). Compared as what runs:
at the benchmark size, every argument's role, dtype and element count, every scalar's value, the grid, the
block, the dynamic shared memory and the instantiation; two specs that spell these differently (sizes
B * T against N, a shape [N, C] against [N * C]) are the same workload.

`python -m pytest tests/test_programs.py -s` prints the table: what matched, and each difference.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.spec import KernelSpec, SpecResolveError, resolve
from cuda_agent.agent.spec.resolve import instantiation
from cuda_agent.agent.spec.validate import build_spec
from cuda_agent.agent.targets import load_targets

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROGRAMS = Path(__file__).parent / "programs"
EXPECTED = sorted(PROGRAMS.glob("*.expected.toml"))

# The (program, kernel) pairs whose inferred spec must equal the hand-written one. The others are shown
# with their differences (test_the_table_of_the_corpus) and are the work left (issue: specs from the program).
MATCHING = {
    ("attention_causal", "attention_query_key_kernel"),
    ("containers_gemv", "gemv_rows"),
    ("containers_gemv", "relu_backward"),
    ("conv1d_tiled", "convolution_1D_tiled"),
    ("cumsum_rows", "inclusive_scan_rows"),
    ("embedding_gather", "encoder_forward_vec4"),
    ("gelu_bf16", "gelu_forward_kernel"),
    ("gelu_bf16", "gelu_backward_inplace_kernel"),
    ("layernorm_warp", "layernorm_forward_warp"),
    ("particles_float4", "integrate_particles"),
    ("particles_float4", "particle_speeds"),
    ("reduce_two_pass", "reduce_sum"),
    ("rmsnorm_rows", "rmsnorm_forward_kernel"),
    ("saxpy_stream", "saxpy_kernel"),
    ("saxpy_stream", "scale_shift_relu"),
    ("sgemm_tiled", "sgemm_tiled"),
    ("silu_mul", "silu_and_mul_kernel"),
    ("silu_mul", "residual_add_half2_kernel"),
    ("softmax_argv", "softmax_rows_kernel"),
    ("transpose_tiled", "transposeNaive"),
    ("transpose_tiled", "transposeTiled"),
}


@dataclass(frozen=True)
class Workload:
    """What a spec runs at its benchmark size, whatever its spelling."""

    arguments: dict[str, tuple[str, str, int | float | None]]  # name -> (role, dtype, numel or value)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    instantiate: str | None


def workload(spec: KernelSpec) -> Workload | str:
    try:
        problem, launch = resolve(spec)
    except SpecResolveError as exc:
        return f"does not resolve: {exc.error.message}"
    arguments: dict[str, tuple[str, str, int | float | None]] = {}
    for argument in problem.arguments:
        if argument.role == "scalar":
            value = argument.distribution.value if argument.distribution.kind == "value" else None
            arguments[argument.name] = ("scalar", argument.dtype, value)
        else:
            arguments[argument.name] = (argument.role, argument.dtype, argument.numel)
    # `k<block.x>` (the template argument follows the block) runs what `k<512>` runs at block 512.
    instantiated = instantiation(spec)
    instantiate = "".join(instantiated.split()) if instantiated else None
    return Workload(arguments, launch.grid, launch.block, launch.shared_bytes, instantiate)


def differences(expected: Workload | str, inferred: Workload | str) -> list[str]:
    if isinstance(expected, str):
        return [f"the expected spec {expected}"]
    if isinstance(inferred, str):
        return [f"the inferred spec {inferred}"]
    found = []
    for name, want in expected.arguments.items():
        got = inferred.arguments.get(name)
        if got is None:
            found.append(f"{name}: missing")
        elif got[:2] != want[:2]:
            found.append(f"{name}: {got[0]} {got[1]}, expected {want[0]} {want[1]}")
        elif (
            want[0] == "scalar"
            and want[2] is not None
            and (got[2] is None or abs(float(got[2]) - float(want[2])) > 1e-9 * max(1.0, abs(float(want[2]))))
        ):
            found.append(f"{name} = {got[2] if got[2] is not None else 'drawn'}, expected {want[2]}")
        elif want[0] != "scalar" and got[2] != want[2]:
            found.append(f"{name}: {got[2]} elements, expected {want[2]}")
    for field in ("grid", "block", "shared_bytes", "instantiate"):
        if getattr(inferred, field) != getattr(expected, field):
            found.append(f"{field} {getattr(inferred, field)}, expected {getattr(expected, field)}")
    return found


def cases() -> list[tuple[str, str, Workload | str, Workload | str, str]]:
    """(program, kernel, expected workload, inferred workload, the inference's note) for the corpus."""
    rows = []
    for path in EXPECTED:
        program = path.name.removesuffix(".expected.toml")
        source_path = PROGRAMS / f"{program}.cu"
        files = load_targets(source_path)
        header = PROGRAMS / f"{program}.cuh"
        kernels = {k.name: k for k in find_kernels(files.source)}
        in_header = load_targets(header) if header.exists() else None  # launched from the .cu
        if in_header is not None:
            kernels.update({t.kernel.name: t.kernel for t in in_header.targets})
        for kernel_name, table in tomllib.loads(path.read_text()).items():
            kernel = kernels.get(kernel_name)
            if kernel is None:
                rows.append((program, kernel_name, "kernel not found", "kernel not found", ""))
                continue
            expected_spec, issues = build_spec(table, kernel)
            expected = workload(expected_spec) if expected_spec else f"has errors: {issues[0].message}"
            target = files.find(kernel_name) or (in_header.find(kernel_name) if in_header else None)
            if target is None or target.spec is None:
                note = target.note if target else "the kernel is in neither the .cu nor its header"
                rows.append((program, kernel_name, expected, "no spec", note))
                continue
            rows.append((program, kernel_name, expected, workload(target.spec), target.note))
    return rows


CASES = cases()


@pytest.mark.parametrize(
    ("program", "kernel", "expected", "inferred", "note"),
    [c for c in CASES if (c[0], c[1]) in MATCHING],
    ids=[f"{c[0]}:{c[1]}" for c in CASES if (c[0], c[1]) in MATCHING],
)
def test_the_inferred_spec_runs_what_the_hand_written_one_runs(
    program: str, kernel: str, expected: Workload | str, inferred: Workload | str, note: str
) -> None:
    assert not isinstance(expected, str), expected
    assert differences(expected, inferred) == [], note


def test_the_table_of_the_corpus() -> None:
    """Every program is read without a traceback, the expected specs all build, and the table is shown."""
    assert len({c[0] for c in CASES}) >= 12
    lines = []
    for program, kernel, expected, inferred, note in CASES:
        assert not isinstance(expected, str), f"{program}:{kernel}: the expected spec {expected}"
        found = differences(expected, inferred) if not isinstance(inferred, str) else [inferred]
        verdict = "same" if not found else "; ".join(found)
        lines.append(f"{program + ':' + kernel:52s} {verdict}\n{'':52s} ({note[:150]})")
    matched = sum(1 for c in CASES if not isinstance(c[3], str) and not differences(c[2], c[3]))
    print(f"\n{matched} of {len(CASES)} kernels inferred as written by hand\n" + "\n".join(lines))
    assert matched >= len(MATCHING)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("program", sorted(p for p in PROGRAMS.glob("*.cu")), ids=lambda p: p.stem)
def test_each_program_compiles_as_it_is(program: Path) -> None:
    """The corpus is real code: every program builds with nvcc (the PyTorch extension needs torch's
    headers, which are not here)."""
    if program.read_text().startswith("// needs: torch"):
        pytest.skip(
            "a PyTorch extension: its full build needs CUDA libraries' headers (cusparse) that are not "
            "here; tests/test_compile_environment.py compiles its kernels"
        )
    done = subprocess.run(
        ["nvcc", "-arch=sm_90", "-c", str(program), "-o", "/dev/null"],
        capture_output=True, text=True, cwd=PROGRAMS, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
