"""A 1-D convolution or a 2-D 5/9-point stencil read straight from global memory -> shared-memory tiles
with halos.

1-D, recognised: a thread per output (`i` from the x axis, bounds-checked `i < m`) whose guarded code runs
`for (int k = 0; k < taps; ++k)` (first, or after statements with no jumps) and in it reads one input
pointer `x` once, at an index that depends on `i` and `k` only through `i + k + offset` (or `i - k +
offset`): directly (`x[i + k - R]`), through loop locals (`int j = i + k - R;`), clamped
(`x[min(max(j, 0), n - 1)]`), and under any conditions of that position (`if (j >= 0 && j < n)`, `j <
n ? x[j] : 0.0f`). Rewritten: the block loads its blockDim.x + taps - 1 inputs (the halo included) into
dynamic shared memory, then runs the user's loop unchanged but for `x[...]` -> `tile[threadIdx.x + k]`.
Slot s is loaded exactly as an in-range output reading it would read it: under the same conditions, at
the same clamped index, and only when such an output exists, so no load goes where the original did not.

2-D, recognised: a 2-D kernel (`col` from x, `row` from y, bounds-checked `row < rows && col < cols`)
reading one input `u` only at `u[(row + dr) * cols + col + dc]` with |dr|, |dc| <= 1, each read off the
centre under guards that keep it inside the grid (`row > 0 ? u[(row - 1) * cols + col] : 0.0f`). The
block loads its (blockDim.y + 2) x (blockDim.x + 2) window (elements outside the grid are not loaded,
and the guards never read them) and the reads become tile reads; the rest is kept verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import (
    CountedLoop,
    Edit,
    KernelTree,
    apply_to_body,
    arguments,
    build_candidate,
    calls,
    counted_loop,
    element_type,
    fits_shared_memory,
    guarded_region,
    has_any,
    identifiers,
    identifiers_in,
    index_variables,
    line_indent,
    linear_form,
    local_names,
    operands,
    single_declaration,
    size_expression,
    statements,
    strip_parens,
    subscript_parts,
    untemplated_kernel_tree,
    walk,
    writes,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "idiom:stencil"
BLOCK_2D = (32, 8)
_SIZES = {"float": 4, "double": 8, "int": 4, "unsigned int": 4, "unsigned": 4, "half": 2, "__half": 2}
_INDEX_TYPES = frozenset({"int", "long", "long long", "int64_t", "ptrdiff_t"})
_JUMPS = ("return_statement", "break_statement", "continue_statement", "goto_statement")
_PURE_CALLS = frozenset({"min", "max", "abs"})
_OPERATORS = frozenset({"binary_expression", "unary_expression", "parenthesized_expression"})


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    if tree is None or target.spec is None or _has_barriers_or_shared(tree):
        return []
    if len(target.spec.launch.block) == 1:
        window = _window(tree)
        return _conv1d_candidate(tree, window) if window is not None else []
    grid = _grid_stencil(tree)
    return _stencil2d_candidate(tree, grid) if grid is not None else []


def _has_barriers_or_shared(tree: KernelTree) -> bool:
    return bool(calls(tree.body, ["__syncthreads", "__syncwarp"])) or "__shared__" in tree.text(tree.body)


def _read_only_input(tree: KernelTree, name: str) -> str | None:
    """The element type of a pointer the spec calls an input that no output may alias."""
    spec = tree.target.spec
    argument = spec.argument(name) if spec is not None else None
    if spec is None or argument is None or argument.role != "input":
        return None
    if any(other.may_alias == name for other in spec.arguments):
        return None
    element = element_type(tree.parameter(name))
    return element if element in _SIZES else None


def _occurrences(tree: KernelTree, name: str) -> list[Node]:
    return [n for n in walk(tree.body) if n.type == "identifier" and tree.text(n) == name]


def _written(tree: KernelTree) -> set[str]:
    return {tree.text(w) for w in writes(tree.body, tree) if w.type == "identifier"}


def _path_conditions(read: Node, stop: Node) -> list[tuple[Node, bool]]:
    """The conditions under which `read` is evaluated, from `stop` down: (condition, must be true);
    empty when it is read unconditionally. ValueError for an `if` with an initialiser (not followed)."""
    found: list[tuple[Node, bool]] = []
    child, node = read, read.parent
    while node is not None and node != stop:
        if node.type in ("if_statement", "conditional_expression"):
            condition = node.child_by_field_name("condition")
            consequence = node.child_by_field_name("consequence")
            alternative = node.child_by_field_name("alternative")
            if condition is not None and node.type == "if_statement":
                values = [c for c in condition.named_children if c.type != "comment"]
                if len(values) != 1:
                    raise ValueError("an if with an initialiser")
                condition = values[0]
            for branch, truth in ((consequence, True), (alternative, False)):
                if condition is not None and branch is not None and _inside(child, branch):
                    found.append((condition, truth))
        elif node.type == "binary_expression":
            op, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
            # `a && x[j]` reads x[j] only where a holds, `a || x[j]` only where it does not.
            if op is not None and op.type in ("&&", "||") and left and right and _inside(child, right):
                found.append((left, op.type == "&&"))
        child, node = node, node.parent
    return found[::-1]


def _inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


# -- 1-D: the window of a convolution ------------------------------------------------------------------


@dataclass
class _Window:
    """What the tile loader needs: per slot s, the user's locals, conditions and index at that position."""

    source: str  # the input pointer: x
    element: str
    index: str  # the output index: i
    bound: str  # the guard's bound on it: m
    loop: CountedLoop
    sign: int  # +1 for x[i + k ...], -1 for x[i - k ...]
    read: Node  # the x[...] in the loop
    guard: Node  # the bounds check (the tile is loaded just before it)
    names: dict[str, str]  # the loader's locals (tile, first, s) and taps as it is written in it
    before: list[Node]  # the guarded statements before the loop (their locals may be re-declared)
    locals: list[tuple[str, str, str]] = field(default_factory=list)  # (type, name, value at slot s)
    conditions: list[str] = field(default_factory=list)  # at slot s
    address: str = ""  # the read's index at slot s


class _AtSlot:
    """Rewrites an integer expression of the loop body as the same expression at tile slot `slot`:
    every `i + k + offset` (`i - k + offset`) becomes `first + slot + offset` (`first - (taps - 1 - slot)
    + offset`); anything else must be a literal, a name safe to read before the bounds check, a loop
    local already rewritten, or +-*/%, comparisons, ?: and min/max/abs of those."""

    def __init__(
        self, tree: KernelTree, index: str, k: str, sign: int, safe: set[str], names: dict[str, str]
    ):
        self.tree, self.index, self.k, self.sign, self.safe = tree, index, k, sign, safe
        self.first, self.slot, self.taps = names["first"], names["s"], names["taps"]
        self.locals: dict[str, set[str]] = {}  # rewritten loop local -> the locals its value uses
        self.shifts = 0  # how many `i +- k + offset` were found (0: the read does not move with i + k)

    def text(self, node: Node, used: set[str]) -> str | None:
        edits: list[Edit] = []
        if not self._collect(node, edits, used):
            return None
        text = self.tree.data[node.start_byte : node.end_byte]
        for begin, end, new in sorted(edits, reverse=True):
            text = text[: begin - node.start_byte] + new.encode("utf-8") + text[end - node.start_byte :]
        return text.decode("utf-8")

    def _collect(self, node: Node, edits: list[Edit], used: set[str]) -> bool:
        shift = self._shift(node)
        if shift is not None:
            i_node, k_node, others = shift
            k_text = self.slot if self.sign > 0 else f"({self.taps} - 1 - {self.slot})"
            edits += [
                (i_node.start_byte, i_node.end_byte, self.first),
                (k_node.start_byte, k_node.end_byte, k_text),
            ]
            self.shifts += 1
            return all(self._collect(term, edits, used) for term in others)
        if node.type == "identifier":
            name = self.tree.text(node)
            if name in self.locals:
                used.add(name)
                return True
            return name in self.safe
        if node.type == "number_literal":
            return True
        if node.type == "call_expression":
            function = node.child_by_field_name("function")
            if (
                function is None
                or function.type != "identifier"
                or self.tree.text(function) not in _PURE_CALLS
            ):
                return False
            return all(self._collect(argument, edits, used) for argument in arguments(node))
        if node.type == "cast_expression":
            value = node.child_by_field_name("value")
            return value is not None and self._collect(value, edits, used)
        if node.type in _OPERATORS or node.type == "conditional_expression":
            return all(self._collect(child, edits, used) for child in node.named_children)
        return False

    def _shift(self, node: Node) -> tuple[Node, Node, list[Node]] | None:
        """(the `i`, the `k`, the other terms) of `i + k + offset` (`i - k + offset` for sign -1)."""
        terms = _signed_terms(node, 1)
        mine = [
            (s, t) for s, t in terms if t.type == "identifier" and self.tree.text(t) in (self.index, self.k)
        ]
        i_terms = [t for s, t in mine if self.tree.text(t) == self.index and s == 1]
        k_terms = [t for s, t in mine if self.tree.text(t) == self.k and s == self.sign]
        if len(mine) != 2 or len(i_terms) != 1 or len(k_terms) != 1:
            return None
        return i_terms[0], k_terms[0], [t for _, t in terms if t not in (i_terms[0], k_terms[0])]


def _signed_terms(node: Node, sign: int) -> list[tuple[int, Node]]:
    """`a - (b - c)` -> [(+1, a), (-1, b), (+1, c)]."""
    node = strip_parens(node)
    op = node.child_by_field_name("operator")
    if node.type == "binary_expression" and op is not None and op.type in ("+", "-"):
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        assert left is not None and right is not None
        return _signed_terms(left, sign) + _signed_terms(right, sign if op.type == "+" else -sign)
    if node.type == "unary_expression" and op is not None and op.type in ("+", "-"):
        argument = node.child_by_field_name("argument")
        assert argument is not None
        return _signed_terms(argument, sign if op.type == "+" else -sign)
    return [(sign, node)]


def _window(tree: KernelTree) -> _Window | None:
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(indices) != 1:
        return None
    ((index, (axis, declaration)),) = indices.items()
    declared = single_declaration(declaration, tree)
    if axis != "x" or set(guarded.bounds) != {index} or declared is None or declared[0] not in _INDEX_TYPES:
        return None
    if any(s.type != "declaration" for s in guarded.prefix):
        return None
    written = _written(tree)
    parameters = {p.name for p in tree.target.kernel.parameters if not p.is_pointer}
    prefix_locals = {single[1] for s in guarded.prefix if (single := single_declaration(s, tree)) is not None}
    safe = (parameters | prefix_locals) - written - {index}
    bound = guarded.bounds[index]
    if index in written or identifiers_in(tree, bound) - safe:
        return None
    guard = statements(tree.body)[len(guarded.prefix)]
    for position, statement in enumerate(guarded.statements):
        loop = counted_loop(statement, tree)
        if loop is not None:
            if any(has_any(s, _JUMPS) for s in guarded.statements[:position]):
                return None
            return _loop_window(tree, loop, index, bound, guard, safe, guarded.statements[:position])
    return None


def _loop_window(
    tree: KernelTree,
    loop: CountedLoop,
    index: str,
    bound: str,
    guard: Node,
    safe: set[str],
    before: list[Node],
) -> _Window | None:
    k, taps = loop.variable, tree.text(loop.bound)
    if not loop.declares or tree.text(loop.start).strip() != "0" or identifiers(loop.bound) - safe:
        return None
    if has_any(loop.body, _JUMPS) or k in {
        tree.text(w) for w in writes(loop.body, tree) if w.type == "identifier"
    }:
        return None
    # The input: a pointer read once in the whole kernel, here, at an index that moves with i +- k.
    reads = []
    for node in walk(loop.body):
        parts = subscript_parts(node)
        if (
            parts is not None
            and tree.parameter(parts[0]) is not None
            and len(_occurrences(tree, parts[0])) == 1
        ):
            reads.append((node, parts))
    names = local_names(tree, "tile", "first", "s")
    names["taps"] = taps if taps.isidentifier() or taps.isdigit() else f"({taps})"
    for read, (source, position) in reads:
        element = _read_only_input(tree, source)
        if element is None:
            continue
        for sign in (1, -1):
            window = _Window(source, element, index, bound, loop, sign, read, guard, names, before)
            if _at_slot(tree, window, position, set(safe)):
                return window
    return None


def _at_slot(tree: KernelTree, window: _Window, position: Node, safe: set[str]) -> bool:
    """Fill the window's locals, conditions and address as the loader writes them; False when the read
    is not a function of the slot alone (or does not move with it)."""
    loop = window.loop
    rewrite = _AtSlot(tree, window.index, loop.variable, window.sign, safe, window.names)
    written = _written(tree)
    # Locals the read may use: those declared before the loop in the guarded code, then in the loop body
    # before the read, never assigned afterwards, whose values are expressions of the slot.
    rewritten: list[tuple[str, str, str]] = []
    shifts: dict[str, int] = {}
    candidates = [*window.before]
    for statement in statements(loop.body):
        if _inside(window.read, statement):
            break
        candidates.append(statement)
    for statement in candidates:
        declared = single_declaration(statement, tree)
        if declared is None or declared[2] is None or declared[1] in written:
            continue
        if declared[1] in rewrite.locals:
            return False  # a loop local shadowing an outer one: the loader would declare it twice
        used: set[str] = set()
        before = rewrite.shifts
        value = rewrite.text(declared[2], used)
        if value is not None:
            rewrite.locals[declared[1]] = used
            shifts[declared[1]] = rewrite.shifts - before
            rewritten.append((declared[0], declared[1], value))
    address_uses: set[str] = set()
    before = rewrite.shifts
    address = rewrite.text(position, address_uses)
    moves = rewrite.shifts - before
    try:
        path = _path_conditions(window.read, loop.node)
    except ValueError:
        return False
    conditions, used = [], set(address_uses)
    for condition, truth in path:
        text = rewrite.text(condition, used)
        if text is None:
            return False
        conditions.append(text if truth else f"!({text})")
    if address is None:
        return False
    address_uses, used = _closure(address_uses, rewritten, rewrite), _closure(used, rewritten, rewrite)
    if moves + sum(shifts[name] for name in address_uses) == 0:
        return False  # x[k]: a weight, not a window
    window.locals = [r for r in rewritten if r[1] in used]
    window.conditions = conditions
    window.address = address
    return True


def _closure(names: set[str], rewritten: list[tuple[str, str, str]], rewrite: _AtSlot) -> set[str]:
    """The locals `names` use, directly or through other locals (declared earlier)."""
    needed = set(names)
    for _, name, _ in reversed(rewritten):
        if name in needed:
            needed |= rewrite.locals[name]
    return needed


def _conv1d_candidate(tree: KernelTree, window: _Window) -> list[Candidate]:
    spec = tree.target.spec
    assert spec is not None
    taps = tree.text(window.loop.bound).strip()
    taps_size = taps if taps.isdigit() else size_expression(tree, taps) if taps.isidentifier() else None
    if taps_size is None:
        return []
    size = _SIZES[window.element]
    launch = replace(spec.launch, shared_bytes=f"(block.x + {taps_size} - 1) * {size}")
    if not fits_shared_memory(tree.target, launch):
        return []
    try:
        count = f"{evaluate(taps_size, spec.sizes)}-tap"
    except ExpressionError:
        count = "taps"
    return [
        build_candidate(
            tree,
            body=_conv1d_body(tree, window),
            launch=launch,
            description=f"shared-memory tile with halo for the {count} window",
            proposer=PROPOSER,
        )
    ]


def _conv1d_body(tree: KernelTree, w: _Window) -> str:
    n = w.names
    taps = n["taps"]
    bound = w.bound if w.bound.isidentifier() else f"({w.bound})"
    tile, first, s, k = n["tile"], n["first"], n["s"], w.loop.variable
    slot = f"threadIdx.x + {k}" if w.sign > 0 else f"threadIdx.x + ({taps} - 1 - {k})"
    reader = f"{first} + max({s} - ({taps} - 1), 0) < {bound}"
    condition = " && ".join([reader, *(f"({c})" for c in w.conditions)])
    pad = line_indent(tree, w.guard)
    lines = [
        f"// The block's window of {w.source} in shared memory: its blockDim.x outputs read",
        f"// blockDim.x + {taps} - 1 inputs (the halo included), each loaded once here instead of once",
        f"// per tap. Slot {s} is loaded only if an output in range reads it (outputs {first} + {s} - {taps}",
        f"// + 1 ... {first} + {s}), and exactly as that output reads it.",
        f"extern __shared__ {w.element} {tile}[];",
        f"const int {first} = blockIdx.x * blockDim.x;  // the block's first output",
        f"for (int {s} = threadIdx.x; {s} < (int)blockDim.x + {taps} - 1; {s} += blockDim.x) {{",
        *(f"    {kind} {name} = {value};" for kind, name, value in w.locals),
        f"    if ({condition}) {tile}[{s}] = {w.source}[{w.address}];",
        "}",
        "__syncthreads();",
        "",
    ]
    loader = "".join((pad + line if line else "") + "\n" for line in lines) + pad
    edits: list[Edit] = [
        (w.guard.start_byte, w.guard.start_byte, loader[len(pad) :]),
        (w.read.start_byte, w.read.end_byte, f"{tile}[{slot}]"),
    ]
    return apply_to_body(tree, edits)


# -- 2-D: a point stencil on a grid ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Grid:
    source: str
    element: str
    row: str
    col: str
    rows: str
    cols: str
    reads: list[tuple[Node, int, int]]  # u[...] and its offset (dr, dc)
    guard: Node


def _grid_stencil(tree: KernelTree) -> _Grid | None:
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(indices) != 2 or any(s.type != "declaration" for s in guarded.prefix):
        return None
    axes = {axis: name for name, (axis, _) in indices.items()}
    col, row = axes.get("x"), axes.get("y")
    if col is None or row is None or set(guarded.bounds) != {row, col}:
        return None
    for _, declaration in indices.values():
        declared = single_declaration(declaration, tree)
        if declared is None or declared[0] not in _INDEX_TYPES:
            return None
    rows, cols = guarded.bounds[row], guarded.bounds[col]
    if {row, col, rows, cols} & _written(tree) or not (rows.isidentifier() and cols.isidentifier()):
        return None
    guard = statements(tree.body)[len(guarded.prefix)]
    found = []
    for parameter in tree.target.kernel.parameters:
        reads = _grid_reads(tree, parameter.name, row, col, cols)
        if reads is not None and any((dr, dc) != (0, 0) for _, dr, dc in reads):
            found.append((parameter.name, reads))
    if len(found) != 1:
        return None
    ((source, reads),) = found
    element = _read_only_input(tree, source)
    if element is None or not _shape_is_grid(tree, source, rows, cols):
        return None
    for read, dr, dc in reads:
        if read.start_byte < guard.start_byte:  # before the bounds check: it would run before the loader
            return None
        try:
            facts = _facts(tree, _path_conditions(read, tree.body))
        except ValueError:
            return None
        if not all(_implied(facts, need) for need in _needs(row, col, rows, cols, dr, dc)):
            return None
    return _Grid(source, element, row, col, rows, cols, reads, guard)


def _grid_reads(
    tree: KernelTree, name: str, row: str, col: str, cols: str
) -> list[tuple[Node, int, int]] | None:
    """Every use of `name` as `name[(row + dr) * cols + col + dc]`, |dr|, |dc| <= 1; None otherwise."""
    reads = []
    for occurrence in _occurrences(tree, name):
        subscript = occurrence.parent
        parts = subscript_parts(subscript) if subscript is not None else None
        form = linear_form(parts[1]) if parts is not None else None
        if subscript is None or parts is None or form is None or parts[0] != name:
            return None
        form = dict(form)
        if form.pop(tuple(sorted((row, cols))), 0) != 1 or form.pop((col,), 0) != 1:
            return None
        dr, dc = form.pop((cols,), 0), form.pop((), 0)
        if form or abs(dr) > 1 or abs(dc) > 1:
            return None
        reads.append((subscript, dr, dc))
    return reads or None


def _shape_is_grid(tree: KernelTree, source: str, rows: str, cols: str) -> bool:
    """The spec's shape of the input is the grid the guard bounds (rows x cols), so every element inside
    the grid may be loaded."""
    spec = tree.target.spec
    argument = spec.argument(source) if spec is not None else None
    r, c = (spec.argument(rows), spec.argument(cols)) if spec is not None else (None, None)
    if argument is None or r is None or c is None or r.value is None or c.value is None:
        return False
    shape = tuple(str(d).replace(" ", "") for d in argument.shape)
    r_text, c_text = str(r.value).replace(" ", ""), str(c.value).replace(" ", "")
    return shape in ((r_text, c_text), (f"{r_text}*{c_text}",))


Fact = dict[tuple[str, ...], int]  # a linear form known to be >= 0


def _facts(tree: KernelTree, path: list[tuple[Node, bool]]) -> list[Fact]:
    """What the conditions on the path say, as linear forms >= 0: `row > 0` -> row - 1 >= 0."""
    facts = []
    for condition, truth in path:
        for part in operands(strip_parens(condition), "&&" if truth else "||"):
            fact = _comparison(tree, strip_parens(part), truth)
            if fact is not None:
                facts.append(fact)
    return facts


def _comparison(tree: KernelTree, node: Node, truth: bool) -> Fact | None:
    op, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
    if node.type != "binary_expression" or op is None or left is None or right is None:
        return None
    a, b = linear_form(left), linear_form(right)
    if a is None or b is None:
        return None
    kind = op.type if truth else {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}.get(op.type)
    difference = dict(a)  # a - b
    for m, c in b.items():
        difference[m] = difference.get(m, 0) - c
    if kind in (">", ">="):
        form = difference
    elif kind in ("<", "<="):
        form = {m: -c for m, c in difference.items()}
    else:
        return None
    if kind in (">", "<"):
        form[()] = form.get((), 0) - 1
    return {m: c for m, c in form.items() if c != 0}


def _needs(row: str, col: str, rows: str, cols: str, dr: int, dc: int) -> list[Fact]:
    """What must hold for (row + dr, col + dc) to be inside the grid, given 0 <= row < rows (cols alike)."""
    needs = []
    for offset, index, size in ((dr, row, rows), (dc, col, cols)):
        if offset < 0:
            needs.append({(index,): 1, (): -1})  # index - 1 >= 0
        elif offset > 0:
            needs.append({(size,): 1, (index,): -1, (): -2})  # size - index - 2 >= 0
    return needs


def _implied(facts: list[Fact], need: Fact) -> bool:
    """Some fact F >= 0 with need - F a constant >= 0."""
    for fact in facts:
        gap = dict(need)
        for m, c in fact.items():
            gap[m] = gap.get(m, 0) - c
        gap = {m: c for m, c in gap.items() if c != 0}
        if set(gap) <= {()} and gap.get((), 0) >= 0:
            return True
    return False


def _stencil2d_candidate(tree: KernelTree, grid: _Grid) -> list[Candidate]:
    rows, cols = size_expression(tree, grid.rows), size_expression(tree, grid.cols)
    if rows is None or cols is None:
        return []
    launch = LaunchSpec(
        block=BLOCK_2D,
        grid=(f"ceil_div({cols}, block.x)", f"ceil_div({rows}, block.y)"),
        shared_bytes=f"(block.x + 2) * (block.y + 2) * {_SIZES[grid.element]}",
    )
    if not fits_shared_memory(tree.target, launch):
        return []
    points = len({(dr, dc) for _, dr, dc in grid.reads})
    return [
        build_candidate(
            tree,
            body=_stencil2d_body(tree, grid),
            launch=launch,
            description=f"shared-memory tile with a one-element halo for the {points}-point stencil",
            proposer=PROPOSER,
        )
    ]


def _stencil2d_body(tree: KernelTree, g: _Grid) -> str:
    n = local_names(tree, "tile", "pitch", "row0", "col0", "r", "c", "gr", "gc")
    tile, pitch, row0, col0, r, c, row, col = n.values()
    pad = line_indent(tree, g.guard)
    lines = [
        f"// The block's window of {g.source} in shared memory, one element of halo on every side:",
        "// each element is loaded once here instead of once per neighbour. Elements outside the",
        f"// {g.rows} x {g.cols} grid are not loaded; the guards below never read them.",
        f"extern __shared__ {g.element} {tile}[];",
        f"const int {pitch} = blockDim.x + 2;",
        f"const int {row0} = (int)(blockIdx.y * blockDim.y) - 1;  // {g.source}'s row in the tile's row 0",
        f"const int {col0} = (int)(blockIdx.x * blockDim.x) - 1;  // its column in the tile's column 0",
        f"for (int {r} = threadIdx.y; {r} < (int)blockDim.y + 2; {r} += blockDim.y)",
        f"    for (int {c} = threadIdx.x; {c} < {pitch}; {c} += blockDim.x) {{",
        f"        const int {row} = {row0} + {r}, {col} = {col0} + {c};",
        f"        if ({row} >= 0 && {row} < {g.rows} && {col} >= 0 && {col} < {g.cols})",
        f"            {tile}[{r} * {pitch} + {c}] = {g.source}[(size_t){row} * {g.cols} + {col}];",
        "    }",
        "__syncthreads();",
        "",
    ]
    loader = "".join((pad + line if line else "") + "\n" for line in lines) + pad
    edits: list[Edit] = [(g.guard.start_byte, g.guard.start_byte, loader[len(pad) :])]
    for read, dr, dc in g.reads:
        y = "threadIdx.y" if dr == -1 else f"(threadIdx.y + {1 + dr})"
        x = "threadIdx.x" if dc == -1 else f"threadIdx.x + {1 + dc}"
        edits.append((read.start_byte, read.end_byte, f"{tile}[{y} * {pitch} + {x}]"))
    return apply_to_body(tree, edits)
