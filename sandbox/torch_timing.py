"""Time a problem's PyTorch oracle, eager and through `torch.compile` (worker side; imports cupy, torch).

The oracle is what a user would otherwise write, so it is the reference a rewrite is compared with
(CUDA Agent's paper measures against `torch.compile`). It is timed the way kernels are timed in
sandbox/timing.py: warm-up first, fresh inputs drawn outside the timed region before every run, the L2
flushed, CUDA events around the call on torch's stream, the same median/spread/roofline report, and the
same GPU wait queued before the start event (sandbox/launch_cover.py): what is timed is the call's kernels
back to back, not Dynamo's guards and wrappers, whose host time varies from run to run and had made
torch.compile's median of a 0.1 ms oracle vary by up to 1.6× between bench runs. Compile
time is excluded: `torch.compile` compiles during its first call, which is not timed and may take tens
of seconds (the worker announces that silence with a Heartbeat, so the caller does not call it a hang).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from cuda_agent.sandbox.oracle import (
    PRECISION_NOTE,
    OracleError,
    constants_of,
    load_torch,
    oracle_function,
    oracle_parameters,
)
from cuda_agent.sandbox.plan import Problem, Tolerance
from cuda_agent.sandbox.protocol import IMPORTING_TORCH, TimeTorchRequest, TorchTimingResult
from cuda_agent.sandbox.reports import TimingReport

# CuPy is imported by the functions that touch the GPU.
Beat = Any  # sandbox/verify.py's Beat (imported lazily with the rest of the worker side)

COMPILE_SILENCE_S = 600.0  # torch.compile's first call: Dynamo, Inductor, Triton autotuning, ptxas
FIRST_CALL_SILENCE_S = 30.0  # an operator's first use loads its library (cuBLAS for `@`)


class _Inputs:
    """One device buffer per input (and inout), viewed as torch tensors without a copy; every run draws
    fresh values into them on the worker's stream, outside the timed region."""

    def __init__(self, problem: Problem, stream: Any, torch: Any) -> None:
        import cupy
        from cuda_agent.sandbox.buffers import storage_dtype

        self.problem, self.stream, self.torch = problem, stream, torch
        self.arguments = [a for a in problem.arguments if a.role in ("input", "inout")]
        self.arrays = [cupy.empty(a.shape, dtype=storage_dtype(a.dtype)) for a in self.arguments]
        self.tensors = tuple(
            torch.from_dlpack(array.view(cupy.int16)).view(torch.bfloat16)
            if a.dtype == "bfloat16"  # bit patterns travel as int16, which every DLPack reader takes
            else torch.from_dlpack(array)
            for a, array in zip(self.arguments, self.arrays, strict=True)
        )

    def draw(self, seed: int) -> None:
        from cuda_agent.sandbox.buffers import fill_random

        with self.stream:
            for argument, array in zip(self.arguments, self.arrays, strict=True):
                fill_random(array, argument, seed)
        self.stream.synchronize()  # torch runs on its own stream: the inputs must be complete first


def _scalars(problem: Problem, seed: int) -> tuple[dict[str, Any], str]:
    """Scalar arguments as constants: a changing Python number would make torch.compile recompile."""
    from cuda_agent.sandbox.buffers import draw_scalar, scalar_value

    values, drawn = {}, []
    for argument in problem.arguments:
        if argument.role == "scalar":
            values[argument.name] = scalar_value(argument, draw_scalar(argument, seed))
            if argument.distribution.kind != "value":
                drawn.append(argument.name)
    note = f"random scalars fixed at one draw ({', '.join(drawn)}); " if drawn else ""
    return values, note


def _time_function(
    label: str, function: Callable, inputs: _Inputs, flush: Any, request: TimeTorchRequest,
    base_seed: int, notes: list[str], beat: Beat,
) -> TimingReport:  # fmt: skip
    # The kernel timer's warm-up rule and report (median, p10-p90, roofline against the same ceilings),
    # so torch and kernels are measured alike.
    import cupy
    from cuda_agent.sandbox import launch_cover
    from cuda_agent.sandbox.timing import WARMUP_MS, WARMUP_RUNS
    from cuda_agent.sandbox.timing import _report as timing_report

    torch = inputs.torch
    cover = launch_cover.on_stream(cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream))

    def one_run(seed: int, warming: bool = False) -> float:
        inputs.draw(seed)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        cover.wait()
        start.record()
        with cover.host(timed=not warming):
            outputs = function(*inputs.tensors)
        end.record()
        end.synchronize()
        del outputs
        return float(start.elapsed_time(end))

    warm_ms, warm_runs = 0.0, 0
    while warm_runs < WARMUP_RUNS[0] or (warm_ms < WARMUP_MS and warm_runs < WARMUP_RUNS[1]):
        warm_ms += one_run(base_seed + warm_runs, warming=True)
        warm_runs += 1
        beat(f"{label}: warm-up")
    times: list[float] = []
    # As for kernels: the timed budget, and at most twice it in wall time (fresh inputs cost time too).
    wall_deadline = time.perf_counter() + 2 * request.budget_s
    while len(times) < request.max_runs and (
        len(times) < request.min_runs
        or (sum(times) < request.budget_s * 1e3 and time.perf_counter() < wall_deadline)
    ):
        times.append(one_run(base_seed + 1_000_000 + len(times)))
        beat(f"{label}: timed run {len(times)}")
    notes.append(f"{label}: {cover.note()}")
    return timing_report(
        label, times, request.problem, request.ceilings_bandwidth_gbs, request.ceilings_tflops
    )


def _outputs_agree(problem: Problem, names: tuple[str, ...], first: Any, second: Any, torch: Any) -> bool:
    for name, a, b in zip(names, first, second, strict=True):
        argument = next(x for x in problem.arguments if x.name == name)
        tolerance = problem.tolerances.get(name) or Tolerance.default(argument.dtype)
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        if a.shape != b.shape or not torch.allclose(
            a.double(), b.double(), atol=tolerance.atol, rtol=tolerance.rtol, equal_nan=True
        ):
            return False
    return True


def time_torch(request: TimeTorchRequest, stream: Any, l2_bytes: int, beat: Beat) -> TorchTimingResult:
    from cuda_agent.sandbox.verify import TORCH_IMPORT_LIMIT_S, BadRequest

    problem = request.problem
    if not problem.oracle:
        raise BadRequest("the problem has no PyTorch oracle to time")
    missing = [a.name for a in problem.outputs if a.name not in problem.oracle]
    if missing:  # torch would be timed doing less than the kernel does
        raise BadRequest(f"the oracle gives no expression for {', '.join(missing)}: nothing to time")
    import cupy

    with beat.host_work(IMPORTING_TORCH, limit_s=TORCH_IMPORT_LIMIT_S):
        torch = load_torch(cupy.cuda.Device().id)
    base_seed = secrets.randbits(31)
    constants, note = _scalars(problem, base_seed)
    try:
        function, names = oracle_function(problem, constants_of(problem, constants), torch)
    except OracleError as exc:
        raise BadRequest(str(exc)) from exc
    inputs = _Inputs(problem, stream, torch)
    flush = torch.empty(max(2 * l2_bytes, 32 << 20), dtype=torch.uint8, device="cuda")
    notes = [f"{note}oracle timed as a function of {', '.join(oracle_parameters(problem))}; {PRECISION_NOTE}"]
    try:
        return _time_both(request, function, names, inputs, flush, base_seed, notes, beat)
    finally:
        del inputs, flush
        torch._dynamo.reset()  # the worker lives long: drop compiled graphs and their guards
        torch.cuda.empty_cache()  # and give the memory back to the kernels' allocator


def _time_both(
    request: TimeTorchRequest, function: Callable, names: tuple[str, ...], inputs: _Inputs, flush: Any,
    base_seed: int, notes: list[str], beat: Beat,
) -> TorchTimingResult:  # fmt: skip
    torch, problem = inputs.torch, request.problem
    try:
        beat("torch eager: first call", expect_silence_s=FIRST_CALL_SILENCE_S)
        inputs.draw(base_seed)
        # A copy: the timed runs below draw new values into the inputs, and an output may be one of them.
        reference = tuple(torch.as_tensor(value).clone() for value in function(*inputs.tensors))
        torch.cuda.synchronize()
        eager = _time_function("torch eager", function, inputs, flush, request, base_seed, notes, beat)
    except Exception as exc:  # the user's expression: any error is theirs, and ends this request's work
        notes.append(f"torch eager failed: {exc!r}")
        return TorchTimingResult(None, None, "; ".join(notes))
    if not request.compile:
        notes.append("torch.compile not asked for")
        return TorchTimingResult(eager, None, "; ".join(notes))
    compiled = None
    try:
        # Announced before torch.compile is even touched: importing Dynamo and Inductor alone takes
        # seconds on a fresh machine (seen on the H200 as a 5 s "hang").
        beat("torch.compile: compiling the oracle", expect_silence_s=COMPILE_SILENCE_S)
        compiled_function = torch.compile(function)
        inputs.draw(base_seed)  # the reference's inputs again, so the two results can be compared
        started = time.perf_counter()
        result = compiled_function(*inputs.tensors)  # compiles; not timed
        torch.cuda.synchronize()
        notes.append(f"torch.compile took {time.perf_counter() - started:.1f} s to compile (not timed)")
        if not _outputs_agree(problem, names, reference, result, torch):
            notes.append("torch.compile's result differs from eager beyond the tolerance")
        del result
        compiled = _time_function(
            "torch.compile", compiled_function, inputs, flush, request, base_seed, notes, beat
        )
    except Exception as exc:  # Dynamo/Inductor refusing an expression is an answer, not a worker crash
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        notes.append(f"torch.compile failed: {type(exc).__name__}: {first_line}")
    return TorchTimingResult(eager, compiled, "; ".join(notes))
