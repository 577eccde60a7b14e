"""A thread per output of a contraction over a nest of loops -> the tiled SGEMM, the nest one reduction.

A direct convolution is a matrix product nobody wrote as one: each thread sums over its input channels
and its window (`for c, for i, for j: acc += x[n][c][row + i][col + j] * w[k][c][i][j]`), the input read
through the window's offsets and guarded by the padding. Driven by the analysis, whatever the names:

* the loops form a chain of counted loops (declarations, `if (...) continue;` and `if (...) { ... }`
  allowed on the way), whose innermost statement sums a product into one place;
* the thread's indices (the x and y global indices, bounded by the check, and blockIdx.z or its quotient
  and remainder by a size) fall into two groups, the indices each factor reads: the factors of one group
  read none of the other's. The group holding the x index gives the GEMM's columns (so the epilogue's
  warps store neighbouring outputs), the other its rows; a quotient of blockIdx.z stays the batch;
* the guards inside the nest read only one group's indices (the padding: the input's side).

Then the loop variables are one reduction index taken apart (the innermost fastest), each group's indices
one row (col) index taken apart (the x index fastest), and `_gemm_tile`'s kernels compute the product:
a factor tile is loaded by evaluating the user's own expression at the row (col) and the reduction index,
0 where the user's guard says the term is not added. The statements after the nest run as written, once
per output, with the user's index locals declared from the output's place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names, flat_pieces
from cuda_agent.agent.analysis.facts import Access, Loop, ThreadIndex
from cuda_agent.agent.analysis.forms import Atoms, Form, exact_quotient
from cuda_agent.agent.analysis.normalise import inlined_loop_locals
from cuda_agent.agent.analysis.preprocessor import kernel_definitions
from cuda_agent.agent.analysis.values import Values, text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites import contraction
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, as_factor, bound_terms, in_kernel_terms
from cuda_agent.agent.proposers.rewrites._combine import declared_type
from cuda_agent.agent.proposers.rewrites._gemm_tile import (
    SPLIT_TILES,
    Contraction,
    Factor,
    Shape,
    fitting,
    gemm_candidates,
)
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    declarator_name,
    local_names,
    statements,
    strip_parens,
)
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:implicit-gemm"
# Rows of at most one 64-row tile (a convolution's output channels) lead with 64-row tiles, wide ones
# with 128; the float4 kernel first (its loads here are one element at a time, but its epilogue leaves
# through shared memory, coalesced), the first kernel last. The 64x64 tiles 16 deep lead: on an H100
# conv2d_naive's 0.140 ms (64x64x8, the sum split between 4 groups) became 0.116 ms.
NARROW_SHAPES: tuple[Shape, ...] = (
    Shape(vector=True, quads_m=1, quads_n=1, depth=16),
    Shape(vector=True, quads_m=1, quads_n=2),
    Shape(vector=False, quads_m=1, quads_n=1),
    *SPLIT_TILES,
)
WIDE_SHAPES: tuple[Shape, ...] = (
    Shape(vector=True, quads_m=2, quads_n=1),
    Shape(vector=True, quads_m=1, quads_n=1),
    Shape(vector=True, quads_m=2, quads_n=2, flags=("-maxrregcount=128",)),
)


_BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})


class _Unsupported(Exception):
    """Not a loop-nest contraction this rewrite can tile; the message says why (for debugging)."""


def propose(target: KernelTarget, shapes: Sequence[Shape] | None = None) -> list[Candidate]:
    """The tiled GEMM candidates of a convolution-like loop nest; `shapes` replaces the tile shapes chosen
    by the output's rows (`python -m bench.gemm_shapes` measures others)."""
    # `float a = A[..]; float b = B[..]; acc += a * b;` is read as `acc += A[..] * B[..];`
    found = analysed(inlined_loop_locals(target))
    if found is None or target.spec is None:
        return []
    tree, facts = found
    try:
        contraction._recognise(tree, facts)
        return []  # one plain loop: the contraction rewrite's own
    except contraction._Unsupported:
        pass
    try:
        match, nest = _recognise(tree, facts)
    except (_Unsupported, contraction._Unsupported, NotInSizes):
        return []
    arrays = {a.array for a in facts.accesses}
    try:
        rows_at = evaluate(nest.rows_spec, target.spec.sizes)
    except (ExpressionError, ArithmeticError):
        rows_at = None
    if shapes is None:
        shapes = NARROW_SHAPES if rows_at is not None and rows_at <= 64 else WIDE_SHAPES
    shapes = fitting(target, shapes)
    if not shapes or not all(contraction._is_type(tree, p, "float", "float32") for p in arrays):
        return []
    summary = f"implicit GEMM: {nest.summary}; "
    return gemm_candidates(
        tree, match, shapes, proposer=PROPOSER, batch_grid=match.batch_spec, summary=summary
    )


# -- the thread's indices ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Index:
    """One of the thread's indices: its extent (in kernel and spec terms), None for the batch."""

    name: str
    order: int  # within a GEMM index, lower orders vary faster
    lane: str | None  # the builtin it moves with along a warp, where it is the x index's fastest part
    extent: tuple[str, str] | None  # None: blockIdx.z or its quotient, the batch kept on z


@dataclass(frozen=True)
class _Indices:
    found: list[_Index]
    batch: str | None  # the batch's extent in spec terms
    flat: tuple[str, str] | None = None  # a flat x index taken apart: (its name, its value from the pieces)


def _indices(tree: KernelTree, facts: KernelFacts) -> _Indices:
    """The thread's indices with their extents, the batch's extent, and a flat index's pieces."""
    guard = facts.guard
    assert guard is not None and tree.target.spec is not None
    launch = tree.target.spec.launch
    values = Values(Atoms(), kernel_definitions(tree), frozenset())
    found: list[_Index] = []
    quotient: Form | None = None  # blockIdx.z / E: E
    remainder: Form | None = None  # blockIdx.z % E: E
    flat: tuple[str, str] | None = None
    flat_batch: str | None = None
    pieces: set[str] = set()
    for index in facts.indices:
        if index.name in pieces:
            continue
        if index.axis in ("x", "y"):
            bound = guard.bound_of(index.name)
            if bound is None:
                raise _Unsupported(f"{index.name} is not bounded")
            lanes = {i.name: next(iter(i.form.atoms())) for i in facts.indices if len(i.form.atoms()) == 1}
            taken = _flat_pieces(tree, index.name, bound.bound, values, lanes) if index.axis == "x" else None
            if taken is not None:
                found += taken[0]
                flat = (index.name, taken[1])
                pieces = {i.name for i in taken[0]}
                flat_batch = taken[2]
                continue
            order, lane = (0, "threadIdx.x") if index.axis == "x" else (100, "threadIdx.y")
            found.append(_Index(index.name, order, lane, bound_terms(tree, bound.bound)))
            continue
        if not index.direct:
            continue  # a value of the others (`oy = pix / W`): written out where it is read
        if index.form == Form.atom("blockIdx.z"):
            found.append(_Index(index.name, 200, None, None))
            continue
        axis = next((a for a in "xy" if index.form == Form.atom(f"blockIdx.{a}")), None)
        if axis is not None and len(launch.grid) > "xy".index(axis):
            # a block per value (`co = blockIdx.y`): as many as the launch's grid has along that axis
            grid = launch.grid["xy".index(axis)]
            found.append(_Index(index.name, 200, None, (as_factor(in_kernel_terms(tree, grid)), grid)))
            continue
        split = _split_z(index, values)
        if split is None:
            raise _Unsupported(f"{index.name} is another mapping of threads")
        operator, divisor = split
        if operator == "%":
            remainder = divisor
            found.append(_Index(index.name, 200, None, bound_terms(tree, divisor)))
        else:
            quotient = divisor
            found.append(_Index(index.name, 200, None, None))
    batches = [i for i in found if i.extent is None]
    if len(batches) > 1 or (quotient is not None and quotient != remainder):
        raise _Unsupported("blockIdx.z is not one batch and one remainder")
    if remainder is not None and quotient is None:
        raise _Unsupported("a remainder of blockIdx.z without its quotient")
    if flat_batch is not None:
        if len(batches) > 1 or len(launch.grid) > 1:
            raise _Unsupported("a flat index's batch and another")
        return _Indices(found, flat_batch, flat)
    if not batches:
        if len(launch.grid) > 2:
            raise _Unsupported("a z grid the indices do not read")
        return _Indices(found, None, flat)
    if len(launch.grid) < 3:
        raise _Unsupported("no z grid for the batch")
    batch = launch.grid[2]
    if quotient is not None:
        batch = f"({batch}) // {as_factor(bound_terms(tree, quotient)[1])}"
    return _Indices(found, batch, flat)


def _flat_pieces(
    tree: KernelTree, index: str, bound: Form, values: Values, lanes: dict[str, str]
) -> tuple[list[_Index], str, str | None] | None:
    """A flat index taken apart into locals (`ow = idx % OW; oh = (idx / OW) % OH; n = idx / (OW * OH)`),
    each piece's divisor the product of the moduli before it and the last one's extent what the bound
    leaves (or, where that is no size, the batch on z): the pieces as indices, fastest first, the index's
    value from them and the batch's extent in spec terms. None where the index is not taken apart so."""
    # the divisors with the locals they read written out (`Wo = W - 2`), to compare with the bound's sizes
    remaining = flat_pieces(tree.body, index, values, through_locals=True)
    if len(remaining) < 2:
        return None
    index_type = declared_type(tree, index)
    pieces: list[_Index] = []
    terms: list[str] = []
    step = Form.constant(1)
    while remaining:
        following = next((p for p in remaining if p.divisor == step), None)
        if following is None:
            raise _Unsupported(f"the pieces of {index} do not follow each other")
        remaining.remove(following)
        name, modulus = following.name, following.modulus
        step_text = as_factor(bound_terms(tree, step)[0])
        # in the index's own type (a `long` index over more than 2^31 outputs stays exact)
        piece = name if index_type in ("int", None) else f"({index_type}){name}"
        terms.append(piece if step == Form.constant(1) else f"{piece} * {step_text}")
        # the fastest piece's loads move along a warp as its own (opaque) value does: `x[.. + w_out]`
        lane = (lanes.get(name) or "threadIdx.x") if not pieces else None
        if modulus is None and remaining:
            raise _Unsupported(f"a piece of {index} is divided without a remainder before the last")
        if modulus is None and exact_quotient(bound, step) is None:
            # what the bound leaves is no size of the kernel's (`total`): the batch, on z, as many as the
            # spec's value of the bound holds whole steps
            batch = f"({bound_terms(tree, bound)[1]}) // ({bound_terms(tree, step)[1]})"
            pieces.append(_Index(name, len(pieces), lane, None))
            return pieces, " + ".join(terms), batch
        extent = modulus if modulus is not None else exact_quotient(bound, step)
        assert extent is not None
        pieces.append(_Index(name, len(pieces), lane, bound_terms(tree, extent)))
        step = step * extent
    if step != bound:
        raise _Unsupported(f"the pieces of {index} do not make up its bound")
    return pieces, " + ".join(terms), None


def _split_z(index: ThreadIndex, values: Values) -> tuple[str, Form] | None:
    """("/", E) for `blockIdx.z / E`, ("%", E) for `blockIdx.z % E`, else None."""
    declared = index.declaration
    for declarator in declared.children_by_field_name("declarator"):
        value = declarator.child_by_field_name("value")
        if value is None:
            continue
        node = unwrap(value)
        op = node.child_by_field_name("operator")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if node.type != "binary_expression" or op is None or left is None or right is None:
            return None
        if text(unwrap(left)) != "blockIdx.z" or op.type not in ("/", "%"):
            return None
        return op.type, values.form(right)
    return None


# -- the loop nest ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Nest:
    loops: tuple[str, ...]  # outermost first
    summary: str  # for the description
    rows_spec: str  # the GEMM's rows in the spec's terms, for choosing tiles


def _chain(facts: KernelFacts) -> list[Loop]:
    """The loops, outermost first, when each holds the next and nothing else is a counted loop."""
    loops = list(facts.loops)
    if not loops:
        raise _Unsupported("no loop")
    for depth, loop in enumerate(loops):
        if loop.depth != depth or loop.trip is None:
            raise _Unsupported("not a chain of counted loops")
        outer = loops[depth - 1].body if depth else None
        if outer is not None and not outer.start_byte <= loop.node.start_byte < outer.end_byte:
            raise _Unsupported("not a chain of nested loops")
    return loops


def _walk_nest(tree: KernelTree, loops: list[Loop]) -> tuple[Node, list[Node | _NegatedNode]]:
    """The accumulating statement at the bottom of the nest and the guards on the way (each a condition
    under which the term is added): `if (c) continue;` adds `!c`, `if (c) { ... }` adds `c`."""
    conditions: list[Node | _NegatedNode] = []
    mutable = assigned_names(tree.body)

    def through(body: list[Node], inner: Loop | None) -> Node:
        remaining = list(body)
        while remaining:
            statement = remaining.pop(0)
            if statement.type == "declaration":
                declared = [declarator_name(d) for d in statement.children_by_field_name("declarator")]
                if any(name is None or name in mutable for name in declared):
                    raise _Unsupported("a local of the nest is assigned")
                continue
            if statement.type == "if_statement":
                condition = statement.child_by_field_name("condition")
                consequence = statement.child_by_field_name("consequence")
                alternative = statement.child_by_field_name("alternative")
                if alternative is not None or condition is None or consequence is None:
                    raise _Unsupported("an if with an else in the nest")
                written = strip_parens(condition.named_children[0]) if condition.named_children else None
                if written is None:
                    raise _Unsupported("an if without a condition")
                inside = statements(consequence)
                if len(inside) == 1 and inside[0].type == "continue_statement":
                    conditions.append(_NegatedNode(written))
                    continue
                if remaining:
                    raise _Unsupported("statements after a guarded block")
                conditions.append(written)
                return through(inside, inner)
            if inner is not None and statement == inner.node:
                if remaining:
                    raise _Unsupported("statements after an inner loop")
                return statement
            if inner is None and statement.type == "expression_statement" and not remaining:
                return statement
            raise _Unsupported(f"a {statement.type} in the nest")
        raise _Unsupported("the nest ends without its sum")

    found: Node | None = None
    for depth, loop in enumerate(loops):
        inner = loops[depth + 1] if depth + 1 < len(loops) else None
        found = through(statements(loop.body), inner)
    assert found is not None
    return found, conditions


@dataclass(frozen=True)
class _NegatedNode:
    """A condition that holds where `inner` fails: `if (inner) continue;` skips the term."""

    inner: Node


# -- recognition -------------------------------------------------------------------------------------------


def _recognise(tree: KernelTree, facts: KernelFacts) -> tuple[Contraction, _Nest]:
    guard = facts.guard
    if guard is None or facts.uses_shared or facts.barriers or facts.atomics:
        raise _Unsupported("no bounds check, or shared memory, barriers, atomics")
    if facts.thread_uses or facts.unmodelled:
        raise _Unsupported("no bounds check, or shared memory, barriers, atomics, builtins in the body")
    taken = _indices(tree, facts)
    indices, batch_spec = taken.found, taken.batch
    loops = _chain(facts)
    outer, innermost = loops[0], loops[-1]
    if outer.start.value() is None and outer.start != Form():
        raise _Unsupported("a loop start that is not a number")
    statement, conditions = _walk_nest(tree, loops)
    target, value, in_memory = contraction._accumulation(tree, facts, innermost, statement)
    own = {i.name for i in indices}
    variables = [loop.variable for loop in loops]
    expand = contraction._Expander(tree, own | set(variables))
    batch = {i.name for i in indices if i.extent is None}
    grouped = {i.name for i in indices} - batch

    def reads(node: Node | _NegatedNode) -> set[str]:
        inner = node.inner if isinstance(node, _NegatedNode) else node
        names = expand.names(inner)
        if names & _BUILTINS:
            raise _Unsupported("a factor or guard reads the thread's position otherwise than by its indices")
        return names & grouped

    factors = contraction._factors(value)
    groups = _groups([reads(f) for f in factors], grouped)
    x_index = next((i.name for i in indices if i.order == 0), None)
    cols_group = next((g for g in groups if x_index in g), groups[1])
    rows_group = next(g for g in groups if g is not cols_group)
    row_factors = [f for f in factors if not reads(f) & cols_group]
    col_factors = [f for f in factors if reads(f) & cols_group]
    row_guards, col_guards = [], []
    for condition in conditions:
        used = reads(condition)
        if used & rows_group and used & cols_group:
            raise _Unsupported("a guard reads both sides")
        (col_guards if used & cols_group else row_guards).append(condition)

    out = local_names(tree, "out_row", "out_col")
    place = (out["out_row"], out["out_col"])
    rows_side = _side(tree, [i for i in indices if i.name in rows_group])
    cols_side = _side(tree, [i for i in indices if i.name in cols_group])
    reduction = _reduction(tree, loops)
    at_row = {name: text_at for name, text_at in rows_side.taken_apart("{r}").items()}
    at_col = {name: text_at for name, text_at in cols_side.taken_apart("{c}").items()}
    batch_at = {name: "blockIdx.z" for name in batch}
    row_names = at_row | reduction.taken_apart("{c}") | batch_at
    col_names = at_col | reduction.taken_apart("{r}") | batch_at
    a_at = _guarded(expand, row_factors, row_guards, row_names)
    b_at = _guarded(expand, col_factors, col_guards, col_names)
    loads = [a for a in facts.accesses_in(outer) if not a.write]
    a_k_fast = _fast_along_reduction(loads, row_factors, rows_side.lane, loops, default=True)
    b_k_fast = _fast_along_reduction(loads, col_factors, cols_side.lane, loops, default=False)

    redeclared = own | ({taken.flat[0]} if taken.flat else set())
    epilogue = contraction._epilogue(
        tree, facts, outer, target, in_memory, {}, redeclared=frozenset(redeclared)
    )
    declarations = [
        f"const {declared_type(tree, name) or 'int'} {name} = {value_at};"
        for name, value_at in (
            *rows_side.taken_apart(place[0]).items(),
            *cols_side.taken_apart(place[1]).items(),
            *batch_at.items(),
        )
    ]
    if taken.flat is not None:  # the flat index itself, from its pieces, for the statements that read it
        name, value_at = taken.flat
        declarations.append(f"const {declared_type(tree, name) or 'int'} {name} = {value_at};")
    before = "\n".join(declarations + ([epilogue.before] if epilogue.before else []))
    condition = contraction._condition(tree, guard.statement, guard.early_return)
    bounded = f"{place[0]} < {rows_side.extent} && {place[1]} < {cols_side.extent} && ({condition})"
    match = Contraction(
        k=", ".join(variables),
        rows=rows_side.extent,
        cols=cols_side.extent,
        depth=reduction.extent,
        rows_spec=rows_side.extent_spec,
        cols_spec=cols_side.extent_spec,
        a=Factor(a_at, a_k_fast),
        b=Factor(b_at, b_k_fast),
        scalar_at=(a_at, b_at),
        accumulator=epilogue.accumulator,
        before=before,
        inside=epilogue.inside,
        inside_placed=epilogue.inside,
        condition=bounded,
        place=place,
        batch=bool(batch),
        batch_spec=batch_spec,
    )
    summary = (
        f"the loops {', '.join(variables)} one reduction of {reduction.extent}, "
        f"({', '.join(rows_side.names)}) the rows, ({', '.join(cols_side.names)}) the columns"
    )
    return match, _Nest(tuple(variables), summary, rows_side.extent_spec)


def _fast_along_reduction(
    loads: list[Access], factors: list[Node], lane: str, loops: list[Loop], default: bool
) -> bool:
    """Whether the side's tile is best loaded with threads along the reduction index: a load of it steps
    one element for each step of the nest taken as one index (`w[k][c][i][j]`: 1 along j, 3 along i, 9
    along c), rather than along its output index (`x[..][row + i][col + j]` is 1 along col, W along i)."""
    mine = contraction._loads_in(factors, loads)
    innermost = loops[-1].variable
    for access in mine:
        step = Form.constant(1)
        for loop in reversed(loops):
            if access.stride(loop.variable) != step:
                break
            assert loop.trip is not None
            step = step * loop.trip
        else:
            return True
    if any(a.stride(lane) == Form.constant(1) for a in mine):
        return False
    if any(a.stride(innermost) == Form.constant(1) for a in mine):
        return True  # contiguous for a run of the innermost loop (NHWC's channels)
    return default


def _groups(used: list[set[str]], grouped: set[str]) -> list[set[str]]:
    """The indices joined by the factors that read them together: exactly two groups, every index in one."""
    groups: list[set[str]] = []
    for names in used:
        if not names:
            continue
        joined = [g for g in groups if g & names]
        merged = set(names).union(*joined)
        groups = [g for g in groups if not g & names] + [merged]
    if len(groups) != 2 or set().union(*groups) != grouped:
        raise _Unsupported("the factors do not split the indices in two")
    return groups


@dataclass(frozen=True)
class _Side:
    """A group of indices as one GEMM index: the first listed fastest."""

    names: tuple[str, ...]
    extents: tuple[str, ...]  # in kernel terms, as factors
    extent: str
    extent_spec: str
    lane: str  # the builtin the fastest index moves with, for the loads' strides

    def taken_apart(self, flat: str) -> dict[str, str]:
        found: dict[str, str] = {}
        step = ""
        for position, (name, extent) in enumerate(zip(self.names, self.extents, strict=True)):
            quotient = f"({flat})" if not step else f"(({flat}) / ({step}))"
            last = position == len(self.names) - 1
            found[name] = quotient if last else f"({quotient} % {extent})"
            step = extent if not step else f"{step} * {extent}"
        return found


def _side(tree: KernelTree, indices: list[_Index]) -> _Side:
    ordered = sorted(indices, key=lambda i: i.order)
    extents = [i.extent for i in ordered]
    assert all(e is not None for e in extents)
    kernel = tuple(as_factor(e[0]) for e in extents if e is not None)
    spec = " * ".join(as_factor(e[1]) for e in extents if e is not None)
    lane = ordered[0].lane or "blockIdx.z"  # (no lane: no load is contiguous along it)
    return _Side(tuple(i.name for i in ordered), kernel, " * ".join(kernel), spec, lane)


@dataclass(frozen=True)
class _Reduction:
    variables: tuple[str, ...]  # outermost first
    starts: tuple[str, ...]
    trips: tuple[str, ...]  # in kernel terms, as factors
    extent: str

    def taken_apart(self, flat: str) -> dict[str, str]:
        found: dict[str, str] = {}
        step = ""
        for position in reversed(range(len(self.variables))):
            quotient = f"({flat})" if not step else f"(({flat}) / ({step}))"
            piece = quotient if position == 0 else f"({quotient} % {self.trips[position]})"
            start = self.starts[position]
            found[self.variables[position]] = piece if start == "0" else f"({start} + {piece})"
            step = self.trips[position] if not step else f"{step} * {self.trips[position]}"
        return found


def _reduction(tree: KernelTree, loops: list[Loop]) -> _Reduction:
    starts, trips = [], []
    for loop in loops:
        assert loop.trip is not None
        starts.append(as_factor(bound_terms(tree, loop.start)[0]))
        trips.append(as_factor(bound_terms(tree, loop.trip)[0]))
    return _Reduction(tuple(loop.variable for loop in loops), tuple(starts), tuple(trips), " * ".join(trips))


def _guarded(
    expand: contraction._Expander,
    factors: list[Node],
    guards: list[Node | _NegatedNode],
    names: dict[str, str],
) -> str:
    """The side's product at the placeholders, 0 where a guard of the nest says the term is not added."""
    product = " * ".join(f"({expand.text(f, names)})" for f in factors) or "1.0f"
    if not guards:
        return product
    written = []
    for guard in guards:
        if isinstance(guard, _NegatedNode):
            written.append(f"!({expand.text(guard.inner, names)})")
        else:
            written.append(f"({expand.text(guard, names)})")
    return f"(({' && '.join(written)}) ? ({product}) : 0.0f)"
