"""The offline search: propose, evaluate in batches, keep the best verified rewrites, combine what helped.

Round 1 runs every proposer on the original kernel. Each later round takes the fastest verified
candidates so far (the beam) and runs on top of each of them the proposers that helped somewhere (plus
launch-configuration tuning, since the best block changes with the work a thread does, and
`__launch_bounds__` once a block was chosen): the proposers read the candidate's file, re-loaded, exactly
as they read the user's. The search stops at the time or candidate budget, when a round brings no gain
beyond `min_gain`, or when there is nothing new to try.

The loop talks to the GPU only through `evaluate` (Engine.evaluate in production), and every decision is
a plain function of CandidateResults, so the logic is tested on a CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cuda_agent.agent.candidates import Candidate, CandidateResult
from cuda_agent.agent.engine import Progress
from cuda_agent.agent.proposers.accessor_form import has_accessors, through_pointers
from cuda_agent.agent.proposers.idioms import block_scan
from cuda_agent.agent.proposers.normal_form import through_normal_form
from cuda_agent.agent.proposers.rewrites import (
    atomic_sum,
    block_coarsen,
    block_to_loop,
    contraction,
    fuse_passes,
    implicit_gemm,
    inline_helper,
    look_back,
    max_then_sum,
    promote,
    row_blocks,
    row_loop,
    row_registers,
    row_stage,
    shared_loop,
    stride_loop,
    vector_loop,
    warp_per_output,
    y_split,
)
from cuda_agent.agent.proposers.transforms import single_precision, vectorize, vectorize_rows
from cuda_agent.agent.targets import KernelTarget, reloaded_target, with_block

Proposer = Callable[[KernelTarget], list[Candidate]]
# Evaluate candidates in order, calling back after each result: Engine.evaluate with its baseline bound.
Evaluate = Callable[[Sequence[Candidate], Callable[[CandidateResult], None]], list[CandidateResult]]

LAUNCH_CONFIG = "launch-config"
ANALYSED = ("rewrite:", "idiom:")  # the prefixes of the proposers the kernel's analysis drives
# Proposers worth trying on top of a candidate whose lineage includes the key, helped or not.
# A loop split across lanes (or a block's threads) steps past the others: its loads are then worth
# vectorising. A sum
# moved from memory into a register is a reduction the other rewrites can take on.
FOLLOW_UPS: dict[str, tuple[str, ...]] = {
    LAUNCH_CONFIG: ("launch-bounds",),
    # ... and a row its passes each read is then worth reading once, into shared memory
    warp_per_output.PROPOSER: (vector_loop.PROPOSER, row_registers.PROPOSER, row_stage.PROPOSER),
    shared_loop.PROPOSER: (vector_loop.PROPOSER,),
    # a thread standing for several may still leave thread 0 a loop the (smaller) block can share
    block_coarsen.PROPOSER: (shared_loop.PROPOSER,),
    # the carry from the blocks before: the block's own scan is then the kernel's remaining cost
    look_back.PROPOSER: (block_scan.PROPOSER,),
    # a block's values combined by one thread's loop: the plain reduction warp-per-output splits; where
    # the rewrite gave each block one warp already (the slides' reduce0), its lanes' strided loop wants
    # 16-byte loads (H100 GPU test: 3.69x with them, 2.48x for the best the search found without)
    block_to_loop.PROPOSER: (warp_per_output.PROPOSER, vector_loop.PROPOSER),
    # a row's loop where a thread an element was: split across lanes again, the row's own work done once
    # (its atomic into the row's place, where it had one, summed first: then a plain reduction too)
    row_loop.PROPOSER: (warp_per_output.PROPOSER, atomic_sum.PROPOSER),
    # a thread's atomics one after its loop: the loop is a plain sum, split across lanes like any other
    atomic_sum.PROPOSER: (warp_per_output.PROPOSER,),
    # a row shared by several blocks: a thread then takes one 16-byte vector of it, or a few
    row_blocks.PROPOSER: (vector_loop.PROPOSER,),
    # a thread's few elements along x in a strided loop: each step then one 16-byte vector an array
    stride_loop.PROPOSER: (vector_loop.PROPOSER,),
    # loads at full bandwidth: float math that unsuffixed literals made double is then the cost left (an
    # LSTM cell's `1.0 / (1.0 + exp(-z))`: 1.08x on top of its vector loop, H100)
    vector_loop.PROPOSER: (single_precision.PROPOSER,),
    vectorize.PROPOSER: (single_precision.PROPOSER,),
    vectorize_rows.PROPOSER: (single_precision.PROPOSER,),
    # two passes made one leave a plain reduction, to split across lanes like any other
    fuse_passes.PROPOSER: (warp_per_output.PROPOSER, y_split.PROPOSER),
    # an online softmax's pair as two plain reductions: split across lanes like the classic form
    max_then_sum.PROPOSER: (warp_per_output.PROPOSER,),
    promote.PROPOSER: (warp_per_output.PROPOSER, contraction.PROPOSER, y_split.PROPOSER),
    # a helper's loop written out at its call is the kernel's own: every loop rewrite may take it
    inline_helper.PROPOSER: (
        fuse_passes.PROPOSER,
        warp_per_output.PROPOSER,
        y_split.PROPOSER,
        promote.PROPOSER,
        vector_loop.PROPOSER,
    ),
}
# Rewrites whose follow-ups also run on their candidates in the first round: those that gain little alone
# but make the kernel another rewrite's (a sum moved into a register, a helper's loop written out), and
# the lane split, whose strided loops are then worth vectorising. The combination that pays is measured
# early instead of a round later, when the budget may be spent.
CHAINED = (
    promote.PROPOSER,
    inline_helper.PROPOSER,
    fuse_passes.PROPOSER,
    max_then_sum.PROPOSER,
    warp_per_output.PROPOSER,
    shared_loop.PROPOSER,
    block_coarsen.PROPOSER,
    block_to_loop.PROPOSER,
    row_loop.PROPOSER,
    atomic_sum.PROPOSER,
    row_blocks.PROPOSER,
    stride_loop.PROPOSER,
    vector_loop.PROPOSER,
    vectorize.PROPOSER,
    vectorize_rows.PROPOSER,
    look_back.PROPOSER,
)
# Rewrites whose kernels are written for their own block (the tiled GEMMs: 256 threads, each loading its
# share of every tile): another block leaves parts of the tiles unloaded, so no launch tuning on top.
OWN_BLOCK = frozenset({contraction.PROPOSER, implicit_gemm.PROPOSER})
CHAINED_PER_PROPOSER = 2  # of each such proposer's candidates, how many get their follow-ups at once
# A chain's follow-up that is itself chained gets its own follow-ups too (a helper written out, its two
# passes fused, the pass split across lanes, its loads vectorised), this many steps deep at most.
CHAINED_DEPTH = 3


@dataclass(frozen=True)
class SearchBudget:
    seconds: float = 180.0  # wall time for the whole search of one kernel
    candidates: int = 200  # evaluated candidates, all rounds together
    batch: int = 8  # candidates compiled together; the budget is checked between batches
    beam: int = 3  # how many of the best candidates a round builds on
    rounds: int = 4
    min_gain: float = 0.02  # a round must beat the best speedup by this fraction to count


@dataclass
class SearchOutcome:
    results: list[CandidateResult] = field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0
    first_improvement_s: float | None = None  # from the start to the first verified faster candidate
    stop_reason: str = ""
    notes: list[str] = field(default_factory=list)  # proposers that failed, with the error

    @property
    def best(self) -> CandidateResult | None:
        return best_of(self.results)


# -- decisions: pure functions of results -------------------------------------------------------------


def best_of(results: Iterable[CandidateResult]) -> CandidateResult | None:
    """The verified candidate with the largest speedup that is faster beyond the measured noise."""
    return max((r for r in results if r.faster), key=lambda r: r.speedup or 0.0, default=None)


def beam(results: Iterable[CandidateResult], width: int) -> list[CandidateResult]:
    """The `width` fastest verified candidates, one per distinct source and launch."""
    chosen: list[CandidateResult] = []
    seen: set[tuple[str, object, tuple[str, ...]]] = set()
    for result in sorted((r for r in results if r.faster), key=lambda r: -(r.speedup or 0.0)):
        key = (
            result.candidate.source,
            result.candidate.launch or result.candidate.block,
            result.candidate.flags,
        )
        if key not in seen:
            seen.add(key)
            chosen.append(result)
    return chosen[:width]


def lineage(candidate: Candidate) -> tuple[str, ...]:
    """The proposers whose changes a candidate carries, first to last: "vectorize+restrict"."""
    return tuple(candidate.proposer.split("+"))


def helped(results: Iterable[CandidateResult]) -> set[str]:
    """Proposers that made some candidate faster: the last step of its lineage gets the credit."""
    return {lineage(r.candidate)[-1] for r in results if r.faster}


def follow_ups(base: Candidate, helpful: set[str], available: Iterable[str]) -> list[str]:
    """What to run on top of `base`: proposers that helped, launch tuning, and the follow-ups of its
    lineage, minus what it already carries; in the registry's order."""
    carried = set(lineage(base))
    wanted = set(helpful) | {LAUNCH_CONFIG}
    for step in carried:
        wanted |= set(FOLLOW_UPS.get(step, ()))
    if carried & OWN_BLOCK:
        wanted.discard(LAUNCH_CONFIG)
    return [name for name in available if name in wanted and name not in carried]


def combine(base: Candidate, step: Candidate, base_target: KernelTarget, original: KernelTarget) -> Candidate:
    """`step` (proposed on `base`'s file) as a candidate carrying both changes: its source, both sets of
    flags and assumptions, a description of both. A step that keeps the launch of `base`'s file but
    changes the block gets that file's grid spelled out, since the engine otherwise falls back to the
    original's grid."""
    assert base_target.spec is not None and original.spec is not None
    launch = step.launch
    if launch is None:
        own = replace(base_target.spec.launch, block=step.block)
        if own != with_block(original.spec, step.block).launch:
            launch = own
    return replace(
        step,
        description=f"{base.description} + {step.description}",
        proposer=f"{base.proposer}+{step.proposer}",
        flags=_merged(base.flags, step.flags),
        assumptions=_merged(base.assumptions, step.assumptions),
        notes=_merged(base.notes, step.notes),
        launch=launch,
    )


def interleave(groups: Sequence[Sequence[Candidate]]) -> list[Candidate]:
    """One candidate of each group in turn, so the first batch already samples every proposer and a
    verified gain comes early whichever proposer finds it."""
    ordered: list[Candidate] = []
    for position in range(max((len(g) for g in groups), default=0)):
        ordered += [group[position] for group in groups if position < len(group)]
    return ordered


def improved(previous: CandidateResult | None, current: CandidateResult | None, min_gain: float) -> bool:
    if current is None:
        return False
    if previous is None:
        return True
    return (current.speedup or 0.0) > (previous.speedup or 0.0) * (1.0 + min_gain)


def _merged(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*first, *second)))


# -- the loop ------------------------------------------------------------------------------------------


def run_search(
    target: KernelTarget,
    proposers: Mapping[str, Proposer],
    evaluate: Evaluate,
    budget: SearchBudget | None = None,
    progress: Progress | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SearchOutcome:
    budget = budget or SearchBudget()
    progress = progress or Progress(kernel=target.kernel.name)
    outcome = SearchOutcome()
    start = clock()
    tried: set[str] = set()

    def report(result: CandidateResult) -> None:
        progress.done += 1
        progress.results.append(result)
        if result.faster and result.speedup:
            if outcome.first_improvement_s is None:
                outcome.first_improvement_s = clock() - start
            progress.best_speedup = max(progress.best_speedup, result.speedup)
        if on_progress is not None:
            on_progress(progress)

    queue = _fresh(interleave(_first_round(target, proposers, outcome.notes)), tried)
    while queue:
        outcome.rounds += 1
        best_before = outcome.best
        progress.total += len(queue)
        progress.message = f"round {outcome.rounds}: {len(queue)} candidates"
        stopped = _evaluate_round(queue, evaluate, budget, outcome, report, clock, start)
        if stopped:
            outcome.stop_reason = stopped
            break
        if not improved(best_before, outcome.best, budget.min_gain):
            outcome.stop_reason = (
                "no candidate was faster"
                if outcome.best is None
                else f"round {outcome.rounds} improved nothing beyond {budget.min_gain:.0%}"
            )
            break
        if outcome.rounds >= budget.rounds:
            outcome.stop_reason = f"round limit ({budget.rounds})"
            break
        queue = _fresh(_combinations(target, proposers, outcome, budget.beam), tried)
        if not queue:
            outcome.stop_reason = "no combination left to try"
    else:
        outcome.stop_reason = outcome.stop_reason or "no proposer applies to this kernel"
    outcome.seconds = clock() - start
    progress.message = f"done: {outcome.stop_reason}"
    if on_progress is not None:
        on_progress(progress)
    return outcome


def _evaluate_round(
    queue: list[Candidate],
    evaluate: Evaluate,
    budget: SearchBudget,
    outcome: SearchOutcome,
    report: Callable[[CandidateResult], None],
    clock: Callable[[], float],
    start: float,
) -> str:
    """Evaluate the round in batches; the reason the budget stopped it, or "" when it ran to the end."""
    for first in range(0, len(queue), budget.batch):
        if clock() - start >= budget.seconds:
            return f"time budget ({budget.seconds:g} s) spent"
        room = budget.candidates - len(outcome.results)
        if room <= 0:
            return f"candidate budget ({budget.candidates}) spent"
        batch = queue[first : first + min(budget.batch, room)]
        outcome.results += evaluate(batch, report)
    if len(outcome.results) >= budget.candidates:
        return f"candidate budget ({budget.candidates}) spent"
    return ""


def _first_round(
    target: KernelTarget, proposers: Mapping[str, Proposer], notes: list[str]
) -> list[list[Candidate]]:
    """Every proposer on the original; right after a chained proposer's candidates, its follow-ups on
    them."""
    groups: list[list[Candidate]] = []
    for name, proposer in proposers.items():
        proposed = _propose(name, proposer, target, notes)
        groups.append(proposed)
        if name in CHAINED:
            for base in proposed[:CHAINED_PER_PROPOSER]:
                groups += _chained(target, proposers, base, notes)
    return groups


def _chained(
    original: KernelTarget,
    proposers: Mapping[str, Proposer],
    base: Candidate,
    notes: list[str],
    depth: int = 1,
) -> list[list[Candidate]]:
    base_target = _candidate_target(original, base)
    if base_target is None:
        return []
    groups = []
    for name in FOLLOW_UPS.get(lineage(base)[-1], ()):
        if name not in proposers:
            continue
        steps = _propose(name, proposers[name], base_target, notes)
        combined = [combine(base, step, base_target, original) for step in steps]
        groups.append(combined)
        if name in CHAINED and depth < CHAINED_DEPTH:
            for further in combined[:CHAINED_PER_PROPOSER]:
                groups += _chained(original, proposers, further, notes, depth + 1)
    return groups


def _candidate_target(original: KernelTarget, candidate: Candidate) -> KernelTarget | None:
    """A candidate's file as the target a follow-up is proposed on, with the launch the candidate runs
    with: its file's spec may not say it (an accessor kernel's written spec is the user's)."""
    target = reloaded_target(original, candidate.source, candidate.kernel_name)
    if target is None or target.spec is None:
        return None
    if candidate.launch is None:
        return target
    return replace(target, spec=replace(target.spec, launch=candidate.launch))


def _propose(name: str, proposer: Proposer, target: KernelTarget, notes: list[str]) -> list[Candidate]:
    # One proposer's bug must not cost the user every other proposer's results; it is reported instead.
    try:
        if has_accessors(target):  # rewrites read pointers: made on the kernel's pointer form
            return through_pointers(proposer, target)
        # `CUDA_KERNEL_LOOP(i, n) {` read as its `for`, ...; a grid-stride loop as a thread an element
        # for the rewrites the analysis drives
        return through_normal_form(proposer, target, grid_stride=name.startswith(ANALYSED))
    except Exception as exc:
        notes.append(f"proposer {name} failed on {target.kernel.name}: {type(exc).__name__}: {exc}")
        return []


def _combinations(
    original: KernelTarget, proposers: Mapping[str, Proposer], outcome: SearchOutcome, width: int
) -> list[Candidate]:
    helpful = helped(outcome.results)
    groups: list[list[Candidate]] = []
    for base in beam(outcome.results, width):
        base_target = _candidate_target(original, base.candidate)
        if base_target is None:
            continue
        for name in follow_ups(base.candidate, helpful, proposers):
            steps = _propose(name, proposers[name], base_target, outcome.notes)
            groups.append([combine(base.candidate, step, base_target, original) for step in steps])
    return interleave(groups)


def _fresh(candidates: list[Candidate], tried: set[str]) -> list[Candidate]:
    """Candidates not evaluated before in this search (the engine's cache covers earlier runs)."""
    fresh = []
    for candidate in candidates:
        if candidate.id not in tried:
            tried.add(candidate.id)
            fresh.append(candidate)
    return fresh
