"""How far a kernel's accesses reach, as expressions of its integer parameters: the range analysis that
sizes the buffers of an inferred spec whose indices are products and pieces of several sizes.

Every atom of an access's offset gets a range: a guarded global index [0, bound) (x, and y), a loop variable
[start, bound), a piece of either (`(i / spatial) % filters`: [0, filters); `i / spatial`: [0, (bound - 1)
// spatial]), a parameter itself. A polynomial in atoms that are never negative is largest with each atom
at its top where its term adds and at its bottom where it subtracts. The bound is safe (never below what
is reached, so the original never reads past a buffer sized by it) and exact for the affine indices
kernels use: `delta[j*filters*spatial + i*spatial + k]` over j < batch, i < filters, k < spatial reaches
batch*filters*spatial elements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from cuda_agent.agent.analysis.facts import Access, KernelFacts, Loop
from cuda_agent.agent.analysis.forms import THREAD_ATOMS, Atoms, Form, exact_quotient
from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.parsing import walk
from cuda_agent.agent.spec.expressions import evaluate
from tree_sitter import Node

AXES = ("x", "y", "z")
GLOBAL = {axis: f"⟨global index {axis}⟩" for axis in AXES}  # the atoms the global indices are rewritten to
_G = {a: Form.atom(f"blockIdx.{a}") * Form.atom(f"blockDim.{a}") + Form.atom(f"threadIdx.{a}") for a in AXES}
_NEVER_NEGATIVE_BUILTINS = frozenset(
    f"{b}.{a}" for b in ("threadIdx", "blockIdx", "blockDim", "gridDim") for a in AXES
)


@dataclass(frozen=True)
class Span:
    """The smallest and the largest value of a form; None where unknown (a builtin's top)."""

    low: Form
    high: Form | None


@dataclass(frozen=True)
class Reach:
    """What one kernel's accesses reach: the threads' count and, per buffer, the lowest offsets and the
    elements needed (the largest offset + 1), as forms of the integer parameters whose `text()` is a spec
    expression (a division atom is named by its expression, `((n - 1) // spatial)`)."""

    threads: tuple[Form, ...]  # each global index's bound (x, then y): the threads that get past the guard
    lowest: dict[str, list[Form]]  # per buffer, one per distinct access form
    needed: dict[str, list[Form]]  # likewise; a spec's shape is their max
    work: list[Form]  # per access, the loop iterations one thread runs to reach it, at most
    # the offsets stored to outside loops, with `GLOBAL[axis]` for each global index (for the caller's
    # check that two threads never store to one element); a loop's unconditional stores at its first
    # iteration count too (two threads storing to one element then race, whatever the later ones do)
    stored: list[Form]
    atoms: Atoms  # what the division atoms of the forms stand for
    # forms that must stay at least 1 for two threads' stores in loops never to meet: for a store at
    # `c * i + j` (i the global index along x, j a loop counter), c - (j's span): a row pitch of at
    # least the row a thread writes (`out[b * offset + j]`, j < n: offset >= n)
    separations: list[Form] = field(default_factory=list)
    # axes along which a block covers one index (`const int b = blockIdx.z;`, no threadIdx.z anywhere):
    # the launch is one thread deep along them, its grid as long as the bound
    block_only: tuple[str, ...] = ()

    def offsets(self, form: Form, values: Mapping[str, int], most: int) -> np.ndarray | None:
        """The form's value for each of the first `most` threads of a 1-D launch at these sizes, or None
        where it reads anything but the index and the sizes (a loop counter)."""
        index = np.arange(min(evaluate_form(self.threads[0], values), most), dtype=np.int64)
        # one block as wide as the launch: blockIdx.x * blockDim.x + threadIdx.x is the thread's position
        launch = {"threadIdx.x": index, "blockIdx.x": 0, "blockDim.x": 1, "gridDim.x": 1}
        found = _evaluated(form, {GLOBAL["x"]: index, **launch, **values}, self.atoms)
        # a form the index does not move is the same element for every thread
        return None if found is None else np.broadcast_to(np.asarray(found, dtype=np.int64), index.shape)


def reach(facts: KernelFacts, sizes: frozenset[str], axes: tuple[str, ...] = ("x",)) -> Reach | str:
    """The reach of a kernel whose global index along each of `axes` is bounded by its guard (or, along
    x alone, by a grid-stride loop's condition), in terms of `sizes` (its integer parameters); why not,
    for any other kernel."""
    ranges = _Ranges(facts, sizes)
    threads = []
    for axis in axes:
        bound = ranges.threads(axis)
        if isinstance(bound, str):
            return bound
        threads.append(bound)
    lowest: dict[str, list[Form]] = {}
    needed: dict[str, list[Form]] = {}
    work: list[Form] = []
    stored: list[Form] = []
    separations: list[Form] = []
    for access in facts.accesses:
        first = _at_first_iteration(access, ranges.loops) if access.loops else access.offset
        apart = ranges.separation(access.offset, access.loops) if access.write and access.loops else None
        if apart is not None and apart not in separations:
            separations.append(apart)
        if (
            access.write
            and first is not None
            and not _stores_a_constant(access.node)
            and not _in_an_atomic(access.node)
            and (offset := ranges.in_global_indices(first)) not in stored
        ):
            stored.append(offset)
        span = ranges.span(access.offset)
        if isinstance(span, str) or span.high is None:
            why = span if isinstance(span, str) else "no largest index"
            return f"{why} in {text(access.node)}"
        for found, form in ((lowest, span.low), (needed, span.high + Form.constant(1))):
            if form not in found.setdefault(access.array, []):
                found[access.array].append(form)
        trips = ranges.trips(access.loops)
        if isinstance(trips, str):
            return trips
        work.append(trips)
    block_only = tuple(axis for axis in axes if axis in ranges.block_only)
    return Reach(tuple(threads), lowest, needed, work, stored, facts.atoms, separations, block_only)


def _at_first_iteration(access: Access, loops: Mapping[str, list[Loop]]) -> Form | None:
    """A store's offset at its loops' first iterations (each counter at its start, innermost first, so
    that an inner start naming an outer counter is resolved too); None where the store may be skipped
    then: a branch or a `continue`/`break` in the loop nest, or a loop not counted."""
    around = [_enclosing(access.node, loops.get(variable, [])) for variable in access.loops]
    if any(loop is None for loop in around):
        return None
    outermost = around[0]
    assert outermost is not None
    if any(n.type in _SKIPPING for n in walk(outermost.body)):
        return None
    offset = access.offset
    for variable, loop in zip(reversed(access.loops), reversed(around), strict=True):
        assert loop is not None
        offset = offset.substitute(variable, loop.start)
    return offset


def _enclosing(node: Node, loops: list[Loop]) -> Loop | None:
    """The loop of those (one counter's, `int i;` reused by several) whose statement holds the node."""
    at = node.start_byte
    return next((loop for loop in loops if loop.node.start_byte <= at < loop.node.end_byte), None)


_SKIPPING = frozenset(
    {"if_statement", "conditional_expression", "continue_statement", "break_statement", "return_statement"}
)


def _in_an_atomic(node: Node) -> bool:
    """`atomicAdd(&sum[k], v)`, `atomicMax(best, v)`: threads meeting at one element there do not race."""
    parent: Node | None = node  # the access itself when the analysis names the call (`atomicAdd(p, 1)`)
    while parent is not None and parent.type not in ("expression_statement", "compound_statement"):
        if parent.type == "call_expression":
            function = parent.child_by_field_name("function")
            if function is not None and text(function).split("::")[-1].startswith("atomic"):
                return True
        parent = parent.parent
    return False


def _stores_a_constant(node: Node) -> bool:
    """`out[corner] = 0;`: threads that store the same number to one element do not race."""
    parent = node.parent
    if parent is None or parent.type != "assignment_expression":
        return False
    operator, right = parent.child_by_field_name("operator"), parent.child_by_field_name("right")
    constant = right is not None and right.type == "number_literal"
    return operator is not None and operator.type == "=" and constant


def _evaluated(
    form: Form, env: Mapping[str, object], atoms: Atoms, known: dict[str, object] | None = None
) -> np.ndarray | None:
    known = {} if known is None else known  # division atoms already evaluated: pieces share their numerators
    total: object = 0
    for monomial, coefficient in form.terms.items():
        term: object = coefficient
        for atom in monomial:
            value = env.get(atom, known.get(atom))
            if value is None:
                operation = atoms.operations.get(atom)
                if operation is None:
                    return None
                op, numerator, denominator = operation
                top, bottom = (
                    _evaluated(numerator, env, atoms, known),
                    _evaluated(denominator, env, atoms, known),
                )
                if top is None or bottom is None or np.any(np.asarray(bottom) <= 0):
                    return None
                value = known[atom] = top // bottom if op == "/" else top % bottom
            term = term * value  # type: ignore[operator]
        total = total + term  # type: ignore[operator]
    return np.asarray(total)


def evaluate_form(form: Form, values: Mapping[str, int]) -> int:
    """The form's value with `values` for the parameters (division atoms evaluated too)."""
    return evaluate(form.text(), values)


class _Ranges:
    def __init__(self, facts: KernelFacts, sizes: frozenset[str]) -> None:
        self.facts, self.sizes, self.atoms = facts, sizes, facts.atoms
        self.loops: dict[str, list[Loop]] = {}
        for loop in facts.loops:
            self.loops.setdefault(loop.variable, []).append(loop)
        self.bounds: dict[str, Form] = {}  # each global index's, once threads() found it
        self.lows: dict[str, Form] = {}  # a guard's lower bound on it (`i > 0` of a stencil): 1
        self.global_forms = dict(_G)
        self.loop_spans: dict[str, Span | str] = {}  # each counter's, once asked (every access reads them)
        self.block_only: set[str] = set()  # axes whose index is a block number alone
        # the grid-stride loops that are the threads: a grid as long as their bound runs each once a thread
        self.grid_strides: set[str] = set()

    def threads(self, axis: str) -> Form | str:
        """The bound of the global index along the axis: its guard's (`if (i >= n) return;`, also a piece
        of it: `if (i / w >= h)` bounds i by h * w), else (along x) a grid-stride loop's condition."""
        guard = self.facts.guard
        for bound in guard.bounds if guard is not None else ():
            form = bound.index_form
            if form is None or not bound.bound.atoms() <= self.sizes:
                continue
            block_only = self._a_block_an_index(form, axis)
            shift = self._shift(form, axis)  # empty for the global index itself
            if block_only or shift is not None:
                if block_only:
                    self.block_only.add(axis)
                self.global_forms[axis], self.bounds[axis] = form, bound.bound
                low = _lower_bound(guard.others, bound.index, guard.early_return)
                if shift is not None and shift.terms and low:
                    continue  # `k = i + offset` also bounded below: two lower bounds, neither the least
                self.lows[axis] = shift if shift is not None and shift.terms else Form.constant(low)
                # the guarded index starts at the shift: the threads are the bound less it
                return bound.bound - shift if shift is not None else bound.bound
            (atom,) = form.atoms() if len(form.atoms()) == 1 else ("",)
            op, numerator, denominator = self.atoms.operations.get(atom, ("", Form(), Form()))
            whole = form == Form.atom(atom) and op == "/" and _is_global(numerator, axis)
            if whole and denominator.atoms() <= self.sizes:
                self.global_forms[axis], self.bounds[axis] = numerator, bound.bound * denominator
                return self.bounds[axis]
        for loop in self.facts.loops if axis == "x" else ():
            strides_grid = loop.step == Form.atom("blockDim.x") * Form.atom("gridDim.x")
            sized = loop.bound.atoms() <= self.sizes
            if loop.depth == 0 and _is_global(loop.start, axis) and strides_grid and sized:
                self.global_forms[axis], self.bounds[axis] = loop.start, loop.bound
                self.grid_strides.add(loop.variable)
                return loop.bound
        along = "" if axis == "x" else f" along {axis}"
        return f"no bound on the global index{along} (an `if (i < n)` guard or a grid-stride loop over n)"

    def _shift(self, form: Form, axis: str) -> Form | None:
        """`k = i + offset` checked `k < n` (i the global index, offset of sizes): the offset, the
        guarded index's least value; None when the form is not the global index plus sizes."""
        thread = Form.atom(f"threadIdx.{axis}")
        step = (form - thread).coefficient(f"blockIdx.{axis}")
        if step is None or (step != Form.atom(f"blockDim.{axis}") and (step.value() or 0) <= 0):
            return None
        rest = form - thread - step * Form.atom(f"blockIdx.{axis}")
        if not rest.atoms() <= self.sizes or not _never_negative(rest):
            return None
        return rest

    def _a_block_an_index(self, form: Form, axis: str) -> bool:
        """`blockIdx.y` alone (also z) where no access, bound or loop reads threadIdx along that axis: a
        block covers one index along it (a batch row a block, torch's extension tutorial's `blockIdx.y`)."""
        if axis == "x" or form != Form.atom(f"blockIdx.{axis}"):
            return False
        thread = f"threadIdx.{axis}"
        forms = [a.offset for a in self.facts.accesses] + [
            f for loop in self.facts.loops for f in (loop.start, loop.bound)
        ]
        return not any(thread in f.atoms() for f in forms) and not any(
            thread in text(n) for n in self.facts.thread_uses
        )

    def separation(self, offset: Form, counters: tuple[str, ...]) -> Form | None:
        """For a store at `c * i + j + rest` (i the global index along x, c of sizes, j one of the store's
        loop counters, rest of sizes: each thread writing a row of its own, `out[b * offset + j]`): c
        minus the span of j + rest, which must stay at least 1 for the threads' rows never to meet."""
        form = self.in_global_indices(offset)
        step = form.coefficient(GLOBAL["x"])
        if step is None or not step.atoms() or not step.atoms() <= self.sizes:
            return None
        rest = form - step * Form.atom(GLOBAL["x"])
        along = [c for c in counters if rest.coefficient(c) == Form.constant(1)]
        if len(along) != 1 or not rest.atoms() <= self.sizes | {along[0]}:
            return None  # interleaved rows (`step * row`), or what else the offset reads: not this check
        span = self.span(rest)
        if isinstance(span, str) or span.high is None:
            return None
        return step - (span.high - span.low)

    def span(self, form: Form) -> Span | str:
        low, high = Form(), Form()
        form = self.in_global_indices(form)
        for monomial, coefficient in form.terms.items():
            spans = []
            for atom in monomial:
                span = self._atom(atom)
                if isinstance(span, str):
                    return span
                spans.append(span)
            if len(spans) == 1:
                bottom, top = spans[0].low, spans[0].high
            elif all(_never_negative(s.low) for s in spans):
                bottom, top = Form.constant(1), Form.constant(1)
                for s in spans:
                    bottom = bottom * s.low
                    top = top * s.high if top is not None and s.high is not None else None
            else:
                return "a product of values that may be negative"
            scale = Form.constant(coefficient)
            if coefficient < 0:
                bottom, top = top, bottom
            if bottom is None:
                return "no smallest index"
            low = low + scale * bottom
            high = high + scale * top if high is not None and top is not None else None
        return Span(low, high)

    def trips(self, variables: tuple[str, ...]) -> Form | str:
        """The iterations one thread runs of the loops named (nested), at most."""
        total = Form.constant(1)
        for variable in variables:
            loops = self.loops.get(variable)
            if not loops or variable == "?":
                return "a loop whose iterations are not counted"
            if variable in self.grid_strides:
                continue
            span = self._atom(variable)
            if isinstance(span, str) or span.high is None:
                return f"loop {variable}: no trip count"
            step = loops[0].step.value()
            total = total * (span.high - span.low + Form.constant(1))
            if step is not None and step > 1:
                return total  # a strided loop runs fewer: an estimate is enough for sizing
        return total

    def in_global_indices(self, form: Form) -> Form:
        """The form with `c * (blockIdx.x * blockDim.x + threadIdx.x)` as c times the global index (and
        likewise along y)."""
        for axis in self.bounds:
            if axis in self.block_only:  # the block number is the index
                weight = form.coefficient(f"blockIdx.{axis}")
                if weight is not None and weight.atoms() <= self.sizes:
                    form = form - weight * Form.atom(f"blockIdx.{axis}") + weight * Form.atom(GLOBAL[axis])
                continue
            weight = form.coefficient(f"threadIdx.{axis}")
            if weight is None or not weight.atoms() <= self.sizes:
                continue
            rest = form - weight * self.global_forms[axis]
            if f"threadIdx.{axis}" in rest.atoms() or f"blockIdx.{axis}" in rest.atoms():
                continue
            form = rest + weight * Form.atom(GLOBAL[axis])
        return form

    def _atom(self, atom: str) -> Span | str:
        axis = next((a for a, name in GLOBAL.items() if name == atom), None)
        if axis is not None:
            return Span(self.lows.get(axis, Form()), self.bounds[axis] - Form.constant(1))
        if atom in self.sizes:
            return Span(Form.atom(atom), Form.atom(atom))
        if atom in _NEVER_NEGATIVE_BUILTINS:
            return Span(Form(), None)
        if atom in THREAD_ATOMS:
            return f"{atom}: the kernel is not 1-D"
        if atom in self.loops:
            if atom not in self.loop_spans:
                self.loop_spans[atom] = self._loop(atom)
            return self.loop_spans[atom]
        operation = self.atoms.operations.get(atom)
        if operation is not None:
            return self._operation(*operation)
        if "memory" in self.atoms.depends.get(atom, frozenset()):
            return "an index read from memory"
        return f"{atom.strip('⟨⟩')}: a value the analysis does not model"

    def _loop(self, variable: str) -> Span | str:
        spans: list[Span] = []
        for loop in self.loops[variable]:
            step = loop.step.value()
            if step is not None and step <= 0:
                return f"loop {variable}: counts down"
            start, bound = self.span(loop.start), self.span(loop.bound)
            if isinstance(start, str):
                return start
            if isinstance(bound, str):
                return bound
            top = bound.high - Form.constant(1) if bound.high is not None else None
            spans.append(Span(start.low, top))
        if any(s != spans[0] for s in spans[1:]):
            return f"loop {variable}: counted over different ranges in different places"
        return spans[0]

    def _operation(self, op: str, numerator: Form, denominator: Form) -> Span | str:
        if not denominator.atoms() <= self.sizes or (denominator.value() or 1) <= 0:
            return "a division by a value that is not a size"
        span = self.span(numerator)
        if isinstance(span, str):
            return span
        if not _never_negative(span.low):
            return "a division of a value that may be negative"
        if op == "%":
            return Span(Form(), denominator - Form.constant(1))
        if span.high is None:
            return Span(Form(), None)
        whole = _exact_division(span.high + Form.constant(1), denominator)
        if whole is not None:  # (a*d - 1) // d is a - 1
            return Span(Form(), whole - Form.constant(1))
        return Span(Form(), Form.atom(f"(({span.high.text()}) // ({denominator.text()}))"))


def _exact_division(numerator: Form, denominator: Form) -> Form | None:
    """`numerator / denominator` where it divides exactly: by a single term, or a quotient that is one or
    two of the numerator's atoms (`N*K*(H - 2)*(W - 2)` over `K*(H - 2)*(W - 2)`, expanded, is N)."""
    whole = exact_quotient(numerator, denominator)
    if whole is not None:
        return whole
    atoms = sorted(numerator.atoms() - set(GLOBAL.values()))
    candidates = [Form.atom(a) for a in atoms]
    candidates += [Form.atom(a) * Form.atom(b) for i, a in enumerate(atoms) for b in atoms[i:]]
    return next((q for q in candidates if denominator * q == numerator), None)


def _is_global(form: Form, axis: str) -> bool:
    """`blockIdx.x * blockDim.x + threadIdx.x`, or with a constant for blockDim.x (`128 * blockIdx.x +
    threadIdx.x`: the spec's block is then that constant); likewise along y."""
    if form == _G[axis]:
        return True
    thread = Form.atom(f"threadIdx.{axis}")
    step = (form - thread).coefficient(f"blockIdx.{axis}")
    rest = form - thread - (step or Form()) * Form.atom(f"blockIdx.{axis}")
    return step is not None and (step.value() or 0) > 0 and not rest.terms


def _never_negative(form: Form) -> bool:
    return all(c > 0 for c in form.terms.values())


# `i > c` (or `c < i`) in a guard's conjunction: i >= c + 1; in an early return's exit conditions, `i < c`
# (or `c > i`) says the same of the body: i >= c.
_LOWER = {">": 1, ">=": 0}
_LOWER_MIRRORED = {"<": 1, "<=": 0}
_EXIT = {"<": 0, "<=": 1}
_EXIT_MIRRORED = {">": 0, ">=": 1}


def _lower_bound(conjuncts: tuple[Node, ...], index: str, early_return: bool) -> int:
    """The least value the guard's other conditions let the index take in the body (`i > 0 && i < n - 1`,
    or `if (i < 1 || i >= n - 1) return;`: 1)."""
    on_left, on_right = (_EXIT, _EXIT_MIRRORED) if early_return else (_LOWER, _LOWER_MIRRORED)
    lowest = 0
    for node in conjuncts:
        while node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        if node.type != "binary_expression":
            continue
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        operator = node.child_by_field_name("operator")
        if left is None or right is None or operator is None:
            continue
        op = text(operator)
        if text(left) == index and op in on_left and right.type == "number_literal":
            number, extra = text(right), on_left[op]
        elif text(right) == index and op in on_right and left.type == "number_literal":
            number, extra = text(left), on_right[op]
        else:
            continue
        if number.isdigit():
            lowest = max(lowest, int(number) + extra)
    return lowest
