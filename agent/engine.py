"""The loop's steps joined: compile → verify → time, for an original kernel and for candidates.

Compiling happens here, in the caller (NVRTC needs no GPU); verifying and timing go to the sandbox worker.
Every step's result is plain data, cached on disk by everything it depends on.
"""

from __future__ import annotations

import importlib.metadata
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from cuda_agent.agent.cache import ResultCache, result_key
from cuda_agent.agent.candidate_log import CandidateLog, process_log
from cuda_agent.agent.candidates import Candidate, CandidateResult
from cuda_agent.agent.compile_environment import CompileEnvironment, compile_in, environment_for
from cuda_agent.agent.executors import Executor, PoolSettings, open_executor
from cuda_agent.agent.index_ranges import with_index_ranges
from cuda_agent.agent.spec import KernelSpec, SpecResolveError, resolve
from cuda_agent.agent.targets import KernelTarget, automatic_verify_points, problems_for, with_block
from cuda_agent.sandbox.children import kill_running
from cuda_agent.sandbox.plan import CompiledKernel, KernelUnderTest, LaunchPlan, Problem
from cuda_agent.sandbox.protocol import (
    TimeRequest,
    TimeTorchRequest,
    TimingResult,
    TorchTimingResult,
    VerifyRequest,
)
from cuda_agent.sandbox.reports import (
    Comparison,
    CompileResult,
    DeviceInfo,
    TimingReport,
    VerificationReport,
    WorkerError,
)
from cuda_agent.sandbox.sanitizer import (
    NOT_FOUND,
    SanitizerReport,
    SanitizerRequest,
    SanitizerSettings,
    not_checked,
)

DEFAULT_ARCH = "sm_90"  # without a GPU to ask, compile for the H100/H200 generation


@dataclass(frozen=True)
class EngineSettings:
    gpu_index: int = 0
    timeout_s: float = 5.0  # a launch that has not finished after this is a hang
    arch: str | None = None  # None: the GPU's own, else DEFAULT_ARCH
    input_sets: int = 5
    # A search's candidates are verified on this many of them first, a screening as their timing is (on
    # the H100 verifying was half of a search's time: 0.5 s a candidate at 256 MiB); the one to be shown
    # is verified on all `input_sets` before it is (Engine.confirm), and gives way if that fails.
    screen_input_sets: int = 2
    time_budget_s: float = 0.6  # timed work per measurement
    # A candidate's measurement stops once its verdict and speedup are settled (sandbox/paired.py); the
    # one to be shown is measured again in full first (Engine.confirm).
    settle_early: bool = True
    use_cache: bool = True
    # Every compile's environment besides the file's own (agent/compile_environment.py): absolute include
    # folders, NAME[=VALUE] macros and compiler flags, from -I/-D/--nvcc-flag or the server's settings.
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    nvcc_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Baseline:
    """The original kernel, compiled, verified and timed: what candidates are measured against."""

    target: KernelTarget
    spec: KernelSpec
    problems: tuple[Problem, ...]
    kernel: KernelUnderTest | None  # None when it did not compile
    compile: CompileResult
    verification: VerificationReport | None = None
    timing: TimingReport | None = None
    error: WorkerError | None = None
    notes: tuple[str, ...] = ()

    @property
    def oracle(self) -> str:
        """What the outputs are checked against, for a person."""
        problem = self.problems[0] if self.problems else None
        expressions = (problem.oracle or {}) if problem else {}
        if not expressions:
            return "original kernel"
        by_kernel = [a.name for a in problem.outputs if a.name not in expressions]  # type: ignore[union-attr]
        if not by_kernel:
            return "PyTorch expression"
        return f"PyTorch expression for {', '.join(expressions)}, original kernel for {', '.join(by_kernel)}"

    @property
    def usable(self) -> bool:
        """Candidates can only be judged against a baseline that compiled and passed its own checks."""
        return self.kernel is not None and self.verification is not None and self.verification.passed


@dataclass
class Progress:
    """What a long job reports to the CLI progress bar or the editor."""

    kernel: str
    total: int = 0
    done: int = 0
    best_speedup: float = 1.0
    message: str = ""
    results: list[CandidateResult] = field(default_factory=list)
    # While the LLM proposer runs: its turn (1-based) of max_turns, and its estimated cost so far.
    turn: int = 0
    max_turns: int = 0
    cost_usd: float = 0.0


class Engine:
    """Thread-safe: several kernels' searches may share one engine (repository mode), their requests
    spread over the executor's GPUs."""

    def __init__(
        self,
        settings: EngineSettings | None = None,
        cache: ResultCache | None = None,
        pool: PoolSettings | None = None,
        recorder: CandidateLog | None = None,
    ) -> None:
        self.settings = settings or EngineSettings()
        self.cache = cache or ResultCache(enabled=self.settings.use_cache)
        self.pool = pool or PoolSettings()
        # Each candidate evaluated and each PyTorch timing: a sample in the feedback log (candidate_log.py).
        self.recorder = recorder if recorder is not None else process_log()
        self._executor: Executor | None = None
        self._device: DeviceInfo | WorkerError | None = None
        self._device_lock = threading.Lock()
        self._open_lock = threading.Lock()

    # -- the GPU ---------------------------------------------------------------------------------------

    def device(self) -> DeviceInfo | WorkerError:
        """The GPU with measured ceilings (measured once per device and cached), or why there is none."""
        with self._device_lock:
            if self._device is None:
                executor = self._opened()
                info = executor.device_info(measure_ceilings=False)
                if isinstance(info, DeviceInfo):
                    key = result_key("ceilings", info.name, info.compute_capability, info.driver_version)
                    ceilings = self.cache.get(key)
                    if ceilings is None:
                        measured = executor.device_info(measure_ceilings=True)
                        ceilings = measured.ceilings if isinstance(measured, DeviceInfo) else None
                        if ceilings is not None:
                            self.cache.set(key, ceilings)
                    info = replace(info, ceilings=ceilings)
                self._device = info
            return self._device

    def _opened(self) -> Executor:
        """The executor, opened on first use (a Ray pool joins its cluster and starts its actors then)."""
        with self._open_lock:
            if self._executor is None:
                self._executor = open_executor(self.pool, self.settings.gpu_index, self.settings.timeout_s)
            return self._executor

    @property
    def executor(self) -> Executor:
        """Where requests run (opened by the first device query)."""
        self.device()
        assert self._executor is not None
        return self._executor

    @property
    def gpu(self) -> DeviceInfo | None:
        device = self.device()
        return device if isinstance(device, DeviceInfo) else None

    @property
    def arch(self) -> str:
        if self.settings.arch:
            return self.settings.arch
        return self.gpu.arch if self.gpu else DEFAULT_ARCH

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
        self.cache.close()

    def kill(self) -> None:
        """Stop now, from any thread, for a process that is leaving: the GPU worker and every compiler or
        sanitizer process still running are killed (a step on the engine's thread may be minutes from
        its end, and `close` would wait for it)."""
        if self._executor is not None:
            self._executor.kill()
        kill_running()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- steps -----------------------------------------------------------------------------------------

    def compile(self, target: KernelTarget, source: str, candidate: Candidate | None = None) -> CompileResult:
        environment = self.environment(target)
        if candidate is not None and candidate.include_dir:
            environment = environment.searching_first(candidate.include_dir)
        return compile_in(
            environment,
            source,
            (candidate.kernel_name if candidate else None)
            or target.name_expression_at(candidate.block if candidate else None, source),
            filename=str(target.path),
            arch=self.arch,
            flags=candidate.flags if candidate else (),
        )

    def environment(self, target: KernelTarget) -> CompileEnvironment:
        """Where the target's file finds its headers, and its macros and flags: the file's folder, the
        settings, its spec's, its compile_commands.json entry's (read again only when that file changes)."""
        spec = target.spec
        return environment_for(
            target.path,
            self.settings.include_dirs,
            self.settings.defines,
            self.settings.nvcc_flags,
            spec_include_dirs=spec.include_dirs if spec is not None else (),
            spec_flags=spec.flags if spec is not None else (),
        )

    def device_key(self) -> tuple[object, ...]:
        gpu = self.gpu
        return (gpu.name, gpu.compute_capability, gpu.driver_version) if gpu else ("no-gpu",)

    def baseline(self, target: KernelTarget) -> Baseline:
        """Compile the original, verify it (against its oracle, or against itself: guards, inputs unchanged,
        unwritten outputs, determinism), drop an automatic extra size it cannot run, and time it."""
        assert target.spec is not None, "a target without a spec cannot be run"
        # an inferred spec's integer positions drawn within the buffers they index (agent/index_ranges.py)
        spec = with_index_ranges(target) or target.spec
        problems, launches, automatic = problems_for(spec)
        compiled = self.compile(target, target.source)
        if not compiled.ok or compiled.kernel is None:
            return Baseline(target, spec, problems, None, compiled)
        kernel = KernelUnderTest(compiled.kernel, launches, label="original")
        device = self.device()
        if isinstance(device, WorkerError):
            return Baseline(target, spec, problems, kernel, compiled, error=device)
        key = result_key("baseline", kernel.compiled, problems, launches, self.device_key(), self.settings)
        cached = self.cache.get(key)
        if isinstance(cached, Baseline):
            return replace(cached, target=target)
        notes: list[str] = []
        report = self._sandbox_verify(
            VerifyRequest(kernel, problems, _reference_for(problems, kernel), self.settings.input_sets)
        )
        if isinstance(report, WorkerError):
            return Baseline(target, spec, problems, kernel, compiled, error=report)
        if not report.passed and automatic and report.failures[0].problem == problems[-1].label:
            # The original itself cannot run at the size we made up: try the next automatic size (one that
            # keeps the sizes' power-of-two factors), then the benchmark size alone.
            failed = []
            for point in [*automatic_verify_points(spec)[1:], None]:
                failed.append(f"{problems[-1].label} ({report.failures[0].check})")
                problems, launches, _ = problems_for(spec, verify_points=[point] if point else [])
                kernel = KernelUnderTest(compiled.kernel, launches, label="original")
                report = self._sandbox_verify(
                    VerifyRequest(
                        kernel, problems, _reference_for(problems, kernel), self.settings.input_sets
                    )
                )
                if isinstance(report, WorkerError):
                    return Baseline(target, spec, problems, kernel, compiled, error=report)
                if point is None or report.passed or report.failures[0].problem != problems[-1].label:
                    break
            kept = (
                f"kept {problems[-1].label}" if len(problems) > 1 else "verified at the benchmark size only"
            )
            notes.append(
                f"the original kernel fails at the automatic extra size{'s' if len(failed) > 1 else ''} "
                f"{' and '.join(failed)}; {kept}. Add [verify] sizes."
            )
        timing = None
        if report.passed:
            timed = self._sandbox_time(self._time_request((kernel,), problems[0], reference=None))
            if isinstance(timed, WorkerError):
                return Baseline(
                    target, spec, problems, kernel, compiled, report, error=timed, notes=tuple(notes)
                )
            timing = timed.reports[0]
        result = Baseline(target, spec, problems, kernel, compiled, report, timing, notes=tuple(notes))
        self.cache.set(key, result)
        return result

    def evaluate(
        self,
        baseline: Baseline,
        candidates: Sequence[Candidate],
        progress: Progress | None = None,
        on_result: Callable[[CandidateResult], None] | None = None,
        keep_going: Callable[[], bool] | None = None,
        screen: bool = False,
    ) -> list[CandidateResult]:
        """Compile the candidates in parallel on the CPU and verify and time each on the GPU in turn, the
        first while the others still compile; while `keep_going()` (a search's time budget): the
        candidates left then are not evaluated. With `screen` (a search), each is verified on
        `screen_input_sets` input sets only: `confirm` verifies the one to be shown on all of them."""
        pool = ThreadPoolExecutor(max_workers=4)
        compiled = [pool.submit(self.compile, baseline.target, c.source, c) for c in candidates]
        try:
            return self._evaluate_compiled(
                baseline, candidates, compiled, progress, on_result, keep_going, screen
            )
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # a search stopped early: no wasted compiles

    def _evaluate_compiled(
        self,
        baseline: Baseline,
        candidates: Sequence[Candidate],
        compiled: list[Future[CompileResult]],
        progress: Progress | None,
        on_result: Callable[[CandidateResult], None] | None,
        keep_going: Callable[[], bool] | None,
        screen: bool,
    ) -> list[CandidateResult]:
        """Each candidate on the next free worker, as many at once as the executor has workers; results in
        the candidates' order, `on_result` called as each ends (one call at a time)."""
        lock = threading.Lock()
        results: dict[int, CandidateResult] = {}

        def run(index: int, candidate: Candidate, compiling: Future[CompileResult]) -> None:
            result = self._evaluate_one(baseline, candidate, compiling.result(), screen)
            self.recorder.candidate(baseline, result, self.gpu, self.arch)
            with lock:
                results[index] = result
                if progress is not None:
                    progress.done += 1
                    progress.results.append(result)
                    if result.faster and result.speedup:
                        progress.best_speedup = max(progress.best_speedup, result.speedup)
                if on_result is not None:
                    on_result(result)

        workers = self._opened().workers
        if workers <= 1:
            for index, (candidate, compiling) in enumerate(zip(candidates, compiled, strict=True)):
                if keep_going is not None and not keep_going():
                    break
                run(index, candidate, compiling)
            return [results[i] for i in sorted(results)]
        # A candidate starts only when a worker is free, so `keep_going` (the budget) is asked when it
        # could start, as in the sequential loop, not once for the whole batch.
        free = threading.Semaphore(workers)
        raised = threading.Event()  # a callback stopped the search (the server's cancel): start no more

        def run_and_free(index: int, candidate: Candidate, compiling: Future[CompileResult]) -> None:
            try:
                run(index, candidate, compiling)
            except BaseException:
                raised.set()
                raise
            finally:
                free.release()

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cuda-agent-candidate") as threads:
            running = []
            for index, (candidate, compiling) in enumerate(zip(candidates, compiled, strict=True)):
                free.acquire()
                if raised.is_set() or (keep_going is not None and not keep_going()):
                    free.release()
                    break
                running.append(threads.submit(run_and_free, index, candidate, compiling))
            for future in running:
                future.result()  # a bug of ours in one candidate's evaluation is raised here, as before
        return [results[i] for i in sorted(results)]

    def _evaluate_one(
        self, baseline: Baseline, candidate: Candidate, compiled: CompileResult, screen: bool = False
    ) -> CandidateResult:
        if not compiled.ok or compiled.kernel is None:
            return CandidateResult(candidate, compiled)
        input_sets = self._input_sets(screen)
        purpose = "screened" if input_sets < self.settings.input_sets else "candidate"
        under_test = self._under_test(baseline, candidate, compiled.kernel, purpose)
        if isinstance(under_test, WorkerError):
            return CandidateResult(candidate, compiled, error=under_test)
        kernel, key = under_test
        cached = self.cache.get(key)
        if isinstance(cached, CandidateResult):
            return replace(cached, candidate=candidate, compile=compiled, cached=True)
        reference = _reference_for(baseline.problems, baseline.kernel)
        report = self._verify_against(baseline, kernel, input_sets)
        if isinstance(report, WorkerError):
            return CandidateResult(candidate, compiled, error=report)
        result = CandidateResult(candidate, compiled, report)
        if report.passed:
            timed = self._time_against(baseline, kernel, reference, self.settings.settle_early)
            if isinstance(timed, WorkerError):
                return replace(result, error=timed)
            result = replace(result, comparison=timed)
        self.cache.set(key, result)
        return result

    def _input_sets(self, screen: bool) -> int:
        full = self.settings.input_sets
        return min(full, max(1, self.settings.screen_input_sets)) if screen else full

    def screened(self, result: CandidateResult) -> bool:
        """Whether the result's verification was a search's screening, on fewer input sets than a shown
        rewrite's."""
        report = result.verification
        return report is not None and report.passed and report.input_sets < self.settings.input_sets

    def confirm(self, baseline: Baseline, result: CandidateResult) -> CandidateResult:
        """A candidate before it is shown: verified on every input set where a screening verified it on
        fewer (one that then fails is no longer verified, nor faster); and, faster with a measurement that
        settled early, measured again for the whole budget: the figures a user is shown, and hundreds of
        launches whose sampled outputs are checked (a kernel that changes after many launches is caught
        here, not only in the few dozen a screening made). Any other result is returned as it is. Cached
        like a candidate's result."""
        result = self._verified_in_full(baseline, result)
        comparison = result.comparison
        if not result.faster or comparison is None or not comparison.settled_early:
            return result
        assert result.compile.kernel is not None
        under_test = self._under_test(baseline, result.candidate, result.compile.kernel, "confirmed")
        if isinstance(under_test, WorkerError):
            return replace(result, comparison=None, error=under_test)
        kernel, key = under_test
        cached = self.cache.get(key)
        if isinstance(cached, Comparison):
            return replace(result, comparison=cached)
        reference = _reference_for(baseline.problems, baseline.kernel)
        timed = self._time_against(baseline, kernel, reference, settle_early=False)
        if isinstance(timed, WorkerError):  # unconfirmed: not shown as faster
            return replace(result, comparison=None, error=timed)
        if timed is not None:
            self.cache.set(key, timed)
        return replace(result, comparison=timed)

    def _verified_in_full(self, baseline: Baseline, result: CandidateResult) -> CandidateResult:
        if not self.screened(result) or result.compile.kernel is None:
            return result
        under_test = self._under_test(baseline, result.candidate, result.compile.kernel, "verified")
        if isinstance(under_test, WorkerError):
            return replace(result, comparison=None, error=under_test)
        kernel, key = under_test
        report = self.cache.get(key)
        if not isinstance(report, VerificationReport):
            verified = self._verify_against(baseline, kernel, self.settings.input_sets)
            if isinstance(verified, WorkerError):  # unverified: not shown
                return replace(result, comparison=None, error=verified)
            report = verified
            self.cache.set(key, report)
        if not report.passed:  # a screening's input sets passed, another did not: not a rewrite to show
            self.recorder.verification(baseline, result, report, self.gpu)  # its sample is wrong: say so
            return replace(result, verification=report, comparison=None)
        return replace(result, verification=report)

    def _verify_against(
        self, baseline: Baseline, kernel: KernelUnderTest, input_sets: int
    ) -> VerificationReport | WorkerError:
        """The candidate's kernel verified at every problem size on `input_sets` input sets, against the
        spec's oracle and the original for what the oracle leaves out."""
        reference = _reference_for(baseline.problems, baseline.kernel)
        return self._sandbox_verify(VerifyRequest(kernel, baseline.problems, reference, input_sets))

    def _under_test(
        self, baseline: Baseline, candidate: Candidate, compiled: CompiledKernel, purpose: str
    ) -> tuple[KernelUnderTest, str] | WorkerError:
        """The candidate's kernel with its launch at every problem size, and the cache key of what
        `purpose` ("candidate": verified and screened; "confirmed": timed in full) finds out about it."""
        assert baseline.kernel is not None
        launches = self._launches(baseline, candidate)
        if isinstance(launches, WorkerError):
            return launches
        key = result_key(
            purpose, baseline.kernel.compiled, compiled, baseline.problems, launches, self.device_key(),
            self.settings,
        )  # fmt: skip
        return KernelUnderTest(compiled, launches, label="candidate"), key

    def _time_against(
        self,
        baseline: Baseline,
        kernel: KernelUnderTest,
        reference: KernelUnderTest | None,
        settle_early: bool,
    ) -> Comparison | WorkerError | None:
        """The candidate timed interleaved with the original at the benchmark size; failures of its timed
        runs' outputs make it not faster."""
        assert baseline.kernel is not None
        pair = (_first(baseline.kernel), _first(kernel))
        timed = self._sandbox_time(self._time_request(pair, baseline.problems[0], reference, settle_early))
        if isinstance(timed, WorkerError):
            return timed
        comparison = timed.comparison
        if comparison is not None and timed.failures:
            comparison = replace(comparison, timed_output_failures=timed.failures, faster=False)
        return comparison

    def time_torch(
        self, baseline: Baseline, budget_s: float | None = None, compile: bool = True
    ) -> TorchTimingResult | WorkerError:
        """The spec's PyTorch oracle at the benchmark size, timed eager and with `torch.compile`: what a
        user would otherwise run, so what a rewrite is compared with. Cached by the problem and the device
        like other results, and by the installed torch version (read from its metadata, not imported)."""
        problem = baseline.problems[0] if baseline.problems else None
        if problem is None or not problem.oracle:
            return TorchTimingResult(None, None, "the spec has no PyTorch oracle: no reference to time")
        left_out = [a.name for a in problem.outputs if a.name not in problem.oracle]
        if left_out:
            return TorchTimingResult(
                None, None, f"the PyTorch oracle leaves out {', '.join(left_out)}: torch would do less work"
            )
        device = self.device()
        if isinstance(device, WorkerError):
            return device
        ceilings = device.ceilings
        request = TimeTorchRequest(
            problem,
            budget_s=budget_s or self.settings.time_budget_s,
            ceilings_bandwidth_gbs=ceilings.copy_bandwidth_gbs if ceilings else None,
            ceilings_tflops=ceilings.flops_tflops.get(problem.flop_dtype) if ceilings else None,
            compile=compile,
        )
        key = result_key("torch", request, self.device_key(), _installed_version("torch"))
        cached = self.cache.get(key)
        if isinstance(cached, TorchTimingResult):
            self.recorder.torch(baseline, cached, device)
            return cached
        # torch.compile's long first call is announced by the worker's heartbeats, not taken for a hang.
        result = self.executor.time_torch(request)
        if isinstance(result, TorchTimingResult) and result.eager is not None:
            self.cache.set(key, result)
            self.recorder.torch(baseline, result, device)
        return result

    def sanitize(
        self, baseline: Baseline, result: CandidateResult, settings: SanitizerSettings | None = None
    ) -> SanitizerReport:
        """The candidate under compute-sanitizer (memcheck, racecheck, synccheck, initcheck; the sizes each
        runs: SanitizerSettings), compiled again with -lineinfo so that findings name lines of its file. The
        GPU is held meanwhile: no verify or time request runs beside it. Cached like other results by the
        kernel, the problems, the launches and the device; a report that could not check is not kept."""
        settings = settings or SanitizerSettings()
        executable = self._opened().sanitizer()  # where the GPUs are
        if executable is None:
            return not_checked(NOT_FOUND)
        device = self.device()
        if isinstance(device, WorkerError):
            return not_checked(f"no GPU ({device.message})", executable=executable)
        candidate = result.candidate
        flags = candidate.flags if "-lineinfo" in candidate.flags else (*candidate.flags, "-lineinfo")
        compiled = self.compile(baseline.target, candidate.source, replace(candidate, flags=flags))
        if not compiled.ok or compiled.kernel is None:
            why = compiled.errors[0].message if compiled.errors else "no kernel"
            return not_checked(f"it does not compile with -lineinfo ({why})", executable=executable)
        launches = self._launches(baseline, candidate)
        if isinstance(launches, WorkerError):
            return not_checked(launches.message, executable=executable)
        key = result_key(
            "sanitizer", compiled.kernel, baseline.problems, launches, self.device_key(), settings,
            executable,
        )  # fmt: skip
        cached = self.cache.get(key)
        if isinstance(cached, SanitizerReport):
            return cached
        request = SanitizerRequest(
            compiled.kernel, baseline.problems, launches, candidate.source, str(baseline.target.path),
        )  # fmt: skip
        report = self.executor.sanitize(request, settings)  # on a worker's GPU, holding it
        if report.status != "not_checked":
            self.cache.set(key, report)
        return report

    def _launches(self, baseline: Baseline, candidate: Candidate) -> tuple[LaunchPlan, ...] | WorkerError:
        """The candidate's launch at every problem size: its own launch spec, else the original's grid
        expressions with the candidate's block."""
        if candidate.launch is not None:
            spec = replace(baseline.spec, launch=candidate.launch)
        else:
            spec = with_block(baseline.spec, candidate.block)
        try:
            return tuple(resolve(spec, p.sizes)[1] for p in baseline.problems)
        except SpecResolveError as exc:
            return WorkerError("bad_request", f"launch of the candidate: {exc}")

    def _time_request(
        self,
        kernels: tuple[KernelUnderTest, ...],
        problem: Problem,
        reference: KernelUnderTest | None,
        settle_early: bool = False,
    ) -> TimeRequest:
        ceilings = self.gpu.ceilings if self.gpu else None
        flop_rate = ceilings.flops_tflops.get(problem.flop_dtype) if ceilings else None
        return TimeRequest(
            kernels=kernels,
            problem=problem,
            reference=_first(reference) if reference else None,
            budget_s=self.settings.time_budget_s,
            ceilings_bandwidth_gbs=ceilings.copy_bandwidth_gbs if ceilings else None,
            ceilings_tflops=flop_rate,
            settle_early=settle_early,
        )

    def _sandbox_verify(self, request: VerifyRequest) -> VerificationReport | WorkerError:
        return self.executor.verify(request)

    def _sandbox_time(self, request: TimeRequest) -> TimingResult | WorkerError:
        return self.executor.time(request)


def _reference_for(problems: Sequence[Problem], original: KernelUnderTest) -> KernelUnderTest | None:
    """The original kernel as the oracle of every output the spec's PyTorch oracle leaves out (all of them
    without one); None when the expressions cover every output."""
    if not problems:
        return original
    expressions = problems[0].oracle or {}
    return None if all(a.name in expressions for a in problems[0].outputs) else original


def _first(kernel: KernelUnderTest) -> KernelUnderTest:
    """The kernel with only its benchmark-size launch: timing runs the benchmark problem alone."""
    return replace(kernel, launches=kernel.launches[:1])


def _installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
