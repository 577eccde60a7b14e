"""A naive Hillis-Steele scan of a block's shared-memory array -> a warp-shuffle block scan.

Recognised: an inclusive prefix sum over a `__shared__` array indexed by the thread, written as

    for (int offset = 1; offset < BOUND; offset <<= 1) {   // or `offset *= 2`, `offset = offset * 2`
        T left = t >= offset ? buf[t - offset] : 0;      // or `T left = 0; if (t >= offset) left = ...;`
        __syncthreads();
        buf[t] += left;                                  // or `buf[t] = buf[t] + left;`
        __syncthreads();
    }

where `t` is `threadIdx.x` (or a local initialised to it and never written), T is the array's element
type (float, double, int or unsigned), and BOUND is the block's thread count: `blockDim.x`, or a literal,
`#define` or `const`/`constexpr` integer equal to the spec's block, which must be 1-D and a multiple of 32.
Every thread must reach the loop's barriers: the loop is not under a branch or loop that depends on the
thread (only on parameters, constants and blockIdx/blockDim/gridDim), and no thread can leave before it.

Rewritten: only the loop is replaced (the load into the array and the use of the result stay as written)
by a block that reads `buf[t]` into a register, scans each warp with `__shfl_up_sync` (5 steps), leaves
each warp's total in a new `__shared__ T warp_totals[32]`, lets warp 0 scan those totals, adds the totals
of the preceding warps and writes `buf[t]` back, then synchronises so every thread sees the whole scan as
after the original loop. The launch is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.proposers.tree import (
    FULL_MASK,
    ZERO_LITERALS,
    KernelTree,
    apply_to_body,
    build_candidate,
    fresh_names,
    identifiers,
    is_barrier,
    is_name,
    line_indent,
    single_declaration,
    statements,
    strip_parens,
    subscript_parts,
    untemplated_kernel_tree,
    walk,
    writes,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "idiom:block-scan"
WARP = 32
# The element types `__shfl_up_sync` moves, with the identity of the sum written in each.
IDENTITY = {"float": "0.0f", "double": "0.0", "int": "0", "unsigned": "0u", "unsigned int": "0u"}
# The types a copy of threadIdx.x may be held in without changing its value (blocks have <= 1024 threads).
_INDEX_TYPES = frozenset(
    {"int", "unsigned", "unsigned int", "long", "long long", "unsigned long", "unsigned long long"}
    | {"size_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "auto"}
)
_UNIFORM_BUILTINS = frozenset({"blockIdx", "blockDim", "gridDim"})
_JUMPS = frozenset({"return_statement", "break_statement", "continue_statement", "goto_statement"})
_PRIMARY = frozenset({"number_literal", "identifier", "parenthesized_expression"})
_MAX_EXPANSION = 8  # macros and constants defined through others, this deep at most


@dataclass(frozen=True)
class _Scan:
    """One recognised scan loop: the bytes to replace and what the replacement reads and writes."""

    start_byte: int  # the loop's first byte, or a `#pragma unroll` right above it
    lead: str  # written before the block's `{` (the indentation, when the pragma's line is replaced)
    end_byte: int
    indent: str  # the whitespace before the loop on its line
    slot: str  # `buf[t]` as the user wrote it
    element: str  # the array's element type as written
    steps: int  # the original loop's trip count


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    spec = target.spec
    if tree is None or spec is None or len(spec.launch.block) != 1:
        return []
    threads = spec.launch.block[0]
    if threads % WARP or not WARP <= threads <= 1024:
        return []
    scans = [s for node in walk(tree.body) if (s := _scan(tree, node, threads)) is not None]
    if not scans:
        return []
    names = _local_names(tree)
    unit = tree.indent_unit()
    edits = [(s.start_byte, s.end_byte, _replacement(s, names, unit)) for s in scans]
    steps = scans[0].steps
    loops = "" if len(scans) == 1 else f", {len(scans)} loops"
    floats = any(s.element in ("float", "double") for s in scans)
    return [
        build_candidate(
            tree,
            body=apply_to_body(tree, edits),
            launch=spec.launch,
            description=(
                f"warp-shuffle block scan (5 shuffle steps a warp, 3 barriers; "
                f"was {steps} steps with {2 * steps} barriers{loops})"
            ),
            proposer=PROPOSER,
            assumptions=("the sums are added in another order (within the spec's tolerance)",)
            if floats
            else (),
        )
    ]


# -- recognising the loop ------------------------------------------------------------------------------


def _scan(tree: KernelTree, node: Node, threads: int) -> _Scan | None:
    """The scan loop `node` is, if it is one, with a bound equal to the block and reached by every thread."""
    if node.type != "for_statement":
        return None
    header = _doubling_header(tree, node)
    body = node.child_by_field_name("body")
    if header is None or body is None:
        return None
    offset, bound = header
    if not (_is_block_dim_x(bound) or _integer(tree, bound, node) == threads):
        return None
    scanned = _scan_body(tree, body, offset, node)
    if scanned is None or not _reached_by_every_thread(tree, node):
        return None
    array, slot = scanned
    element = _shared_array_type(tree, array, node)
    if element is None:
        return None
    start, lead = node.start_byte, ""
    before = node.prev_named_sibling
    if before is not None and before.type == "preproc_call" and b"unroll" in (before.text or b""):
        # `#pragma unroll` must not be left above a statement that is no loop: it goes too, and the
        # block starts at the loop's indentation wherever the pragma stood.
        start = before.start_byte
        if tree.starts_line(before):
            start, lead = tree.data.rfind(b"\n", 0, start) + 1, line_indent(tree, node)
    return _Scan(
        start,
        lead,
        node.end_byte,
        line_indent(tree, node),
        tree.text(slot),
        element,
        (threads - 1).bit_length(),
    )


def _doubling_header(tree: KernelTree, loop: Node) -> tuple[str, Node] | None:
    """`for (int o = 1; o < BOUND; o <<= 1)` (or `o *= 2`, `o = o * 2`, `o = o << 1`, `o += o`) ->
    ("o", the BOUND node)."""
    init, condition, update = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    declared = single_declaration(init, tree) if init is not None else None
    if declared is None or condition is None or update is None:
        return None
    kind, offset, start = declared
    if kind not in _INDEX_TYPES - {"auto"} or start is None or _literal(start) != 1:
        return None
    condition = strip_parens(condition)
    left, op, bound = (condition.child_by_field_name(f) for f in ("left", "operator", "right"))
    if condition.type != "binary_expression" or left is None or op is None or bound is None:
        return None
    if op.type != "<" or not is_name(left, offset, tree) or offset in identifiers(bound):
        return None
    return (offset, bound) if _doubles(tree, update, offset) else None


def _doubles(tree: KernelTree, update: Node, name: str) -> bool:
    update = strip_parens(update)
    left, op, right = (update.child_by_field_name(f) for f in ("left", "operator", "right"))
    if update.type != "assignment_expression" or left is None or op is None or right is None:
        return False
    if not is_name(left, name, tree):
        return False
    if op.type in ("<<=", "*="):
        return _literal(right) == (1 if op.type == "<<=" else 2)
    if op.type == "+=":
        return is_name(right, name, tree)
    right = strip_parens(right)
    a, operator, b = (right.child_by_field_name(f) for f in ("left", "operator", "right"))
    if op.type != "=" or right.type != "binary_expression" or a is None or operator is None or b is None:
        return False
    if operator.type == "<<":
        return is_name(a, name, tree) and _literal(b) == 1
    if operator.type == "*":
        return any(is_name(x, name, tree) and _literal(y) == 2 for x, y in ((a, b), (b, a)))
    return operator.type == "+" and is_name(a, name, tree) and is_name(b, name, tree)


def _scan_body(tree: KernelTree, body: Node, offset: str, loop: Node) -> tuple[str, Node] | None:
    """("buf", the `buf[t]` node) for a body that reads the element `offset` to the left (0 when there
    is none), waits, adds it to its own element, and waits again; nothing else."""
    if body.type != "compound_statement":
        return None
    parts = statements(body)
    if len(parts) not in (4, 5):
        return None
    declared = single_declaration(parts[0], tree)
    if declared is None or declared[2] is None:
        return None
    kind, left, value = declared
    if len(parts) == 5:
        if not _is_zero(value):
            return None
        read = _guarded_assignment(tree, parts[1], left, offset, loop)
    else:
        read = _guarded_read(tree, value, offset, loop)
    *_, first_wait, add, second_wait = parts
    if read is None or not (is_barrier(first_wait, tree) and is_barrier(second_wait, tree)):
        return None
    array, _ = read
    slot = _added_slot(tree, add, array, left, loop)
    if slot is None or left in {array, offset} or _is_thread_name(tree, left, loop):
        return None
    element = _shared_array_type(tree, array, loop)
    if element is None or _same_type(kind) != _same_type(element):
        return None
    return array, slot


def _guarded_read(tree: KernelTree, value: Node, offset: str, loop: Node) -> tuple[str, Node] | None:
    """`t >= o ? buf[t - o] : 0` -> ("buf", the read)."""
    value = strip_parens(value)
    condition, read, otherwise = (
        value.child_by_field_name(f) for f in ("condition", "consequence", "alternative")
    )
    if value.type != "conditional_expression" or condition is None or read is None or otherwise is None:
        return None
    if not (_is_guard(tree, condition, offset, loop) and _is_zero(otherwise)):
        return None
    return _left_neighbour(tree, read, offset, loop)


def _guarded_assignment(
    tree: KernelTree, statement: Node, left: str, offset: str, loop: Node
) -> tuple[str, Node] | None:
    """`if (t >= o) left = buf[t - o];` (braces or not, no else) -> ("buf", the read)."""
    condition, consequence = (statement.child_by_field_name(f) for f in ("condition", "consequence"))
    if statement.type != "if_statement" or statement.child_by_field_name("alternative") is not None:
        return None
    if condition is None or consequence is None or len(statements(consequence)) != 1:
        return None
    guard = condition.child_by_field_name("value") or strip_parens(condition)
    if not _is_guard(tree, guard, offset, loop):
        return None
    (assignment,) = statements(consequence)
    if assignment.type != "expression_statement" or assignment.named_child_count != 1:
        return None
    expression = strip_parens(assignment.named_children[0])
    target, op, read = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
    if expression.type != "assignment_expression" or target is None or op is None or read is None:
        return None
    if op.type != "=" or not is_name(target, left, tree):
        return None
    return _left_neighbour(tree, read, offset, loop)


def _is_guard(tree: KernelTree, condition: Node, offset: str, loop: Node) -> bool:
    """`t >= o` or `o <= t`."""
    condition = strip_parens(condition)
    a, op, b = (condition.child_by_field_name(f) for f in ("left", "operator", "right"))
    if condition.type != "binary_expression" or a is None or op is None or b is None:
        return False
    if op.type == ">=":
        return _is_thread(tree, a, loop) and is_name(b, offset, tree)
    return op.type == "<=" and is_name(a, offset, tree) and _is_thread(tree, b, loop)


def _left_neighbour(tree: KernelTree, read: Node, offset: str, loop: Node) -> tuple[str, Node] | None:
    """`buf[t - o]` -> ("buf", the read)."""
    parts = subscript_parts(read)
    if parts is None:
        return None
    array, index = parts
    index = strip_parens(index)
    a, op, b = (index.child_by_field_name(f) for f in ("left", "operator", "right"))
    if index.type != "binary_expression" or a is None or op is None or b is None or op.type != "-":
        return None
    return (array, read) if _is_thread(tree, a, loop) and is_name(b, offset, tree) else None


def _added_slot(tree: KernelTree, statement: Node, array: str, left: str, loop: Node) -> Node | None:
    """The `buf[t]` of `buf[t] += left;`, `buf[t] = buf[t] + left;` or `buf[t] = left + buf[t];`."""
    if statement.type != "expression_statement" or statement.named_child_count != 1:
        return None
    expression = strip_parens(statement.named_children[0])
    target, op, right = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
    if expression.type != "assignment_expression" or target is None or op is None or right is None:
        return None
    if not _is_own_slot(tree, target, array, loop):
        return None
    if op.type == "+=":
        return target if is_name(right, left, tree) else None
    right = strip_parens(right)
    a, plus, b = (right.child_by_field_name(f) for f in ("left", "operator", "right"))
    if op.type != "=" or right.type != "binary_expression" or a is None or plus is None or b is None:
        return None
    if plus.type != "+":
        return None
    pairs = ((a, b), (b, a))
    found = any(_is_own_slot(tree, x, array, loop) and is_name(y, left, tree) for x, y in pairs)
    return target if found else None


def _is_own_slot(tree: KernelTree, node: Node, array: str, loop: Node) -> bool:
    parts = subscript_parts(node)
    return parts is not None and parts[0] == array and _is_thread(tree, parts[1], loop)


# -- names, declarations and constants -----------------------------------------------------------------


def _is_zero(node: Node) -> bool:
    """`0`, `0.0f` and the like, or a cast of one (`(float)0`)."""
    node = strip_parens(node)
    if node.type == "cast_expression" and (value := node.child_by_field_name("value")) is not None:
        node = strip_parens(value)
    return node.type == "number_literal" and (node.text or b"").decode() in ZERO_LITERALS


def _is_block_dim_x(node: Node) -> bool:
    return _is_builtin_x(node, "blockDim")


def _is_builtin_x(node: Node, builtin: str) -> bool:
    node = strip_parens(node)
    base, field = node.child_by_field_name("argument"), node.child_by_field_name("field")
    return (
        node.type == "field_expression"
        and base is not None
        and field is not None
        and base.text == builtin.encode()
        and field.text == b"x"
    )


def _is_thread(tree: KernelTree, node: Node, loop: Node) -> bool:
    """Whether the expression is threadIdx.x: directly, or a local that holds it."""
    node = strip_parens(node)
    if _is_builtin_x(node, "threadIdx"):
        return True
    return node.type == "identifier" and _is_thread_name(tree, tree.text(node), loop)


def _is_thread_name(tree: KernelTree, name: str, loop: Node) -> bool:
    """`name` is, at the loop, a local declared once as `int name = threadIdx.x;` and never written."""
    found = _visible_declaration(tree, name, loop)
    if found is None:
        return False
    declaration, declarator = found
    type_node = declaration.child_by_field_name("type")
    value = declarator.child_by_field_name("value")
    if type_node is None or value is None or " ".join(tree.text(type_node).split()) not in _INDEX_TYPES:
        return False
    value = strip_parens(value)
    if value.type == "cast_expression" and (inner := value.child_by_field_name("value")) is not None:
        value = inner
    if not _is_builtin_x(value, "threadIdx"):
        return False
    written = any(is_name(target, name, tree) for target in writes(tree.body, tree))
    referenced = any(
        n.type == "pointer_expression"
        and (argument := n.child_by_field_name("argument")) is not None
        and is_name(argument, name, tree)
        for n in walk(tree.body)
    )
    return not written and not referenced


def _shared_array_type(tree: KernelTree, name: str, loop: Node) -> str | None:
    """The element type of `__shared__ T name[N];` (or `extern __shared__ T name[];`) as seen at the loop,
    when it is one the scan handles."""
    found = _visible_declaration(tree, name, loop)
    if found is None:
        return None
    declaration, declarator = found
    shared = any(c.type == "type_qualifier" and c.text == b"__shared__" for c in declaration.children)
    inner = declarator.child_by_field_name("declarator")
    type_node = declaration.child_by_field_name("type")
    if not shared or declarator.type != "array_declarator" or inner is None or inner.type != "identifier":
        return None
    element = " ".join(tree.text(type_node).split()) if type_node is not None else ""
    return element if element in IDENTITY else None


def _same_type(element: str) -> str:
    return "unsigned int" if element == "unsigned" else element


def _declared(node: Node) -> Iterator[tuple[Node, str]]:
    """(declarator, name) for each name a declaration introduces."""
    for declarator in node.children_by_field_name("declarator"):
        inner: Node | None = declarator
        while inner is not None and inner.type != "identifier":
            inner = inner.child_by_field_name("declarator")
        if inner is not None and inner.text is not None:
            yield declarator, inner.text.decode()


def _file_root(tree: KernelTree) -> Node:
    root = tree.definition
    while root.parent is not None:
        root = root.parent
    return root


def _declarations(tree: KernelTree) -> Iterator[Node]:
    """Declarations at file scope (namespaces included) and anywhere in this kernel's body."""
    stack = [_file_root(tree)]
    while stack:
        node = stack.pop()
        if node.type == "declaration":
            yield node
        if node.type == "function_definition" and node != tree.definition:
            continue
        stack.extend(child for child in node.children if child.type != "comment")


def _visible_declaration(tree: KernelTree, name: str, loop: Node) -> tuple[Node, Node] | None:
    """(declaration, declarator) of the one declaration of `name` (not a parameter) that the loop sees:
    at file scope, or earlier in a block around the loop. None when there are several or none."""
    if tree.parameter(name) is not None:
        return None
    found = [(d, declarator) for d in _declarations(tree) for declarator, n in _declared(d) if n == name]
    if len(found) != 1 or _macro_values(tree).get(name) is not None:
        return None
    declaration, declarator = found[0]
    scope = declaration.parent
    inside = scope is not None and scope.type == "compound_statement"
    if inside and (declaration.start_byte > loop.start_byte or not _encloses(scope, loop)):
        return None
    return declaration, declarator


def _encloses(outer: Node, inner: Node) -> bool:
    return outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


def _macro_values(tree: KernelTree) -> dict[str, list[str]]:
    """Object-like macros of the file: name -> the values it is given (`#undef` adds an empty one)."""
    values: dict[str, list[str]] = {}
    for node in walk(_file_root(tree)):
        if node.type in ("preproc_def", "preproc_function_def"):
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if name is not None:
                text = tree.text(value) if value is not None and node.type == "preproc_def" else ""
                values.setdefault(tree.text(name), []).append(text)
        elif node.type == "preproc_call":
            directive, argument = node.child_by_field_name("directive"), node.child_by_field_name("argument")
            if directive is not None and tree.text(directive) == "#undef" and argument is not None:
                values.setdefault(tree.text(argument).strip(), []).append("")
    return values


def _literal(node: Node) -> int | None:
    """The value of an integer literal (`1`, `2u`, `0x400`); None for anything else."""
    node = strip_parens(node)
    if node.type != "number_literal" or node.text is None:
        return None
    text = node.text.decode().rstrip("uUlL").replace("'", "")
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None


def _integer(tree: KernelTree, node: Node, loop: Node, depth: int = 0, operand: bool = False) -> int | None:
    """The value of a compile-time integer expression: literals, `#define`d and `const`/`constexpr`
    integers, and + - * / % << >> of them; None for anything else (parameters, variables, calls). An
    `operand` of a larger expression may be a macro only if the macro's value is one primary expression
    (`#define N (A + B)`, not `#define N A + B`: the text is substituted, not the value)."""
    node = strip_parens(node)
    if depth > _MAX_EXPANSION:
        return None
    if node.type == "number_literal":
        return _literal(node)
    if node.type == "cast_expression" and (value := node.child_by_field_name("value")) is not None:
        return _integer(tree, value, loop, depth + 1, operand=True)
    if node.type == "identifier":
        # Read from the node itself: a macro's value is parsed on its own, outside the file's bytes.
        return _named_integer(tree, (node.text or b"").decode(), loop, depth, operand)
    if node.type != "binary_expression":
        return None
    a, op, b = (node.child_by_field_name(f) for f in ("left", "operator", "right"))
    if a is None or op is None or b is None:
        return None
    x = _integer(tree, a, loop, depth + 1, operand=True)
    y = _integer(tree, b, loop, depth + 1, operand=True)
    if x is None or y is None or x < 0 or y < 0:
        return None
    operations = {
        "+": lambda: x + y,
        "-": lambda: x - y,
        "*": lambda: x * y,
        "/": lambda: x // y if y else None,
        "%": lambda: x % y if y else None,
        "<<": lambda: x << y if y < 64 else None,
        ">>": lambda: x >> y,
    }
    operation = operations.get(op.type)
    return operation() if operation is not None else None


def _named_integer(tree: KernelTree, name: str, loop: Node, depth: int, operand: bool) -> int | None:
    macros = _macro_values(tree).get(name)
    if macros is not None:
        if len(macros) != 1 or not macros[0].strip():
            return None
        value = _parsed_expression(macros[0])
        if value is None or (operand and value.type not in _PRIMARY):
            return None
        return _integer(tree, value, loop, depth + 1)
    found = _visible_declaration(tree, name, loop)
    if found is None:
        return None
    declaration, declarator = found
    qualifiers = {c.text for c in declaration.children if c.type == "type_qualifier"}
    type_node = declaration.child_by_field_name("type")
    value = declarator.child_by_field_name("value")
    if not qualifiers & {b"const", b"constexpr"} or value is None or type_node is None:
        return None
    if " ".join(tree.text(type_node).split()) not in _INDEX_TYPES - {"auto"}:
        return None
    return _integer(tree, value, loop, depth + 1)


def _parsed_expression(text: str) -> Node | None:
    """A macro's value parsed as an expression (a trailing comment, ended by the newline, falls outside)."""
    root = parse_cuda(f"int cuda_agent_value = {text}\n;").root_node
    declarations = [n for n in root.named_children if n.type != "comment"]
    if root.has_error or len(declarations) != 1 or declarations[0].type != "declaration":
        return None
    declarators = declarations[0].children_by_field_name("declarator")
    return declarators[0].child_by_field_name("value") if len(declarators) == 1 else None


# -- every thread reaches the loop ---------------------------------------------------------------------


def _reached_by_every_thread(tree: KernelTree, loop: Node) -> bool:
    """No thread leaves before the loop, and every branch and loop around it is the same for the whole
    block: its conditions read only parameters, constants, blockIdx/blockDim/gridDim and the variables
    of enclosing uniform `for` loops; an enclosing loop has no jumps that could split the block."""
    if any(
        n.type in ("return_statement", "goto_statement") and n.start_byte < loop.start_byte
        for n in walk(tree.body)
    ):
        return False
    written = {tree.text(w) for w in writes(tree.body, tree) if w.type == "identifier"}
    uniform = {p.name for p in tree.target.kernel.parameters if p.name not in written} | _UNIFORM_BUILTINS
    chain = []
    node = loop.parent
    while node is not None and node != tree.body:
        chain.append(node)
        node = node.parent
    if node is None:
        return False
    for enclosing in reversed(chain):
        if enclosing.type in ("compound_statement", "else_clause"):
            continue
        if enclosing.type == "if_statement":
            condition = enclosing.child_by_field_name("condition")
            if condition is None or not _uniform(tree, condition, uniform, loop):
                return False
        elif enclosing.type in ("for_statement", "while_statement"):
            body = enclosing.child_by_field_name("body")
            if body is None or any(n.type in _JUMPS for n in walk(body)):
                return False
            if not _uniform_loop_header(tree, enclosing, body, uniform, loop):
                return False
        else:
            return False
    return True


def _uniform_loop_header(
    tree: KernelTree, loop_node: Node, body: Node, uniform: set[str], scan: Node
) -> bool:
    """The loop runs the same iterations in every thread; a `for` header's own variables join `uniform`
    when they are set only from uniform values and changed only by the header."""
    if loop_node.type == "while_statement":
        condition = loop_node.child_by_field_name("condition")
        return condition is not None and _uniform(tree, condition, uniform, scan)
    init = loop_node.child_by_field_name("initializer")
    own: set[str] = set()
    if init is not None:
        if init.type != "declaration":
            return False
        for declarator, name in _declared(init):
            value = declarator.child_by_field_name("value")
            if value is None or not _uniform(tree, value, uniform, scan):
                return False
            own.add(name)
    if any(tree.text(w) in own for w in writes(body, tree) if w.type == "identifier"):
        return False
    uniform |= own
    parts = [loop_node.child_by_field_name(f) for f in ("condition", "update")]
    return all(part is None or _uniform(tree, part, uniform, scan) for part in parts)


def _uniform(tree: KernelTree, expression: Node, uniform: set[str], loop: Node) -> bool:
    """Whether the expression has one value for the whole block (no calls, no thread-varying names)."""
    if any(n.type == "call_expression" for n in walk(expression)):
        return False
    for n in walk(expression):
        if n.type == "identifier" and tree.text(n) not in uniform and _integer(tree, n, loop) is None:
            return False
    return True


# -- the replacement -----------------------------------------------------------------------------------


def _local_names(tree: KernelTree) -> dict[str, str]:
    """The replacement's locals, clear of every name in the file (macros and file-scope names included)."""
    taken = tree.names() | identifiers(_file_root(tree)) | set(_macro_values(tree))
    wanted = ("warp_totals", "value", "lane", "warp", "delta", "shifted", "total")
    return dict(zip(wanted, fresh_names(taken, *wanted), strict=True))


def _replacement(scan: _Scan, n: dict[str, str], unit: str) -> str:
    """The block that replaces the loop: the same inclusive scan of `buf[t]` over the block's threads."""
    element, zero, slot = scan.element, IDENTITY[scan.element], scan.slot
    value, total, lane, warp, delta, shifted, totals = (
        n[k] for k in ("value", "total", "lane", "warp", "delta", "shifted", "warp_totals")
    )

    def warp_scan(x: str) -> list[tuple[int, str]]:
        return [
            (0, f"for (unsigned {delta} = 1; {delta} < {WARP}; {delta} <<= 1) {{"),
            (1, f"{element} {shifted} = __shfl_up_sync({FULL_MASK}, {x}, {delta});"),
            (1, f"if ({lane} >= {delta}) {x} += {shifted};"),
            (0, "}"),
        ]

    lines: list[tuple[int, str]] = [
        (1, "// The block's inclusive scan (was a Hillis-Steele loop), in registers: each warp scans its"),
        (1, f"// {WARP} values with shuffles, warp 0 scans the warps' totals, and each thread adds those of"),
        (1, f"// the warps before its own and writes {slot} back."),
        (1, f"__shared__ {element} {totals}[{WARP}];"),
        (1, f"const unsigned {lane} = threadIdx.x % {WARP}, {warp} = threadIdx.x / {WARP};"),
        (1, f"{element} {value} = {slot};"),
        *((1 + depth, text) for depth, text in warp_scan(value)),
        (1, f"if ({lane} == {WARP - 1}) {totals}[{warp}] = {value};"),
        (1, "__syncthreads();"),
        (1, f"if ({warp} == 0) {{"),
        (2, f"{element} {total} = {lane} < blockDim.x / {WARP} ? {totals}[{lane}] : {zero};"),
        *((2 + depth, text) for depth, text in warp_scan(total)),
        (2, f"{totals}[{lane}] = {total};"),
        (1, "}"),
        (1, "__syncthreads();"),
        (1, f"if ({warp} > 0) {value} += {totals}[{warp} - 1];"),
        (1, f"{slot} = {value};"),
        (1, "__syncthreads();"),
        (0, "}"),
    ]
    return scan.lead + "{\n" + "\n".join(scan.indent + unit * depth + text for depth, text in lines)
