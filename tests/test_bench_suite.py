"""The bench suite is valid on a CPU: every kernel has a spec without errors, compiles with NVRTC, and
resolves at its benchmark size and at every verification size."""

from __future__ import annotations

import pytest
from cuda_agent.agent.compile_environment import compile_in, environment_for
from cuda_agent.agent.device_source import device_source, includes_torch
from cuda_agent.agent.targets import KernelTarget, load_targets, problems_for
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.nvrtc import nvrtc_unavailable_reason

from bench.suite import KERNELS_DIR, UnknownKernel, load_suite

SUITE = load_suite()
L2_BYTES = 60 << 20  # the H200's L2: benchmark data must not fit in it
KINDS = {  # the list: each kind at least once
    "element-wise": {"gelu", "bias_relu"},
    "reduction": {"sum_atomic", "reduce_shared"},
    "row-wise": {"softmax_rows", "layernorm_rows", "row_sum"},
    "2-D data movement": {"transpose_naive", "transpose_shared"},
    "matrix multiply": {"matmul", "matmul_4k"},
    "convolution / stencil": {"conv1d", "jacobi2d"},
    "histogram": {"histogram"},
    "scan": {"scan_segmented"},
}


def _ids(targets: list[KernelTarget]) -> list[str]:
    return [t.kernel.name for t in targets]


def test_the_suite_has_every_kind_and_at_least_twelve_kernels() -> None:
    names = set(_ids(SUITE))
    assert len(SUITE) >= 12
    for kind, members in KINDS.items():
        assert members <= names, f"{kind}: missing {members - names}"
    assert any("__syncthreads" in t.source for t in SUITE)
    assert any(a.dtype == "float16" for t in SUITE for a in problems_for(t.spec)[0][0].arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", sorted(KERNELS_DIR.glob("*.cu")), ids=lambda p: p.name)
def test_every_spec_parses_without_errors(path) -> None:  # type: ignore[no-untyped-def]
    files = load_targets(path)
    assert not files.spec_errors, [f"{e.line + 1}:{e.column + 1} {e.message}" for e in files.spec_errors]
    assert files.targets and all(t.spec is not None and not t.spec.inferred for t in files.targets)


@pytest.mark.parametrize("target", SUITE, ids=_ids(SUITE))
def test_resolves_at_every_size_with_an_oracle_and_an_odd_verify_size(target: KernelTarget) -> None:
    assert target.spec is not None
    problems, launches, automatic = problems_for(target.spec)
    assert not automatic, "verify sizes are written, not derived"
    assert len(problems) >= 2 and len(launches) == len(problems)
    bench, *extra = problems
    assert bench.oracle and set(bench.oracle) == {a.name for a in bench.outputs}
    assert any(any(v % 2 for v in p.sizes.values()) for p in extra), "no odd verification size"
    for launch in launches:
        assert all(g >= 1 for g in launch.grid) and launch.threads >= 1
    if target.kernel.name != "matmul":  # matmul_naive.cu is the engine benchmark's 1 ms kernel
        data = sum(a.nbytes for a in bench.arguments if a.is_buffer)
        assert data >= 3 * L2_BYTES, f"{data >> 20} MiB fits too well in the L2"
    assert bench.bytes_moved > 0


@pytest.mark.skipif(nvrtc_unavailable_reason() is not None, reason="NVRTC is not installed")
@pytest.mark.parametrize("target", SUITE, ids=_ids(SUITE))
def test_compiles_with_nvrtc(target: KernelTarget) -> None:
    assert_compiles(target, "nvrtc")


def assert_compiles(target: KernelTarget, backend: str) -> None:
    """The bench kernel compiles for the H200 with that compiler, as the worker would compile it (a
    PyTorch extension's kernels with nvcc and torch's device headers, as agent/compile_environment.py
    compiles them)."""
    if includes_torch(target.source):
        environment = environment_for(target.path)
        extension = compile_in(
            environment, target.source, target.name_expression, filename=str(target.path), arch="sm_90"
        )
        assert extension.ok, [d.message for d in extension.errors]
        return
    result = compile_kernel(
        device_source(target.source),
        target.name_expression,
        filename=str(target.path),
        arch="sm_90",
        include_dirs=(str(target.path.parent),),
        backend=backend,
    )
    assert result.ok and result.backend == backend, [d.message for d in result.errors]


def test_selecting_kernels_by_name_or_file_and_unknown_names() -> None:
    assert _ids(load_suite(["gelu", "bias_relu_fp16"])) == ["bias_relu", "gelu"]
    with pytest.raises(UnknownKernel, match="no bench kernel named nope"):
        load_suite(["gelu", "nope"])
