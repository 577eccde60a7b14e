"""The two bench suites on a CPU: the outside suite's kernels have written specs, compile with nvcc, resolve
at every size, draw valid indices and have oracles that run; names are unique across the suites; the
command line and the report tell the suites apart (summaries per suite and for all, old runs as classic)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_agent.agent.targets import KernelTarget, load_targets, problems_for
from cuda_agent.sandbox.nvcc import find_nvcc
from cuda_agent.sandbox.plan import Problem

from bench.__main__ import main as bench_main
from bench.report import ALL_SUITES, BenchRun, KernelResult, from_json, merge, to_json, to_markdown
from bench.suite import SUITES, UnknownKernel, load_suite, suite_names, suite_of
from tests.test_bench_suite import assert_compiles

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = load_suite(suite="outside")
EVERY = load_suite(suite="all")
GIB = 1 << 30
KINDS = {  # the kinds the outside suite was written to cover: each at least once
    "attention": {"attention_scores"},
    "gather": {"encoder_forward", "index_select_rows"},
    "scatter": {"scatter_add_rows"},
    "row-wise": {"row_argmax", "cross_entropy_forward", "softmax_online", "layernorm_forward"},
    "pooling": {"maxpool2d", "avgpool2d"},
    "matrix-vector": {"gemv", "gemv_transposed", "gesummv"},
    "PolyBench": {"covariance", "syrk", "gesummv"},
    "optimizer": {"adamw_step"},
    "half / bfloat16": {"gelu_erf_fp16", "silu_and_mul_bf16", "rmsnorm_fp16", "linear_forward_fp16"},
    "half-precision contraction": {"linear_forward_fp16"},
    "convolution": {"conv2d_naive"},
    "scan": {"scan_blocks"},
    "grid-stride loops": {"row_l2norm", "column_max"},
}


def _ids(targets: list[KernelTarget]) -> list[str]:
    return [t.kernel.name for t in targets]


def _buffer_bytes(problem: Problem) -> int:
    return sum(a.nbytes for a in problem.arguments if a.is_buffer)


def _problems(target: KernelTarget) -> tuple[Problem, ...]:
    assert target.spec is not None
    return problems_for(target.spec)[0]


# -- the outside suite's kernels --------------------------------------------------------------------------


def test_the_outside_suite_has_every_kind_and_at_least_sixteen_kernels() -> None:
    names = set(_ids(OUTSIDE))
    assert len(OUTSIDE) >= 16
    for kind, members in KINDS.items():
        assert members <= names, f"{kind}: missing {members - names}"
    dtypes = {a.dtype for t in OUTSIDE for a in _problems(t)[0].arguments}
    assert {"float16", "bfloat16", "int32", "int64"} <= dtypes
    assert any(a.role == "inout" for t in OUTSIDE for a in _problems(t)[0].arguments)


@pytest.mark.parametrize("path", sorted(SUITES["outside"].glob("*.cu")), ids=lambda p: p.name)
def test_every_file_holds_one_kernel_with_a_written_spec(path: Path) -> None:
    files = load_targets(path)
    assert not files.spec_errors, [f"{e.line + 1}:{e.column + 1} {e.message}" for e in files.spec_errors]
    assert len(files.targets) == 1
    assert files.targets[0].spec is not None and not files.targets[0].spec.inferred


@pytest.mark.parametrize("target", OUTSIDE, ids=_ids(OUTSIDE))
def test_resolves_at_every_size_with_an_oracle_and_a_small_odd_verify_size(target: KernelTarget) -> None:
    assert target.spec is not None
    problems, launches, automatic = problems_for(target.spec)
    assert not automatic, "verify sizes are written, not derived"
    bench, *extra = problems
    assert extra and bench.oracle and set(bench.oracle) == {a.name for a in bench.outputs}
    assert any(any(v % 2 for v in p.sizes.values()) for p in extra), "no odd verification size"
    for problem, launch in zip(problems, launches, strict=True):
        assert all(g >= 1 for g in launch.grid) and launch.threads >= 1
        assert _buffer_bytes(problem) <= GIB, f"{problem.label}: {_buffer_bytes(problem) >> 20} MiB"
    assert all(_buffer_bytes(p) < _buffer_bytes(bench) for p in extra), "a verify size is not smaller"


@pytest.mark.parametrize("target", OUTSIDE, ids=_ids(OUTSIDE))
def test_integer_inputs_are_drawn_within_a_size(target: KernelTarget) -> None:
    """Token ids and row indices must be valid at every size: an explicit range [0, size) each time, not
    the default [0, 100), which runs past a 33-row table at the small size."""
    for problem in _problems(target):
        for argument in problem.arguments:
            if argument.role != "input" or argument.dtype not in ("int32", "int64"):
                continue
            drawn = argument.distribution
            assert drawn.kind == "integers" and drawn.low == 0, argument.name
            assert drawn.high in problem.sizes.values(), f"{argument.name}: high {drawn.high} is no size"


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
@pytest.mark.parametrize("target", OUTSIDE, ids=_ids(OUTSIDE))
def test_compiles_with_nvcc(target: KernelTarget) -> None:
    assert_compiles(target, "nvcc")


@pytest.mark.parametrize("target", OUTSIDE, ids=_ids(OUTSIDE))
def test_the_oracle_runs_on_the_cpu_and_gives_each_output_its_shape(target: KernelTarget) -> None:
    """The worker's own oracle function, on the CPU at the small size, over inputs drawn as specified."""
    torch = pytest.importorskip("torch")
    from cuda_agent.sandbox.oracle import constants_of, full_precision, oracle_function

    full_precision(torch)
    problem = _problems(target)[1]
    generator = torch.Generator().manual_seed(0)
    scalars, tensors = {}, []
    for argument in problem.arguments:
        drawn, dtype = argument.distribution, getattr(torch, argument.dtype)
        if argument.role == "scalar":
            scalars[argument.name] = drawn.value
        elif argument.role in ("input", "inout"):
            if drawn.kind == "integers":
                values = torch.randint(int(drawn.low), int(drawn.high), argument.shape, generator=generator)
            elif drawn.kind == "uniform":
                values = drawn.low + (drawn.high - drawn.low) * torch.rand(
                    argument.shape, generator=generator
                )
            else:
                values = drawn.mean + drawn.std * torch.randn(argument.shape, generator=generator)
            tensors.append(values.to(dtype))
    function, names = oracle_function(problem, constants_of(problem, scalars), torch)
    values = function(*tensors)
    by_name = {a.name: a for a in problem.arguments}
    for name, value in zip(names, values, strict=True):
        argument = by_name[name]
        assert tuple(value.shape) == argument.shape, name
        assert not value.to(getattr(torch, argument.dtype)).isnan().any(), name


# -- the suites together -----------------------------------------------------------------------------------


def test_names_are_unique_across_the_suites() -> None:
    """A --kernels name (kernel or file stem) picks one kernel, whichever suite holds it."""
    kernels = [t.kernel.name for t in EVERY]
    stems = [t.path.stem for t in EVERY]
    assert len(set(kernels)) == len(kernels)
    assert len(set(stems)) == len(stems)
    for target in EVERY:
        assert target.kernel.name not in set(stems) - {target.path.stem}, target.kernel.name


def test_suites_are_the_folders() -> None:
    classic = load_suite()  # the default, as before there were two
    assert {suite_of(t.path) for t in classic} == {"classic"}
    assert {suite_of(t.path) for t in OUTSIDE} == {"outside"}
    holdout = load_suite(suite="holdout")
    assert {suite_of(t.path) for t in holdout} == {"holdout"} and len(holdout) >= 10
    assert _ids(EVERY) == _ids(classic) + _ids(OUTSIDE) + _ids(holdout)
    assert suite_names("all") == ("classic", "outside", "holdout")
    with pytest.raises(ValueError, match="no bench suite named nope"):
        suite_names("nope")


def test_kernels_are_selected_by_name_across_suites() -> None:
    assert _ids(load_suite(["gelu", "attention_scores", "gelu_fp16"], "all")) == [
        "gelu", "attention_scores", "gelu_erf_fp16",
    ]  # fmt: skip
    with pytest.raises(UnknownKernel, match="no bench kernel named attention_scores in the classic suite"):
        load_suite(["attention_scores"], "classic")


def test_the_command_line_names_the_suite_of_an_unknown_kernel(tmp_path: Path) -> None:
    env = dict(os.environ, COLUMNS="160", CUDA_AGENT_CACHE_DIR=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "bench", "--suite", "outside", "--kernels", "gelu"]
    completed = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert "no bench kernel named gelu in the outside suite" in completed.stdout
    assert "syrk" in completed.stdout  # the outside suite's kernels, named
    assert "Traceback" not in completed.stderr


# -- the report, split by suite ------------------------------------------------------------------------------


def result(
    name: str, suite: str, original: float, best: float | None = None, **extra: object
) -> KernelResult:
    speedup = original / best if best else 1.0
    return KernelResult(name, f"{name}.cu", "n=1", original, best, speedup, suite=suite, **extra)  # type: ignore[arg-type]


RESULTS = (
    result("gelu", "classic", 4.0, 1.0, torch_compile_ms=0.9, first_improvement_s=2.0),
    result("row_sum", "classic", 1.0, torch_compile_ms=2.0),  # never improved, but ahead of torch.compile
    result("gemv", "outside", 9.0, 1.0, torch_compile_ms=1.5, first_improvement_s=6.0),
    result("syrk", "outside", 8.0, 4.0, torch_compile_ms=1.0, first_improvement_s=3.0),
    result("conv2d_naive", "outside", 2.0, torch_compile_ms=4.0),
)
RUN = BenchRun("NVIDIA H200", "2026-11-03T14:12:09+00:00", "0.1.0", 180.0, ("launch-config",), RESULTS)


def test_the_summary_is_split_by_suite_and_given_for_both() -> None:
    summaries = dict(RUN.summaries())
    assert list(summaries) == ["classic", "outside", ALL_SUITES]
    classic, outside, both = summaries["classic"], summaries["outside"], summaries[ALL_SUITES]
    assert (classic.kernels, classic.improved, outside.kernels, outside.improved) == (2, 1, 3, 2)
    assert classic.geomean_speedup == pytest.approx(math.sqrt(4.0))
    assert outside.geomean_speedup == pytest.approx((9.0 * 2.0 * 1.0) ** (1 / 3))
    assert both.geomean_speedup == pytest.approx((4.0 * 9.0 * 2.0) ** (1 / 5))
    # vs torch.compile: gelu 0.9, row_sum 2.0 | gemv 1.5, syrk 0.25, conv2d 2.0
    assert (classic.at_least_torch_compile, outside.at_least_torch_compile) == (1, 2)
    assert both == RUN.summary and both.at_least_torch_compile == 3
    assert outside.median_first_improvement_s == 6.0  # of 3, 6 and never
    only_outside = BenchRun(RUN.gpu, RUN.started, RUN.version, 180.0, (), RESULTS[2:])
    assert [label for label, _ in only_outside.summaries()] == ["outside"]


def test_markdown_and_json_show_each_kernels_suite_and_each_suites_summary() -> None:
    text = to_markdown(RUN)
    header = next(line for line in text.splitlines() if line.startswith("| kernel"))
    assert " suite " in header
    assert "| 0.0 s | outside |" in next(line for line in text.splitlines() if line.startswith("| gemv |"))
    sections = text.split("**")
    assert {"classic suite", "outside suite", "all suites (5 kernels)"} <= set(sections)
    outside = text.split("**outside suite**")[1].split("**all suites")[0]
    assert "geometric-mean speedup over the originals: 2.62×" in outside
    assert "as fast as or faster than torch.compile: 2 of 3" in outside
    data = json.loads(to_json(RUN))
    assert data["summary"]["kernels"] == 5
    assert {suite: s["kernels"] for suite, s in data["suites"].items()} == {"classic": 2, "outside": 3}
    assert from_json(to_json(RUN)) == RUN


def test_a_run_written_before_the_suites_loads_as_classic_and_merges(tmp_path: Path) -> None:
    old = json.loads(to_json(BenchRun(RUN.gpu, RUN.started, RUN.version, 180.0, RUN.proposers, RESULTS[:2])))
    del old["suites"]
    for r in old["results"]:
        del r["suite"]
    assert {r.suite for r in from_json(json.dumps(old)).results} == {"classic"}
    later = BenchRun(RUN.gpu, "2026-11-03T15:00:00+00:00", RUN.version, 180.0, RUN.proposers, RESULTS[2:])
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    paths[0].write_text(json.dumps(old))
    paths[1].write_text(to_json(later))
    out = tmp_path / "merged"
    assert bench_main(["--merge", *map(str, paths), "--out", str(out)]) == 0
    merged = from_json((out / "2026-11-03T1412_NVIDIA-H200.json").read_text())
    assert merged == merge([RUN])
    assert [r.suite for r in merged.results] == ["classic", "classic", "outside", "outside", "outside"]
    assert "all suites (5 kernels)" in (out / "2026-11-03T1412_NVIDIA-H200.md").read_text()
