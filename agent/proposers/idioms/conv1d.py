"""A 1-D convolution read straight from global memory -> a shared-memory tile with its halo, and
thread-coarsened variants that slide a window of inputs through registers.

1-D, recognised: a thread per output (`i` from the x axis, bounds-checked `i < m`) whose guarded code runs
`for (int k = 0; k < taps; ++k)` (first, or after statements with no jumps) and in it reads one input
pointer `x` once, at an index that depends on `i` and `k` only through `i + k + offset` (or `i - k +
offset`): directly (`x[i + k - R]`), through loop locals (`int j = i + k - R;`), clamped
(`x[min(max(j, 0), n - 1)]`), and under any conditions of that position (`if (j >= 0 && j < n)`, `j <
n ? x[j] : 0.0f`). Rewritten: the block loads its blockDim.x + taps - 1 inputs (the halo included) into
dynamic shared memory, then runs the user's loop unchanged but for `x[...]` -> `tile[threadIdx.x + k]`.
Slot s is loaded exactly as an in-range output reading it would read it: under the same conditions, at
the same clamped index, and only when such an output exists, so no load goes where the original did not.

Register blocked (two more candidates, R = 5 and 9 outputs a thread): the tile alone leaves a
convolution bound by its load instructions (a shared load and a weight load per multiply-add). Each thread
then computes R consecutive outputs, i ... i + R - 1 (`i` is now the first of them), from a window of R
inputs in registers that slides one element per tap: per tap one shared-memory load and the weight,
then R multiply-adds (each output still sums its taps in the user's order). R is odd so that the 32
threads of a warp, reading tile[R * threadIdx.x + ...], hit 32 distinct banks; owning outputs t + j *
blockDim.x instead would be conflict-free for any R, but a thread's outputs would share no inputs: R
shared loads per tap instead of one. The block loads its R * blockDim.x + taps - 1 inputs under the same
conditions as the tile, R + 1 loads in flight a thread; the sums go through shared memory so that the
statements finishing an output (`y[i] = acc;`) run with consecutive threads on consecutive outputs
(stores R apart would move R times the sectors), and only for outputs in range. The grid shrinks
R-fold. Offered only for the plain form: the read `x[i + k + offset]` directly in the loop,
unconditional and unclamped (a clamped, conditional or flipped read gets the tile alone); the guarded
code is declarations (none using `i`), then the loop, whose body writes one accumulator declared there
with a value, of the input's type, and its own locals, uses `i` only in the read, and does nothing
other threads could see; then the statements that finish the output (no jumps, no thread indices, no
locals declared after the bounds check but their own). Nothing before the bounds check but the index
uses `i`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.idioms._reads import (
    ELEMENT_BYTES,
    INDEX_TYPES,
    inside,
    occurrences,
    path_conditions,
    read_only_input,
    written_names,
)
from cuda_agent.agent.proposers.tree import (
    THREAD_BUILTINS,
    CountedLoop,
    Edit,
    KernelTree,
    apply_to_body,
    arguments,
    build_candidate,
    counted_loop,
    declared_names,
    fits_shared_memory,
    guarded_region,
    has_any,
    identifiers,
    identifiers_in,
    index_variables,
    line_indent,
    local_names,
    mentions,
    reindent,
    single_declaration,
    size_expression,
    statements,
    strip_parens,
    subscript_parts,
    walk,
    writes,
)
from cuda_agent.agent.spec import SpecResolveError, complete_sizes
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate, parse_expression
from tree_sitter import Node

PROPOSER = "idiom:stencil"  # the stencil idiom's 1-D case: stencil.py hands 1-D kernels to this module
_JUMPS = ("return_statement", "break_statement", "continue_statement", "goto_statement")
_PURE_CALLS = frozenset({"min", "max", "abs"})
_OPERATORS = frozenset({"binary_expression", "unary_expression", "parenthesized_expression"})
# Outputs per thread of the register-blocked candidates: odd, so that thread t's reads of
# tile[t * R + ...] fall in distinct banks (a power of two would be an R-way bank conflict).
OUTPUTS_PER_THREAD = (5, 9)
# Calls (by prefix) with effects beyond the output's own value: atomics, warp or block collectives, output.
_SHARED_EFFECTS = (
    *("atomic", "__sync", "__shfl", "__ballot", "__any", "__all", "__activemask", "__match", "__reduce"),
    "printf",
)


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
        return _edited(self.tree, node.start_byte, node.end_byte, edits)

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


def conv1d_window(tree: KernelTree) -> _Window | None:
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(indices) != 1:
        return None
    ((index, (axis, declaration)),) = indices.items()
    declared = single_declaration(declaration, tree)
    if axis != "x" or set(guarded.bounds) != {index} or declared is None or declared[0] not in INDEX_TYPES:
        return None
    if any(s.type != "declaration" for s in guarded.prefix):
        return None
    written = written_names(tree)
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
            and len(occurrences(tree, parts[0])) == 1
        ):
            reads.append((node, parts))
    names = local_names(tree, "tile", "first", "s")
    names["taps"] = taps if taps.isidentifier() or taps.isdigit() else f"({taps})"
    for read, (source, position) in reads:
        element = read_only_input(tree, source)
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
    written = written_names(tree)
    # Locals the read may use: those declared before the loop in the guarded code, then in the loop body
    # before the read, never assigned afterwards, whose values are expressions of the slot.
    rewritten: list[tuple[str, str, str]] = []
    shifts: dict[str, int] = {}
    candidates = [*window.before]
    for statement in statements(loop.body):
        if inside(window.read, statement):
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
        path = path_conditions(window.read, loop.node)
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


def conv1d_candidates(tree: KernelTree, window: _Window) -> list[Candidate]:
    spec = tree.target.spec
    assert spec is not None
    taps = tree.text(window.loop.bound).strip()
    taps_size = taps if taps.isdigit() else size_expression(tree, taps) if taps.isidentifier() else None
    if taps_size is None:
        return []
    size = ELEMENT_BYTES[window.element]
    try:
        count = f"{evaluate(taps_size, spec.sizes)}-tap"
    except ExpressionError:
        count = "taps"
    found: list[Candidate] = []
    launch = replace(spec.launch, shared_bytes=f"(block.x + {taps_size} - 1) * {size}")
    if fits_shared_memory(tree.target, launch):
        found.append(
            build_candidate(
                tree,
                body=_conv1d_body(tree, window),
                launch=launch,
                description=f"shared-memory tile with halo for the {count} window",
                proposer=PROPOSER,
            )
        )
    blocked = _blocked(tree, window)
    if blocked is None or not _never_negative(tree, taps_size):
        return found
    for outputs in OUTPUTS_PER_THREAD:
        launch = replace(
            spec.launch,
            grid=(_blocked_grid(tree, spec.launch.grid[0], outputs),),
            shared_bytes=f"({2 * outputs} * block.x + {taps_size} - 1) * {size}",  # tile, sums
        )
        if fits_shared_memory(tree.target, launch):
            found.append(
                build_candidate(
                    tree,
                    body=_blocked_body(tree, window, blocked, outputs),
                    launch=launch,
                    description=f"{outputs} outputs a thread from a sliding register window over a "
                    f"shared-memory tile, for the {count} window",
                    proposer=PROPOSER,
                )
            )
    return found


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


# -- 1-D: register blocking ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Blocked:
    """The plain convolution register blocking rewrites: what it needs beyond the tile's window."""

    first_output: Node  # the index's value (`blockIdx.x * blockDim.x + threadIdx.x`), to scale by R
    accumulator: str
    declaration: Node  # `float acc = 0.0f;`
    kind: str  # its type, the input's
    initial: Node  # its value
    before: list[Node]  # the guarded statements before the loop, its declaration among them
    after: list[Node]  # the statements that finish one output
    header: str  # `if (i < m) `: the bounds check, as written or (for an early return) turned around
    end: int  # the end of the guarded code: the if's closing brace, or the kernel's last statement


def _blocked(tree: KernelTree, w: _Window) -> _Blocked | None:
    """The convolution in the plain form the module docstring describes, or None."""
    guarded = guarded_region(tree)
    parts = subscript_parts(w.read)
    consequence = w.guard.child_by_field_name("consequence")
    if guarded is None or parts is None or consequence is None or w.sign != 1 or w.conditions:
        return None
    index, loop, k = w.index, w.loop, w.loop.variable
    position = next(
        (p for p, s in enumerate(guarded.statements) if s.start_byte == loop.node.start_byte), None
    )
    if not position:
        return None  # no declarations before the loop: no accumulator
    before, after = guarded.statements[:position], guarded.statements[position + 1 :]
    body_locals, after_locals = declared_names(loop.body, tree), _declared_in(tree, after)
    # The read is x[i + k + offset] itself: not clamped, the offset free of i, k and the loop's locals.
    terms = _signed_terms(parts[1], 1)
    mine = [(sign, t) for sign, t in terms if t.type == "identifier" and tree.text(t) in (index, k)]
    others = [t for _, t in terms if all(t != m for _, m in mine)]
    if sorted((sign, tree.text(t)) for sign, t in mine) != sorted([(1, index), (1, k)]):
        return None
    if set().union(*(identifiers(t) for t in others)) & ({index, k} | body_locals):
        return None
    # The loop body runs for every output a thread owns, in range or not, and must not see which: it
    # writes one accumulator (of the input's type) and its own locals, and uses i only in the read.
    targets = writes(loop.body, tree)
    if any(t.type != "identifier" for t in targets) or len(_occurrences_in(tree, loop.body, index)) != 1:
        return None
    written = {tree.text(t) for t in targets} - body_locals
    declarations = [single_declaration(s, tree) for s in before]
    if len(written) != 1 or any(d is None or d[2] is None for d in declarations):
        return None
    if any(mentions(tree, s, {index} | THREAD_BUILTINS) for s in before):
        return None
    (accumulator,) = written
    pairs = zip(before, declarations, strict=True)
    found = [(s, d) for s, d in pairs if d is not None and d[1] == accumulator]
    if len(found) != 1:
        return None
    declaration, (kind, _, initial) = found[0]
    if kind != w.element or initial is None:
        return None
    # What finishes an output runs after the bounds check's block, once per output: it sees the
    # accumulator, i and what was declared before the bounds check, and writes only its own locals.
    before_locals = {d[1] for d in declarations if d is not None} - {accumulator}
    after_writes = {tree.text(t) for s in after for t in writes(s, tree) if t.type == "identifier"}
    if not after or (body_locals | after_locals) & {accumulator, index}:
        return None
    if any(mentions(tree, s, before_locals) or has_any(s, _JUMPS) for s in after):
        return None
    if after_writes - after_locals - {accumulator}:
        return None
    if any(_acts_across_threads(tree, node) for node in [loop.body, *after]):
        return None
    index_declaration = index_variables(tree.body)[index][1]
    for statement in guarded.prefix:
        if statement.start_byte != index_declaration.start_byte and mentions(
            tree, statement, {index} | THREAD_BUILTINS
        ):
            return None
    declared = single_declaration(index_declaration, tree)
    if declared is None or declared[2] is None:
        return None
    if [s.type for s in statements(consequence)] == ["return_statement"]:
        bound = w.bound if w.bound.isidentifier() else f"({w.bound})"
        header, end = f"if ({index} < {bound}) ", after[-1].end_byte
    else:
        header = tree.data[w.guard.start_byte : consequence.start_byte].decode("utf-8")
        end = w.guard.end_byte
    return _Blocked(declared[2], accumulator, declaration, kind, initial, before, after, header, end)


def _declared_in(tree: KernelTree, nodes: list[Node]) -> set[str]:
    return set().union(*(declared_names(n, tree) for n in nodes))


def _occurrences_in(tree: KernelTree, node: Node, name: str) -> list[Node]:
    return [n for n in walk(node) if n.type == "identifier" and tree.text(n) == name]


def _acts_across_threads(tree: KernelTree, node: Node) -> bool:
    """Thread indices, warp or block collectives, atomics, printf or asm: code that would see (or be
    seen by) the other outputs a thread now computes."""
    if mentions(tree, node, THREAD_BUILTINS) or any("asm" in n.type for n in walk(node)):
        return True
    called = [
        tree.text(f)
        for c in walk(node)
        if c.type == "call_expression" and (f := c.child_by_field_name("function")) is not None
    ]
    return any(name.startswith(_SHARED_EFFECTS) for name in called)


def _never_negative(tree: KernelTree, taps_size: str) -> bool:
    """Whether the tap count is >= 0 at every size the spec runs (the register window's first loads
    stay inside the tile only then)."""
    spec = tree.target.spec
    assert spec is not None
    try:
        points = [spec.sizes, *(complete_sizes(spec, s) for s in spec.verify_sizes)]
        return all(evaluate(taps_size, point) >= 0 for point in points)
    except (ExpressionError, SpecResolveError):
        return False


def _blocked_grid(tree: KernelTree, grid: str, outputs: int) -> str:
    """The grid for `outputs` outputs a thread: `ceil_div(m, block.x)` -> `ceil_div(m, 5 * block.x)`, any
    other grid g -> `ceil_div(g, 5)` (the same count: ceil(ceil(m / b) / R) = ceil(m / (R * b)))."""
    spec = tree.target.spec
    assert spec is not None
    try:
        call = parse_expression(grid, spec.sizes.keys(), allow_block=True).tree
    except ExpressionError:
        return f"ceil_div({grid}, {outputs})"
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in ("ceil_div", "cdiv")
        and len(call.args) == 2
        and ast.unparse(call.args[1]) == "block.x"
    ):
        count = ast.get_source_segment(grid.strip(), call.args[0])
        if count is not None:
            return f"{call.func.id}({count}, {outputs} * block.x)"
    return f"ceil_div({grid}, {outputs})"


def _blocked_body(tree: KernelTree, w: _Window, b: _Blocked, outputs: int) -> str:
    n = w.names | local_names(tree, "slots", "sums", "chunk", "r", "window", "output")
    taps, tile, first, s, k = n["taps"], n["tile"], n["first"], n["s"], w.loop.variable
    slots, sums, chunk, r, window = n["slots"], n["sums"], n["chunk"], n["r"], n["window"]
    output, i, acc = n["output"], w.index, b.accumulator
    bound = w.bound if w.bound.isidentifier() else f"({w.bound})"
    pad, unit = line_indent(tree, w.guard), tree.indent_unit()
    inner, last, loads = pad + unit, outputs - 1, outputs + 1
    loader = [
        f"// Each thread computes {outputs} consecutive outputs, {i} ... {i} + {last}, from {outputs} inputs "
        "in registers that slide",
        f"// by one element per tap: one shared-memory load and one weight per {outputs} multiply-adds. "
        "The block's",
        f"// {outputs} * blockDim.x outputs read {outputs} * blockDim.x + {taps} - 1 inputs (the halo "
        "included), each loaded",
        f"// once here, {loads} loads in flight a thread. Slot {s} is loaded only if an output in range "
        "reads it",
        f"// (outputs {first} + {s} - {taps} + 1 ... {first} + {s}), and exactly as that output reads it.",
        f"extern __shared__ {w.element} {tile}[];",
        f"const int {first} = {outputs} * blockIdx.x * blockDim.x;  // the block's first output",
        f"const int {slots} = {outputs} * (int)blockDim.x + {taps} - 1;",
        f"{w.element}* {sums} = {tile} + {slots};  // then the block's {outputs} * blockDim.x results",
        f"for (int {chunk} = 0; {chunk} < {slots}; {chunk} += {loads} * blockDim.x) {{",
        f"{unit}#pragma unroll",
        f"{unit}for (int {r} = 0; {r} < {loads}; ++{r}) {{",
        f"{unit * 2}const int {s} = {chunk} + {r} * blockDim.x + threadIdx.x;",
        *(f"{unit * 2}{kind} {name} = {value};" for kind, name, value in w.locals),
        f"{unit * 2}if ({s} < {slots} && {first} + max({s} - ({taps} - 1), 0) < {bound}) "
        f"{tile}[{s}] = {w.source}[{w.address}];",
        f"{unit}}}",
        "}",
        "__syncthreads();",
        "",
    ]
    # In the bounds check: the accumulator becomes one per output, the loop slides a window.
    declaration = [
        f"{b.kind} {acc}[{outputs}];  // {acc}[{r}]: output {i} + {r}",
        "#pragma unroll",
        f"for (int {r} = 0; {r} < {outputs}; ++{r}) {acc}[{r}] = {tree.text(b.initial)};",
    ]
    loop, loop_pad = w.loop, line_indent(tree, w.loop.node)
    per_output = [(n.start_byte, n.end_byte, f"{acc}[{r}]") for n in _occurrences_in(tree, loop.body, acc)]
    read = (w.read.start_byte, w.read.end_byte, f"{window}[{r}]")
    body = _edited(tree, loop.body.start_byte, loop.body.end_byte, [read, *per_output])
    body = reindent(body, loop_pad, loop_pad + unit)[len(loop_pad + unit) :]
    header = tree.data[loop.node.start_byte : loop.body.start_byte].decode("utf-8").rstrip()
    slot = f"{outputs} * threadIdx.x"  # the slot of the thread's first output
    sliding = [
        f"{w.element} {window}[{outputs}];  // {window}[{r}]: {tree.text(w.read)} for output {i} + {r}",
        "#pragma unroll",
        f"for (int {r} = 1; {r} < {outputs}; ++{r}) {window}[{r}] = {tile}[{slot} + {r} - 1];",
        f"{header} {{",
        f"{unit}#pragma unroll",
        f"{unit}for (int {r} = 0; {r} < {last}; ++{r}) {window}[{r}] = {window}[{r} + 1];",
        f"{unit}{window}[{last}] = {tile}[{slot} + {k} + {last}];",
        f"{unit}#pragma unroll",
        f"{unit}for (int {r} = 0; {r} < {outputs}; ++{r}) {body}",
        "}",
    ]
    edits: list[Edit] = []
    for node, lines in ((b.declaration, declaration), (loop.node, sliding)):
        at = line_indent(tree, node)  # on a line of its own, even where the user's shared one
        alone = tree.starts_line(node) or node.start_byte == b.before[0].start_byte
        text = _lines(at, lines) if alone else "\n" + at + _lines(at, lines)
        edits.append((node.start_byte, node.end_byte, text))
    computed = _edited(tree, b.before[0].start_byte, loop.node.end_byte, edits)
    # What finishes an output, by consecutive threads for consecutive outputs (so the stores coalesce).
    renamed = [(n.start_byte, n.end_byte, output) for a in b.after for n in _occurrences_in(tree, a, i)]
    finish = _edited(tree, b.after[0].start_byte, b.after[-1].end_byte, renamed)
    lines = [
        *(pad + line if line else "" for line in loader),
        f"{pad}{b.header}{{",
        *(line.rstrip() for line in reindent(computed, line_indent(tree, b.before[0]), inner).split("\n")),
        f"{inner}#pragma unroll",
        f"{inner}for (int {r} = 0; {r} < {outputs}; ++{r}) {sums}[{slot} + {r}] = {acc}[{r}];",
        f"{pad}}}",
        f"{pad}__syncthreads();",
        f"{pad}// The outputs finished by consecutive threads, so that their stores coalesce.",
        f"{pad}#pragma unroll",
        f"{pad}for (int {r} = 0; {r} < {outputs}; ++{r}) {{",
        f"{inner}const int {output} = {first} + {r} * blockDim.x + threadIdx.x;",
        f"{inner}if ({output} >= {bound}) break;  // outputs past the end are not written",
        f"{inner}{b.kind} {acc} = {sums}[{r} * blockDim.x + threadIdx.x];",
        reindent(finish, line_indent(tree, b.after[0]), inner),
        f"{pad}}}",
    ]
    edits = [
        (b.first_output.start_byte, b.first_output.end_byte, f"{outputs} * ({tree.text(b.first_output)})"),
        (w.guard.start_byte, b.end, "\n".join(lines)[len(pad) :]),
    ]
    return apply_to_body(tree, edits)


def _edited(tree: KernelTree, start: int, end: int, edits: list[Edit]) -> str:
    """The file's bytes [start, end) with the edits (inside that range, none overlapping) applied."""
    text = tree.data[start:end]
    for begin, stop, new in sorted(edits, reverse=True):
        text = text[: begin - start] + new.encode("utf-8") + text[stop - start :]
    return text.decode("utf-8")


def _lines(pad: str, lines: list[str]) -> str:
    """Lines to put where a statement indented by `pad` starts: the first without the pad."""
    return "\n".join([lines[0], *(pad + line if line else "" for line in lines[1:])])
