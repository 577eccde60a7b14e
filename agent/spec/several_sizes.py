"""The layout of a kernel over several integer sizes: darknet's `normalize_kernel(N, x, mean, variance,
batch, filters, spatial)` (a flat index taken apart into pieces), `mean_kernel` (a thread per filter
looping over the batch and the spatial positions), a bias added over `n * size * batch`, a 2-D kernel over
rows a pitch apart read from a shifted start.

Each buffer is as long as the analysis finds its accesses reach (analysis/reach.py), an expression of the
sizes (`batch*filters*spatial`, `filters`), so it holds at any sizes. The sizes are chosen for the work:
the benchmark starts from 2^24 threads and sizes of 1024 and halves the largest size of whatever is over
its cap (a buffer's elements, the threads times one thread's loop iterations, one thread's iterations)
until all fit; verification runs at small, distinct odd sizes (a rewrite that swaps two sizes does not
pass), fitted the same way. Sizes at which the original would race (two threads storing to one element)
or read before a buffer's start are refused, as is a kernel whose reach is not known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from cuda_agent.agent.kernels import Kernel, Parameter
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate, referenced_names
from cuda_agent.agent.spec.model import KernelSpec, LaunchSpec
from tree_sitter import Node

if TYPE_CHECKING:  # the analysis reads targets, which read specs
    from cuda_agent.agent.analysis.forms import Form
    from cuda_agent.agent.analysis.reach import Reach

BENCH_THREADS = 1 << 24
BENCH_SIZE = 1024  # a size the threads do not count, before fitting
VERIFY_THREADS = 100_003
VERIFY_SIZES = (7, 5, 11, 3, 13, 9, 17, 19, 15, 23, 21, 29, 27, 31, 25, 37)  # distinct, small, odd


@dataclass(frozen=True)
class Caps:
    elements: int  # of any one buffer
    work: int  # the threads times the loop iterations of one thread
    # one thread's loop iterations: a thread per channel looping over a batch of planes is latency-bound,
    # and an original that takes 100 ms leaves the search's measurements few
    thread_work: int


BENCH_CAPS = Caps(elements=1 << 25, work=1 << 28, thread_work=1 << 14)
VERIFY_CAPS = Caps(elements=1 << 21, work=1 << 24, thread_work=1 << 12)
_MOST_HALVINGS = 400


@dataclass(frozen=True)
class Sized:
    """What the layout needs: the threads (an expression), each buffer's shape, the sizes."""

    threads: tuple[str, ...]  # along x, then y
    shapes: dict[str, str]
    bench: dict[str, int]
    verify: dict[str, int]
    summary: str
    block_only: tuple[str, ...] = ()  # axes a block covers one index along (reach.Reach.block_only)


def several_sizes(
    kernel: Kernel,
    source: str,
    body: Node,
    instantiate: str | None,
    sizes: Sequence[Parameter],
    path: Path | None = None,
    rank: int = 1,
) -> Sized | str:
    """The threads, shapes and sizes of a kernel over the integer parameters `sizes` (`rank` 2: a thread
    per (y, x), both bounded by the guard; 3: per (z, y, x)), or why not. `path`: the file's, whose own
    headers' #defines the analysis reads (`BLOCK_SIZE * blockIdx.x + threadIdx.x`)."""
    # The analysis reads targets, which read specs: imported here, once a spec is being inferred.
    from cuda_agent.agent.analysis import analyse, assigned_names
    from cuda_agent.agent.analysis.reach import GLOBAL, evaluate_form, reach
    from cuda_agent.agent.proposers.tree import KernelTree
    from cuda_agent.agent.targets import KernelTarget

    names = frozenset(p.name for p in sizes)
    axes = ("x", "y", "z")[:rank]
    # A provisional launch of that rank: under a 1-D one blockIdx.y reads as 0 (a line of blocks is x).
    launch = LaunchSpec(BLOCKS[rank], ("1",) * rank)
    provisional = KernelSpec(kernel.name, (), launch, instantiate=instantiate)
    target = KernelTarget(path or Path("kernel.cu"), source, kernel, provisional)
    assert body.parent is not None  # a compound statement is never the root
    facts = analyse(KernelTree(target, source.encode("utf-8"), body.parent, body))
    if facts is None:
        return "the body is beyond the analysis"
    if facts.unmodelled:
        return "an access the analysis cannot place (a 2-D array, shared or local memory, a lost pointer)"
    assigned = assigned_names(body)
    moved = sorted(p.name for p in kernel.parameters if p.is_pointer and p.name in assigned)
    if moved:  # `out = out + y * pitch + x;`: where it points is no longer the buffer's start
        return f"{', '.join(moved)} moved in the body"
    found = reach(facts, names, axes)
    if isinstance(found, str):
        return found
    counted = {atom for bound in found.threads for atom in bound.atoms()}
    if counted & set(GLOBAL.values()):
        return "the thread count depends on the threads"
    total = found.threads[0]
    for more in found.threads[1:]:
        total = total * more
    leading = {atom for bound in found.threads for atom in _leading_atoms(bound)}
    bench_start = _start(leading, names, BENCH_THREADS, (BENCH_SIZE,), power_of_two=True)
    verify_start = _start(leading, names, VERIFY_THREADS, VERIFY_SIZES, power_of_two=False)
    # a size that scales the index in a store is a pitch whatever its name (`b * offset`): fitted, not 0
    pitches = {atom for form in found.separations for atom in form.atoms()} - counted
    for name in names - pitches:
        if (by_name := _by_name(name)) is not None:
            bench_start[name], verify_start[name] = by_name
    shapes = {array: _max_text(_undominated(forms)) for array, forms in found.needed.items()}
    costs = [total * w for w in found.work] or [total]
    # Divisors and counts that must stay at least 1 (a window wider than its row makes `h - k + 1` negative).
    positive = [*found.threads, *(f for forms in found.needed.values() for f in forms)]
    positive += [
        denominator
        for _, _, denominator in facts.atoms.operations.values()
        if denominator.atoms() and denominator.atoms() <= names
    ]
    positive += _one_store_a_thread(found.stored, found.threads, GLOBAL, bench_start)
    positive += found.separations if rank == 1 else []
    fitted = []
    for start, caps in ((bench_start, BENCH_CAPS), (verify_start, VERIFY_CAPS)):
        capped = [(text, caps.elements) for text in shapes.values()]
        capped += [(c.text(), caps.work) for c in costs] + [(w.text(), caps.thread_work) for w in found.work]
        values = _fit(start, capped, names, positive)
        if isinstance(values, str):
            return values
        for array, lows in found.lowest.items():
            try:
                lowest = min(evaluate_form(low, values) for low in lows)
            except ExpressionError as exc:
                return f"{array}: {exc}"
            if lowest < 0:
                return f"{array} is read {-lowest} elements before its start at {_listed(values)}"
        fitted.append(values)
    bench, verify = fitted
    for values in () if rank > 1 else fitted:
        if (clash := _stored_twice(found, values)) is not None:
            return clash
    threads = tuple(bound.text() for bound in found.threads)
    summary = f"{' × '.join(threads)} threads; {_listed(bench)}, verified at {_listed(verify)}"
    return Sized(threads, shapes, bench, verify, summary, found.block_only)


_MOST_THREADS_CHECKED = 1 << 18
# The block of each rank: 256 threads, a warp along x (a 3-D one 4 rows by 2 planes: a plane's neighbours
# along y and z stay in L1 for the block).
BLOCKS = {1: (256,), 2: (32, 8), 3: (32, 4, 2)}


def block_for(rank: int, block_only: tuple[str, ...]) -> tuple[int, ...]:
    """The rank's block, one thread along the axes a block covers one index of, their threads along x."""
    block = list(BLOCKS[rank])
    for axis in block_only:
        index = "xyz".index(axis)
        block[0], block[index] = block[0] * block[index], 1
    return tuple(block)


def _stored_twice(found: Reach, values: Mapping[str, int]) -> str | None:
    """Why the sizes are refused where two threads of a 1-D launch store to one element at them (the
    original would race: darknet's shortcut kernel at sizes its host code would not pick)."""
    for form in found.stored:
        offsets = found.offsets(form, values, _MOST_THREADS_CHECKED)  # the first threads: enough to see
        if offsets is not None and offsets.size > 1 and len(np.unique(offsets)) < offsets.size:
            sizes = _listed(values)
            return f"two threads store to one element at {sizes}: its sizes relate in a way not read here"
    return None


def _one_store_a_thread(
    stored: list[Form], threads: tuple[Form, ...], globals_: Mapping[str, str], values: Mapping[str, int]
) -> list[Form]:
    """Forms to keep at least 1 so that no two threads store to one element: where a store's offset is
    `cy * y + cx * x + ...`, the outer stride covers the inner axis (`cy >= cx * width`: a pitch at least
    a row's length); which axis is outer is read at the starting sizes."""
    from cuda_agent.agent.analysis.forms import Form  # see several_sizes: imported once inferring

    kept: list[Form] = []
    if len(threads) < 2:
        return kept
    for offset in stored:
        cx, cy = (offset.coefficient(globals_[axis]) for axis in ("x", "y"))
        if cx is None or cy is None or not cx.terms or not cy.terms:
            continue
        try:
            outer_y = evaluate(cy.text(), values) >= evaluate(cx.text(), values)
        except ExpressionError:
            continue
        outer, inner, count = (cy, cx, threads[0]) if outer_y else (cx, cy, threads[1])
        kept.append(outer - inner * count + Form.constant(1))
    return kept


def _leading_atoms(form: Form) -> set[str]:
    """The sizes of the form's positive terms of the highest degree: those that share the threads
    (`n - offset`: n alone; `batch * spatial`: both)."""
    positive = [monomial for monomial, coefficient in form.terms.items() if coefficient > 0]
    degree = max((len(monomial) for monomial in positive), default=0)
    return {atom for monomial in positive if len(monomial) == degree for atom in monomial}


def _start(
    counted: set[str], names: frozenset[str], threads: int, others: Sequence[int], power_of_two: bool
) -> dict[str, int]:
    """The sizes before fitting: the threads' sizes sharing `threads` between them, the others from
    `others` in turn (distinct where it has enough values)."""
    by_threads = sorted(counted & names)
    values: dict[str, int] = {}
    if by_threads:
        share = threads ** (1 / len(by_threads))
        for position, name in enumerate(by_threads):
            if power_of_two:
                values[name] = 1 << round(share).bit_length() - 1 if len(by_threads) > 1 else threads
            else:
                values[name] = (round(share) + 2 * position) | 1 if len(by_threads) > 1 else threads
    rest = [name for name in sorted(names) if name not in values]
    for position, name in enumerate(rest):
        values[name] = others[position % len(others)]
    return values


def _fit(
    values: dict[str, int], capped: list[tuple[str, int]], names: frozenset[str], positive: list[Form]
) -> dict[str, int] | str:
    """The sizes with, first, the largest size that makes a divisor or count below 1 halved, then the
    largest size of whatever is over its cap (`capped`: expression, cap), until nothing is."""
    values = dict(values)
    for _ in range(_MOST_HALVINGS):
        try:
            below = next((f for f in positive if evaluate(f.text(), values) < 1), None)
        except ExpressionError as exc:
            return str(exc)
        if below is not None:
            against = {a for m, c in below.terms.items() if c < 0 for a in m if a in names and values[a] > 1}
            if not against:
                return f"{below.text()} is below 1 at {_listed(values)}"
            name = max(against, key=lambda n: (values[n], n))
            values[name] = _halved(values[name])
            continue
        worst, over = None, 1.0
        for text, cap in capped:
            try:
                ratio = evaluate(text, values) / cap
            except ExpressionError as exc:
                return f"{text}: {exc}"
            if ratio > over:
                worst, over = text, ratio
        if worst is None:
            return values
        shrinkable = [n for n in referenced_names(worst, names) if values[n] > 1]
        if not shrinkable:
            return f"{worst} is over {dict(capped)[worst]} at the smallest sizes"
        name = max(shrinkable, key=lambda n: (values[n], n))
        values[name] = _halved(values[name])
    return "the sizes did not fit their caps"


def _halved(value: int) -> int:
    """Half, kept odd where it was (verify sizes stay odd: a rewrite that assumes even sizes fails)."""
    return max(1, value // 2) | (value & 1)


# Sizes whose names say what they are: a stride (1 at the benchmark, the elements one after another, and 2
# when verifying), an offset (0, and 3), a convolution or pooling window (3), a padding (1). Any other size
# is fitted to the work (a pitch or a leading dimension too: kept at least a row's length, see
# `_one_store_a_thread`).
_NAMED = (
    (re.compile(r"(?i)^(inc[a-z]?|stride(_?[a-z])?|strides|step)$"), (1, 2)),
    (re.compile(r"(?i)(^|_)(offset|off)(_|$)|^offset|offset$|^(start|begin|first)$"), (0, 3)),
    # `K` alone is often a count of output channels: only a lower-case k is taken for a window
    (re.compile(r"^(k|ks|k[lhwLHW])$|^(?i:ksize|kernel_?size|filter_?size|window|win)$"), (3, 3)),
    (re.compile(r"(?i)^pad(ding)?$"), (1, 1)),
)


def _by_name(name: str) -> tuple[int, int] | None:
    return next((values for pattern, values in _NAMED if pattern.search(name)), None)


def _undominated(forms: list[Form]) -> list[str]:
    """The forms no other is at least everywhere (`3*n` over `n` and `3*n - 2`: every atom is never
    negative, so a difference with no negative coefficient is never negative)."""
    kept = [
        f
        for i, f in enumerate(forms)
        if not any(
            j != i and all(c >= 0 for c in (g - f).terms.values())  # forms come distinct
            for j, g in enumerate(forms)
        )
    ]
    return [f.text() for f in kept]


def _max_text(texts: list[str]) -> str:
    return texts[0] if len(texts) == 1 else f"max({', '.join(texts)})"


def _listed(values: Mapping[str, int]) -> str:
    return ", ".join(f"{name} = {value}" for name, value in values.items())
