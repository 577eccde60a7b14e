"""A thread per output of a contraction -> a shared-memory tiled, register-blocked SGEMM.

Driven by the analysis: a thread per (row, col) element (the y and x global indices, a batch on
blockIdx.z allowed) whose only loop sums over k a product of factors, each depending on the row and k
or on the col and k: `C[i][j] += A[i][k] * B[k][j]`, `A[k][i] * A[k][j]` (a covariance, with its means
subtracted inside the factors), `A[i][k] * A[j][k]` (SYRK, attention scores), with either stride,
through pointer locals or macros, the sum kept in a local or in the output element itself. The
factors are evaluated where the tiles are loaded, in the user's own spelling with the row and k
replaced, so whatever they compute is computed once per element instead of once per output.

Rewritten: a block of 256 threads computes a BM x BN tile of outputs, each thread (BM/16) x (BN/16) of
them in registers; the factor tiles of depth 16 pass through shared memory, double-buffered, loaded with
neighbouring threads on whichever index walks memory contiguously. The statements after the loop (the
epilogue: a scale, `beta * C`, a mirrored store) and the bounds check run as written, once per output.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names, declared_values
from cuda_agent.agent.analysis.facts import SUM, Access, Loop
from cuda_agent.agent.analysis.forms import Atoms, Form, exact_quotient
from cuda_agent.agent.analysis.values import Values, file_definitions, text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, as_factor, bound_terms, spelled
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    local_names,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:contraction"
THREADS = 256
# (quads of 4 rows, quads of 4 columns) per thread, compiler flags: 128x128 tiles for big outputs (also
# capped at 128 registers, two blocks per SM instead of one at ~167), smaller tiles so mid-sized ones
# still fill 132 SMs.
SHAPES: tuple[tuple[int, int, tuple[str, ...]], ...] = (
    (2, 2, ()),
    (2, 2, ("-maxrregcount=128",)),
    (2, 1, ()),
    (1, 1, ()),
)
_IDENTITY = frozenset({"0", "0.0", "0.0f", "0.f", "0.0F", "0.F", "0."})


class _Unsupported(Exception):
    """Not a contraction this rewrite can tile; the message says why (for debugging)."""


@dataclass(frozen=True)
class _Match:
    row: str
    col: str
    k: str
    rows: str  # bounds in kernel terms
    cols: str
    depth: str
    rows_spec: str
    cols_spec: str
    a_at: str  # the row factor with the row and k as `{r}` and `{c}` placeholders
    b_at: str  # the col factor with k and the col as `{r}` and `{c}`
    a_k_fast: bool  # the row factor walks memory contiguously along k (else along the row)
    b_k_fast: bool
    accumulator: str  # the local that holds the sum in the epilogue
    before: str  # declarations before the bounds check (other than the indices), re-run per output
    inside: str  # the statements under the bounds check, with the sum in `accumulator`
    condition: str  # the bounds check, true for an output that is written
    batch: bool  # blockIdx.z is a batch index, kept
    batch_spec: str | None = None  # the batch's extent, for a flat index taken apart (else the launch's z)
    flat: str | None = None  # `const int idx = ...;` from the output's {row} and {col}, for a flat index


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    try:
        match = _recognise(tree, facts)
    except _Unsupported:
        return []
    if not _block_fits(target) or not all(_is_float(tree, p) for p in _arrays(facts)):
        return []
    candidates = []
    for quads_m, quads_n, flags in SHAPES:
        tile_m, tile_n = 64 * quads_m, 64 * quads_n
        grid = [f"ceil_div({match.cols_spec}, {tile_n})", f"ceil_div({match.rows_spec}, {tile_m})"]
        if match.batch:
            grid.append(match.batch_spec or target.spec.launch.grid[2])
        candidate = build_candidate(
            tree,
            body=_body(tree, match, quads_m, quads_n),
            launch=LaunchSpec(block=(THREADS,) + (1,) * (len(grid) - 1), grid=tuple(grid)),
            description=(
                f"tiled contraction over {match.k}: {tile_m}x{tile_n} shared-memory tiles, "
                f"{4 * quads_m}x{4 * quads_n} outputs per thread in registers"
            ),
            proposer=PROPOSER,
            assumptions=(
                f"the float sum over {match.k} is regrouped into fused multiply-adds (within tolerance)",
            ),
        )
        if flags:
            candidate = replace(candidate, flags=flags, description=candidate.description + ", 128 registers")
        candidates.append(candidate)
    return candidates


def _block_fits(target: KernelTarget) -> bool:
    bounds = target.kernel.launch_bounds
    first = bounds.split(",")[0].strip() if bounds else ""
    return not first or (first.isdigit() and int(first) >= THREADS)


def _arrays(facts: KernelFacts) -> set[str]:
    return {a.array for a in facts.accesses}


def _is_float(tree: KernelTree, name: str) -> bool:
    parameter = tree.parameter(name)
    return parameter is not None and parameter.type == "float"


# -- recognition ---------------------------------------------------------------------------------------


def _recognise(tree: KernelTree, facts: KernelFacts) -> _Match:
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
        row, col, batch = _owners(facts)
        row_bound, col_bound = guard.bound_of(row), guard.bound_of(col)
        if row_bound is None or col_bound is None:
            raise _Unsupported("the row or the col is not bounded")
        rows, cols, extent = row_bound.bound, col_bound.bound, None
        index_at: tuple[str, str] = ("", "")
    else:
        row, col, rows, cols, extent, index, index_at, along_row, along_col, pieces = flat
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
    factors = _factors(value)
    row_factors, col_factors = [], []
    for factor in factors:
        names = expand.names(factor)
        if row in names and col in names:
            raise _Unsupported("a factor depends on both the row and the col")
        (col_factors if col in names else row_factors).append(factor)
    if not col_factors or not any(row in expand.names(f) for f in row_factors):
        raise _Unsupported("not a product of a row factor and a col factor")
    if flat:
        # Each factor may see the flat index only through pieces that are the same along its side.
        seen = _Expander(tree, {row, col, index} | pieces)
        for side, own, allowed in ((row_factors, row, along_row), (col_factors, col, along_col)):
            for factor in side:
                if seen.names(factor) & ({index, row, col} | pieces) - ({own} | allowed):
                    raise _Unsupported("a factor depends on the other side of the flat index")
    k = loop.variable
    row_names = {row: "{r}", k: "{c}"} | ({index: index_at[0]} if flat else {})
    col_names = {k: "{r}", col: "{c}"} | ({index: index_at[1]} if flat else {})
    a_at = " * ".join(f"({expand.text(f, row_names)})" for f in row_factors)
    b_at = " * ".join(f"({expand.text(f, col_names)})" for f in col_factors)
    loads = [a for a in facts.accesses_in(loop) if not a.write]
    a_k_fast = _fast_along_k(loads, row_factors, "threadIdx.y", k, default=True)
    b_k_fast = _fast_along_k(loads, col_factors, "threadIdx.x", k, default=False)
    before, inside, accumulator = _epilogue(tree, facts, loop, target, in_memory)
    condition = _condition(tree, guard.statement, guard.early_return)
    try:
        rows_text, rows_spec = bound_terms(tree, rows)
        cols_text, cols_spec = bound_terms(tree, cols)
        depth_text, _ = bound_terms(tree, loop.bound)
        batch_spec = bound_terms(tree, extent)[1] if extent is not None else None
    except NotInSizes as exc:
        raise _Unsupported(str(exc)) from exc
    rows_text, cols_text, depth_text = as_factor(rows_text), as_factor(cols_text), as_factor(depth_text)
    declared = None
    if flat:
        z = "blockIdx.z * " + rows_text + " + " if extent is not None else ""
        declared = f"const int {index} = ({z}{{row}}) * {cols_text} + {{col}};"
    return _Match(
        row, col, k, rows_text, cols_text, depth_text, rows_spec, cols_spec, a_at, b_at, a_k_fast,
        b_k_fast, accumulator, before, inside, condition, batch, batch_spec, declared,
    )  # fmt: skip


def _flat(
    tree: KernelTree, facts: KernelFacts
) -> tuple[str, str, Form, Form, Form | None, str, tuple[str, str]] | None:
    """A flat thread index taken apart as (col, row[, batch]): `t2 = idx % T; t = (idx / T) % T` (the
    rest of `idx` a batch) or `t = idx / T`. Returns (row, col, row extent, col extent, batch extent,
    the index, the index at a row factor's {r} and at a col factor's {c})."""
    guard = facts.guard
    launch = tree.target.spec.launch if tree.target.spec else None
    flat = [i for i in facts.indices if i.axis == "x"]
    if guard is None or launch is None or len(launch.block) != 1 or len(flat) != 1:
        return None
    index = flat[0].name
    bound = guard.bound_of(index)
    if bound is None:
        return None
    values = Values(Atoms(), file_definitions(tree.root), frozenset())
    splits: list[tuple[str, str, Form, Form | None]] = []  # (name, kind, divisor, modulus)
    for name, value in declared_values(tree.body).items():
        node = unwrap(value)
        op = node.child_by_field_name("operator") if node.type == "binary_expression" else None
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if op is None or left is None or right is None:
            continue
        left = unwrap(left)
        if op.type == "%" and text(left) == index:
            splits.append((name, "col", Form.constant(1), values.form(right)))
        elif op.type == "%" and left.type == "binary_expression" and _divides(left, index):
            divisor = left.child_by_field_name("right")
            assert divisor is not None
            splits.append((name, "row", values.form(divisor), values.form(right)))
        elif op.type == "/" and text(left) == index:
            splits.append((name, "row", values.form(right), None))
    cols_found = [(n, m) for n, kind, _, m in splits if kind == "col"]
    if len(cols_found) != 1 or cols_found[0][1] is None:
        return None
    col, cols = cols_found[0]
    assert cols is not None
    rows_found = [(n, m) for n, kind, d, m in splits if kind == "row" and d == cols]
    if len(rows_found) != 1:
        return None
    row, rows = rows_found[0]
    if rows is None:  # t = idx / T: the rows are what is left
        rows = exact_quotient(bound.bound, cols)
        extent = None
    else:
        extent = exact_quotient(bound.bound, rows * cols)
    if rows is None or (extent is None and exact_quotient(bound.bound, rows * cols) != Form.constant(1)):
        return None
    row_text, col_text = as_factor(spelled(rows, {})), as_factor(spelled(cols, {}))
    z = f"blockIdx.z * {row_text} + " if extent is not None else ""
    at = (f"(({z}{{r}}) * {col_text})", f"(({z}0) * {col_text} + {{c}})" if z else "({c})")
    pieces = [(n, d) for n, _, d, _ in splits if n not in (row, col)]
    along_row = frozenset(n for n, d in pieces if exact_quotient(d, cols) is not None)
    along_col = frozenset(n for n, d in pieces if exact_quotient(d, rows * cols) is not None)
    return row, col, rows, cols, extent, index, at, along_row, along_col, frozenset(n for n, _ in pieces)


def _divides(node: Node, index: str) -> bool:
    op, left = node.child_by_field_name("operator"), node.child_by_field_name("left")
    return op is not None and op.type == "/" and left is not None and text(unwrap(left)) == index


def _owners(facts: KernelFacts) -> tuple[str, str, bool]:
    row = col = None
    batch = False
    for index in facts.indices:
        if index.axis == "y":
            row = index.name
        elif index.axis == "x":
            col = index.name
        elif index.form == Form.atom("blockIdx.z"):
            batch = True
        elif index.direct:
            raise _Unsupported(f"{index.name} is another mapping of threads")
    if row is None or col is None:
        raise _Unsupported("not a thread per (row, col)")
    return row, col, batch


def _single_statement(body: Node) -> Node:
    statements = (
        [s for s in body.named_children if s.type != "comment"]
        if body.type == "compound_statement"
        else [body]
    )
    if len(statements) != 1 or statements[0].type != "expression_statement":
        raise _Unsupported("the loop body is not one statement")
    return statements[0]


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
    node = unwrap(value)
    op = node.child_by_field_name("operator")
    if node.type == "binary_expression" and op is not None and op.type == "*":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        assert left is not None and right is not None
        return _factors(left) + _factors(right)
    return [node]


def _fast_along_k(loads: list[Access], factors: list[Node], lane: str, k: str, default: bool) -> bool:
    """Whether the factor's loads are contiguous along k (load the tile with threads along k) rather than
    along the output index (threads along the row or col)."""
    spans = [(f.start_byte, f.end_byte) for f in factors]
    mine = [a for a in loads if any(s <= a.node.start_byte and a.node.end_byte <= e for s, e in spans)]
    if any(a.stride(k) == Form.constant(1) for a in mine):
        return True
    if any(a.stride(lane) == Form.constant(1) for a in mine):
        return False
    return default


class _Expander:
    """A factor's text with locals replaced by their values, so it can be evaluated at another row and k:
    `x_row[k]` with `const float* x_row = x + row * n;` is `(x + row * n)[k]`."""

    def __init__(self, tree: KernelTree, keep: set[str]) -> None:
        self.tree = tree
        self.keep = keep
        mutable = assigned_names(tree.body)
        self.values = {n: v for n, v in declared_values(tree.body).items() if n not in mutable}

    def names(self, node: Node) -> set[str]:
        return _identifiers(self.text(node, {}))

    def text(self, node: Node, replace_with: dict[str, str], depth: int = 0) -> str:
        if depth > 16:
            raise _Unsupported("locals defined through too many others")

        def substitute(child: Node) -> str | None:
            if child.type != "identifier":
                return None
            name = text(child)
            if name in replace_with:
                return replace_with[name]
            if name in self.values and name not in self.keep:
                return f"({self.text(self.values[name], replace_with, depth + 1)})"
            return None

        return self.tree.substituted(node, substitute)


def _identifiers(source: str) -> set[str]:
    word, found = "", set()
    for char in source + " ":
        if char.isalnum() or char == "_":
            word += char
        else:
            if word and not word[0].isdigit():
                found.add(word)
            word = ""
    return found


def _epilogue(
    tree: KernelTree, facts: KernelFacts, loop: Loop, target: Node, in_memory: bool
) -> tuple[str, str, str]:
    """(declarations before the check, statements under it, the local holding the sum there).

    The check's statements are re-run per output with the loop replaced by the finished sum: a sum into
    a local becomes that local's value; a sum into a memory element becomes one `+=` of the sum, after
    the statements that come before the loop (a `C *= beta` stays before it)."""
    guard = facts.guard
    assert guard is not None
    index_declarations = {(i.declaration.start_byte, i.declaration.end_byte) for i in facts.indices if i.axis}
    top = [s for s in tree.body.named_children if s.type != "comment"]
    position = next(n for n, s in enumerate(top) if s == guard.statement)
    before = []
    for statement in top[:position]:
        if (statement.start_byte, statement.end_byte) in index_declarations:
            continue
        if statement.type != "declaration":
            raise _Unsupported("a statement before the bounds check")
        before.append(tree.text(statement))
    if guard.early_return:
        inner = top[position + 1 :]
    else:
        consequence = guard.statement.child_by_field_name("consequence")
        assert consequence is not None
        inner = [s for s in consequence.named_children if s.type != "comment"]
    names = local_names(tree, "sum")
    # A sum that starts from zero is the finished sum itself; one that starts elsewhere (memory, or a
    # local loaded from it) gets the finished sum added where the loop was.
    from_zero = not in_memory and _starts_from_zero(inner, loop, text(target))
    accumulator = text(target) if from_zero else names["sum"]
    lines = []
    seen_loop = False
    for statement in inner:
        if statement == loop.node:
            seen_loop = True
            if not from_zero:
                lines.append(f"{tree.text(target)} += {accumulator};")
            continue
        if not seen_loop and from_zero and _declares(statement, accumulator):
            continue
        written = _per_output(tree, statement)
        if not seen_loop and any(
            a.write and a.array in {b.array for b in facts.accesses_in(loop) if not b.write}
            for a in facts.accesses
            if statement.start_byte <= a.node.start_byte < statement.end_byte
        ):
            raise _Unsupported("a statement before the loop stores what the loop reads")
        lines.append(written)
    if not seen_loop:
        raise _Unsupported("the loop is not under the bounds check")
    return "\n".join(before), "\n".join(lines), accumulator


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


def _per_output(tree: KernelTree, statement: Node) -> str:
    """The statement's text for the epilogue, where each thread finishes several outputs in a loop: a
    `return` that ended the thread's one output ends this output (`continue`)."""
    edits = []
    for node in walk(statement):
        if node.type == "return_statement":
            if node.named_children:
                raise _Unsupported("a return with a value")
            edits.append((node.start_byte, node.end_byte))
    written = tree.data[statement.start_byte : statement.end_byte]
    for start, end in sorted(edits, reverse=True):
        offset = statement.start_byte
        written = written[: start - offset] + b"continue;" + written[end - offset :]
    return written.decode("utf-8")


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


def _condition(tree: KernelTree, statement: Node, early_return: bool) -> str:
    condition = statement.child_by_field_name("condition")
    assert condition is not None and condition.named_children
    written = tree.text(condition.named_children[0])
    return f"!({written})" if early_return else written


# -- the tiled kernel ----------------------------------------------------------------------------------


def _body(tree: KernelTree, match: _Match, quads_m: int, quads_n: int) -> str:
    names = local_names(
        tree, "BM", "BN", "BK", "As", "Bs", "tid", "tx", "ty", "row0", "col0", "accum", "a_next", "b_next",
        "tiles", "t", "buf", "kk", "a_frag", "b_frag", "i", "j", "q", "v", "r", "c", "k0", "e",
    )  # fmt: skip
    n = {**names, "QM": str(quads_m), "QN": str(quads_n)}
    r, c, e, i = n["r"], n["c"], n["e"], n["i"]
    a_at = match.a_at.replace("{r}", r).replace("{c}", c)
    b_at = match.b_at.replace("{r}", r).replace("{c}", c)
    bm, bn, bk = n["BM"], n["BN"], n["BK"]
    # Neighbouring threads take neighbouring elements along whichever index the factor walks in memory.
    a_index = (f"{e} / {bk}", f"{e} % {bk}") if match.a_k_fast else (f"{e} % {bm}", f"{e} / {bm}")
    b_index = (f"{e} % {bk}", f"{e} / {bk}") if match.b_k_fast else (f"{e} / {bn}", f"{e} % {bn}")

    def load(k0: str) -> str:
        return f"""\
        #pragma unroll
        for (int {i} = 0; {i} < {bm} * {bk} / {THREADS}; ++{i}) {{
            const int {e} = {n["tid"]} + {i} * {THREADS};
            const int {r} = {n["row0"]} + {a_index[0]}, {c} = {k0} + {a_index[1]};
            {n["a_next"]}[{i}] = ({r} < {match.rows} && {c} < {match.depth}) ? {a_at} : 0.0f;
        }}
        #pragma unroll
        for (int {i} = 0; {i} < {bn} * {bk} / {THREADS}; ++{i}) {{
            const int {e} = {n["tid"]} + {i} * {THREADS};
            const int {r} = {k0} + {b_index[0]}, {c} = {n["col0"]} + {b_index[1]};
            {n["b_next"]}[{i}] = ({r} < {match.depth} && {c} < {match.cols}) ? {b_at} : 0.0f;
        }}"""

    def store(buf: str) -> str:
        return f"""\
        #pragma unroll
        for (int {i} = 0; {i} < {bm} * {bk} / {THREADS}; ++{i}) {{
            const int {e} = {n["tid"]} + {i} * {THREADS};
            {n["As"]}[{buf}][{a_index[1]}][{a_index[0]}] = {n["a_next"]}[{i}];
        }}
        #pragma unroll
        for (int {i} = 0; {i} < {bn} * {bk} / {THREADS}; ++{i}) {{
            const int {e} = {n["tid"]} + {i} * {THREADS};
            {n["Bs"]}[{buf}][{b_index[0]}][{b_index[1]}] = {n["b_next"]}[{i}];
        }}"""

    pad = "                "
    before = "\n".join(pad + line.strip() for line in match.before.splitlines())
    inside = "\n".join(pad + "    " + line.strip() for line in match.inside.splitlines())
    row, col, acc = match.row, match.col, match.accumulator
    condition = match.condition
    if match.flat:  # the user's statements take the index apart again: the output's place goes by index
        fresh = local_names(tree, "out_row", "out_col")
        row, col = fresh["out_row"], fresh["out_col"]
        before = pad + match.flat.format(row=row, col=col) + ("\n" + before if before else "")
        # past the tile's edge the flat index would name another batch's element: bound it first
        condition = f"{row} < {match.rows} && {col} < {match.cols} && ({condition})"
    return f"""{{
    // A tiled contraction over {match.k}: each block of {THREADS} threads computes a {bm} x {bn} tile of the
    // outputs, each thread {4 * quads_m} x {4 * quads_n} of them in registers. The row and col factors pass
    // through shared memory in tiles of depth 16, double-buffered (the next tile's loads are in flight
    // while the current one is multiplied); out-of-range elements load as 0, so any sizes work.
    constexpr int {bm} = {64 * quads_m}, {bn} = {64 * quads_n}, {bk} = 16;
    __shared__ __align__(16) float {n["As"]}[2][{bk}][{bm} + 4];  // +4: float4-aligned rows, fewer bank conflicts
    __shared__ __align__(16) float {n["Bs"]}[2][{bk}][{bn}];

    const int {n["tid"]} = threadIdx.x;
    const int {n["tx"]} = {n["tid"]} % 16, {n["ty"]} = {n["tid"]} / 16;
    const int {n["row0"]} = blockIdx.y * {bm}, {n["col0"]} = blockIdx.x * {bn};
    float {n["accum"]}[4 * {quads_m}][4 * {quads_n}] = {{}};
    float {n["a_next"]}[{bm} * {bk} / {THREADS}], {n["b_next"]}[{bn} * {bk} / {THREADS}];
    const int {n["tiles"]} = ({match.depth} + {bk} - 1) / {bk};

    {{
        const int {n["k0"]} = 0;
{load(n["k0"])}
{store("0")}
    }}
    __syncthreads();

    for (int {n["t"]} = 0; {n["t"]} < {n["tiles"]}; ++{n["t"]}) {{
        const int {n["buf"]} = {n["t"]} & 1;
        if ({n["t"]} + 1 < {n["tiles"]}) {{
            const int {n["k0"]} = ({n["t"]} + 1) * {bk};
    {load(n["k0"]).replace(chr(10), chr(10) + "    ")}
        }}
        #pragma unroll
        for (int {n["kk"]} = 0; {n["kk"]} < {bk}; ++{n["kk"]}) {{
            float {n["a_frag"]}[4 * {quads_m}], {n["b_frag"]}[4 * {quads_n}];
            #pragma unroll
            for (int {n["q"]} = 0; {n["q"]} < {quads_m}; ++{n["q"]}) {{
                const float4 {n["v"]} = *reinterpret_cast<const float4*>(&{n["As"]}[{n["buf"]}][{n["kk"]}][{n["q"]} * 64 + {n["ty"]} * 4]);
                {n["a_frag"]}[4 * {n["q"]}] = {n["v"]}.x; {n["a_frag"]}[4 * {n["q"]} + 1] = {n["v"]}.y;
                {n["a_frag"]}[4 * {n["q"]} + 2] = {n["v"]}.z; {n["a_frag"]}[4 * {n["q"]} + 3] = {n["v"]}.w;
            }}
            #pragma unroll
            for (int {n["q"]} = 0; {n["q"]} < {quads_n}; ++{n["q"]}) {{
                const float4 {n["v"]} = *reinterpret_cast<const float4*>(&{n["Bs"]}[{n["buf"]}][{n["kk"]}][{n["q"]} * 64 + {n["tx"]} * 4]);
                {n["b_frag"]}[4 * {n["q"]}] = {n["v"]}.x; {n["b_frag"]}[4 * {n["q"]} + 1] = {n["v"]}.y;
                {n["b_frag"]}[4 * {n["q"]} + 2] = {n["v"]}.z; {n["b_frag"]}[4 * {n["q"]} + 3] = {n["v"]}.w;
            }}
            #pragma unroll
            for (int {i} = 0; {i} < 4 * {quads_m}; ++{i})
                #pragma unroll
                for (int {n["j"]} = 0; {n["j"]} < 4 * {quads_n}; ++{n["j"]})
                    {n["accum"]}[{i}][{n["j"]}] = fmaf({n["a_frag"]}[{i}], {n["b_frag"]}[{n["j"]}], {n["accum"]}[{i}][{n["j"]}]);
        }}
        // The other buffer was last read before the previous barrier, so it is free to fill now.
        if ({n["t"]} + 1 < {n["tiles"]}) {{
    {store(f"{n['buf']} ^ 1").replace(chr(10), chr(10) + "    ")}
        }}
        __syncthreads();
    }}

    // Each thread's rows are ty*4 .. ty*4+3 in each 64-row slab of the tile (columns likewise), so
    // the float4 reads above are conflict-free; the user's statements after the loop run once per output.
    #pragma unroll
    for (int {i} = 0; {i} < 4 * {quads_m}; ++{i}) {{
        const int {row} = {n["row0"]} + ({i} / 4) * 64 + {n["ty"]} * 4 + {i} % 4;
        #pragma unroll
        for (int {n["j"]} = 0; {n["j"]} < 4 * {quads_n}; ++{n["j"]}) {{
            const int {col} = {n["col0"]} + ({n["j"]} / 4) * 64 + {n["tx"]} * 4 + {n["j"]} % 4;
{before}
                if ({condition}) {{
                    float {acc} = {n["accum"]}[{i}][{n["j"]}];
{inside}
                }}
        }}
    }}
}}"""  # noqa: E501
