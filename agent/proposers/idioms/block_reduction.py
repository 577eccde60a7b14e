"""A textbook shared-memory tree reduction with one atomic per block -> the grid-stride, warp-shuffle one.

Recognised: a kernel that is exactly these steps, in the user's names. Each thread stores one element in
a `__shared__` array (fixed size at least the block, or `extern __shared__`) at its thread index
(`partial[tid] = i < n ? x[i] : 0.0f;`, the `if`/`else` form, or the identity stored first and the
element under `if (i < n)`), `i` being the global index from blockIdx/blockDim/threadIdx and the element
any expression of `i` and the parameters (`x[i] * x[i]`). After a `__syncthreads()`, a log-step loop
combines the array in place with a barrier every step, interleaved (`for (s = 1; s < blockDim.x; s *= 2)
if (tid % (2 * s) == 0) partial[tid] += partial[tid + s];`) or with sequential addressing
(`for (s = blockDim.x / 2; s > 0; s >>= 1) if (tid < s) ...`). Last, thread 0 adds the block's result to
one address (`if (tid == 0) atomicAdd(total, partial[0]);`). Sums (`+=`, `a = a + b`), and integer
`max`/`min` with atomicMax/atomicMin, the out-of-range threads storing the operation's identity.

Rewritten: it is the atomic-reduction idiom with the element's atomic already gathered per block, so it
gets that idiom's body: a grid-stride loop folds the elements into a register, `__shfl_down_sync` reduces
each warp, one slot per warp in shared memory (the user's array, now 32 long) collects the warps, the
first warp reduces those, and one thread issues the block's atomic. The grid is capped at what the GPU
holds at once, and no dynamic shared memory is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.parsing import linear_form
from cuda_agent.agent.proposers.idioms._grid_stride import ATOMICS, ElementLoop
from cuda_agent.agent.proposers.idioms.atomic_reduction import IDENTITY, one_atomic_per_block, single_address
from cuda_agent.agent.proposers.tree import (
    COMBINERS,
    MAX,
    MIN,
    SUM,
    ZERO_LITERALS,
    KernelTree,
    arguments,
    element_type,
    identifiers,
    is_barrier,
    is_name,
    operands,
    statements,
    strip_parens,
    subscript_parts,
    untemplated_kernel_tree,
    walk,
    writes,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "idiom:block-reduction"
KIND_OF_ATOMIC = {"atomicAdd": SUM, "atomicMax": MAX, "atomicMin": MIN}
DOUBLED, HALVED = "doubled", "halved"  # how the tree loop's step changes
# The identities a first draft stores for the out-of-range threads, besides the literals in IDENTITY.
_LIMITS = {
    ("atomicMax", "int"): "INT_MIN",
    ("atomicMax", "long long"): "LLONG_MIN",
    ("atomicMin", "int"): "INT_MAX",
    ("atomicMin", "unsigned int"): "UINT_MAX",
    ("atomicMin", "unsigned"): "UINT_MAX",
    ("atomicMin", "long long"): "LLONG_MAX",
    ("atomicMin", "unsigned long long"): "ULLONG_MAX",
}


@dataclass(frozen=True)
class _Names:
    """The kernel's roles, in the user's names."""

    shared: str  # the __shared__ array
    shared_type: str
    shared_size: int | None  # None for `extern __shared__ T a[];`
    threads: frozenset[str]  # locals holding threadIdx.x (`tid`); `threadIdx.x` itself always counts
    index: str  # the global element index
    index_type: str


@dataclass(frozen=True)
class _Load:
    bound: str  # `n` in `i < n`
    value: Node  # the element stored by an in-range thread
    fill: Node  # what an out-of-range thread stores


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    found = _block_reduction(tree) if tree is not None else None
    if tree is None or found is None:
        return []
    loop, shared = found
    return one_atomic_per_block(tree, loop, PROPOSER, slots=shared)


def _block_reduction(tree: KernelTree) -> tuple[ElementLoop, str] | None:
    """The kernel as atomic-reduction's element loop (and its shared array's name), when it is exactly:
    declarations, the load into shared memory, a barrier, the tree loop, thread 0's atomic."""
    spec = tree.target.spec
    if spec is None or len(spec.launch.block) != 1 or len(spec.launch.grid) != 1:
        return None
    block = spec.launch.block[0]
    if block < 2 or block & (block - 1):
        return None  # the draft's halving and doubling only cover a power-of-two block
    body = statements(tree.body)
    count = next((k for k, s in enumerate(body) if s.type != "declaration"), len(body))
    names = _names(body[:count], tree)
    if names is None or (names.shared_size is not None and names.shared_size < block):
        return None
    rest = body[count:]
    load, used = _load(rest, names, tree)
    if load is None or len(rest) != used + 3 or not is_barrier(rest[used], tree):
        return None
    kind = _tree_loop(rest[used + 1], names, block, tree)
    final = _final_atomic(rest[used + 2], names, tree)
    if kind is None or final is None:
        return None
    statement, atomic = final
    function = tree.text(atomic.child_by_field_name("function") or atomic)
    if KIND_OF_ATOMIC.get(function) != kind:
        return None
    address, _ = arguments(atomic)
    # Seen as atomic-reduction's element loop: each element's work is the block's atomic applied to the
    # element's value (its body swaps that call in `statement` for the fold into the register).
    loop = ElementLoop(
        index=names.index,
        index_type=names.index_type,
        bound=load.bound,
        statements=[statement],
        atomic=atomic,
        function=function,
        address=address,
        value=load.value,
    )
    pointer = single_address(tree, loop)
    element = element_type(tree.parameter(pointer)) if pointer else None
    if pointer is None or element is None or element != names.shared_type:
        return None
    if pointer in identifiers(load.value) or not _is_identity(load.fill, function, element, tree):
        return None
    return loop, names.shared


# -- the declarations ----------------------------------------------------------------------------------


def _names(declarations: list[Node], tree: KernelTree) -> _Names | None:
    """One shared array, the global index and any `tid = threadIdx.x`; nothing else is declared."""
    shared: tuple[str, str, int | None] | None = None
    threads: set[str] = set()
    index: tuple[str, str] | None = None
    for declaration in declarations:
        type_node = declaration.child_by_field_name("type")
        declarators = declaration.children_by_field_name("declarator")
        if type_node is None or not declarators:
            return None
        if "__shared__" in {tree.text(c) for c in declaration.children}:
            array = _shared_array(declaration, tree)
            if shared is not None or array is None:
                return None
            shared = (array[0], tree.text(type_node), array[1])
            continue
        for declarator in declarators:
            name, value = (
                declarator.child_by_field_name("declarator"),
                declarator.child_by_field_name("value"),
            )
            if (
                declarator.type != "init_declarator"
                or name is None
                or value is None
                or name.type != "identifier"
            ):
                return None
            if _is_thread(value, threads, tree):
                threads.add(tree.text(name))
            elif _is_global_index(value, threads, tree) and index is None:
                index = (tree.text(name), tree.text(type_node))
            else:
                return None
    if shared is None or index is None:
        return None
    return _Names(shared[0], shared[1], shared[2], frozenset(threads), index[0], index[1])


def _shared_array(declaration: Node, tree: KernelTree) -> tuple[str, int | None] | None:
    """(name, length) of `__shared__ T a[256];`, (name, None) of `extern __shared__ T a[];`."""
    (declarator, *others) = declaration.children_by_field_name("declarator")
    name = declarator.child_by_field_name("declarator")
    if others or declarator.type != "array_declarator" or name is None or name.type != "identifier":
        return None
    size = declarator.child_by_field_name("size")
    if size is None:
        extern = any(
            c.type == "storage_class_specifier" and tree.text(c) == "extern" for c in declaration.children
        )
        return (tree.text(name), None) if extern else None
    length = _integer(size, tree)
    return (tree.text(name), length) if length is not None else None


def _is_thread(node: Node, threads: set[str] | frozenset[str], tree: KernelTree) -> bool:
    """`threadIdx.x`, or a local holding it."""
    node = strip_parens(node)
    if node.type == "identifier":
        return tree.text(node) in threads
    return _x_of(node, tree) == "threadIdx"


def _x_of(node: Node, tree: KernelTree) -> str | None:
    """`blockDim` for `blockDim.x` (also under a cast); None for anything else."""
    node = strip_parens(node)
    if node.type == "cast_expression" and (value := node.child_by_field_name("value")) is not None:
        node = strip_parens(value)
    base, field = node.child_by_field_name("argument"), node.child_by_field_name("field")
    if node.type != "field_expression" or base is None or field is None or tree.text(field) != "x":
        return None
    return tree.text(base)


def _is_global_index(node: Node, threads: set[str], tree: KernelTree) -> bool:
    """`blockIdx.x * blockDim.x + threadIdx.x` (any order), the thread index possibly a local."""
    terms = operands(node, "+")
    if len(terms) != 2:
        return False
    return any(
        _is_thread(thread, threads, tree)
        and sorted(str(_x_of(f, tree)) for f in operands(product, "*")) == ["blockDim", "blockIdx"]
        for thread, product in (terms, terms[::-1])
    )


def _integer(node: Node, tree: KernelTree) -> int | None:
    node = strip_parens(node)
    if node.type != "number_literal":
        return None
    try:
        return int(tree.text(node).rstrip("uUlL"), 0)
    except ValueError:
        return None


# -- the load ------------------------------------------------------------------------------------------


def _load(body: list[Node], names: _Names, tree: KernelTree) -> tuple[_Load | None, int]:
    """The element each thread stores in its own slot, and how many statements store it: `a[t] = i < n ? v
    : 0;`, `if (i < n) a[t] = v; else a[t] = 0;`, or `a[t] = 0; if (i < n) a[t] = v;`."""
    if not body:
        return None, 0
    first = body[0]
    stored = _own_slot_store(first, names, tree)
    if stored is not None and strip_parens(stored).type == "conditional_expression":
        conditional = strip_parens(stored)
        condition, taken, other = (
            conditional.child_by_field_name(f) for f in ("condition", "consequence", "alternative")
        )
        if condition is None or taken is None or other is None:
            return None, 0
        return _checked(condition, taken, other, names, tree), 1
    if first.type == "if_statement":
        condition, inside, alternative = _if_parts(first)
        otherwise = alternative.named_children[-1] if alternative is not None else None
        taken = _own_slot_store(_single(inside), names, tree) if inside is not None else None
        other = _own_slot_store(_single(otherwise), names, tree) if otherwise is not None else None
        if condition is None or taken is None or other is None:
            return None, 0
        return _checked(condition, taken, other, names, tree), 1
    if stored is not None and len(body) > 1 and body[1].type == "if_statement":
        condition, inside, alternative = _if_parts(body[1])
        taken = _own_slot_store(_single(inside), names, tree) if inside is not None else None
        if condition is None or taken is None or alternative is not None:
            return None, 0
        load = _checked(condition, taken, stored, names, tree, fill_first=True)
        return load, 2
    return None, 0


def _checked(
    condition: Node, taken: Node, other: Node, names: _Names, tree: KernelTree, *, fill_first: bool = False
) -> _Load | None:
    """The load when the condition is the bounds check (`i < n`, or `i >= n` with the branches swapped)
    and the element reads nothing but the index and the parameters."""
    bounds = _bounds_check(condition, names.index, tree)
    if bounds is None:
        return None
    bound, in_range = bounds
    parameters = {p.name for p in tree.target.kernel.parameters}
    if (fill_first and not in_range) or identifiers(bound) - parameters:
        return None  # the grid-stride loop's bound must be the same for every thread
    value, fill = (taken, other) if in_range else (other, taken)
    called = {
        tree.text(function)
        for n in walk(value)
        if n.type == "call_expression" and (function := n.child_by_field_name("function")) is not None
    }
    if identifiers(value) - called - parameters - {names.index}:
        return None  # a thread-, block- or slot-dependent element is not one element of a flat range
    if writes(value, tree) or any(f in ATOMICS or f.startswith(("__sync", "__shfl")) for f in called):
        return None
    return _Load(tree.text(bound), value, fill)


def _bounds_check(condition: Node, index: str, tree: KernelTree) -> tuple[Node, bool] | None:
    """(bound, true in range) for `i < n` / `n > i` (True) and `i >= n` / `n <= i` (False)."""
    condition = strip_parens(condition)
    op, left, right = (condition.child_by_field_name(f) for f in ("operator", "left", "right"))
    if condition.type != "binary_expression" or op is None or left is None or right is None:
        return None
    for mine, other, below, above in ((left, right, "<", ">="), (right, left, ">", "<=")):
        if is_name(mine, index, tree) and op.type in (below, above):
            return other, op.type == below
    return None


def _own_slot_store(statement: Node | None, names: _Names, tree: KernelTree) -> Node | None:
    """The stored value of `a[t] = value;`, `a` the shared array and `t` the thread index."""
    assignment = _assignment(statement)
    if assignment is None or assignment[1] != "=" or not _is_slot(assignment[0], names, tree, offset=None):
        return None
    return assignment[2]


def _is_identity(fill: Node, function: str, element: str, tree: KernelTree) -> bool:
    """Whether the out-of-range threads store the identity of the reduction."""
    text = "".join(tree.text(strip_parens(fill)).split())
    identity = IDENTITY[function][element]
    spellings = {"".join(identity.split()).strip("()"), _LIMITS.get((function, element), "")}
    if identity in ZERO_LITERALS | {"0ull"}:
        spellings |= ZERO_LITERALS
    return text.strip("()") in spellings - {""}


# -- the tree loop -------------------------------------------------------------------------------------


def log_step_tree(
    node: Node, shared: str, threads: frozenset[str], block: int, tree: KernelTree
) -> str | None:
    """SUM, MAX or MIN for a log-step loop combining the shared array `shared` in place (its result in slot
    0), the thread index `threadIdx.x` or one of `threads`; floating-point maxima (`fmaxf`) included."""
    names = _Names(shared, "", None, threads, "", "")
    return _tree_loop(node, names, block, tree, float_combines=True)


def _tree_loop(
    node: Node, names: _Names, block: int, tree: KernelTree, *, float_combines: bool = False
) -> str | None:
    """SUM, MAX or MIN for the log-step loop that leaves the block's result in slot 0, else None."""
    if node.type != "for_statement":
        return None
    init, condition, update, body = (
        node.child_by_field_name(f) for f in ("initializer", "condition", "update", "body")
    )
    if init is None or condition is None or update is None or body is None or init.type != "declaration":
        return None
    declarators = init.children_by_field_name("declarator")
    if len(declarators) != 1 or declarators[0].type != "init_declarator":
        return None
    name, start = (
        declarators[0].child_by_field_name("declarator"),
        declarators[0].child_by_field_name("value"),
    )
    if name is None or start is None or name.type != "identifier":
        return None
    step = tree.text(name)
    inside = statements(body)
    if len(inside) != 2 or inside[0].type != "if_statement" or not is_barrier(inside[1], tree):
        return None
    guard, combine, alternative = _if_parts(inside[0])
    if guard is None or combine is None or alternative is not None:
        return None
    kind = _combine(_single(combine), step, names, tree, float_combines)
    if kind is None:
        return None
    scaled = _scaled(update, step, tree)
    if _integer(start, tree) == 1 and _below(condition, step, block, tree) and scaled == DOUBLED:
        return kind if _interleaved_guard(guard, step, names, block, tree) else None
    if _is_half_block(start, block, tree) and _positive(condition, step, tree) and scaled == HALVED:
        return kind if _lower_half(guard, step, names, tree) else None
    return None


def _combine(
    statement: Node | None, step: str, names: _Names, tree: KernelTree, float_combines: bool
) -> str | None:
    """`a[t] += a[t + s]`, `a[t] = a[t] + a[t + s]` (SUM), `a[t] = max(a[t], a[t + s])` (MAX/MIN, and
    `fmaxf`/`fminf` with `float_combines`)."""
    assignment = _assignment(statement)
    if assignment is None or not _is_slot(assignment[0], names, tree, offset=None):
        return None
    _, op, value = assignment
    value = strip_parens(value)
    if op == "+=":
        return SUM if _is_slot(value, names, tree, offset=step) else None
    if op != "=":
        return None
    if value.type == "binary_expression" and (plus := value.child_by_field_name("operator")) is not None:
        pair = [value.child_by_field_name("left"), value.child_by_field_name("right")]
        return SUM if plus.type == "+" and _own_and_partner(pair, step, names, tree) else None
    if value.type == "call_expression":
        function = tree.text(value.child_by_field_name("function") or value)
        # atomicMax/atomicMin are integer operations: fmaxf and friends would round large integers.
        allowed = COMBINERS if float_combines else ("max", "min")
        if function in allowed and _own_and_partner(list(arguments(value)), step, names, tree):
            return COMBINERS[function]
    return None


def _own_and_partner(pair: list[Node | None], step: str, names: _Names, tree: KernelTree) -> bool:
    if len(pair) != 2 or pair[0] is None or pair[1] is None:
        return False
    a, b = pair
    return any(
        _is_slot(mine, names, tree, offset=None) and _is_slot(other, names, tree, offset=step)
        for mine, other in ((a, b), (b, a))
    )


def _is_slot(node: Node, names: _Names, tree: KernelTree, *, offset: str | None) -> bool:
    """`a[t]` (offset None) or `a[t + s]`, `a` the shared array and `t` the thread index."""
    parts = subscript_parts(node)
    if parts is None or parts[0] != names.shared:
        return False
    index = parts[1]
    if offset is None:
        return _is_thread(index, names.threads, tree)
    terms = operands(index, "+")
    return len(terms) == 2 and any(
        _is_thread(t, names.threads, tree) and is_name(other, offset, tree)
        for t, other in (terms, terms[::-1])
    )


def _is_block_size(node: Node, block: int, tree: KernelTree) -> bool:
    return _x_of(node, tree) == "blockDim" or _integer(node, tree) == block


def _is_half_block(node: Node, block: int, tree: KernelTree) -> bool:
    """`blockDim.x / 2`, `blockDim.x >> 1`, or the half block as a number."""
    node = strip_parens(node)
    if _integer(node, tree) == block // 2:
        return True
    op, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
    if node.type != "binary_expression" or op is None or left is None or right is None:
        return False
    halving = {"/": 2, ">>": 1}.get(op.type)
    return _is_block_size(left, block, tree) and halving is not None and _integer(right, tree) == halving


def _below(condition: Node, step: str, block: int, tree: KernelTree) -> bool:
    """`s < blockDim.x` (or the block size as a number)."""
    condition = strip_parens(condition)
    op, left, right = (condition.child_by_field_name(f) for f in ("operator", "left", "right"))
    if condition.type != "binary_expression" or op is None or left is None or right is None:
        return False
    return op.type == "<" and is_name(left, step, tree) and _is_block_size(right, block, tree)


def _positive(condition: Node, step: str, tree: KernelTree) -> bool:
    """`s > 0`, `s >= 1`, `s != 0`, `0 < s`."""
    condition = strip_parens(condition)
    op, left, right = (condition.child_by_field_name(f) for f in ("operator", "left", "right"))
    if condition.type != "binary_expression" or op is None or left is None or right is None:
        return False
    if is_name(left, step, tree):
        return (op.type, _integer(right, tree)) in {(">", 0), (">=", 1), ("!=", 0)}
    return is_name(right, step, tree) and (op.type, _integer(left, tree)) in {("<", 0), ("<=", 1), ("!=", 0)}


def _scaled(update: Node, step: str, tree: KernelTree) -> str | None:
    """DOUBLED for `s *= 2`, `s <<= 1`, `s += s`, `s = 2 * s`, `s = s << 1`; HALVED for `s >>= 1`,
    `s /= 2`, `s = s >> 1`, `s = s / 2`; else None."""
    update = strip_parens(update)
    op, left, right = (update.child_by_field_name(f) for f in ("operator", "left", "right"))
    if update.type != "assignment_expression" or op is None or left is None or right is None:
        return None
    if not is_name(left, step, tree):
        return None
    number = _integer(right, tree)
    compound = {("*=", 2): DOUBLED, ("<<=", 1): DOUBLED, (">>=", 1): HALVED, ("/=", 2): HALVED}
    if (op.type, number) in compound:
        return compound[(op.type, number)]
    if op.type == "+=" and is_name(right, step, tree):
        return DOUBLED
    if op.type != "=":
        return None
    if linear_form(right) == {(step,): 2}:
        return DOUBLED
    right = strip_parens(right)
    shift, base, amount = (right.child_by_field_name(f) for f in ("operator", "left", "right"))
    if right.type != "binary_expression" or shift is None or base is None or amount is None:
        return None
    if not is_name(base, step, tree):
        return None
    return {("<<", 1): DOUBLED, (">>", 1): HALVED, ("/", 2): HALVED}.get((shift.type, _integer(amount, tree)))


def _interleaved_guard(guard: Node, step: str, names: _Names, block: int, tree: KernelTree) -> bool:
    """`t % (2 * s) == 0` or `(t & (2 * s - 1)) == 0`, optionally `&& t + s < blockDim.x`."""
    parts = operands(strip_parens(guard), "&&")
    multiples = [p for p in parts if _is_multiple_of_twice(p, step, names, tree)]
    rest = [p for p in parts if p not in multiples]
    return len(multiples) == 1 and all(_partner_in_block(p, step, names, block, tree) for p in rest)


def _is_multiple_of_twice(node: Node, step: str, names: _Names, tree: KernelTree) -> bool:
    node = strip_parens(node)
    op, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
    if node.type != "binary_expression" or op is None or left is None or right is None or op.type != "==":
        return False
    tested = left if _integer(right, tree) == 0 else right if _integer(left, tree) == 0 else None
    if tested is None:
        return False
    tested = strip_parens(tested)
    kind, thread, divisor = (tested.child_by_field_name(f) for f in ("operator", "left", "right"))
    if tested.type != "binary_expression" or kind is None or thread is None or divisor is None:
        return False
    if not _is_thread(thread, names.threads, tree):
        return False
    wanted = {"%": {(step,): 2}, "&": {(step,): 2, (): -1}}.get(kind.type)
    return wanted is not None and linear_form(divisor) == wanted


def _partner_in_block(node: Node, step: str, names: _Names, block: int, tree: KernelTree) -> bool:
    """`t + s < blockDim.x`: the partner slot exists (always true for a power-of-two block)."""
    node = strip_parens(node)
    op, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
    if node.type != "binary_expression" or op is None or left is None or right is None or op.type != "<":
        return False
    terms = operands(left, "+")
    return (
        len(terms) == 2
        and any(
            _is_thread(t, names.threads, tree) and is_name(o, step, tree) for t, o in (terms, terms[::-1])
        )
        and _is_block_size(right, block, tree)
    )


def _lower_half(guard: Node, step: str, names: _Names, tree: KernelTree) -> bool:
    """`t < s` or `s > t`."""
    guard = strip_parens(guard)
    op, left, right = (guard.child_by_field_name(f) for f in ("operator", "left", "right"))
    if guard.type != "binary_expression" or op is None or left is None or right is None:
        return False
    return (op.type == "<" and _is_thread(left, names.threads, tree) and is_name(right, step, tree)) or (
        op.type == ">" and is_name(left, step, tree) and _is_thread(right, names.threads, tree)
    )


# -- the block's result --------------------------------------------------------------------------------


def _final_atomic(node: Node, names: _Names, tree: KernelTree) -> tuple[Node, Node] | None:
    """(statement, call) of `if (t == 0) atomicAdd(address, a[0]);`."""
    if node.type != "if_statement":
        return None
    condition, inside, alternative = _if_parts(node)
    statement = _single(inside) if inside is not None else None
    if (
        condition is None
        or statement is None
        or alternative is not None
        or not _is_thread_zero(condition, names, tree)
    ):
        return None
    if statement.type != "expression_statement" or statement.named_child_count != 1:
        return None
    call = strip_parens(statement.named_children[0])
    if (
        call.type != "call_expression"
        or tree.text(call.child_by_field_name("function") or call) not in KIND_OF_ATOMIC
    ):
        return None
    args = arguments(call)
    parts = subscript_parts(args[1]) if len(args) == 2 else None
    if parts is None or parts[0] != names.shared or _integer(parts[1], tree) != 0:
        return None
    return statement, call


def _is_thread_zero(condition: Node, names: _Names, tree: KernelTree) -> bool:
    condition = strip_parens(condition)
    op, left, right = (condition.child_by_field_name(f) for f in ("operator", "left", "right"))
    if (
        condition.type != "binary_expression"
        or op is None
        or left is None
        or right is None
        or op.type != "=="
    ):
        return False
    return any(
        _is_thread(mine, names.threads, tree) and _integer(other, tree) == 0
        for mine, other in ((left, right), (right, left))
    )


# -- statements ----------------------------------------------------------------------------------------


def _if_parts(node: Node) -> tuple[Node | None, Node | None, Node | None]:
    """(condition expression, consequence, else clause) of an if statement."""
    clause = node.child_by_field_name("condition")
    condition = clause.named_children[0] if clause is not None and clause.named_child_count == 1 else None
    return condition, node.child_by_field_name("consequence"), node.child_by_field_name("alternative")


def _single(node: Node | None) -> Node | None:
    """The one statement of `{ s; }` or `s`."""
    if node is None:
        return None
    inside = statements(node)
    return inside[0] if len(inside) == 1 else None


def _assignment(statement: Node | None) -> tuple[Node, str, Node] | None:
    """(left, operator, right) of an expression statement that is one assignment."""
    if statement is None or statement.type != "expression_statement" or statement.named_child_count != 1:
        return None
    expression = strip_parens(statement.named_children[0])
    left, op, right = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
    if expression.type != "assignment_expression" or left is None or op is None or right is None:
        return None
    return left, op.type, right
