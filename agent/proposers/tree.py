"""The tree-sitter view of one kernel that the transforms and idioms rewrite, and edits on it.

Recognition reads the tree-sitter tree of the kernel; nothing here matches the source with regexes.
Transforms change only the bytes they must: every edit is (start byte, end byte, new text) in the
user's file, applied back to front, so everything outside the edited ranges stays as written. Idiom
templates are written in the user's names (parameters, index variables, accumulators), so the rewrite
reads as the user's own kernel made faster, and the signature is never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import replace_span
from cuda_agent.agent.kernels import Parameter
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.parsing import walk as walk_with_comments
from cuda_agent.agent.rewrite import with_launch
from cuda_agent.agent.spec import LaunchSpec, SpecResolveError, complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets
from tree_sitter import Node

Edit = tuple[int, int, str]  # replace file bytes [start, end) with the text (an insertion when empty)

# Names whose values differ between threads or blocks: a body that reads them cannot be moved into a
# loop over elements, or given more elements a thread, without changing what it computes.
THREAD_BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
FULL_MASK = "0xffffffffu"
# Blocks that saturate an H200 (132 SMs) with grid-stride loops, without oversubscribing.
RESIDENT_BLOCKS = 132 * 8
SHARED_LIMIT = 48 * 1024  # without opting in to more per block


@dataclass(frozen=True)
class KernelTree:
    """The parsed kernel: its definition and body nodes and the bytes the nodes index into."""

    target: KernelTarget
    data: bytes
    definition: Node  # the function_definition
    body: Node  # its compound_statement

    def text(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8")

    def parameter(self, name: str) -> Parameter | None:
        return next((p for p in self.target.kernel.parameters if p.name == name), None)

    def names(self) -> set[str]:
        """Every identifier the kernel (signature and body) uses, and every macro the file defines (a GEMM
        tutorial's `#define BM 64` would expand inside a template's `constexpr int BM`): the names a
        template must not take."""
        names = {p.name for p in self.target.kernel.parameters}
        return names | identifiers(self.body) | self._macros

    @cached_property
    def _macros(self) -> frozenset[str]:
        """The names of the file's #defines: read once a tree, templates ask for fresh names often."""
        root = self.definition
        while root.parent is not None:
            root = root.parent
        return frozenset(
            self.text(name)
            for node in walk(root)
            if node.type in ("preproc_def", "preproc_function_def")
            and (name := node.child_by_field_name("name")) is not None
        )

    def indent_at(self, byte: int) -> str:
        """The whitespace that starts the line holding `byte`."""
        start = self.data.rfind(b"\n", 0, byte) + 1
        end = start
        while end < len(self.data) and self.data[end] in b" \t":
            end += 1
        return self.data[start:end].decode("utf-8")

    def starts_line(self, node: Node) -> bool:
        """Whether only whitespace precedes the node on its line (a `#pragma` can go above it)."""
        start = self.data.rfind(b"\n", 0, node.start_byte) + 1
        return self.data[start : node.start_byte].strip() == b""

    def indent_unit(self) -> str:
        """One level of the user's indentation: the first statement's indent beyond the function's."""
        outer = self.indent_at(self.definition.start_byte)
        for statement in self.body.named_children:
            if self.starts_line(statement):
                inner = self.indent_at(statement.start_byte)
                if inner.startswith(outer) and len(inner) > len(outer):
                    return inner[len(outer) :]
        return "    "

    def identifiers(self) -> set[str]:
        return {self.text(n) for n in walk_with_comments(self.definition) if n.type == "identifier"}

    @property
    def root(self) -> Node:
        """The file's tree (the helpers, macros and other kernels around this one)."""
        node = self.definition
        while node.parent is not None:
            node = node.parent
        return node

    def substituted(self, node: Node, substitute: Callable[[Node], str | None]) -> str:
        """The node's text with every descendant that `substitute` gives a text for replaced by it (its own
        descendants then left alone), the rest as written."""
        pieces, cursor = [], node.start_byte
        for child in walk_with_comments(node):
            if child.start_byte < cursor:
                continue
            new = substitute(child)
            if new is not None:
                pieces.append(self.data[cursor : child.start_byte].decode("utf-8"))
                pieces.append(new)
                cursor = child.end_byte
        pieces.append(self.data[cursor : node.end_byte].decode("utf-8"))
        return "".join(pieces)

    def apply_to_file(self, edits: Sequence[Edit]) -> str:
        """The whole file's text with the edits applied (see `apply_to_body` for the body alone)."""
        data = self.data
        for start, end, new_text in sorted(edits, key=lambda e: e[0], reverse=True):
            data = data[:start] + new_text.encode("utf-8") + data[end:]
        return data.decode("utf-8")


def kernel_tree(target: KernelTarget) -> KernelTree | None:
    """The parsed kernel of `target`, or None when its body is missing or did not parse cleanly
    (a transform never edits code the parser had to recover from)."""
    if target.spec is None or target.kernel.has_errors:
        return None
    data = target.source.encode("utf-8")
    root = parse_cuda(data).root_node
    span = target.kernel.body_span
    body = root.descendant_for_byte_range(span.start_byte, span.end_byte)
    while body is not None and body.type != "compound_statement":
        body = body.parent
    if body is None or body.parent is None or body.parent.type != "function_definition":
        return None
    return KernelTree(target, data, body.parent, body)


def untemplated_kernel_tree(target: KernelTarget, instantiated: bool = False) -> KernelTree | None:
    """The kernel, for one an idiom can rewrite: parsed cleanly, not a template, with a spec, and the body
    node exactly the kernel's body span (`kernel_tree` also takes templates). `instantiated`: a template
    too, where its spec's `instantiate` gives every template argument (`KernelTarget.template_values`)."""
    kernel = target.kernel
    if target.spec is None or kernel.has_errors or kernel.template_arguments:
        return None
    if kernel.template_parameters and (not instantiated or target.template_values() is None):
        return None
    data = target.source.encode("utf-8")
    root = parse_cuda(data).root_node
    body = root.descendant_for_byte_range(kernel.body_span.start_byte, kernel.body_span.end_byte)
    while body is not None and body.type != "compound_statement":
        body = body.parent
    if body is None or (body.start_byte, body.end_byte) != (
        kernel.body_span.start_byte,
        kernel.body_span.end_byte,
    ):
        return None
    assert body.parent is not None  # a compound statement is never the root
    return KernelTree(target, data, body.parent, body)


# -- walking -------------------------------------------------------------------------------------------


def walk(node: Node) -> Iterator[Node]:
    """The node and all its descendants, comments skipped, in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "comment":
            continue
        yield current
        stack.extend(reversed(current.children))


def identifiers(node: Node) -> set[str]:
    return {n.text.decode() for n in walk(node) if n.type == "identifier" and n.text is not None}


def identifiers_in(tree: KernelTree, text: str) -> set[str]:
    """The names in a bound as written (bounds are short expressions of parameters)."""
    return {word for word in _words(text) if not word[0].isdigit()}


def _words(text: str) -> list[str]:
    word, found = "", []
    for char in text + " ":
        if char.isalnum() or char == "_":
            word += char
        elif word:
            found.append(word)
            word = ""
    return found


def statements(block: Node) -> list[Node]:
    """The statements of a compound statement, or the statement itself; comments dropped."""
    if block.type == "compound_statement":
        return [child for child in block.named_children if child.type != "comment"]
    return [block]


def strip_parens(node: Node) -> Node:
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def calls(node: Node, names: Iterable[str]) -> list[Node]:
    wanted = set(names)
    return [
        n
        for n in walk(node)
        if n.type == "call_expression"
        and (fn := n.child_by_field_name("function")) is not None
        and fn.text is not None
        and fn.text.decode() in wanted
    ]


def arguments(call: Node) -> list[Node]:
    args = call.child_by_field_name("arguments")
    return [a for a in args.named_children if a.type != "comment"] if args is not None else []


def subscript_parts(node: Node) -> tuple[str, Node] | None:
    """`x[i]` -> ("x", i-node); None for anything else (or a multi-dimensional subscript)."""
    node = strip_parens(node)
    if node.type != "subscript_expression":
        return None
    array = node.child_by_field_name("argument")
    indices = node.child_by_field_name("indices")
    if array is None or indices is None or array.type != "identifier":
        return None
    named = [n for n in indices.named_children if n.type != "comment"]
    if len(named) != 1:
        return None
    return array.text.decode() if array.text else "", named[0]


# -- shapes of index expressions -----------------------------------------------------------------------


def _field(node: Node) -> tuple[str, str] | None:
    node = strip_parens(node)
    if node.type != "field_expression":
        return None
    base, field = node.child_by_field_name("argument"), node.child_by_field_name("field")
    if base is None or field is None or base.text is None or field.text is None:
        return None
    return base.text.decode(), field.text.decode()


def operands(node: Node, operator: str) -> list[Node]:
    """The operands of a chain of one associative operator: a + b + c -> [a, b, c]."""
    node = strip_parens(node)
    op = node.child_by_field_name("operator")
    if node.type == "binary_expression" and op is not None and op.type == operator:
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        assert left is not None and right is not None
        return operands(left, operator) + operands(right, operator)
    return [node]


def global_index_axis(node: Node) -> str | None:
    """'x' for `blockIdx.x * blockDim.x + threadIdx.x` (any order, parentheses, casts to int)."""
    node = strip_parens(node)
    if node.type == "cast_expression" and (value := node.child_by_field_name("value")) is not None:
        node = strip_parens(value)
    terms = operands(node, "+")
    if len(terms) != 2:
        return None
    for thread, product in (terms, terms[::-1]):
        axis = _field(thread)
        factors = sorted(f for f in (_field(t) for t in operands(product, "*")) if f is not None)
        if axis is None or axis[0] != "threadIdx" or len(operands(product, "*")) != 2:
            continue
        if factors == [("blockDim", axis[1]), ("blockIdx", axis[1])]:
            return axis[1]
    return None


def index_variables(body: Node) -> dict[str, tuple[str, Node]]:
    """Top-level `int i = blockIdx.x * blockDim.x + threadIdx.x;` declarations: name -> (axis, statement)."""
    found: dict[str, tuple[str, Node]] = {}
    for statement in statements(body):
        if statement.type != "declaration":
            continue
        for declarator in statement.children_by_field_name("declarator"):
            name, value = (
                declarator.child_by_field_name("declarator"),
                declarator.child_by_field_name("value"),
            )
            if declarator.type == "init_declarator" and name is not None and value is not None:
                axis = global_index_axis(value)
                if axis is not None and name.type == "identifier" and name.text is not None:
                    found[name.text.decode()] = (axis, statement)
    return found


# -- guards --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Guarded:
    """The statements a thread runs after its bounds check, and the bounds: index name -> bound text."""

    bounds: dict[str, str]
    statements: list[Node]
    prefix: list[Node]  # the statements before the check (index declarations and the like)


def _bounds(condition: Node, negated: bool, tree: KernelTree) -> dict[str, str] | None:
    """`i < n && j < m` (or, negated, `i >= n || j >= m`) -> {i: n, j: m}, however the comparison is
    spelled: `i <= n - k` and `n - k >= i` are `i < n - k + 1` (negated: `i > n - k`, `n - k < i`)."""
    joiner = "||" if negated else "&&"
    # operator -> (is the index on the left, is the bound inclusive)
    forms = (
        {">=": (True, False), "<=": (False, False), ">": (True, True), "<": (False, True)}
        if negated
        else {"<": (True, False), ">": (False, False), "<=": (True, True), ">=": (False, True)}
    )
    found: dict[str, str] = {}
    for part in operands(strip_parens(condition), joiner):
        op = part.child_by_field_name("operator")
        left, right = part.child_by_field_name("left"), part.child_by_field_name("right")
        if part.type != "binary_expression" or op is None or left is None or right is None:
            return None
        left, right = strip_parens(left), strip_parens(right)
        form = forms.get(op.type)
        if form is None:
            return None
        index, bound = (left, right) if form[0] else (right, left)
        if index.type != "identifier":
            return None
        found[tree.text(index)] = _past(bound, tree) if form[1] else tree.text(bound)
    return found


def _past(bound: Node, tree: KernelTree) -> str:
    """The exclusive bound of an inclusive one: `n - k` -> `n - k + 1`, `n >> 1` -> `(n >> 1) + 1`."""
    text = tree.text(bound)
    additive = bound.type in ("identifier", "number_literal", "field_expression", "call_expression") or (
        bound.type == "binary_expression"
        and (op := bound.child_by_field_name("operator")) is not None
        and op.type in ("+", "-", "*", "/", "%")
    )
    return f"{text} + 1" if additive else f"({text}) + 1"


def guarded_region(tree: KernelTree) -> Guarded | None:
    """The kernel as `prefix; if (i >= n) return; rest` or `prefix; if (i < n) { rest }` (the if last)."""
    body = statements(tree.body)
    for position, statement in enumerate(body):
        if statement.type != "if_statement" or statement.child_by_field_name("alternative") is not None:
            continue
        condition = statement.child_by_field_name("condition")
        consequence = statement.child_by_field_name("consequence")
        if condition is None or consequence is None:
            return None
        value = condition.named_children[0] if condition.named_children else None
        if value is None:
            return None
        inner = statements(consequence)
        if len(inner) == 1 and inner[0].type == "return_statement" and inner[0].named_child_count == 0:
            bounds = _bounds(value, negated=True, tree=tree)
            rest = body[position + 1 :]
        elif position == len(body) - 1:
            bounds = _bounds(value, negated=False, tree=tree)
            rest = inner
        else:
            return None
        return Guarded(bounds, rest, body[:position]) if bounds else None
    return None


# -- spec expressions ----------------------------------------------------------------------------------


def size_expression(tree: KernelTree, name: str) -> str | None:
    """The spec expression a scalar parameter takes (`"rows"`, `"n * 2"`, `4096`), parenthesised;
    None when it is not a scalar with a fixed value (then the grid cannot be written from it)."""
    spec = tree.target.spec
    argument = spec.argument(name) if spec is not None else None
    if argument is None or argument.role != "scalar" or argument.value is None:
        return None
    if isinstance(argument.value, float):
        return None
    return f"({argument.value})"


def fresh_names(taken: set[str], *wanted: str) -> list[str]:
    """The wanted local names, each with `_` appended until it clashes with nothing the user wrote."""
    result = []
    for name in wanted:
        while name in taken:
            name += "_"
        taken.add(name)
        result.append(name)
    return result


def local_names(tree: KernelTree, *wanted: str) -> dict[str, str]:
    """Template placeholder -> the local name to use for it in this kernel (see `fresh_names`)."""
    return dict(zip(wanted, fresh_names(tree.names(), *wanted), strict=True))


# Loads through a cache hint, each taking one element's address (`__ldg(&x[i])`): the value is the element's.
CACHED_LOADS = frozenset({"__ldg", "__ldca", "__ldcg", "__ldcs", "__ldlu", "__ldcv"})


def element_type(parameter: Parameter | None) -> str | None:
    """`float` for `const float* __restrict__ x`; None for non-pointers and pointers to pointers."""
    if parameter is None or parameter.pointer_depth != 1:
        return None
    return parameter.type


def fits_shared_memory(target: KernelTarget, launch: LaunchSpec) -> bool:
    """Whether the launch's dynamic shared memory stays under SHARED_LIMIT at every size the spec runs."""
    spec = target.spec
    assert spec is not None
    candidate = replace(spec, launch=launch)
    try:
        points = [spec.sizes, *(complete_sizes(spec, s) for s in spec.verify_sizes)]
        return all(resolve(candidate, point)[1].shared_bytes <= SHARED_LIMIT for point in points)
    except SpecResolveError:
        return False


# -- the candidate -------------------------------------------------------------------------------------


def indent(lines: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in lines.splitlines())


def build_candidate(
    tree: KernelTree,
    *,
    body: str,
    launch: LaunchSpec,
    description: str,
    proposer: str,
    helpers: str = "",
    assumptions: tuple[str, ...] = (),
) -> Candidate:
    """The file with the kernel's body replaced (the signature untouched) and helper device functions
    right above the kernel; everything else, the spec included, stays byte for byte."""
    kernel = tree.target.kernel
    text = replace_span(tree.target.source, kernel.body_span, body)
    if helpers:
        start = kernel.span
        at_start = replace(start, end_byte=start.start_byte)
        text = replace_span(text, at_start, helpers.rstrip("\n") + "\n\n")
    return Candidate(
        source=text,
        block=launch.block,
        description=description,
        proposer=proposer,
        assumptions=assumptions,
        launch=launch,
    )


# -- loops and accumulations ---------------------------------------------------------------------------

SUM, MAX, MIN = "sum", "max", "min"
# The combining functions a first draft writes, by the reduction they perform.
COMBINERS = {"fmaxf": MAX, "fmax": MAX, "max": MAX, "fminf": MIN, "fmin": MIN, "min": MIN}
ZERO_LITERALS = frozenset({"0", "0.0", "0.0f", "0.f", "0.0F", "0.F", "0u", "0.", "0.0L"})


@dataclass(frozen=True)
class Accumulation:
    """`acc += value`, `acc = acc + value`, `acc = fmaxf(acc, value)`: what is folded into which name."""

    name: str
    kind: str  # SUM, MAX or MIN
    combiner: str  # "+" or the function the user called ("fmaxf"), to combine partials the same way
    value: Node  # the folded expression
    statement: Node


def accumulation(statement: Node, tree: KernelTree) -> Accumulation | None:
    """The accumulation an expression statement performs, if it is one (`-=` is a sum of negations)."""
    if statement.type != "expression_statement" or statement.named_child_count != 1:
        return None
    expression = strip_parens(statement.named_children[0])
    if expression.type != "assignment_expression":
        return None
    left, op, right = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None or left.type != "identifier":
        return None
    name = tree.text(left)
    if op.type == "+=":
        return Accumulation(name, SUM, "+", right, statement)
    if op.type != "=":
        return None
    right = strip_parens(right)
    if right.type == "binary_expression":
        plus = right.child_by_field_name("operator")
        a, b = right.child_by_field_name("left"), right.child_by_field_name("right")
        if plus is None or plus.type != "+" or a is None or b is None:
            return None
        for mine, other in ((a, b), (b, a)):
            if strip_parens(mine).type == "identifier" and tree.text(strip_parens(mine)) == name:
                return Accumulation(name, SUM, "+", other, statement)
        return None
    if right.type == "call_expression":
        function = right.child_by_field_name("function")
        args = arguments(right)
        combiner = tree.text(function) if function is not None else ""
        if combiner not in COMBINERS or len(args) != 2:
            return None
        for mine, other in ((args[0], args[1]), (args[1], args[0])):
            if strip_parens(mine).type == "identifier" and tree.text(strip_parens(mine)) == name:
                return Accumulation(name, COMBINERS[combiner], combiner, other, statement)
    return None


@dataclass(frozen=True)
class CountedLoop:
    """`for (int k = start; k < bound; ++k) body`: a unit-step loop over one integer."""

    variable: str
    start: Node
    bound: Node
    body: Node
    declares: bool  # `int k = ...` in the header (else `k = ...` assigns an outer variable)
    node: Node


def counted_loop(node: Node, tree: KernelTree) -> CountedLoop | None:
    if node.type != "for_statement":
        return None
    init, condition, update, body = (
        node.child_by_field_name(f) for f in ("initializer", "condition", "update", "body")
    )
    if init is None or condition is None or update is None or body is None:
        return None
    declares = init.type == "declaration"
    if declares:
        declarators = init.children_by_field_name("declarator")
        if len(declarators) != 1 or declarators[0].type != "init_declarator":
            return None
        name_node, start = (
            declarators[0].child_by_field_name("declarator"),
            declarators[0].child_by_field_name("value"),
        )
    elif (
        init.type == "assignment_expression"
        and tree.text(init.child_by_field_name("operator") or init) == "="
    ):
        name_node, start = init.child_by_field_name("left"), init.child_by_field_name("right")
    else:
        return None
    if name_node is None or start is None or name_node.type != "identifier":
        return None
    variable = tree.text(name_node)
    condition = strip_parens(condition)
    op = condition.child_by_field_name("operator")
    left, bound = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    if condition.type != "binary_expression" or op is None or op.type != "<" or left is None or bound is None:
        return None
    if tree.text(strip_parens(left)) != variable or variable in identifiers(bound):
        return None
    if not _unit_step(update, variable, tree):
        return None
    return CountedLoop(variable, start, bound, body, declares, node)


def _unit_step(update: Node, variable: str, tree: KernelTree) -> bool:
    if update.type == "update_expression":
        op, arg = update.child_by_field_name("operator"), update.child_by_field_name("argument")
        return op is not None and op.type == "++" and arg is not None and tree.text(arg) == variable
    if update.type == "assignment_expression":
        op, left, right = (update.child_by_field_name(f) for f in ("operator", "left", "right"))
        return (
            op is not None
            and op.type == "+="
            and left is not None
            and tree.text(left) == variable
            and right is not None
            and tree.text(right).strip() == "1"
        )
    return False


def declared_names(node: Node, tree: KernelTree) -> set[str]:
    """Names declared anywhere inside the node (locals), loop variables included."""
    return {
        name
        for n in walk(node)
        if n.type == "declaration"
        for declarator in n.children_by_field_name("declarator")
        if (name := declarator_name(declarator)) is not None
    }


def declarator_name(declarator: Node) -> str | None:
    """The name a declarator (or a function definition) declares, through `*`, `[]`, `= value` and
    `(...)`; None where it ends in something else (an operator's definition)."""
    inner: Node | None = declarator
    while inner is not None and inner.type != "identifier":
        inner = inner.child_by_field_name("declarator")
    return inner.text.decode("utf-8") if inner is not None and inner.text is not None else None


# What a `break` or `continue` binds to.
_JUMP_TARGETS = frozenset({"for_statement", "while_statement", "do_statement", "switch_statement"})


def inside_loop(node: Node, top: Node) -> bool:
    """Whether a loop or switch within the statement `top` holds the node (a jump there stays inside)."""
    parent = node.parent
    while parent is not None and parent != top.parent:
        if parent.type in _JUMP_TARGETS:
            return True
        parent = parent.parent
    return False


def single_declaration(node: Node, tree: KernelTree) -> tuple[str, str, Node | None] | None:
    """`float acc = 0.0f;` -> ("float", "acc", value node); None for several declarators or arrays."""
    if node.type != "declaration":
        return None
    declarators = node.children_by_field_name("declarator")
    type_node = node.child_by_field_name("type")
    if len(declarators) != 1 or type_node is None:
        return None
    declarator = declarators[0]
    if declarator.type == "identifier":
        return tree.text(type_node), tree.text(declarator), None
    name = declarator.child_by_field_name("declarator")
    if declarator.type != "init_declarator" or name is None or name.type != "identifier":
        return None
    return tree.text(type_node), tree.text(name), declarator.child_by_field_name("value")


def writes(node: Node, tree: KernelTree) -> list[Node]:
    """The targets of every assignment and ++/-- inside the node."""
    found = []
    for n in walk(node):
        if n.type == "assignment_expression" and (left := n.child_by_field_name("left")) is not None:
            found.append(strip_parens(left))
        elif n.type == "update_expression" and (arg := n.child_by_field_name("argument")) is not None:
            found.append(strip_parens(arg))
    return found


def always_assigns(statement: Node, assigned: Callable[[Node], bool]) -> bool:
    """Whether running the statement always assigns the place `assigned` accepts (with a plain `=`): such
    an expression statement, a block holding one at its top, or an if whose branches both always do
    (`if (m[i] < p) y[i] = 0; else y[i] = x[i];`). For code without jumps (the callers refuse them)."""
    if statement.type == "expression_statement" and statement.named_child_count == 1:
        expression = strip_parens(statement.named_children[0])
        operator, left = expression.child_by_field_name("operator"), expression.child_by_field_name("left")
        return (
            expression.type == "assignment_expression"
            and operator is not None
            and operator.type == "="
            and left is not None
            and assigned(left)
        )
    if statement.type == "compound_statement":
        return any(always_assigns(child, assigned) for child in statement.named_children)
    if statement.type == "if_statement":
        consequence, alternative = (statement.child_by_field_name(f) for f in ("consequence", "alternative"))
        if consequence is None or alternative is None:
            return False
        branch = alternative.named_children[-1] if alternative.type == "else_clause" else alternative
        return always_assigns(consequence, assigned) and always_assigns(branch, assigned)
    return False


def is_name(node: Node, name: str, tree: KernelTree) -> bool:
    """Whether the expression is the identifier `name`, parentheses aside."""
    node = strip_parens(node)
    return node.type == "identifier" and tree.text(node) == name


def is_barrier(statement: Node, tree: KernelTree) -> bool:
    """Whether the statement is `__syncthreads();`."""
    if statement.type != "expression_statement" or statement.named_child_count != 1:
        return False
    call = strip_parens(statement.named_children[0])
    function = call.child_by_field_name("function")
    return (
        call.type == "call_expression"
        and function is not None
        and tree.text(function) == "__syncthreads"
        and not arguments(call)
    )


def reads_axes(tree: KernelTree, axes: str) -> bool:
    """Whether the kernel, or a function of the file it calls, reads a builtin along one of the axes
    (`threadIdx.y`, `blockDim.z`, ...)."""
    names = ("threadIdx", "blockIdx", "blockDim", "gridDim")
    builtins = {f"{name}.{axis}" for name in names for axis in axes}
    functions = {
        name: node
        for node in walk(tree.root)
        if node.type == "function_definition" and (name := declarator_name(node)) is not None
    }
    pending, seen = [tree.body], set()
    while pending:
        for node in walk(pending.pop()):
            if node.type == "field_expression" and "".join(tree.text(node).split()) in builtins:
                return True
            if node.type == "call_expression" and (function := node.child_by_field_name("function")):
                name = tree.text(function)
                if name in functions and name not in seen:
                    seen.add(name)
                    pending.append(functions[name])
    return False


def has_any(node: Node, types: Iterable[str]) -> bool:
    wanted = set(types)
    return any(n.type in wanted for n in walk(node))


# -- editing the body in place -------------------------------------------------------------------------


def apply_to_body(tree: KernelTree, edits: list[Edit]) -> str:
    """The kernel body's text with the edits applied (ranges in file bytes, none overlapping); see
    `KernelTree.apply_to_file` for the whole file."""
    start, data = tree.body.start_byte, tree.data
    text = data[start : tree.body.end_byte]
    for begin, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[: begin - start] + new.encode("utf-8") + text[end - start :]
    return text.decode("utf-8")


def line_indent(tree: KernelTree, node: Node) -> str:
    """The whitespace that starts the node's line, up to the node (`KernelTree.indent_at` counts only
    spaces and tabs from the line's start)."""
    line_start = tree.data.rfind(b"\n", 0, node.start_byte) + 1
    prefix = tree.data[line_start : node.start_byte].decode("utf-8")
    return prefix[: len(prefix) - len(prefix.lstrip())]


# -- for the transforms: names, re-indenting, the candidate --------------------------------------------


def mentions(tree: KernelTree, node: Node, names: frozenset[str] | set[str]) -> bool:
    return any(n.type == "identifier" and tree.text(n) in names for n in walk_with_comments(node))


def reindent(text: str, old_indent: str, new_indent: str) -> str:
    """A statement's text (its first line without indentation) moved from one depth to another."""
    lines = text.split("\n")
    moved = [new_indent + lines[0]]
    for line in lines[1:]:
        stripped = line[len(old_indent) :] if line.startswith(old_indent) else line.lstrip()
        moved.append(new_indent + stripped if stripped else "")
    return "\n".join(moved)


def candidate_from(
    target: KernelTarget,
    source: str,
    *,
    description: str,
    proposer: str,
    assumptions: tuple[str, ...] = (),
    launch: LaunchSpec | None = None,
    flags: tuple[str, ...] = (),
) -> Candidate:
    """A candidate whose launch, when it differs from the target's, is also written into the file's spec,
    so the file re-read (the next search round, or the user after applying it) runs the same launch."""
    assert target.spec is not None
    if launch is not None and launch != target.spec.launch:
        if target.spec.inferred:
            # Written out above the kernel as inferred from the original, not re-inferred from the
            # rewrite (whose shape the inference may read differently). Edits inside the kernel leave
            # its first byte where it was.
            source = with_launch(replace(target, source=source), launch)
        else:
            edited = load_targets(target.path, source, infer=False).find(target.kernel.name)
            assert edited is not None and edited.spec is not None, "an edit lost the kernel's spec"
            source = with_launch(edited, launch)
    return Candidate(
        source=source,
        block=(launch or target.spec.launch).block,
        description=description,
        proposer=proposer,
        flags=flags,
        assumptions=assumptions,
        launch=launch if launch is not None and launch != target.spec.launch else None,
    )


def with_grid(launch: LaunchSpec, grid: str) -> LaunchSpec:
    return replace(launch, grid=(grid,))


def accessed_array(node: Node) -> str:
    """The name an unplaced access starts from: `A` of `A[i][j]`, `p` of `*(p + k)`."""
    while node.type in ("subscript_expression", "pointer_expression", "parenthesized_expression"):
        inner = node.child_by_field_name("argument") or (
            node.named_children[0] if node.named_children else None
        )
        if inner is None:
            break
        node = inner
    return _text(node) if node.type == "identifier" else ""


def shared_arrays(tree: KernelTree) -> dict[str, str]:
    """The kernel's shared arrays and the pointers it declares into them, with their element types."""
    arrays: dict[str, str] = {}
    for node in walk(tree.body):
        if node.type != "declaration":
            continue
        kind = node.child_by_field_name("type")
        for declarator in node.children_by_field_name("declarator"):
            name = declarator_name(declarator)
            value = declarator.child_by_field_name("value")
            pointer = declarator.child_by_field_name("declarator")
            points = pointer is not None and pointer.type == "pointer_declarator"
            into = value is not None and any(
                n.type == "identifier" and _text(n) in arrays for n in walk(value)
            )
            if name is not None and kind is not None and ("__shared__" in _text(node) or (points and into)):
                arrays[name] = _text(kind)
    return arrays


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8")
