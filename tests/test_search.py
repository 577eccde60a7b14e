"""The search loop: rounds, combination of what helped, budgets, stopping. Candidates are real (proposed by
the real proposers, compiled by NVRTC); only the GPU's verdict is made up, at the one boundary the search
has with the GPU (`evaluate`), from a table of speedups by proposer lineage."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate, CandidateResult
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.engine import Baseline, Progress
from cuda_agent.agent.optimize import PROPOSERS, explain
from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.proposers.transforms import TRANSFORMS
from cuda_agent.agent.search import (
    SearchBudget,
    SearchOutcome,
    beam,
    combine,
    follow_ups,
    helped,
    improved,
    interleave,
    lineage,
    run_search,
)
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.reports import (
    CheckFailure,
    Comparison,
    CompileResult,
    TimingReport,
    VerificationReport,
)

ROOT = Path(__file__).resolve().parents[1]
BASELINE_MS = 1.0


def scale_add() -> KernelTarget:
    target = load_targets(ROOT / "tests" / "kernels" / "original_scale_add.cu").find("scale_add")
    assert target is not None and target.spec is not None
    return target


def verdict(candidate: Candidate, speedup: float) -> tuple[VerificationReport, Comparison]:
    """What the GPU would say: verified, and this much faster (beyond noise when above 1.05)."""
    ms = BASELINE_MS / speedup
    comparison = Comparison(
        baseline=TimingReport("original", BASELINE_MS, 0.99 * BASELINE_MS, 1.01 * BASELINE_MS, 50),
        candidate=TimingReport("candidate", ms, 0.99 * ms, 1.01 * ms, 50),
        speedup=speedup,
        ratio_ci=(0.98 / speedup, 1.02 / speedup),
        faster=speedup > 1.05,
        slower=speedup < 0.95,
        decision="made up for the test",
    )
    return VerificationReport(passed=True, problems=("benchmark",), input_sets=5), comparison


class FakeGpu:
    """`evaluate` with real compiles and made-up timings: the speedup of a lineage ("vectorize+restrict")
    is the product of its steps' factors, launch-config counted only for its 512-thread block."""

    def __init__(
        self,
        factors: dict[str, float],
        clock: list[float] | None = None,
        seconds_a_batch: float = 0,
        kernel: str = "scale_add",
    ):
        self.factors = factors
        self.kernel = kernel
        self.batches: list[list[Candidate]] = []
        self.clock = clock
        self.seconds_a_batch = seconds_a_batch

    def speedup(self, candidate: Candidate) -> float:
        value = 1.0
        for step in lineage(candidate):
            if step == "launch-config" and 512 not in candidate.block:
                continue
            value *= self.factors.get(step, 1.0)
        return value

    def __call__(
        self, candidates: Sequence[Candidate], on_result: Callable[[CandidateResult], None]
    ) -> list[CandidateResult]:
        self.batches.append(list(candidates))
        if self.clock is not None:
            self.clock[0] += self.seconds_a_batch
        results = []
        for candidate in candidates:
            compiled = compile_kernel(device_source(candidate.source), self.kernel, flags=candidate.flags)
            assert compiled.ok, (candidate.description, compiled.errors)
            verification, comparison = verdict(candidate, self.speedup(candidate))
            result = CandidateResult(candidate, compiled, verification, comparison)
            results.append(result)
            on_result(result)
        return results


def search_with(
    factors: dict[str, float],
    budget: SearchBudget | None = None,
    proposers: tuple[str, ...] = ("launch-config", "vectorize", "restrict", "launch-bounds"),
    clock: list[float] | None = None,
    seconds_a_batch: float = 0.0,
) -> tuple[FakeGpu, SearchOutcome, Progress]:
    gpu = FakeGpu(factors, clock, seconds_a_batch)
    progress = Progress(kernel="scale_add")
    chosen = {name: PROPOSERS[name] for name in proposers}
    now = (lambda: clock[0]) if clock is not None else time.monotonic
    outcome = run_search(scale_add(), chosen, gpu, budget, progress, clock=now)
    return gpu, outcome, progress


def test_combines_what_helped_on_top_of_the_best() -> None:
    gpu, outcome, progress = search_with({"vectorize": 2.0, "restrict": 1.2, "launch-config": 1.1})
    assert outcome.rounds >= 2
    best = outcome.best
    assert best is not None
    # vectorize × restrict × a 512-thread block, with the block tuned on top of the vectorized launch.
    assert set(lineage(best.candidate)) == {"vectorize", "restrict", "launch-config"}
    assert abs(best.speedup - 2.0 * 1.2 * 1.1) < 1e-9
    source = best.candidate.source
    assert "float4" in source and "__restrict__" in source and "block = [512]" in source
    assert best.candidate.launch is not None and best.candidate.launch.grid == ("ceil_div(n, 4 * block.x)",)
    assert best.candidate.assumptions == ("x, y and out do not alias (no two point into the same memory)",)
    assert best.candidate.description.count(" + ") == 2
    # Nothing was evaluated twice; progress saw every result and the best speedup.
    ids = [c.id for batch in gpu.batches for c in batch]
    assert len(ids) == len(set(ids)) == len(outcome.results) == progress.done
    assert abs(progress.best_speedup - best.speedup) < 1e-9
    assert outcome.first_improvement_s is not None and outcome.notes == []


def test_an_enabling_rewrite_is_measured_with_what_it_enables_in_the_first_batch() -> None:
    # gesummv's two sums live in memory: promoting them to registers gains little alone, but makes the
    # rows a warp's each (20x on the H200). That pair must not wait for a second round the budget may
    # never reach.
    (target,) = load_targets(ROOT / "bench" / "kernels" / "outside" / "gesummv.cu").targets
    names = ("launch-config", "rewrite:promote", "rewrite:warp-per-output", "vectorize")
    gpu = FakeGpu({"rewrite:promote": 1.3, "rewrite:warp-per-output": 15.0}, kernel="gesummv")
    outcome = run_search(target, {n: PROPOSERS[n] for n in names}, gpu, SearchBudget(batch=8, rounds=1))
    first = [lineage(c) for c in gpu.batches[0]]
    assert ("rewrite:promote", "rewrite:warp-per-output") in first, first
    assert outcome.best is not None and lineage(outcome.best.candidate)[-1] == "rewrite:warp-per-output"
    assert "split across the lanes" in outcome.best.candidate.description
    # the original alone is not the warp rewrite's: its sums are stores the lanes would race on
    assert not any(lineage(c) == ("rewrite:warp-per-output",) for batch in gpu.batches for c in batch)


def test_a_chain_of_enabling_rewrites_is_measured_whole_in_the_first_round() -> None:
    # row_argmax: the maximum is behind a helper's call and the row is read twice. Written out, fused
    # into one argmax pass, split across lanes and vectorised, it is 68x on the H200; each step alone
    # gains little. The whole chain must be in the first round, not three rounds later.
    (target,) = load_targets(ROOT / "bench" / "kernels" / "outside" / "row_argmax.cu").targets
    names = ("rewrite:inline", "rewrite:fuse-passes", "rewrite:warp-per-output", "rewrite:vector-loop")
    factors = {"rewrite:fuse-passes": 2.0, "rewrite:warp-per-output": 20.0, "rewrite:vector-loop": 1.3}
    gpu = FakeGpu(factors, kernel="row_argmax")
    outcome = run_search(target, {n: PROPOSERS[n] for n in names}, gpu, SearchBudget(batch=64, rounds=1))
    first = {lineage(c) for c in gpu.batches[0]}
    assert (*names[:3], "rewrite:vector-loop") in first
    assert outcome.best is not None and len(lineage(outcome.best.candidate)) == 4
    assert "in one pass instead of two" in outcome.best.candidate.description
    assert all(len(lineage(c)) <= 4 for c in gpu.batches[0])  # the chain stops at its depth


def test_first_batch_samples_every_proposer() -> None:
    gpu, _, _ = search_with({}, SearchBudget(batch=4))
    first = gpu.batches[0]
    assert {lineage(c)[-1] for c in first} == {"launch-config", "vectorize", "restrict", "launch-bounds"}


def test_stops_after_the_first_round_when_nothing_is_faster() -> None:
    _, outcome, progress = search_with({})
    assert outcome.rounds == 1 and outcome.best is None
    assert outcome.stop_reason == "no candidate was faster"
    assert progress.best_speedup == 1.0 and outcome.first_improvement_s is None


def test_stops_when_a_round_improves_nothing() -> None:
    # vectorize helps; nothing on top of it does: round 2 runs and the search stops after it.
    _, outcome, _ = search_with({"vectorize": 2.0})
    assert outcome.rounds == 2
    assert outcome.stop_reason == "round 2 improved nothing beyond 2%"
    assert outcome.best is not None and lineage(outcome.best.candidate) == ("vectorize",)


def test_candidate_budget() -> None:
    gpu, outcome, _ = search_with({"vectorize": 2.0}, SearchBudget(candidates=5, batch=4))
    assert len(outcome.results) == 5 and [len(b) for b in gpu.batches] == [4, 1]
    assert outcome.stop_reason == "candidate budget (5) spent"


def test_time_budget_checked_between_batches() -> None:
    clock = [0.0]
    budget = SearchBudget(seconds=25, batch=2)
    gpu, outcome, _ = search_with({"vectorize": 2.0}, budget, clock=clock, seconds_a_batch=10.0)
    assert len(gpu.batches) == 3 and outcome.stop_reason == "time budget (25 s) spent"
    assert outcome.seconds == 30.0


def test_a_failing_proposer_is_reported_not_fatal() -> None:
    def broken(target: KernelTarget) -> list[Candidate]:
        raise RuntimeError("bug")

    gpu = FakeGpu({"vectorize": 2.0})
    outcome = run_search(scale_add(), {"broken": broken, "vectorize": TRANSFORMS["vectorize"]}, gpu)
    assert outcome.best is not None
    assert outcome.notes and outcome.notes[0].startswith("proposer broken failed on scale_add: RuntimeError")


def test_no_proposer_applies() -> None:
    outcome = run_search(scale_add(), {"nothing": lambda t: []}, FakeGpu({}))
    assert outcome.rounds == 0 and outcome.stop_reason == "no proposer applies to this kernel"


# -- the decisions, one by one ------------------------------------------------------------------------


def result(candidate: Candidate, speedup: float) -> CandidateResult:
    compiled = compile_kernel(device_source(candidate.source), "scale_add")
    return CandidateResult(candidate, compiled, *verdict(candidate, speedup))


def test_beam_helped_and_improved() -> None:
    target = scale_add()
    blocks = propose_launch_configs(target)
    [vector] = TRANSFORMS["vectorize"](target)
    results = [result(blocks[0], 1.0), result(blocks[1], 1.3), result(vector, 2.0), result(vector, 1.9)]
    assert [r.speedup for r in beam(results, 3)] == [2.0, 1.3]  # one per distinct source and launch
    assert helped(results) == {"vectorize", "launch-config"}
    assert improved(None, results[2], 0.02) and not improved(results[2], results[3], 0.02)
    assert not improved(results[1], None, 0.02)


def test_follow_ups() -> None:
    target = scale_add()
    [block] = [c for c in propose_launch_configs(target) if c.block == (128,)]
    names = list(PROPOSERS)
    # A tuned block is followed by __launch_bounds__ even when it helped nowhere on its own.
    assert follow_ups(block, {"vectorize"}, names) == ["vectorize", "launch-bounds"]
    [vector] = TRANSFORMS["vectorize"](target)
    # ... and vectors by float arithmetic where literals made it double (it helped nowhere alone)
    assert follow_ups(vector, {"vectorize", "restrict"}, names) == [
        "single-precision",
        "restrict",
        "launch-config",
    ]


def test_a_warp_a_block_is_followed_by_16_byte_loads() -> None:
    """The slides' reduce0 made a warp a block by block-to-loop: its lanes' strided loop is the 16-byte
    loads' to take at once (3.69x on the H100 with them), though they helped nowhere before."""
    slides = load_targets(ROOT / "bench" / "kernels" / "holdout" / "reduce_slides.cu").find("reduce0")
    assert slides is not None
    (warps,) = PROPOSERS["rewrite:block-to-loop"](slides)
    assert "rewrite:vector-loop" in follow_ups(warps, set(), list(PROPOSERS))


def test_a_tiled_gemm_keeps_its_own_block() -> None:
    """The GEMM templates load their tiles with 256 threads: another block would leave parts unloaded
    (on the H100 every such combination was rejected as unwritten), so launch tuning is not run on them."""
    conv = load_targets(ROOT / "bench" / "kernels" / "outside" / "conv2d.cu").find("conv2d_naive")
    assert conv is not None
    (gemm, *_) = PROPOSERS["rewrite:implicit-gemm"](conv)
    names = list(PROPOSERS)
    assert "launch-config" not in follow_ups(gemm, {"launch-config", "restrict"}, names)
    assert "restrict" in follow_ups(gemm, {"launch-config", "restrict"}, names)


def test_combine_keeps_the_base_launch_under_a_new_block() -> None:
    target = scale_add()
    [vector] = TRANSFORMS["vectorize"](target)
    on_vector = load_targets(target.path, vector.source).find("scale_add")
    assert on_vector is not None and on_vector.spec is not None
    [block] = [c for c in propose_launch_configs(on_vector) if c.block == (128,)]
    assert block.launch is None  # the launch-config proposer only changes the block
    combined = combine(vector, block, on_vector, target)
    assert combined.launch is not None
    assert combined.launch.block == (128,) and combined.launch.grid == ("ceil_div(n, 4 * block.x)",)
    assert combined.proposer == "vectorize+launch-config"
    assert combined.source == block.source and "block = [128]" in combined.source


def test_interleave() -> None:
    target = scale_add()
    a, b = propose_launch_configs(target)[:2], TRANSFORMS["restrict"](target)
    assert interleave([a, b, []]) == [a[0], b[0], a[1]]


def test_a_roofline_past_100_percent_says_the_byte_count_is_too_high() -> None:
    """An embedding gather read only part of its table and 'ran at 328% of the roofline': the byte count,
    not the kernel, is wrong, and the user is told how to fix it."""

    def baseline(fraction: float) -> Baseline:
        timing = TimingReport("original", 0.0133, 0.0132, 0.0135, 500, roofline_fraction=fraction,
                              bandwidth_gbs=13827.0)  # fmt: skip
        return Baseline(None, None, (), None, CompileResult(True, None), timing=timing)  # type: ignore[arg-type]

    assert "write [roofline] bytes for a true roofline" in explain(baseline(3.28), [], None)
    honest = explain(baseline(0.42), [], None)
    assert "runs at 42% of the measured roofline (13,827 GB/s)" in honest and "[roofline]" not in honest


@pytest.mark.parametrize(
    ("bound", "ceiling", "said"),
    [
        ("memory", 4200.0, "memory-bound: the original already runs at 99% of the measured copy bandwidth "
                           "(4,158 of 4,200 GB/s)"),
        ("compute", 50.8, "compute-bound: the original already runs at 71% of the measured peak "
                          "(36.1 of 50.8 TFLOP/s)"),
        # a scan whose thread 0 walks the whole array: nowhere near its bandwidth, and not held back by it
        ("memory", 415800.0, "memory-bound by its bytes, yet at only 1% of the measured copy bandwidth "
                             "(4,158 of 415,800 GB/s): the time goes elsewhere (serial work in one thread"),
    ],
)  # fmt: skip
def test_when_nothing_helps_the_explanation_names_the_bound_and_the_figures(
    bound: str, ceiling: float, said: str
) -> None:
    fraction = 0.71 if bound == "compute" else 4158.0 / ceiling
    timing = TimingReport("original", 1.0, 0.99, 1.01, 500, bandwidth_gbs=4158.0, flop_rate_tflops=36.1,
                          roofline_fraction=fraction, bound=bound, ceiling=ceiling)  # fmt: skip
    baseline = Baseline(None, None, (), None, CompileResult(True, None), timing=timing)  # type: ignore[arg-type]
    assert said in explain(baseline, [], None)


def test_when_no_rewrite_verifies_the_explanation_points_at_an_inferred_spec() -> None:
    """Every rewrite of a kernel whose inferred launch left rows unwritten failed the same check, which
    read as 'no gain': the explanation names the check and, the spec being inferred, says to check it."""
    candidates = propose_launch_configs(scale_add())[:3]
    unwritten = VerificationReport(
        passed=False,
        failures=(CheckFailure("unwritten", "out: 4194304 of 16777216 elements were never written"),),
    )
    results = [CandidateResult(c, CompileResult(True, None), unwritten) for c in candidates]
    timing = TimingReport("original", 0.068, 0.067, 0.069, 500)

    def baseline(inferred: bool) -> Baseline:
        spec = replace(scale_add().spec, inferred=inferred)  # type: ignore[type-var]
        return Baseline(None, spec, (), None, CompileResult(True, None), timing=timing)  # type: ignore[arg-type]

    said = explain(baseline(inferred=True), results, None)
    assert (
        "(0 of 3 verified); none of the 3 rewrites that compiled passed its checks (3 failed unwritten)"
        in said
    )
    assert "its spec was inferred" in said
    assert "inferred" not in explain(baseline(inferred=False), results, None)
    # one that verified (slower, say): nothing to point at
    passed = replace(results[0], verification=VerificationReport(passed=True))
    assert "none of the" not in explain(baseline(inferred=True), [passed, *results[1:]], None)
