"""What the analysis knows about one kernel, as plain data the rewrites read (see `analyse.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuda_agent.agent.analysis.forms import LANE, Atoms, Form
from tree_sitter import Node

# The combines a reduction can have; the first six are what the warp rewrites know how to finish.
SUM, PRODUCT, MAX, MIN, ARGMAX, ARGMIN = "sum", "product", "max", "min", "argmax", "argmin"
OR, AND, XOR = "or", "and", "xor"
# The online softmax normaliser: a running maximum m and a sum s of exp(v - m), rescaled as m grows.
LOGSUMEXP = "logsumexp"
# A search: `if (cond(k)) { at = k; break; }` keeps the first position where the condition holds.
FIND_FIRST = "find-first"
IDEMPOTENT = frozenset({MAX, MIN, ARGMAX, ARGMIN, OR, AND})  # repeating an element changes nothing
REASSOCIATED = frozenset({SUM, PRODUCT})  # in floating point, splitting changes the rounding


@dataclass(frozen=True)
class ThreadIndex:
    """A local holding a thread's position: `int col = blockIdx.x * blockDim.x + threadIdx.x;`."""

    name: str
    form: Form
    axis: str | None  # "x" when the form is exactly the global index along x, else None
    declaration: Node
    direct: bool = True  # its declaration reads the builtins itself (else it follows another index by name)


@dataclass(frozen=True)
class GuardBound:
    """One conjunct of a bounds check, normalised to `index < bound` (`i <= n - k` is `i < n - k + 1`)."""

    index: str
    bound: Form
    bound_text: str  # in the user's spelling, exclusive
    index_form: Form | None = None  # the index's value at the check


@dataclass(frozen=True)
class Guard:
    """The kernel's bounds check: `if (i >= n) return;` or `if (i < n) { ... }` (the if last)."""

    bounds: tuple[GuardBound, ...]
    statement: Node
    early_return: bool
    others: tuple[Node, ...] = ()  # conjuncts that are not an index bound (`col <= row`)

    def bound_of(self, index: str) -> GuardBound | None:
        return next((b for b in self.bounds if b.index == index), None)


@dataclass(frozen=True)
class Reduction:
    """Accumulators folded over a loop by one combine (`acc += x[i]`; `if (v > best) {best = v; at = i;}`)."""

    combine: str
    accumulators: tuple[str, ...]  # the value first; argmax/argmin add the index, logsumexp the sum
    loop: str  # the loop variable
    statements: tuple[Node, ...]
    combiner: str = "+"  # how the user spelled it: "+", "*", "fmaxf", ">", ... (for the partials)
    first: bool = True  # argmax/argmin keep the first (strict comparison) or the last position


@dataclass(frozen=True)
class Loop:
    """A counted loop: `for (int k = start; k < bound; k += step)`, normalised."""

    variable: str
    start: Form
    bound: Form  # exclusive
    step: Form
    node: Node
    body: Node
    depth: int  # 0 for a loop directly in the kernel's (guarded) body
    reductions: tuple[Reduction, ...] = ()
    carried: frozenset[str] = frozenset()  # outer locals updated otherwise than by a reduction
    independent: bool = False  # iterations may run in any order, on any thread (reductions aside)

    @property
    def trip(self) -> Form | None:
        """The trip count for a unit step (`bound - start`), else None."""
        return self.bound - self.start if self.step.value() == 1 else None


@dataclass(frozen=True)
class Access:
    """One load or store of a parameter's elements: `x_row[c]` is x at `C*row + c`."""

    array: str
    offset: Form  # in elements from the parameter's start
    write: bool
    read: bool
    node: Node
    loops: tuple[str, ...]  # enclosing loop variables, outermost first ("?" for a loop not counted)
    element_bytes: int | None
    hidden: frozenset[str] = frozenset()  # what the offset's opaque parts (loads, divisions) depend on

    def stride(self, atom: str) -> Form | None:
        """Elements between the addresses of neighbouring values of the atom; None where the offset is
        not affine in it (`x[idx[k]]`, `x[k * k]`)."""
        return None if atom in self.hidden else self.offset.coefficient(atom)

    def piecewise_lane_stride(self, atoms: Atoms) -> Form | None:
        """`stride(LANE)` with a flat index's pieces read as a warp sees them away from a piece's edge: `g %
        D` steps with g, `g / D` stays (`inp[(b * T + t) * C + c]` with `c = idx % C` is one element apart
        between neighbouring threads, except where a warp crosses a multiple of C). A coalescing estimate,
        not a fact every warp holds; None where a load or another opaque part moves with the lane."""
        stepped = _lane_steps(self.offset, atoms)
        return stepped.coefficient(LANE) if stepped is not None else None

    @property
    def lane_stride(self) -> int | None:
        """Elements between neighbouring threads of a warp, when it is a number (the coalescing model)."""
        coefficient = self.stride(LANE)
        return coefficient.value() if coefficient is not None else None


@dataclass(frozen=True)
class KernelFacts:
    """Everything `analyse` found, for rewrites to build on and for people to read (`describe`)."""

    indices: tuple[ThreadIndex, ...]
    guard: Guard | None
    loops: tuple[Loop, ...]  # in source order, nested ones included
    accesses: tuple[Access, ...]
    uses_shared: bool
    barriers: bool
    atomics: bool
    thread_uses: tuple[Node, ...]  # every builtin read outside the index declarations
    # Loads and stores it could not place (2-D arrays, shared or local arrays, pointers it lost track of):
    # a rewrite that moves work between threads or iterations must not apply while any remains.
    unmodelled: tuple[Node, ...] = ()
    # The opaque atoms of the forms above (divisions, remainders, loads): what each stands for.
    atoms: Atoms = field(default_factory=Atoms, compare=False, repr=False)

    def accesses_in(self, loop: Loop) -> list[Access]:
        """The accesses inside the loop (its inner loops' included)."""
        return [a for a in self.accesses if loop.node.start_byte <= a.node.start_byte < loop.node.end_byte]

    def innermost_loop(self, node: Node) -> Loop | None:
        """The innermost counted loop around the node (a loop is not around itself)."""
        around = [
            loop
            for loop in self.loops
            if loop.node.start_byte < node.start_byte and node.end_byte <= loop.node.end_byte
        ]
        return max(around, key=lambda loop: loop.node.start_byte, default=None)

    def outermost_loop(self, access: Access) -> Loop | None:
        """The top-level loop holding the access, if one does (uncounted loops are not in `loops`)."""
        return next(
            (loop for loop in self.loops if loop.depth == 0 and access in self.accesses_in(loop)), None
        )

    def describe(self) -> str:
        """One line a person can check, in the kernel's own spelling: the thread mapping, the loops and
        their reductions, and the worst-coalesced access."""
        parts = []
        # a local read from the builtins but not the thread's position (`stride = blockDim.x * gridDim.x`)
        # names no mapping; a grid-stride loop's variable starting at the thread's position does
        mapped = [i.name for i in self.indices if i.axis] or [
            i.name for i in self.indices[:1] if _reads_thread(i.form)
        ]
        strided = [loop.variable for loop in self.loops if loop.depth == 0 and _reads_thread(loop.start)]
        if mapped:
            parts.append(
                "a thread per " + (mapped[0] if len(mapped) == 1 else f"({', '.join(reversed(mapped))})")
            )
        elif strided:
            parts.append(f"a thread per {strided[0]} (a grid-stride loop)")
        for loop in self.loops:
            kind = ", ".join(f"{r.combine} into {'/'.join(r.accumulators)}" for r in loop.reductions)
            if not kind:
                kind = "independent" if loop.independent else "iterations depend on each other"
            parts.append(f"loop {loop.variable} {_extent(loop)}: {kind}")
        worst = None
        for access in self.accesses:
            stride = access.stride(LANE)
            if stride is not None and stride.value() in (0, 1):
                continue
            if worst is None or (stride is not None and worst[1] is None):
                worst = (access, stride)
        if worst is not None:
            access, stride = worst
            apart = "at unrelated places" if stride is None else f"{_spelled(stride)} elements apart"
            parts.append(f"{_written(access.node)}: neighbouring threads {apart}")
        return "; ".join(parts)


def _extent(loop: Loop) -> str:
    condition = loop.node.child_by_field_name("condition")
    update = loop.node.child_by_field_name("update")
    bound = condition.child_by_field_name("right") if condition is not None else None
    limit = _written(bound) if bound is not None else "?"
    step = update.child_by_field_name("right") if update is not None else None
    if loop.step.value() == 1 or step is None:
        return f"to {limit}"
    return f"to {limit} by {_written(step)}"


def _written(node: Node) -> str:
    return " ".join((node.text or b"").decode("utf-8").split())


def _spelled(form: Form) -> str:
    written = form.text()
    return "a loaded or divided amount" if "⟨" in written else written


def _reads_thread(form: Form) -> bool:
    """Whether the form moves with the thread within its block (reads a `threadIdx` component)."""
    return any(atom.startswith("threadIdx") for monomial in form.terms for atom in monomial)


def _lane_steps(form: Form, atoms: Atoms) -> Form | None:
    """The form with each division or remainder of a lane-dependent value replaced by how it moves with the
    lane (see `Access.piecewise_lane_stride`); None where an opaque part that is neither moves with it."""
    for atom in form.atoms():
        if LANE not in atoms.depends.get(atom, frozenset({atom})) or atom == LANE:
            continue
        operation = atoms.operations.get(atom)
        if operation is None:
            return None
        kind, numerator, _ = operation
        inner = _lane_steps(numerator, atoms)
        step = inner.coefficient(LANE) if inner is not None else None
        if step is None:
            return None
        form = form.substitute(atom, Form.atom(LANE) * step if kind == "%" else Form())
    return form
