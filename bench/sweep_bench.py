"""`python -m bench.sweep_bench PATH... [--compile] [--all] [--second-round]`: the offline proposers over
code we did not write, on CPU. For every kernel of the .cu/.cuh files under PATH (a checkout of a public
repository, say): whether it gets a spec (written, or inferred, and why not), which analysis-driven
rewrites and idioms (with --all: every offline proposer, the transforms and launch tuning too) the first
round offers (chains included), any proposer that raised (a bug: a proposer declines, it never raises),
the slowest proposer calls, whether each candidate's file reads back (its spec intact, with the launch
the candidate runs), and with --compile whether each first-round candidate compiles with nvcc where the
original does. Prints the figures and the failures; exits 1 when a proposer raised or a candidate broke
its file or a compiling original.

With --second-round, a later round as the search makes it, every proposer counted as one that helped: on
each of a kernel's first `SECOND_ROUND_BASES` analysis-driven candidates, every follow-up proposer,
combined (with --compile, compiled too). A rewrite's file is then what the proposers read: a lost
function or launch shows there, not in the first round."""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.compile_environment import compile_in, environment_for
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.repository import find_sources
from cuda_agent.agent.search import (
    ANALYSED,
    Proposer,
    _candidate_target,
    _first_round,
    _propose,
    combine,
    follow_ups,
)
from cuda_agent.agent.targets import KernelTarget, load_targets

SLOW_S = 1.0  # a first round slower than this for one kernel is listed
SECOND_ROUND_BASES = 2  # with --second-round: of each kernel's analysis-driven candidates, how many


@dataclass
class Sweep:
    kernels: int = 0
    with_spec: int = 0
    offered: int = 0
    by_proposer: Counter[str] = field(default_factory=Counter)
    no_spec: Counter[str] = field(default_factory=Counter)  # the first clause of each reason
    raised: list[str] = field(default_factory=list)
    broke: list[str] = field(default_factory=list)
    slow: list[tuple[float, str]] = field(default_factory=list)
    compiled: int = 0
    combined: int = 0  # with --second-round: candidates made on a first-round candidate's file
    uninferred: int = 0  # candidates of a kernel with an inferred spec whose file infers none any more


def sweep(
    paths: Sequence[Path],
    compile_candidates: bool = False,
    arch: str = "sm_90",
    every: bool = False,
    second_round: bool = False,
) -> Sweep:
    found = Sweep()
    proposers = {name: p for name, p in PROPOSERS.items() if every or name.startswith(ANALYSED)}
    for path in find_sources(paths):
        try:
            targets = load_targets(path).targets
        except Exception:  # a bug of ours: it costs this file only
            found.raised.append(f"{path}: load_targets: {traceback.format_exc(limit=3)}")
            continue
        for target in targets:
            found.kernels += 1
            if target.spec is None:
                found.no_spec[_first_clause(target.note)] += 1
                continue
            found.with_spec += 1
            candidates = _first_round_of(found, target, proposers)
            if second_round:
                candidates += _second_round_of(found, target, candidates)
            _check_reads_back(found, target, candidates)
            if compile_candidates:
                _compile_each(found, target, candidates, arch)
    return found


def _first_round_of(found: Sweep, target: KernelTarget, proposers: dict[str, Proposer]) -> list[Candidate]:
    where = f"{target.path}:{target.kernel.name}"
    notes: list[str] = []
    started = time.perf_counter()
    try:
        groups = _first_round(target, proposers, notes)
    except Exception:
        found.raised.append(f"{where}: {traceback.format_exc(limit=4)}")
        return []
    seconds = time.perf_counter() - started
    if seconds > SLOW_S:
        found.slow.append((seconds, where))
    found.raised += [
        f"{where}: {note}" for note in notes if note.startswith("proposer ") and " failed on " in note
    ]
    candidates = [c for group in groups for c in group]
    if candidates:
        found.offered += 1
    found.by_proposer.update({c.proposer.split("+")[0] for c in candidates})
    return candidates


def _second_round_of(found: Sweep, target: KernelTarget, first: list[Candidate]) -> list[Candidate]:
    """What a later round proposes on the first analysis-driven candidates, every proposer helpful."""
    where = f"{target.path}:{target.kernel.name}"
    bases = [c for c in first if c.proposer.startswith(ANALYSED)][:SECOND_ROUND_BASES]
    combined = []
    for base in bases:
        base_target = _candidate_target(target, base)
        if base_target is None:
            found.raised.append(f"{where}: {base.proposer}: its file does not read back with a spec")
            continue
        for name in follow_ups(base, set(PROPOSERS), PROPOSERS):
            notes: list[str] = []
            steps = _propose(name, PROPOSERS[name], base_target, notes)
            found.raised += [f"{where}: on {base.proposer}: {note}" for note in notes]
            combined += [combine(base, step, base_target, target) for step in steps]
    found.combined += len(combined)
    return combined


def _check_reads_back(found: Sweep, target: KernelTarget, candidates: list[Candidate]) -> None:
    """Each candidate's file, as the user would get it applied, must read back: the kernel found, its spec
    without errors, and (for a written spec) the launch the candidate was verified with. A kernel whose
    spec was inferred may no longer infer one from the rewritten body: counted, not a failure (the file is
    right; the next save asks for a spec)."""
    where = f"{target.path}:{target.kernel.name}"
    assert target.spec is not None
    for candidate in candidates:
        again = load_targets(target.path, candidate.source)
        rewritten = again.find(target.kernel.name)
        if again.spec_errors or rewritten is None:
            why = again.spec_errors[0].message if again.spec_errors else "the kernel is gone"
            found.broke.append(f"{where}: {candidate.proposer}: its file does not read back: {why}")
        elif rewritten.spec is None:
            if not target.spec.inferred:
                found.broke.append(f"{where}: {candidate.proposer}: its file lost the kernel's spec")
            else:
                found.uninferred += 1
        elif candidate.launch is not None and not target.spec.inferred:
            launch = rewritten.spec.launch
            if (launch.block, launch.grid) != (candidate.launch.block, candidate.launch.grid):
                found.broke.append(f"{where}: {candidate.proposer}: its file reads back another launch")


def _compile_each(found: Sweep, target: KernelTarget, candidates: list[Candidate], arch: str) -> None:
    """Compile each candidate where the original compiles (once a kernel, both rounds' candidates
    together); a failure is a candidate that broke it."""
    if not candidates:
        return
    where = f"{target.path}:{target.kernel.name}"
    environment = environment_for(target.path)
    original = compile_in(
        environment, target.source, target.name_expression, filename=str(target.path), arch=arch
    )
    if not original.ok:
        return  # missing headers or flags: nothing a candidate could break
    for candidate in candidates:
        name = candidate.kernel_name or target.name_expression_at(candidate.block, candidate.source)
        result = compile_in(
            environment, candidate.source, name, filename=str(target.path), arch=arch, flags=candidate.flags
        )
        found.compiled += 1
        if not result.ok:
            errors = "; ".join(d.message for d in result.errors[:2])
            found.broke.append(f"{where}: {candidate.proposer} ({candidate.description[:60]}): {errors}")


def _first_clause(note: str) -> str:
    reason = note.removeprefix("no spec: ").split(";")[0]
    return reason.split(":")[0] if "element type" in reason else reason[:90]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep_bench", description=__doc__)
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files or folders of CUDA code")
    parser.add_argument("--compile", action="store_true", help="compile every first-round candidate (nvcc)")
    parser.add_argument("--arch", default="sm_90", help="compile for this target (default sm_90)")
    parser.add_argument(
        "--all", action="store_true", help="every offline proposer, not only the analysis-driven ones"
    )
    parser.add_argument(
        "--second-round",
        action="store_true",
        help="also every follow-up on each kernel's first analysis-driven candidates, as a later round",
    )
    arguments = parser.parse_args(argv)
    found = sweep(arguments.paths, arguments.compile, arguments.arch, arguments.all, arguments.second_round)
    print(
        f"kernels: {found.kernels}; with a spec: {found.with_spec}; "
        f"offered {'a candidate' if arguments.all else 'a rewrite or an idiom'}: {found.offered}"
    )
    for proposer, count in found.by_proposer.most_common():
        print(f"  {proposer}: {count} kernels")
    print("no spec, by reason:")
    for reason, count in found.no_spec.most_common(12):
        print(f"  {count:4d}  {reason}")
    if arguments.second_round:
        print(f"second-round candidates on the first analysis-driven ones: {found.combined}")
    print(f"candidates of inferred-spec kernels whose files infer no spec any more: {found.uninferred}")
    if arguments.compile:
        print(
            f"candidates compiled: {found.compiled}; broken where the original compiles: {len(found.broke)}"
        )
    for seconds, where in sorted(found.slow, reverse=True)[:10]:
        print(f"slow first round: {seconds:.2f} s {where}")
    for line in [*found.raised, *found.broke]:
        print(line, file=sys.stderr)
    return 1 if found.raised or found.broke else 0


if __name__ == "__main__":
    sys.exit(main())
