"""The PyTorch reference timing: the oracle as a traceable function (CPU), and the whole request on a
GPU (TimeTorchRequest through the worker, eager and torch.compile)."""

from __future__ import annotations

import re
import time
import types

import numpy as np
import pytest
from cuda_agent.sandbox.launch_cover import COVER_MAX_MS, LaunchCover
from cuda_agent.sandbox.oracle import OracleError, oracle_function
from cuda_agent.sandbox.plan import ArgumentPlan, Distribution, Problem, Tolerance
from cuda_agent.sandbox.protocol import TimeTorchRequest, TorchTimingResult

N = 1 << 20


def saxpy_problem(n: int = N) -> Problem:
    arguments = (
        ArgumentPlan("a", "scalar", "float32", (), Distribution("value", value=2.0)),
        ArgumentPlan("x", "input", "float32", (n,)),
        ArgumentPlan("y", "inout", "float32", (n,)),
        ArgumentPlan("n", "scalar", "int32", (), Distribution("value", value=n)),
    )
    return Problem(f"n={n}", {"n": n}, arguments, {"y": Tolerance.default("float32")}, {"y": "a * x + y"},
                   bytes_moved=12 * n)  # fmt: skip


FAKE_TORCH = types.SimpleNamespace(nn=types.SimpleNamespace(functional=types.SimpleNamespace()))


class Array(np.ndarray):
    """A NumPy array with torch's `.contiguous()`, which the oracle function calls on every output."""

    def contiguous(self) -> Array:
        return self


def test_oracle_function_takes_the_tensors_and_returns_the_outputs_in_order() -> None:
    function, outputs = oracle_function(saxpy_problem(4), {"a": 2.0, "n": 4}, FAKE_TORCH)
    assert outputs == ("y",)
    assert function.__code__.co_varnames[:2] == ("x", "y")  # inputs and inouts, in signature order
    x, y = np.arange(4.0).view(Array), np.ones(4).view(Array)
    (result,) = function(x, y)
    np.testing.assert_array_equal(result, 2.0 * x + y)


def test_oracle_function_refuses_names_it_was_not_given_and_needs_an_oracle() -> None:
    problem = saxpy_problem(4)
    sneaky = Problem(problem.label, problem.sizes, problem.arguments, problem.tolerances, {"y": "open(x)"})
    with pytest.raises(OracleError, match="unknown name 'open'"):
        oracle_function(sneaky, {}, FAKE_TORCH)
    empty = Problem(problem.label, problem.sizes, problem.arguments, problem.tolerances, None)
    with pytest.raises(ValueError, match="no PyTorch oracle"):
        oracle_function(empty, {}, FAKE_TORCH)


def test_the_launch_cover_follows_recent_calls_not_a_recompile_in_the_warm_up() -> None:
    spins: list[int] = []  # the GPU is the boundary here: the spins asked for are kept
    cover = LaunchCover(spins.append, cycles_per_ms=1e6)
    waits = []
    # The warm-up: a call that recompiled for 3 s on the host, then calls of 0.05 ms.
    for host_ms, timed in [(0.05, False), (3000.0, False)] + [(0.05, False)] * 4 + [(0.05, True)] * 3:
        cover.wait()
        waits.append(cover.waited_ms)
        _host_call(cover, host_ms, timed)
    assert waits[2] == COVER_MAX_MS  # right after the recompile: capped, not 6 s a run
    assert spins[2] == COVER_MAX_MS * 1e6  # ...and the spin asked of the GPU is that long
    assert all(wait < 1.0 for wait in waits[-3:])  # the timed calls wait for calls like themselves
    assert all(wait > 2 * 0.05 for wait in waits[-3:])  # ...and longer than they take on the host
    assert "took 50 µs" in cover.note() and "longer on the host" not in cover.note()
    cover.wait()
    _host_call(cover, 5.0, timed=True)  # a timed call slower on the host than its wait: counted, in the note
    assert "1 of 4 calls took longer on the host than their wait" in cover.note()


def _host_call(cover: LaunchCover, host_ms: float, timed: bool) -> None:
    clock = iter([100.0, 100.0 + host_ms / 1e3])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("cuda_agent.sandbox.launch_cover.time.perf_counter", lambda: next(clock))
        with cover.host(timed):
            pass


@pytest.mark.gpu
def test_time_torch_request_times_eager_and_compiled(sandbox) -> None:  # type: ignore[no-untyped-def]
    result = sandbox._request(TimeTorchRequest(saxpy_problem(1 << 24), budget_s=0.3), None)
    assert isinstance(result, TorchTimingResult), result
    assert result.eager is not None and result.eager.runs >= 10 and result.eager.median_ms > 0
    assert result.compiled is not None and result.compiled.median_ms > 0, result.note
    assert "torch.compile took" in result.note
    assert "differs" not in result.note  # eager and compiled agree on the same inputs
    # 200 MB moved: at most the copy bandwidth of any GPU we run on; far from zero.
    assert 0.02 < result.eager.median_ms < 50


@pytest.mark.gpu
def test_a_tiny_oracle_is_timed_on_the_gpu_not_by_its_host_launch_cost(sandbox) -> None:  # type: ignore[no-untyped-def]
    # 4096 elements take the GPU a few µs; Dynamo's guards and the launch take the host tens. The start
    # event waits behind a GPU spin long enough that the call's kernels are queued when it fires.
    medians, hosts = [], []
    for _ in range(3):
        result = sandbox._request(TimeTorchRequest(saxpy_problem(4096), budget_s=0.1), None)
        assert isinstance(result, TorchTimingResult) and result.compiled is not None, result
        found = re.search(r"torch.compile: host launch costs hidden .* took (\d+) µs", result.note)
        assert found, result.note
        medians.append(result.compiled.median_ms * 1e3)
        hosts.append(int(found.group(1)))
    assert max(medians) < min(hosts), (medians, hosts)
    assert max(medians) < 1.5 * min(medians) + 2, medians  # µs: stable from request to request


@pytest.mark.gpu
def test_time_torch_eager_only_and_a_failing_expression(sandbox) -> None:  # type: ignore[no-untyped-def]
    problem = saxpy_problem(4096)
    eager = sandbox._request(TimeTorchRequest(problem, budget_s=0.1, compile=False), None)
    assert isinstance(eager, TorchTimingResult) and eager.eager is not None and eager.compiled is None
    bad = Problem(problem.label, problem.sizes, problem.arguments, problem.tolerances, {"y": "x @ y @ x"})
    failed = sandbox._request(TimeTorchRequest(bad, budget_s=0.1), None)
    assert isinstance(failed, TorchTimingResult) and failed.eager is None
    assert "torch eager failed" in failed.note


@pytest.mark.gpu
def test_an_oracle_that_is_a_view_is_timed_writing_its_output(sandbox) -> None:  # type: ignore[no-untyped-def]
    rows, cols = 4096, 6144
    arguments = (
        ArgumentPlan("src", "input", "float32", (rows, cols)),
        ArgumentPlan("dst", "output", "float32", (cols, rows)),
    )
    problem = Problem("transpose", {"rows": rows, "cols": cols}, arguments, {}, {"dst": "src.T"},
                      bytes_moved=8 * rows * cols)  # fmt: skip
    result = sandbox._request(TimeTorchRequest(problem, budget_s=0.2), None)
    assert isinstance(result, TorchTimingResult) and result.eager and result.compiled, result
    # 200 MB read and written: no GPU does that in 20 µs; a view (no copy) takes about 10 µs.
    assert result.eager.median_ms > 0.02 and result.compiled.median_ms > 0.02
    assert "differs" not in result.note


@pytest.mark.gpu
def test_an_oracle_with_a_graph_break_still_compiles(sandbox) -> None:  # type: ignore[no-untyped-def]
    # torch.bincount's output size depends on the data: Dynamo breaks the graph there and traces the rest
    # as a new frame, which must still find everything it calls.
    n, bins = 1 << 20, 256
    arguments = (
        ArgumentPlan("values", "input", "int32", (n,), Distribution("integers", low=0, high=bins)),
        ArgumentPlan("counts", "inout", "int32", (bins,)),
    )
    oracle = {"counts": "counts + torch.bincount(values.long(), minlength=bins).int()"}
    problem = Problem("histogram", {"n": n, "bins": bins}, arguments, {}, oracle, bytes_moved=4 * n)
    started = time.perf_counter()
    result = sandbox._request(TimeTorchRequest(problem, budget_s=0.2), None)
    assert isinstance(result, TorchTimingResult) and result.eager and result.compiled, result.note
    # Dynamo recompiles here during the warm-up: a launch cover sized on that call slept seconds before
    # every timed run, and this 0.2 s budget took over four minutes (the compile itself takes ~10 s).
    assert time.perf_counter() - started < 120, result.note
