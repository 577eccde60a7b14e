"""Time one kernel, or two interleaved, on one problem (worker side). Reads like triton's do_bench.

Every round draws a fresh input set (a new seed, straight into each kernel's own buffers), poisons the
outputs and flushes L2 by writing a buffer twice its size, all outside the timed region; CUDA events on
the worker's stream bracket the launch alone, after a GPU wait that keeps the host's launch cost out of
the time (sandbox/launch_cover.py). Two kernels alternate AB, BA, AB, ... on the same inputs. A few timed
runs (the last, and some chosen at random) have their outputs copied right after the end event, on the
same stream and with no device-wide sync first, and are checked afterwards against the oracle on the same
inputs replayed from their seed; every timed run's outputs are also scanned for leftover poison on the
GPU (one pass, read at the end). A kernel that behaves differently once it has been launched many times
fails "timed_mismatch". A median below what the measured ceilings allow is "implausible". Guards are
filled once, so an out-of-bounds write in any round shows at the end. A search's screening
(TimeRequest.settle_early) stops once settled and checks the last run alone.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import statistics
import time
from collections import deque
from dataclasses import replace
from typing import Any

import cupy
import numpy as np
from cuda_agent.sandbox import launch_cover
from cuda_agent.sandbox.buffers import (
    POISON_BYTES,
    ArgumentSet,
    KernelModules,
    count_poisoned,
    draw_inputs,
    launch,
    launch_and_wait,
)
from cuda_agent.sandbox.checks import compare_output, timed_runs_to_replay, unexplained_poison
from cuda_agent.sandbox.paired import compare, settled
from cuda_agent.sandbox.plan import Problem, Tolerance
from cuda_agent.sandbox.protocol import TimeRequest, TimingResult
from cuda_agent.sandbox.reports import CheckFailure, TimingReport
from cuda_agent.sandbox.verify import BadRequest, Beat, Oracle

WARMUP_RUNS = (3, 25)  # at least, at most
WARMUP_MS = 10.0  # of kernel time, so clocks and caches settle
SAMPLED_RUNS = 3  # timed runs checked besides the last one
PLAUSIBILITY_MARGIN = 0.15  # a kernel may beat the measured copy bandwidth a little, never by this much


Snapshot = tuple[int, int, dict[str, cupy.ndarray]]  # (timed run, seed, outputs right after it)


class _Bench:
    """The per-round mechanics: each kernel's own buffers, the L2 flush buffer, events, output checks."""

    def __init__(self, request: TimeRequest, modules: KernelModules, stream: Any, l2_bytes: int) -> None:
        self.problem, self.kernels, self.stream = request.problem, request.kernels, stream
        self.functions = [modules.function(k.compiled, f"timed {j}") for j, k in enumerate(self.kernels)]
        self.plans = [k.launches[0] for k in self.kernels]
        self.sets = [ArgumentSet(self.problem) for _ in self.kernels]
        self.flush = cupy.empty(max(2 * l2_bytes, 32 << 20), dtype=cupy.uint8)
        self.poisoned = [a.name for a in self.problem.arguments if a.role == "output"]
        # Per kernel: slot 0 the last timed run, slots 1.. a reservoir sample of the others.
        self.snapshots: list[list[Snapshot | None]] = [[None] * (1 + SAMPLED_RUNS) for _ in self.kernels]
        self.unwritten: list[list[Any]] = [[] for _ in self.kernels]  # device counts, one per timed run
        # A search's screening (settle_early) checks the last run's outputs alone: the rewrite it chooses is
        # measured again in full, every check included, before it is shown (Engine.confirm).
        self.screening = request.settle_early
        self.cover = launch_cover.on_stream(stream) if request.hide_launch_cost else None

    def enqueue(self, index: int, seed: int, slot: int | None, timed: bool) -> list[tuple[Any, Any]]:
        """Queue one round (every kernel once, order alternating) without waiting; return its events."""
        events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in self.kernels]
        poison = POISON_BYTES[index % 2]
        order = range(len(self.kernels)) if index % 2 == 0 else range(len(self.kernels) - 1, -1, -1)
        for j in order:
            argset = self.sets[j]
            argset.draw(self.problem, seed)  # inputs no launch has seen, outside the timed region
            argset.poison_outputs(poison)
            self.flush.fill(0)
            if self.cover is not None:
                self.cover.wait()
            events[j][0].record(self.stream)
            with self.cover.host(timed) if self.cover is not None else contextlib.nullcontext():
                launch(self.functions[j], self.plans[j], argset.launch_args(), self.stream)
            events[j][1].record(self.stream)
            # Queued behind the kernel on its own stream, no device-wide sync: what it left is what we see.
            if timed and self.poisoned and not self.screening:
                self.unwritten[j].append(
                    sum(count_poisoned(argset.buffers[n].data, poison) for n in self.poisoned)
                )
            if slot is not None:
                self.snapshots[j][slot] = (index, seed, {n: d.copy() for n, d in argset.outputs().items()})
        return events

    @staticmethod
    def wait(events: list[tuple[Any, Any]]) -> list[float]:
        for _, end in events:
            end.synchronize()
        return [cupy.cuda.get_elapsed_time(start, end) for start, end in events]


def time_kernels(
    request: TimeRequest,
    modules: KernelModules,
    stream: cupy.cuda.Stream,
    l2_bytes: int,
    beat: Beat,
) -> TimingResult:
    if not request.kernels or any(not k.launches for k in request.kernels):
        raise BadRequest("a time request needs at least one kernel, each with a launch plan")
    bench = _Bench(request, modules, stream, l2_bytes)
    base_seed = request.base_seed if request.base_seed is not None else secrets.randbits(31)

    warm_ms, warm_runs = 0.0, 0
    while warm_runs < WARMUP_RUNS[0] or (warm_ms < WARMUP_MS and warm_runs < WARMUP_RUNS[1]):
        warm_ms += max(bench.wait(bench.enqueue(warm_runs, base_seed + warm_runs, None, timed=False)))
        warm_runs += 1
        beat("warm-up")

    # Two rounds in flight: the GPU runs round r while Python queues round r + 1 (same stream, so they
    # never overlap). The last round is known when it is queued, so its outputs can be snapshotted.
    chooser = random.Random(base_seed)
    times: list[list[float]] = [[] for _ in request.kernels]
    budget_ms, done_ms, round_ms = request.budget_s * 1e3, 0.0, 0.0
    # Fresh inputs and an L2 flush cost more than a short kernel: cap the wall time as well, at twice
    # the timed budget, so a memory-heavy kernel is not run hundreds of times for a stable median.
    wall_deadline = time.perf_counter() + 2 * request.budget_s
    in_flight: deque[list[tuple[Any, Any]]] = deque()
    run = 0
    settled_early = False
    while True:
        queued = run + 1
        last = (
            settled_early
            or queued >= request.max_runs
            or (
                queued >= request.min_runs
                and (
                    done_ms + len(in_flight) * round_ms + round_ms >= budget_ms
                    or time.perf_counter() >= wall_deadline
                )
            )
        )
        slot = 0 if last else None if bench.screening else _reservoir_slot(run, chooser)
        in_flight.append(bench.enqueue(run, base_seed + 1_000_000 + run, slot, timed=True))
        run += 1
        while in_flight and (len(in_flight) > 1 or last):
            for j, t in enumerate(bench.wait(in_flight.popleft())):
                times[j].append(t)
            round_ms = sum(t[-1] for t in times)
            done_ms += round_ms
            beat(f"timed run {len(times[0])}")
            if request.settle_early and len(times) == 2 and not last:
                # settled: the round queued next is the last (its outputs are snapshotted)
                settled_early = settled_early or settled(times[0], times[1])
        if last:
            break

    # Without a reference, the first kernel is loaded afresh as one (its own module: no state from the
    # timed runs), so a kernel that changes after many launches is still compared with its early self.
    reference = request.reference or request.kernels[0]
    function = modules.function(reference.compiled, "reference")
    oracle = Oracle(request.problem, function, reference.launches[0], stream, beat)
    failures = _timed_output_failures(request, oracle, bench.snapshots, run, beat)
    if not bench.screening:
        failures += _unwritten_in_timed_runs(request, modules, stream, bench.unwritten, base_seed, beat)
    for kernel, argset in zip(request.kernels, bench.sets, strict=True):
        guard = argset.check_guards()  # filled once: any out-of-bounds write in any round shows here
        if guard is not None:
            message = f"during timed runs: {guard.message}"
            failures.append(
                replace(guard, kernel=kernel.label, problem=request.problem.label, message=message)
            )
    ceilings = (request.ceilings_bandwidth_gbs, request.ceilings_tflops)
    reports = [
        _report(k.label, t, request.problem, *ceilings) for k, t in zip(request.kernels, times, strict=True)
    ]
    failures += [f for r in reports if (f := _implausible(r, request.problem)) is not None]
    comparison = None
    if len(reports) == 2:
        comparison = compare(reports[0], reports[1], times[0], times[1], settled_early)
        comparison = replace(comparison, timed_output_failures=tuple(failures))
    return TimingResult(reports=tuple(reports), comparison=comparison, failures=tuple(failures))


def _reservoir_slot(run: int, chooser: random.Random) -> int | None:
    """Reservoir sampling: each timed run ends up among the SAMPLED_RUNS checked with equal chance."""
    if run < SAMPLED_RUNS:
        return 1 + run
    pick = chooser.randrange(run + 1)
    return 1 + pick if pick < SAMPLED_RUNS else None


def _timed_output_failures(
    request: TimeRequest,
    oracle: Oracle,
    snapshots: list[list[Snapshot | None]],
    runs: int,
    beat: Beat,
) -> list[CheckFailure]:
    """Check the snapshotted outputs against the oracle on the same inputs, replayed from their seeds."""
    problem = request.problem
    failures = []
    for kernel, slots in zip(request.kernels, snapshots, strict=True):
        for snapshot in sorted((s for s in slots if s is not None), key=lambda s: s[0]):
            index, seed, outputs = snapshot
            expected = oracle.expected(draw_inputs(problem, seed), POISON_BYTES[index % 2])
            failure = _first_mismatch(problem, outputs, expected.values, expected.unwritten)
            beat(f"timed run {index + 1} checked")
            if failure is not None:
                failures.append(
                    replace(
                        failure,
                        check="timed_mismatch",
                        kernel=kernel.label,
                        problem=problem.label,
                        seed=seed,
                        message=f"{kernel.label}, timed run {index + 1} of {runs}: {failure.message}",
                    )
                )
                break
    return failures


def _unwritten_in_timed_runs(
    request: TimeRequest,
    modules: KernelModules,
    stream: cupy.cuda.Stream,
    unwritten: list[list[Any]],
    base_seed: int,
    beat: Beat,
) -> list[CheckFailure]:
    """Timed runs whose outputs kept more elements holding that run's poison than the kernel itself
    leaves so on the same inputs.

    A correct output equals any fixed bit pattern by chance: among 2^27 fp16 values the poison 0xA5A5
    (-0.02205) turns up thousands of times, and a uint8 output holds 0xA5 about 1 in 256. So a count is
    only suspicious beside what the same kernel (loaded afresh: no state from the timed runs) does when
    its outputs were poisoned with the *other* byte: its real values equal to the poison, and the elements
    it never writes (they keep the other byte). Runs replayed: per poison byte, the two with the most
    poisoned elements.
    """
    failures = []
    for j, (kernel, counts) in enumerate(zip(request.kernels, unwritten, strict=True)):
        per_run = cupy.stack(counts).get() if counts else np.zeros(0)
        function = modules.function(kernel.compiled, f"replay {j}")
        args = ArgumentSet(request.problem)  # one set of buffers for all of this kernel's replays
        for run in timed_runs_to_replay(per_run):
            seed, poison = base_seed + 1_000_000 + run, POISON_BYTES[run % 2]
            replays = _replayed_counts(args, function, kernel.launches[0], seed, poison, stream)
            beat(f"timed run {run + 1} replayed")
            left = unexplained_poison(int(per_run[run]), replays)
            chance = int(per_run[run]) - left
            if left > 0:
                failures.append(
                    CheckFailure(
                        check="timed_mismatch",
                        message=(
                            f"{kernel.label}: timed run {run + 1} of {len(per_run)} left {left} output "
                            f"elements unwritten: {int(per_run[run])} held the poison 0x{poison:02X} written "
                            f"before the run, where the same kernel computes that value at {chance} on those "
                            "inputs"
                        ),
                        problem=request.problem.label,
                        seed=seed,
                        bad_elements=left,
                        kernel=kernel.label,
                    )
                )
                break
    return failures


def _replayed_counts(
    args: ArgumentSet, function: Any, plan: Any, seed: int, poison: int, stream: cupy.cuda.Stream
) -> tuple[int, int]:
    """How many output elements would hold `poison` after the kernel itself ran on the inputs of `seed`,
    in two runs with the outputs poisoned by the other byte: those it computes as `poison`, and those it
    leaves holding the other byte (elements it never writes, as a kernel covering part of an output
    does in every run: verification holds it to what the reference writes, and the timed runs to what
    it does itself)."""
    problem = args.problem
    other = POISON_BYTES[1] if poison == POISON_BYTES[0] else POISON_BYTES[0]
    names = [a.name for a in problem.arguments if a.role == "output"]
    found = []
    for _ in range(2):
        args.draw(problem, seed)
        args.poison_outputs(other)
        launch_and_wait(function, plan, args.launch_args(), stream, "replay of a timed run")
        found.append(
            int(sum(count_poisoned(args.buffers[n].data, b) for n in names for b in (poison, other)))
        )
    return found[0], found[1]


def _first_mismatch(
    problem: Problem,
    outputs: dict[str, cupy.ndarray],
    expected: dict[str, cupy.ndarray],
    unwritten: dict[str, Any],
) -> CheckFailure | None:
    for argument in problem.outputs:
        tolerance = problem.tolerances.get(argument.name) or Tolerance.default(argument.dtype)
        failure = compare_output(
            outputs[argument.name], expected[argument.name], tolerance, argument.dtype,
            argument=argument.name, ignore=unwritten.get(argument.name),
        )  # fmt: skip
        if failure is not None:
            return failure
    return None


def _report(
    label: str, times: list[float], problem: Problem, bandwidth_gbs: float | None, tflops: float | None
) -> TimingReport:
    median = statistics.median(times)
    p10, p90 = (float(q) for q in np.percentile(times, [10, 90]))
    seconds = median * 1e-3
    floors: list[tuple[float, str, float]] = []  # (ms, which ceiling, its value)
    if problem.bytes_moved and bandwidth_gbs:
        floors.append((problem.bytes_moved / (bandwidth_gbs * 1e9) * 1e3, "memory", bandwidth_gbs))
    if problem.flops and tflops:
        floors.append((problem.flops / (tflops * 1e12) * 1e3, "compute", tflops))
    binding = max(floors) if floors else None
    floor = binding[0] if binding else None
    floor_bytes = problem.bytes_moved if problem.floor_bytes is None else problem.floor_bytes
    hard = [problem.flops / (tflops * 1e12) * 1e3] if problem.flops and tflops else []
    if floor_bytes and bandwidth_gbs:
        hard.append(floor_bytes / (bandwidth_gbs * 1e9) * 1e3)
    return TimingReport(
        label=label,
        median_ms=median,
        p10_ms=p10,
        p90_ms=p90,
        runs=len(times),
        times_ms=tuple(times),
        bandwidth_gbs=problem.bytes_moved / seconds / 1e9 if problem.bytes_moved and seconds else None,
        flop_rate_tflops=problem.flops / seconds / 1e12 if problem.flops and seconds else None,
        roofline_fraction=floor / median if floor and median else None,
        floor_ms=floor,
        bound=binding[1] if binding else None,
        ceiling=binding[2] if binding else None,
        plausible_floor_ms=max(hard) if hard else None,
    )


def _implausible(report: TimingReport, problem: Problem) -> CheckFailure | None:
    floor = report.plausible_floor_ms
    if floor is None or report.median_ms >= floor * (1 - PLAUSIBILITY_MARGIN):
        return None
    return CheckFailure(
        check="implausible",
        message=(
            f"{report.label}: median {report.median_ms:.4f} ms is below the physical floor "
            f"{floor:.4f} ms (the problem's bytes and FLOPs at the measured ceilings) by more than "
            f"{PLAUSIBILITY_MARGIN:.0%}: it cannot have done the work"
        ),
        problem=problem.label,
        kernel=report.label,
    )
