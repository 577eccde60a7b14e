"""A thread per output of a contraction -> a shared-memory tiled, register-blocked SGEMM.

Driven by the analysis: a thread per (row, col) element (the y and x global indices, a batch on
blockIdx.z allowed) whose only loop sums over k a product of factors, each depending on the row and k
or on the col and k: `C[i][j] += A[i][k] * B[k][j]`, `A[k][i] * A[k][j]` (a covariance, with its means
subtracted inside the factors), `A[i][k] * A[j][k]` (SYRK, attention scores), with either stride,
through pointer locals or macros, the sum kept in a local or in the output element itself. The
factors are evaluated where the tiles are loaded, in the user's own spelling with the row and k
replaced, so whatever they compute is computed once per element instead of once per output.

Rewritten (the kernels are written by `_gemm_tile`): a block of 256 threads computes a BM x BN tile of
outputs, each thread (BM/16) x (BN/16) of them in registers; the factor tiles pass through shared memory,
double-buffered, loaded with neighbouring threads on whichever index walks memory contiguously, as float4s
where the factor's loads are contiguous. The statements after the loop (the epilogue: a scale, `beta * C`,
a mirrored store, a causal mask) and the bounds check run as written, once per output; a tile where the
user's conditions, read at its corners, say no output reads the sum skips the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names, declared_values, flat_pieces
from cuda_agent.agent.analysis.facts import SUM, Access, Loop, ThreadIndex
from cuda_agent.agent.analysis.forms import Atoms, Form, exact_quotient
from cuda_agent.agent.analysis.normalise import inlined_loop_locals
from cuda_agent.agent.analysis.preprocessor import kernel_definitions
from cuda_agent.agent.analysis.reductions import ADDS, FUSED_MULTIPLY_ADDS, MULTIPLIES
from cuda_agent.agent.analysis.values import Values, text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, as_factor, bound_terms, spelled
from cuda_agent.agent.proposers.rewrites._combine import declared_type
from cuda_agent.agent.proposers.rewrites._gemm_tile import (
    ABSOLUTE_DIFFERENCE,
    PRODUCT,
    SPLIT_TILES,
    SQUARED_DIFFERENCE,
    THREADS,
    Contraction,
    Factor,
    Shape,
    allows,
    fitting,
    gemm_candidates,
)
from cuda_agent.agent.proposers.rewrites._mma_tile import element, mma_candidate
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    arguments,
    identifiers_in,
    local_names,
    statements,
    strip_parens,
    walk,
)
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:contraction"
# The GPU's timer chooses, in this order (the search interleaves proposers, so within a short budget the
# first shapes are the ones measured; on the H200 the float4 kernel's 128x64 and 128x128 tiles won on
# covariance, SYRK, attention scores and the matmuls, its 128x256 on the 4096-cube matmul, the first
# kernel's 64x64 on small outputs): the float4 kernel's 128x64 tiles (mid-sized outputs, triangles whose
# tiles are skipped), its 128x128 capped at 128 registers (two blocks an SM), the first kernel's 64x64,
# the float4 128x256 (one block an SM, 16 FMAs a shared-memory load), the first kernel's 128x128 and
# 128x64.
SHAPES: tuple[Shape, ...] = (
    Shape(vector=True, quads_m=2, quads_n=1),
    Shape(vector=True, quads_m=2, quads_n=2, flags=("-maxrregcount=128",)),
    Shape(vector=False, quads_m=1, quads_n=1),
    Shape(vector=True, quads_m=2, quads_n=4),
    Shape(vector=False, quads_m=2, quads_n=2),
    Shape(vector=False, quads_m=2, quads_n=1),
)
# The float4 kernel's 64x64 tiles lead where 128x64 ones would not give every SM of an H200 (132) two
# blocks: an output of 1024 x 1024 (SYRK) is 128 such tiles, one wave at one block an SM. SPLIT_TILES
# follow SHAPES[0]. 16 deep: half the barriers for a tile's 16 outputs a thread (H100: the covariance
# 0.378 -> 0.357 ms against 8 deep).
SMALL_TILES = Shape(vector=True, quads_m=1, quads_n=1, depth=16)
# double factors: the first kernel's 64x64 tiles, whose two buffers of each side (34 KiB) fit the static
# 48 KiB of shared memory in double where larger ones do not
DOUBLE_SHAPES = (Shape(vector=False, quads_m=1, quads_n=1),)
TWO_WAVES = 2 * 132
_IDENTITY = frozenset({"0", "0.0", "0.0f", "0.f", "0.0F", "0.F", "0."})


class _Unsupported(Exception):
    """Not a contraction this rewrite can tile; the message says why (for debugging)."""


def propose(target: KernelTarget, shapes: Sequence[Shape] | None = None) -> list[Candidate]:
    """The tiled GEMM candidates of a recognised float contraction (the tensor-core one for 16-bit
    factors); `shapes` replaces the tile shapes chosen by the output's size (`python -m bench.gemm_shapes`
    measures others)."""
    # `float a = A[..]; float b = B[..]; acc += a * b;` is read as `acc += A[..] * B[..];`
    found = analysed(inlined_loop_locals(target))
    if found is None or target.spec is None:
        return []
    tree, facts = found
    try:
        match = _recognise(tree, facts)
    except _Unsupported:
        return []
    batch_grid = (match.batch_spec or target.spec.launch.grid[2]) if match.batch else None
    if all(_is_type(tree, p, "double", "float64") for p in _arrays(facts)):
        match = replace(match, element="double", mirror=False)
        shapes = fitting(target, DOUBLE_SHAPES if shapes is None else shapes)
        return gemm_candidates(tree, match, shapes, proposer=PROPOSER, batch_grid=batch_grid)
    if not all(_is_type(tree, p, "float", "float32") for p in _arrays(facts)):
        if match.combine != PRODUCT:
            return []  # the tensor cores multiply; a distance's differences are not products
        # half or bfloat16 factors, each one element as stored: the tensor cores multiply them exactly
        a, b = element(tree, match.a.at), element(tree, match.b.at)
        if a is None or b is None or a.dtype != b.dtype or not allows(target, THREADS):
            return []
        return [mma_candidate(tree, match, a, b, proposer=PROPOSER, batch_grid=batch_grid)]
    tiles = _tiles(target, match)
    if match.mirror and (tiles is None or tiles // 2 < TWO_WAVES):
        # half the tiles of an output this small leave SMs idle: SYRK's 1024 x 1024 took 0.090 ms so on
        # the H100, against 0.087 ms computing every tile
        match = replace(match, mirror=False)
    shapes = fitting(target, _shapes(match, tiles) if shapes is None else shapes)
    return gemm_candidates(tree, match, shapes, proposer=PROPOSER, batch_grid=batch_grid) if shapes else []


def _tiles(target: KernelTarget, match: Contraction) -> int | None:
    """The output's tiles of the first shape at the benchmark's sizes, batches counted (None where the
    sizes do not say)."""
    assert target.spec is not None
    sizes = target.spec.sizes
    try:
        rows, cols = evaluate(match.rows_spec, sizes), evaluate(match.cols_spec, sizes)
        batch = evaluate(match.batch_spec or target.spec.launch.grid[2], sizes) if match.batch else 1
    except (ExpressionError, ArithmeticError):
        return None
    tile_m, tile_n = SHAPES[0].tile
    return -(-rows // tile_m) * -(-cols // tile_n) * batch


def _shapes(match: Contraction, tiles: int | None) -> tuple[Shape, ...]:
    """SHAPES, led by SMALL_TILES and SPLIT_TILES for an output too small for two waves of the first
    shape's tiles (a triangle's skipped tiles not counted)."""
    if tiles is None:
        return SHAPES
    if match.unread or match.mirror:  # a triangle (covariance, causal scores, a symmetric sum's mirror)
        tiles //= 2
    if tiles >= TWO_WAVES:
        return SHAPES
    # the split sums after the first shape: it won the 1024-cube matmul on the H200 within 12 s
    return (SMALL_TILES, SHAPES[0], *SPLIT_TILES, *SHAPES[1:])


def _arrays(facts: KernelFacts) -> set[str]:
    return {a.array for a in facts.accesses}


def _is_type(tree: KernelTree, name: str, written: str, dtype: str) -> bool:
    """The type as written (`float`), or through an alias the spec followed (`DATA_TYPE`, `real_t`)."""
    parameter = tree.parameter(name)
    argument = tree.target.spec.argument(name) if tree.target.spec is not None else None
    return parameter is not None and (
        parameter.type == written or (argument is not None and argument.dtype == dtype)
    )


# -- recognition ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FlatIndex:
    """A flat thread index taken apart into the output's (batch, row, col)."""

    row: str  # the locals the pieces are declared in
    col: str
    rows: Form
    cols: Form
    extent: Form | None  # the batch's, when there is one
    index: str
    at: tuple[str, str]  # the index at a row factor's {r}, at a col factor's {c}
    batch: str  # `blockIdx.z * rows + ` with a batch, else empty
    along_row: frozenset[str]  # other pieces, the same along a row (divided by a multiple of cols)
    along_col: frozenset[str]  # the same along a col, too (divided by a multiple of rows * cols)
    pieces: frozenset[str]


def _recognise(tree: KernelTree, facts: KernelFacts) -> Contraction:
    guard = facts.guard
    if (
        guard is None
        or facts.uses_shared
        or facts.barriers
        or facts.atomics
        or facts.thread_uses
        or facts.unmodelled
    ):
        raise _Unsupported("no bounds check, or shared memory, barriers, atomics, builtins in the body")
    flat = _flat(tree, facts)
    if flat is None:
        row, col, batch = _owners(tree, facts)
        row_bound, col_bound = guard.bound_of(row), guard.bound_of(col)
        if row_bound is None or col_bound is None:
            raise _Unsupported("the row or the col is not bounded")
        rows, cols, extent = row_bound.bound, col_bound.bound, None
    else:
        row, col, rows, cols, extent = flat.row, flat.col, flat.rows, flat.cols, flat.extent
        batch = extent is not None
    loops = [loop for loop in facts.loops if loop.depth == 0]
    if len(loops) != 1 or len(facts.loops) != 1:
        raise _Unsupported("not exactly one loop")
    (loop,) = loops
    if loop.step.value() != 1 or loop.start.value() != 0:
        raise _Unsupported("the loop does not count from 0 in steps of 1")
    statement = _single_statement(loop.body)
    accumulated = _accumulation(tree, facts, loop, statement)
    target, value, in_memory = accumulated
    expand = _Expander(tree, {row, col})
    combine, factors = _differences(value) or (PRODUCT, _factors(value))
    row_factors, col_factors = [], []
    for factor in factors:
        names = expand.names(factor)
        if row in names and col in names:
            raise _Unsupported("a factor depends on both the row and the col")
        (col_factors if col in names else row_factors).append(factor)
    if not col_factors or not any(row in expand.names(f) for f in row_factors):
        raise _Unsupported("not a product of a row factor and a col factor")
    if combine != PRODUCT and (len(row_factors), len(col_factors)) != (1, 1):
        raise _Unsupported("a difference of something else than a row element and a col element")
    if flat:
        # Each factor may see the flat index only through pieces that are the same along its side.
        seen = _Expander(tree, {row, col, flat.index} | flat.pieces)
        for side, own, allowed in ((row_factors, row, flat.along_row), (col_factors, col, flat.along_col)):
            for factor in side:
                if seen.names(factor) & ({flat.index, row, col} | flat.pieces) - ({own} | allowed):
                    raise _Unsupported("a factor depends on the other side of the flat index")
    k = loop.variable
    row_names, col_names = {row: "{r}", k: "{c}"}, {k: "{r}", col: "{c}"}
    place, placed, batch_pieces = (row, col), {}, {}
    if flat:
        row_names[flat.index], col_names[flat.index] = flat.at
        out = local_names(tree, "out_row", "out_col")
        place = (out["out_row"], out["out_col"])
        placed = _placed_pieces(tree, flat, place)
        # The float4 kernel takes a flat index's pieces of the batch (the head, in attention) as the same
        # for the whole block: computed once, not divided out of the index at each element.
        batch_pieces = {name: f"({placed[name]})" for name in flat.along_col}
    loads = [a for a in facts.accesses_in(loop) if not a.write]
    a_k_fast = _fast_along_k(loads, row_factors, "threadIdx.y", k, default=True)
    b_k_fast = _fast_along_k(loads, col_factors, "threadIdx.x", k, default=False)
    a_along, b_along = k if a_k_fast else "threadIdx.y", k if b_k_fast else "threadIdx.x"
    a = _factor(expand, row_factors, row_names | batch_pieces, loads, a_along, a_k_fast)
    b = _factor(expand, col_factors, col_names | batch_pieces, loads, b_along, b_k_fast)
    scalar_at = (_written(expand, row_factors, row_names), _written(expand, col_factors, col_names))
    try:
        rows_text, rows_spec = bound_terms(tree, rows)
        cols_text, cols_spec = bound_terms(tree, cols)
        depth_text, _ = bound_terms(tree, loop.bound)
        batch_spec = bound_terms(tree, extent)[1] if extent is not None else None
    except NotInSizes as exc:
        raise _Unsupported(str(exc)) from exc
    rows_text, cols_text, depth_text = as_factor(rows_text), as_factor(cols_text), as_factor(depth_text)
    epilogue = _epilogue(tree, facts, loop, target, in_memory, placed)
    declared = None
    if flat:
        declared = f"const int {flat.index} = ({flat.batch}{place[0]}) * {cols_text} + {place[1]};"
    unread = _Corners(tree, row, col, flat).unread(guard.others, guard.early_return, epilogue.exits)
    return Contraction(
        k=k,
        rows=rows_text,
        cols=cols_text,
        depth=depth_text,
        rows_spec=rows_spec,
        cols_spec=cols_spec,
        a=a,
        b=b,
        scalar_at=scalar_at,
        accumulator=epilogue.accumulator,
        before=epilogue.before,
        inside=epilogue.inside,
        inside_placed=epilogue.inside_placed,
        condition=_condition(tree, guard.statement, guard.early_return),
        place=place,
        batch=batch,
        batch_spec=batch_spec,
        flat=declared,
        unread=unread,
        # (a - b)² and |a - b| are (b - a)² and |b - a| exactly: a difference mirrors as a product does
        mirror=not flat and not batch and unread is None and rows_text == cols_text and _symmetric(a, b),
        combine=combine,
    )


def _symmetric(a: Factor, b: Factor) -> bool:
    """Whether the col factor is the row factor transposed, B(k, x) = A(x, k) as written (`A[i * M + k]`
    and `A[j * M + k]`), up to factors that move with neither index (`alpha`, on either side): the sum at
    (row, col) is then the sum at (col, row), but for the rounding of where such a factor multiplies."""

    def moving(written: str, r: str, c: str) -> list[str]:
        terms = ["".join(t.replace("{r}", r).replace("{c}", c).split()) for t in _product_terms(written)]
        return sorted(t for t in terms if "⟨" in t)

    return moving(a.at, "⟨x⟩", "⟨k⟩") == moving(b.at, "⟨k⟩", "⟨x⟩")


def _product_terms(written: str) -> list[str]:
    """The terms of a product at its top level (`(alpha) * (A[i])` -> `(alpha)`, `(A[i])`)."""
    terms, depth, start = [], 0, 0
    for at, char in enumerate(written):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if char == "*" and depth == 0:
            terms.append(written[start:at].strip())
            start = at + 1
    return [*terms, written[start:].strip()]


def _flat(tree: KernelTree, facts: KernelFacts) -> _FlatIndex | None:
    """A flat thread index taken apart as (col, row[, batch]): `t2 = idx % T; t = (idx / T) % T` (the
    rest of `idx` a batch) or `t = idx / T`."""
    guard = facts.guard
    launch = tree.target.spec.launch if tree.target.spec else None
    flat = [i for i in facts.indices if i.axis == "x"]
    if guard is None or launch is None or len(launch.block) != 1 or len(flat) != 1:
        return None
    index = flat[0].name
    bound = guard.bound_of(index)
    if bound is None:
        return None
    found = flat_pieces(tree.body, index, Values(Atoms(), kernel_definitions(tree), frozenset()))
    cols_found = [p for p in found if p.divisor == Form.constant(1) and p.modulus is not None]
    if len(cols_found) != 1:
        return None
    col, cols = cols_found[0].name, cols_found[0].modulus
    assert cols is not None
    rows_found = [p for p in found if p.name != col and p.divisor == cols]
    if len(rows_found) != 1:
        return None
    row, rows = rows_found[0].name, rows_found[0].modulus
    if rows is None:  # t = idx / T: the rows are what is left
        rows = exact_quotient(bound.bound, cols)
        extent = None
    else:
        extent = exact_quotient(bound.bound, rows * cols)
    if rows is None or (extent is None and exact_quotient(bound.bound, rows * cols) != Form.constant(1)):
        return None
    row_text, col_text = as_factor(spelled(rows, {})), as_factor(spelled(cols, {}))
    if "⟨" in row_text + col_text:
        return None  # a quotient the index texts cannot spell
    z = f"blockIdx.z * {row_text} + " if extent is not None else ""
    at = (f"(({z}{{r}}) * {col_text})", f"(({z}0) * {col_text} + {{c}})" if z else "({c})")
    pieces = [p for p in found if p.name not in (row, col)]
    along_row = frozenset(p.name for p in pieces if exact_quotient(p.divisor, cols) is not None)
    along_col = frozenset(p.name for p in pieces if exact_quotient(p.divisor, rows * cols) is not None)
    return _FlatIndex(
        row, col, rows, cols, extent, index, at, z, along_row, along_col, frozenset(p.name for p in pieces)
    )


def _placed_pieces(tree: KernelTree, flat: _FlatIndex, place: tuple[str, str]) -> dict[str, str]:
    """New values for the declarations that take the flat index apart, by local, from the output's place:
    under the bounds check (the output's row and col in range) `idx % T` is the col and `(idx / T) % T`
    the row, and a piece divided by a multiple of T is the same at the row's first element, one divided by
    a multiple of T * T at the batch's first. The same values, without the divisions per output."""
    values = declared_values(tree.body)
    cols = as_factor(spelled(flat.cols, {}))
    found = {flat.row: place[0], flat.col: place[1]}
    for name in flat.along_row:
        at = f"(({flat.batch}{0 if name in flat.along_col else place[0]}) * {cols})"
        found[name] = tree.substituted(
            values[name],
            lambda node, at=at: at if node.type == "identifier" and text(node) == flat.index else None,
        )
    return found


def _written(expand: _Expander, factors: list[Node], names: dict[str, str]) -> str:
    """The factors' product at the placeholders in `names`."""
    return " * ".join(f"({expand.text(f, names)})" for f in factors)


def _factor(
    expand: _Expander,
    factors: list[Node],
    names: dict[str, str],
    loads: list[Access],
    along: str,
    k_fast: bool,
) -> Factor:
    """The side's factor at placeholders, and its loads that four neighbouring elements along `along` (k, or
    the lane of its output index) read as one float4: those that step one element at a time, where every
    other load of the factor stays put (so the float4 is all the group reads, besides scalars)."""
    at = _written(expand, factors, names)
    mine = _loads_in(factors, loads)
    strides = [a.stride(along) for a in mine]
    if Form.constant(1) not in strides or any(s not in (Form(), Form.constant(1)) for s in strides):
        return Factor(at, k_fast)
    contiguous = [a for a, s in zip(mine, strides, strict=True) if s == Form.constant(1)]
    if any(_conditional(a.node, factors) for a in contiguous):
        return Factor(at, k_fast)  # a float4 would load what the user's code may not
    slots = {(a.node.start_byte, a.node.end_byte): f"{{v{n}}}" for n, a in enumerate(contiguous)}
    vector_at = " * ".join(f"({expand.text(f, names, slots)})" for f in factors)
    addresses = tuple(f"&({expand.text(a.node, names)})" for a in contiguous)
    return Factor(at, k_fast, vector_at, addresses)


_BUILTIN_ALIASES = [Form.atom(f"{b}.{a}") for b in ("blockIdx", "threadIdx") for a in "xy"]


def _only_in_indices(tree: KernelTree, facts: KernelFacts, alias: ThreadIndex) -> bool:
    """Whether the alias is read only in the declarations of thread indices (its own included)."""
    declarations = [i.declaration for i in facts.indices]
    return all(
        any(d.start_byte <= node.start_byte < d.end_byte for d in declarations)
        for node in walk(tree.body)
        if node.type == "identifier" and text(node) == alias.name
    )


def _owners(tree: KernelTree, facts: KernelFacts) -> tuple[str, str, bool]:
    row = col = None
    batch = False
    for index in facts.indices:
        if index.axis == "y":
            row = index.name
        elif index.axis == "x":
            col = index.name
        elif index.form == Form.atom("blockIdx.z"):
            batch = True
        elif index.direct and not (index.form in _BUILTIN_ALIASES and _only_in_indices(tree, facts, index)):
            # `int bx = blockIdx.x, tx = threadIdx.x;` only names what the (row, col) indices are built
            # from (the tiled kernel has its own); anything else maps threads some other way
            raise _Unsupported(f"{index.name} is another mapping of threads")
    if row is None or col is None:
        raise _Unsupported("not a thread per (row, col)")
    return row, col, batch


def _single_statement(body: Node) -> Node:
    found = statements(body)
    if len(found) != 1 or found[0].type != "expression_statement":
        raise _Unsupported("the loop body is not one statement")
    return found[0]


def _accumulation(
    tree: KernelTree, facts: KernelFacts, loop: Loop, statement: Node
) -> tuple[Node, Node, bool]:
    """(what is summed into, the summed value, whether it is a memory element) of `x += value`."""
    expression = unwrap(statement.named_children[0])
    if expression.type != "assignment_expression":
        raise _Unsupported("not an accumulation")
    left, operator, right = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
    assert left is not None and operator is not None and right is not None
    left = unwrap(left)
    if operator.type == "=":
        right = unwrap(right)
        called = _called(right)
        if called is not None and called[0] in FUSED_MULTIPLY_ADDS and len(called[1]) == 3:
            # `acc = fmaf(a, b, acc)`: the call stands for a * b, which `_factors` takes apart
            if text(unwrap(called[1][2])) != text(left):
                raise _Unsupported("not a sum into one place")
            a, b = right, left
        elif called is not None and called[0] in ADDS and len(called[1]) == 2:
            a, b = called[1]
        else:
            op = right.child_by_field_name("operator")
            a, b = right.child_by_field_name("left"), right.child_by_field_name("right")
            if right.type != "binary_expression" or op is None or op.type != "+" or a is None or b is None:
                raise _Unsupported("not a sum")
        if text(unwrap(a)) == text(left):
            right = b
        elif text(unwrap(b)) == text(left):
            right = a
        else:
            raise _Unsupported("not a sum into one place")
    elif operator.type != "+=":
        raise _Unsupported("not a sum")
    if left.type == "identifier":
        if [r.combine for r in loop.reductions] != [SUM] or loop.reductions[0].accumulators != (text(left),):
            raise _Unsupported("the loop is not one sum")
        return left, right, False
    stores = [a for a in facts.accesses_in(loop) if a.write]
    if len(stores) != 1 or stores[0].stride(loop.variable) != Form():
        raise _Unsupported("the sum goes to memory that moves with k")
    if any(
        a.array == stores[0].array and not a.write and a.node != stores[0].node
        for a in facts.accesses_in(loop)
    ):
        raise _Unsupported("the accumulated array is also read in the loop")
    return left, right, True


def _factors(value: Node) -> list[Node]:
    """The factors of a product, however spelled: `a * b`, `__hmul(a, b)`, and the product the fused
    multiply-add `_accumulation` found (`fmaf(a, b, acc)`: its first two arguments)."""
    node = unwrap(value)
    op = node.child_by_field_name("operator")
    if node.type == "binary_expression" and op is not None and op.type == "*":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        assert left is not None and right is not None
        return _factors(left) + _factors(right)
    called = _called(node)
    if called is not None and (
        (called[0] in MULTIPLIES and len(called[1]) == 2)
        or (called[0] in FUSED_MULTIPLY_ADDS and len(called[1]) == 3)
    ):
        return _factors(called[1][0]) + _factors(called[1][1])
    return [node]


def _differences(value: Node) -> tuple[str, list[Node]] | None:
    """(the combine, [the two terms]) of a summed difference however spelled: `d * d` with `d = a - b`
    inlined (`(a - b) * (a - b)`), `powf(a - b, 2)`, `fabsf(a - b)`; None for anything else."""
    node = unwrap(value)
    op = node.child_by_field_name("operator")
    called = _called(node)
    if node.type == "binary_expression" and op is not None and op.type == "*":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        assert left is not None and right is not None
        if _squashed(left) != _squashed(right):
            return None
        combine, inner = SQUARED_DIFFERENCE, left
    elif called is not None and called[0] in _POWERS and len(called[1]) == 2:
        if _squashed(called[1][1]) not in _TWO:
            return None
        combine, inner = SQUARED_DIFFERENCE, called[1][0]
    elif called is not None and called[0] in _ABSOLUTES and len(called[1]) == 1:
        combine, inner = ABSOLUTE_DIFFERENCE, called[1][0]
    else:
        return None
    inner = unwrap(inner)
    op = inner.child_by_field_name("operator")
    if inner.type != "binary_expression" or op is None or op.type != "-":
        return None
    left, right = inner.child_by_field_name("left"), inner.child_by_field_name("right")
    assert left is not None and right is not None
    return combine, [left, right]


_POWERS = frozenset({"powf", "pow", "__powf"})
_ABSOLUTES = frozenset({"fabsf", "fabs", "abs"})
_TWO = frozenset({"2", "2.0", "2.0f", "2.f", "2.0F", "2.F", "2."})


def _squashed(node: Node) -> str:
    """The node's text without whitespace or the parentheses around it."""
    return "".join(text(unwrap(node)).split())


def _called(node: Node) -> tuple[str, list[Node]] | None:
    """(the function's name, the arguments) of a call."""
    if node.type != "call_expression":
        return None
    function = node.child_by_field_name("function")
    return (text(function), arguments(node)) if function is not None else None


def _fast_along_k(loads: list[Access], factors: list[Node], lane: str, k: str, default: bool) -> bool:
    """Whether the factor's loads are contiguous along k (load the tile with threads along k) rather than
    along the output index (threads along the row or col)."""
    mine = _loads_in(factors, loads)
    if any(a.stride(k) == Form.constant(1) for a in mine):
        return True
    if any(a.stride(lane) == Form.constant(1) for a in mine):
        return False
    return default


def _loads_in(factors: list[Node], loads: list[Access]) -> list[Access]:
    """The loads inside the factors."""
    spans = [(f.start_byte, f.end_byte) for f in factors]
    return [a for a in loads if any(s <= a.node.start_byte and a.node.end_byte <= e for s, e in spans)]


class _Expander:
    """A factor's text with locals replaced by their values, so it can be evaluated at another row and k:
    `x_row[k]` with `const float* x_row = x + row * n;` is `(x + row * n)[k]`."""

    def __init__(self, tree: KernelTree, keep: set[str]) -> None:
        self.tree = tree
        self.keep = keep
        mutable = assigned_names(tree.body)
        self.values = {n: v for n, v in declared_values(tree.body).items() if n not in mutable}

    def names(self, node: Node) -> set[str]:
        return identifiers_in(self.tree, self.text(node, {}))

    def text(
        self,
        node: Node,
        replace_with: dict[str, str],
        slots: dict[tuple[int, int], str] | None = None,
        depth: int = 0,
    ) -> str:
        """The node's text with locals expanded, names in `replace_with` replaced, and the nodes at the
        spans of `slots` (loads, for the float4 path) replaced by their texts."""
        if depth > 16:
            raise _Unsupported("locals defined through too many others")

        def substitute(child: Node) -> str | None:
            slot = (slots or {}).get((child.start_byte, child.end_byte))
            if slot is not None:
                return slot
            if child.type != "identifier":
                return None
            name = text(child)
            if name in replace_with:
                return replace_with[name]
            if name in self.values and name not in self.keep:
                return f"({self.text(self.values[name], replace_with, slots, depth + 1)})"
            return None

        return self.tree.substituted(node, substitute)


def _conditional(node: Node, factors: list[Node]) -> bool:
    """Whether the node is evaluated only on some condition inside its factor (`?:`, `&&`, `||`)."""
    roots = {(f.start_byte, f.end_byte) for f in factors}
    parent = node.parent
    while parent is not None and (node.start_byte, node.end_byte) not in roots:
        operator = parent.child_by_field_name("operator")
        if parent.type == "conditional_expression" or (
            parent.type == "binary_expression" and operator is not None and operator.type in ("&&", "||")
        ):
            return True
        node, parent = parent, parent.parent
    return False


@dataclass(frozen=True)
class _Epilogue:
    before: str  # declarations before the check
    inside: str  # statements under it
    inside_placed: str  # the same with the placed pieces' values (see `_placed_pieces`)
    accumulator: str  # the local holding the sum there
    exits: tuple[Node, ...]  # conditions of the early returns taken before the sum is read


def _epilogue(
    tree: KernelTree,
    facts: KernelFacts,
    loop: Loop,
    target: Node,
    in_memory: bool,
    placed: dict[str, str],
    redeclared: frozenset[str] = frozenset(),
) -> _Epilogue:
    """The statements around the loop, re-run per output with the loop replaced by the finished sum: a
    sum into a local becomes that local's value; a sum into a memory element becomes one `+=` of the
    sum, after the statements that come before the loop (a `C *= beta` stays before it). `inside_placed`
    is the same with the declarations of the locals in `placed` given those values (see `_placed_pieces`).
    The thread indices in `redeclared` are left out of `before`: the caller declares them anew."""
    guard = facts.guard
    assert guard is not None
    index_declarations = {
        (i.declaration.start_byte, i.declaration.end_byte)
        for i in facts.indices
        if i.axis or i.name in redeclared
    }
    top = statements(tree.body)
    position = next(n for n, s in enumerate(top) if s == guard.statement)
    if guard.early_return:
        inner = top[position + 1 :]
    else:
        consequence = guard.statement.child_by_field_name("consequence")
        assert consequence is not None
        inner = [s for s in consequence.named_children if s.type != "comment"]
    names = local_names(tree, "sum")
    # A sum that starts from zero is the finished sum itself; one that starts elsewhere (memory, or a
    # local loaded from it) gets the finished sum added where the loop was. Its local may be declared
    # before the bounds check too (`float acc = 0.0f; if (r < rows && c < cols) { ... }`).
    from_zero = not in_memory and _starts_from_zero([*top[:position], *inner], loop, text(target))
    before = []
    for statement in top[:position]:
        if (statement.start_byte, statement.end_byte) in index_declarations:
            continue
        if statement.type != "declaration":
            raise _Unsupported("a statement before the bounds check")
        if from_zero and _declares(statement, text(target)):
            continue  # the sum's local: each output's starts as the finished sum
        before.append(tree.text(statement))
    accumulator = text(target) if from_zero else names["sum"]
    declared = declared_values(tree.body)
    placed_values = {(declared[n].start_byte, declared[n].end_byte): value for n, value in placed.items()}
    lines, placed_lines = [], []
    exits: list[Node] = []
    seen_loop = read = False
    for statement in inner:
        if statement == loop.node:
            seen_loop = True
            if not from_zero:
                lines.append(f"{tree.text(target)} += {accumulator};")
                placed_lines.append(lines[-1])
                read = True
            continue
        if not seen_loop and from_zero and _declares(statement, accumulator):
            continue
        if not seen_loop and any(
            a.write and a.array in {b.array for b in facts.accesses_in(loop) if not b.write}
            for a in facts.accesses
            if statement.start_byte <= a.node.start_byte < statement.end_byte
        ):
            raise _Unsupported("a statement before the loop stores what the loop reads")
        read = read or accumulator in identifiers_in(tree, tree.text(statement))
        exit_condition = None if read else _early_exit(statement)
        if exit_condition is not None:
            exits.append(exit_condition)
        lines.append(_per_output(tree, statement))
        placed_lines.append(_per_output(tree, statement, placed_values))
    if not seen_loop:
        raise _Unsupported("the loop is not under the bounds check")
    return _Epilogue("\n".join(before), "\n".join(lines), "\n".join(placed_lines), accumulator, tuple(exits))


def _early_exit(statement: Node) -> Node | None:
    """The condition of `if (cond) { ...; return; }` (no else), which ends the output where it holds."""
    condition = statement.child_by_field_name("condition")
    consequence = statement.child_by_field_name("consequence")
    if statement.type != "if_statement" or statement.child_by_field_name("alternative") is not None:
        return None
    if condition is None or consequence is None or not condition.named_children:
        return None
    inner = statements(consequence)
    last = inner[-1] if inner else consequence
    return (
        condition.named_children[0] if last.type == "return_statement" and not last.named_children else None
    )


def _starts_from_zero(inner: list[Node], loop: Loop, name: str) -> bool:
    """Whether the local is declared as 0 before the loop and not set again before it."""
    position = next((n for n, s in enumerate(inner) if s == loop.node), None)
    declared = [s for s in inner[: position or 0] if _declares(s, name)]
    if len(declared) != 1:
        raise _Unsupported("the sum's local is not declared before the loop")
    value = _declared_value(declared[0], name)
    later = inner[inner.index(declared[0]) + 1 : position]
    if any(name in assigned_names(s) for s in later):
        return False
    return value is not None and text(value).strip() in _IDENTITY


def _per_output(tree: KernelTree, statement: Node, values: dict[tuple[int, int], str] | None = None) -> str:
    """The statement's text for the epilogue, where each thread finishes several outputs in a loop: a
    `return` that ended the thread's one output ends this output (`continue`). The nodes at the spans of
    `values` get those texts."""
    edits = [(start, end, new) for (start, end), new in (values or {}).items()]
    edits = [e for e in edits if statement.start_byte <= e[0] and e[1] <= statement.end_byte]
    for node in walk(statement):
        if node.type == "return_statement":
            if node.named_children:
                raise _Unsupported("a return with a value")
            if _in_loop(node, statement):
                raise _Unsupported("a return inside a loop of the epilogue")  # `continue` would be its
            edits.append((node.start_byte, node.end_byte, "continue;"))
    written = tree.data[statement.start_byte : statement.end_byte]
    offset = statement.start_byte
    for start, end, new in sorted(edits, reverse=True):
        written = written[: start - offset] + new.encode("utf-8") + written[end - offset :]
    return written.decode("utf-8")


_LOOPS = frozenset({"for_statement", "while_statement", "do_statement", "for_range_loop"})


def _in_loop(node: Node, outermost: Node) -> bool:
    """Whether a loop within `outermost` (itself included) holds the node, so that a `continue` there would
    be that loop's (not `tree.inside_loop`, which is for `break` too: `continue` passes through a switch)."""
    parent = node.parent
    while parent is not None and parent != outermost:
        if parent.type in _LOOPS:
            return True
        parent = parent.parent
    return outermost.type in _LOOPS


def _declares(statement: Node, name: str) -> bool:
    return statement.type == "declaration" and _declared_value(statement, name, any_value=True) is not None


def _declared_value(statement: Node, name: str, any_value: bool = False) -> Node | None:
    if statement.type != "declaration":
        return None
    declarators = statement.children_by_field_name("declarator")
    for declarator in declarators:
        inner = (
            declarator.child_by_field_name("declarator")
            if declarator.type == "init_declarator"
            else declarator
        )
        if inner is not None and text(inner) == name:
            if len(declarators) != 1:
                raise _Unsupported("the sum is declared with other locals")
            value = declarator.child_by_field_name("value")
            return value if value is not None or not any_value else declarator
    return None


# -- tiles whose outputs do not read the sum ------------------------------------------------------------

_SIGNED = frozenset(
    {"int", "long", "long long", "long int", "short", "signed", "signed int", "int32_t", "int64_t"}
)
_CORNERS = (("{first_row}", "{first_col}"), ("{first_row}", "{last_col}"), ("{last_row}", "{first_col}"))
_CORNERS += (("{last_row}", "{last_col}"),)
_COMPARISONS = frozenset({"<", "<=", ">", ">="})
_ARITHMETIC = frozenset({"+", "-", "*", "/", "%"})


class _Corners:
    """When a condition holds, or fails, at every output of a tile, read from the tile's four corners.

    A comparison of two integer expressions affine in the output's row and col (`j2 >= j1`, `t2 > t`),
    with the other names scalar parameters that nothing assigns, holds on a half-plane of (row, col): it
    holds on the whole tile where it holds at its four corners, and fails on the whole tile where it
    fails at all four. `&&`, `||` and `!` combine such answers; anything else is not answered."""

    def __init__(self, tree: KernelTree, row: str, col: str, flat: _FlatIndex | None) -> None:
        self.tree = tree
        self.own = (row, col)
        mutable = assigned_names(tree.body)
        parameters = tree.target.kernel.parameters
        self.scalars = {p.name for p in parameters if not p.is_pointer and p.type in _SIGNED} - mutable
        self.definitions = kernel_definitions(tree)
        self.values = Values(Atoms(), self.definitions, frozenset())
        # A flat index's row and col are the user's locals: signed (or `t2 - t` is not affine), and not
        # assigned after their declarations (the template declares its own const).
        self.usable = flat is None or (
            all(declared_type(tree, name) in _SIGNED for name in self.own) and not set(self.own) & mutable
        )

    def unread(
        self, guard_parts: tuple[Node, ...], early_return: bool, exits: tuple[Node, ...]
    ) -> str | None:
        """True for a tile none of whose outputs reads the sum: a conjunct of the bounds check fails at
        all of it (a disjunct of an early return's holds), or an early return before the sum is read
        is taken at all of it. None where no part of the conditions is answered."""
        if not self.usable:
            return None
        found = [self.everywhere(part, early_return) for part in guard_parts]
        found += [self.everywhere(condition, True) for condition in exits]
        answered = [f"({condition})" for condition in found if condition]
        return " || ".join(answered) or None

    def everywhere(self, node: Node, truth: bool) -> str | None:
        """An expression in the tile's corners that, where true, says the node is `truth` at all of it."""
        node = strip_parens(node)
        operator = node.child_by_field_name("operator")
        op = operator.type if operator is not None else ""
        if node.type == "unary_expression" and op == "!":
            argument = node.child_by_field_name("argument")
            return self.everywhere(argument, not truth) if argument is not None else None
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if node.type != "binary_expression" or left is None or right is None:
            return None
        if op in ("&&", "||"):
            parts = [self.everywhere(left, truth), self.everywhere(right, truth)]
            if (op == "&&") == truth:  # both parts must be
                return f"({parts[0]}) && ({parts[1]})" if all(parts) else None
            either = [f"({p})" for p in parts if p]
            return " || ".join(either) or None
        if op not in _COMPARISONS or not self._affine(node, left, right):
            return None
        at = [self._at(node, row, col) for row, col in _CORNERS]
        return " && ".join(a if truth else f"!{a}" for a in at)

    def _affine(self, node: Node, left: Node, right: Node) -> bool:
        for part in walk(node):
            if not part.is_named:
                continue
            if part.type == "identifier":
                if text(part) not in self.scalars | set(self.own) | set(self.definitions.constants):
                    return False
            elif part.type == "number_literal":
                if not text(part).isdigit():  # no floats, no unsigned suffixes
                    return False
            elif part.type == "unary_expression":
                operator = part.child_by_field_name("operator")
                if operator is None or operator.type != "-":
                    return False
            elif part.type == "binary_expression":
                operator = part.child_by_field_name("operator")
                if operator is None or operator.type not in _ARITHMETIC | (
                    _COMPARISONS if part == node else set()
                ):
                    return False
            elif part.type != "parenthesized_expression":
                return False  # a cast, a call, a load, a field: not known to be affine
        difference = self.values.form(left) - self.values.form(right)
        for monomial in difference.terms:
            if sum(monomial.count(name) for name in self.own) > 1:
                return False  # row * col, row * row
            for atom in monomial:
                roots = self.values.atoms.roots(Form.atom(atom))
                if atom not in self.own and (roots & set(self.own) or not roots <= self.scalars):
                    return False  # row / 2, or a macro that is not made of parameters
        return True

    def _at(self, node: Node, row: str, col: str) -> str:
        corner = {self.own[0]: f"({row})", self.own[1]: f"({col})"}
        return (
            "("
            + self.tree.substituted(node, lambda n: corner.get(text(n)) if n.type == "identifier" else None)
            + ")"
        )


def _condition(tree: KernelTree, statement: Node, early_return: bool) -> str:
    condition = statement.child_by_field_name("condition")
    assert condition is not None and condition.named_children
    written = tree.text(condition.named_children[0])
    return f"!({written})" if early_return else written
