"""Verify a candidate kernel before any timing (worker side).

For each problem (the benchmark size and the extra sizes) and each of `input_sets` fresh seeds: draw the
inputs, compute what the outputs must be (the PyTorch oracle, or the reference kernel on copies of the
same inputs), then run the candidate twice on those inputs with the outputs poisoned by different bytes,
and check in this order: launch → guards (out_of_bounds) → inputs unchanged (input_modified) →
unwritten → the two runs agree (nondeterministic) → against the oracle (mismatch). An output that may
alias an input gets one more run with the two sharing memory (aliasing). A problem stops at its first
failing input set; the failure carries the seed that replays it.
"""

from __future__ import annotations

import secrets
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol

import cupy
from cuda_agent.sandbox.buffers import (
    POISON_BYTES,
    ArgumentSet,
    Inputs,
    KernelModules,
    LaunchError,
    draw_inputs,
    launch_and_wait,
    scalar_value,
    storage_dtype,
)
from cuda_agent.sandbox.checks import (
    check_deterministic,
    check_unchanged,
    compare_output,
    poisoned_elements,
    unwritten_elements,
)
from cuda_agent.sandbox.oracle import (
    PRECISION_NOTE,
    OracleError,
    constants_of,
    load_torch,
    oracle_function,
    respelling_hint,
)
from cuda_agent.sandbox.plan import KernelUnderTest, LaunchPlan, Problem, Tolerance
from cuda_agent.sandbox.protocol import IMPORTING_TORCH, VerifyRequest
from cuda_agent.sandbox.reports import CheckFailure, VerificationReport

TORCH_IMPORT_LIMIT_S = 120.0  # a fresh machine's first `import torch` and CUDA start (4.7 s on the H200)
ORACLE_LIMIT_S = 60.0  # host work evaluating one oracle; beyond it the worker falls silent and is killed


class Beat(Protocol):
    """Tells the caller the worker is alive (sandbox/worker.py's _Beat; tests may pass their own)."""

    def __call__(self, note: str = "", expect_silence_s: float = 0.0) -> None: ...

    def host_work(self, note: str, limit_s: float) -> AbstractContextManager[None]:
        """Host work that cannot hang on the GPU: announced, kept alive for at most `limit_s`, and ended
        with a beat that takes the allowance back (a kernel launched next gets the plain timeout)."""
        ...


CHECKS = ("launch", "out_of_bounds", "input_modified", "unwritten", "nondeterministic", "mismatch")


class BadRequest(Exception):
    """The request cannot be carried out as asked (wrong launch count, no oracle for an output, an oracle
    expression that fails): the worker answers WorkerError(kind="bad_request") and stays up."""


# -- the oracle -----------------------------------------------------------------------------------------


@dataclass
class Expected:
    values: dict[str, cupy.ndarray]  # per output/inout, storage dtype
    unwritten: dict[str, cupy.ndarray | None]  # elements the reference kernel itself left unwritten


class Oracle:
    """What a problem's outputs must be for given inputs: the PyTorch expressions where the problem has
    them, the reference kernel (its own guarded buffers, same poison) for the other outputs."""

    def __init__(
        self,
        problem: Problem,
        reference: Any | None,
        reference_launch: LaunchPlan | None,
        stream: cupy.cuda.Stream,
        beat: Beat,
    ) -> None:
        self.problem, self.reference, self.reference_launch = problem, reference, reference_launch
        self.stream, self.beat = stream, beat
        expressions = problem.oracle or {}
        missing = [a.name for a in problem.outputs if a.name not in expressions]
        if missing and reference is None:
            raise BadRequest(f"no oracle for {', '.join(missing)}: give a PyTorch expression or a reference")
        self.from_reference = tuple(missing)

    def expected(self, inputs: Inputs, poison: int) -> Expected:
        values: dict[str, cupy.ndarray] = {}
        unwritten: dict[str, cupy.ndarray | None] = {}
        if self.problem.oracle:
            values.update(_torch_oracle(self.problem, inputs, self.stream, self.beat))
        if self.from_reference:
            first = self._run_reference(inputs, poison)
            other = POISON_BYTES[1] if poison == POISON_BYTES[0] else POISON_BYTES[0]
            second: dict[str, cupy.ndarray] | None = None
            for argument in self.problem.outputs:
                if argument.name not in self.from_reference:
                    continue
                values[argument.name] = first[argument.name]
                unwritten[argument.name] = None
                if argument.role != "output":
                    continue
                maybe = poisoned_elements(first[argument.name], poison)
                if bool(maybe.any()):  # a value equal to the poison, or really unwritten? ask once more
                    second = second or self._run_reference(inputs, other)
                    unwritten[argument.name] = maybe & poisoned_elements(second[argument.name], other)
        return Expected(values, unwritten)

    def _run_reference(self, inputs: Inputs, poison: int) -> dict[str, cupy.ndarray]:
        assert self.reference is not None and self.reference_launch is not None
        args = ArgumentSet(self.problem)
        args.load(inputs)
        args.poison_outputs(poison)
        try:
            launch_and_wait(
                self.reference, self.reference_launch, args.launch_args(), self.stream, "reference kernel"
            )
        except LaunchError as exc:
            raise BadRequest(f"the reference kernel cannot run on {self.problem.label}: {exc}") from exc
        self.beat("reference")
        return args.outputs()


def _torch_oracle(
    problem: Problem, inputs: Inputs, stream: cupy.cuda.Stream, beat: Beat
) -> dict[str, cupy.ndarray]:
    """Evaluate the oracle function over zero-copy views of copies of the inputs (an in-place expression
    cannot change the pristine set), in full precision, within ORACLE_LIMIT_S of host work."""
    with beat.host_work(IMPORTING_TORCH, limit_s=TORCH_IMPORT_LIMIT_S):
        torch = load_torch(cupy.cuda.Device().id)
    scalars = {
        a.name: scalar_value(a, inputs.scalars[a.name]) for a in problem.arguments if a.role == "scalar"
    }
    tensors = []
    for argument in problem.arguments:
        if argument.role not in ("input", "inout"):
            continue
        array = inputs.arrays[argument.name].copy()
        if argument.dtype == "bfloat16":  # bit patterns travel as int16, which every DLPack reader takes
            tensors.append(torch.from_dlpack(array.view(cupy.int16)).view(torch.bfloat16))
        else:
            tensors.append(torch.from_dlpack(array))
    stream.synchronize()  # torch runs on its own stream: the copies (queued behind the inputs) first
    try:
        function, names = oracle_function(problem, constants_of(problem, scalars), torch)
    except OracleError as exc:
        raise BadRequest(str(exc)) from exc
    by_name = {a.name: a for a in problem.arguments}
    results = {}
    # A first use of an operator loads its library (cuBLAS for `@`): seconds of host work, bounded.
    with beat.host_work("evaluating the oracle", limit_s=ORACLE_LIMIT_S):
        try:
            values = function(*tensors)
            for name, value in zip(names, values, strict=True):
                argument = by_name[name]
                # Our dtype names are torch's (torch.float16, torch.uint32, ...).
                tensor = torch.as_tensor(value, device="cuda").to(getattr(torch, argument.dtype))
                if tensor.numel() == argument.numel:
                    tensor = tensor.reshape(argument.shape)
                tensor = torch.broadcast_to(tensor, argument.shape).contiguous()
                if argument.dtype == "bfloat16":
                    tensor = tensor.view(torch.int16)
                results[name] = cupy.from_dlpack(tensor).view(storage_dtype(argument.dtype))
            torch.cuda.synchronize()
        except Exception as exc:  # the user's expression: any error is theirs to fix
            expressions = "; ".join(f"{n} = {problem.oracle[n]!r}" for n in names)  # type: ignore[index]
            raise BadRequest(f"the oracle ({expressions}) failed: {exc!r}{respelling_hint(problem)}") from exc
    return results


# -- one candidate, one input set ------------------------------------------------------------------------


def _tolerance(problem: Problem, name: str, dtype: str) -> Tolerance:
    return problem.tolerances.get(name) or Tolerance.default(dtype)


def _run_checked(
    function: Any, plan: LaunchPlan, args: ArgumentSet, inputs: Inputs, stream: cupy.cuda.Stream,
    what: str, alias: dict[str, str] | None = None,
) -> CheckFailure | None:  # fmt: skip
    """One launch, then the checks that need only this run: launch, guards, inputs unchanged."""
    try:
        launch_and_wait(function, plan, args.launch_args(alias), stream, what)
    except LaunchError as exc:
        return CheckFailure("launch", f"the kernel did not launch: {exc}")
    failure = args.check_guards()
    if failure is not None:
        return failure
    aliased = set((alias or {}).values())
    for argument in args.problem.arguments:
        if argument.role == "input" and argument.name not in aliased:
            failure = check_unchanged(
                inputs.arrays[argument.name], args.buffers[argument.name].data,
                argument=argument.name, dtype=argument.dtype,
            )  # fmt: skip
            if failure is not None:
                return failure
    return None


def verify_input_set(
    problem: Problem, function: Any, plan: LaunchPlan, oracle: Oracle, inputs: Inputs, set_index: int,
    stream: cupy.cuda.Stream, beat: Beat,
) -> CheckFailure | None:  # fmt: skip
    first_poison, second_poison = POISON_BYTES if set_index % 2 == 0 else POISON_BYTES[::-1]
    expected = oracle.expected(inputs, first_poison)
    args = ArgumentSet(problem)  # fresh buffers for each input set, the same ones for its two runs
    runs: list[dict[str, cupy.ndarray]] = []
    for run, poison in enumerate((first_poison, second_poison)):
        args.load(inputs)
        args.poison_outputs(poison)
        failure = _run_checked(function, plan, args, inputs, stream, f"{problem.label}, run {run + 1}")
        beat(f"{problem.label}: input set {set_index + 1}, run {run + 1}")
        if failure is not None:
            return failure
        runs.append({name: data.copy() for name, data in args.outputs().items()})
    # Each check over every output before the next check: the report names the most basic failure.
    for check in ("unwritten", "nondeterministic", "mismatch"):
        for argument in problem.outputs:
            name, ignore = argument.name, expected.unwritten.get(argument.name)
            first, second = runs[0][name], runs[1][name]
            tolerance = _tolerance(problem, name, argument.dtype)
            if check == "unwritten" and argument.role == "output":
                failure = unwritten_elements(
                    first, second, first_poison, second_poison, argument=name, ignore=ignore
                )
            elif check == "nondeterministic":
                failure = check_deterministic(
                    first, second, tolerance, argument.dtype, argument=name, ignore=ignore
                )
            elif check == "mismatch":
                failure = compare_output(
                    first, expected.values[name], tolerance, argument.dtype, argument=name, ignore=ignore
                )
            else:
                failure = None
            if failure is not None:
                return failure
    return None


def verify_aliasing(
    problem: Problem, function: Any, plan: LaunchPlan, oracle: Oracle, inputs: Inputs,
    stream: cupy.cuda.Stream, beat: Beat,
) -> CheckFailure | None:  # fmt: skip
    """Outputs declared `may_alias` an input: one run with each such output sharing its input's memory."""
    alias = {a.name: a.may_alias for a in problem.outputs if a.may_alias}
    if not alias:
        return None
    expected = oracle.expected(inputs, POISON_BYTES[0])
    args = ArgumentSet(problem)
    args.load(inputs)
    failure = _run_checked(function, plan, args, inputs, stream, f"{problem.label}, in place", alias)
    beat(f"{problem.label}: in place")
    if failure is not None:
        return failure
    for output, source in alias.items():
        argument = next(a for a in problem.arguments if a.name == output)
        failure = compare_output(
            args.buffers[source].data, expected.values[output], _tolerance(problem, output, argument.dtype),
            argument.dtype, argument=output,
        )  # fmt: skip
        if failure is not None:
            return replace(
                failure,
                check="aliasing",
                message=f"with {output} sharing memory with {source} (declared may_alias): {failure.message}",
            )
    return None


# -- the request -------------------------------------------------------------------------------------------


def _validate(request: VerifyRequest) -> None:
    n = len(request.problems)
    for kernel, role in ((request.candidate, "candidate"), (request.reference, "reference")):
        if kernel is not None and len(kernel.launches) != n:
            raise BadRequest(f"the {role} has {len(kernel.launches)} launch plans for {n} problems")
    if request.input_sets < 1:
        raise BadRequest("input_sets must be at least 1")
    for problem in request.problems:
        for argument in problem.outputs:
            source = argument.may_alias
            if source is None:
                continue
            partner = next((a for a in problem.arguments if a.name == source), None)
            if partner is None or partner.nbytes != argument.nbytes or partner.dtype != argument.dtype:
                raise BadRequest(
                    f"{argument.name} may_alias {source!r}: not an input of the same dtype and size"
                )


def _oracle_note(problem: Problem) -> str:
    """Which outputs were checked against what, for the report."""
    oracle = problem.oracle or {}
    by_expression = [a.name for a in problem.outputs if a.name in oracle]
    by_kernel = [a.name for a in problem.outputs if a.name not in oracle]
    if not by_expression:
        return "reference kernel as oracle"
    note = f"PyTorch oracle ({PRECISION_NOTE})"
    if by_kernel:
        note += f" for {', '.join(by_expression)}, the reference kernel for {', '.join(by_kernel)}"
    return note


def verify(
    request: VerifyRequest, modules: KernelModules, stream: cupy.cuda.Stream, beat: Beat
) -> VerificationReport:
    start = time.perf_counter()
    _validate(request)
    base_seed = request.base_seed if request.base_seed is not None else secrets.randbits(31)
    candidate = modules.function(request.candidate.compiled, "candidate")
    reference_kernel: KernelUnderTest | None = request.reference
    reference = modules.function(reference_kernel.compiled, "reference") if reference_kernel else None
    failures: list[CheckFailure] = []
    seeds: list[int] = []
    checks = list(CHECKS)
    for p, problem in enumerate(request.problems):
        plan = request.candidate.launches[p]
        oracle = Oracle(
            problem, reference, reference_kernel.launches[p] if reference_kernel else None, stream, beat
        )
        for k in range(request.input_sets):
            seed = base_seed + p * request.input_sets + k
            seeds.append(seed)
            inputs = draw_inputs(problem, seed)
            failure = verify_input_set(problem, candidate, plan, oracle, inputs, k, stream, beat)
            if failure is None and k == 0 and any(a.may_alias for a in problem.outputs):
                if "aliasing" not in checks:
                    checks.append("aliasing")
                failure = verify_aliasing(problem, candidate, plan, oracle, inputs, stream, beat)
            if failure is not None:
                failures.append(replace(failure, problem=problem.label, seed=seed))
                break
    oracle_note = _oracle_note(request.problems[0]) if request.problems else "no problems"
    poisons = f"0x{POISON_BYTES[0]:02X}/0x{POISON_BYTES[1]:02X}"
    notes = (
        f"{oracle_note}; base seed {base_seed} (replay with base_seed={base_seed}); each input set run "
        f"twice with outputs poisoned {poisons}; guard regions around every buffer",
    )
    return VerificationReport(
        passed=not failures,
        failures=tuple(failures),
        problems=tuple(p.label for p in request.problems),
        seeds=tuple(seeds),
        input_sets=request.input_sets,
        checks_run=tuple(checks),
        notes=notes,
        seconds=time.perf_counter() - start,
    )
