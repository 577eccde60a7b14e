"""What an expression of the kernel computes, as a `Form`, after constant propagation.

Locals assigned once are replaced by their value (`int row = blockIdx.x * blockDim.x + threadIdx.x;`),
pointer locals by a parameter and an element offset (`const float* x_row = x + row * C;`), object-like
`#define`s by their value, and function-like macros and one-line `__device__` helpers (`return i * n + j;`)
are expanded at their calls. What is left unmodelled (a load, a float, a call) becomes an opaque atom
that still says what it depends on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from cuda_agent.agent.analysis.forms import THREAD_ATOMS, Atoms, Form, quotient, recombine, remainder
from cuda_agent.agent.parsing import parse_cuda
from tree_sitter import Node


def text(node: Node) -> str:
    return node.text.decode("utf-8") if node.text is not None else ""


def unwrap(node: Node) -> Node:
    """The expression inside parentheses and casts (`(int)(x)` -> `x`)."""
    while True:
        if node.type == "parenthesized_expression" and node.named_child_count == 1:
            node = node.named_children[0]
        elif node.type == "cast_expression" and (value := node.child_by_field_name("value")) is not None:
            node = value
        else:
            return node


@dataclass(frozen=True)
class Pointer:
    """A pointer local: `base + offset` elements into a parameter."""

    base: str
    offset: Form


@dataclass(frozen=True)
class Inline:
    """A function-like macro or a one-line helper: its parameter names and the expression it returns."""

    parameters: tuple[str, ...]
    body: Node


@dataclass
class Definitions:
    """What the file defines around the kernel: numeric macros, expandable macros and helpers."""

    constants: dict[str, Node] = field(default_factory=dict)  # object-like #define NAME value
    inlines: dict[str, Inline] = field(default_factory=dict)


def file_definitions(root: Node) -> Definitions:
    """The file's `#define`s and one-line `__device__` helpers, read from its tree."""
    return definitions_of(_preorder(root))


def definitions_of(nodes: Iterable[Node]) -> Definitions:
    """The `#define`s and one-line `__device__` helpers among the nodes (a later definition wins)."""
    found = Definitions()
    for node in nodes:
        if node.type == "preproc_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            expression = expression_of(text(value)) if value is not None else None
            if name is not None and expression is not None:
                found.constants[text(name)] = expression
        elif node.type == "preproc_function_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            parameters = node.child_by_field_name("parameters")
            expression = expression_of(text(value)) if value is not None else None
            if name is not None and parameters is not None and expression is not None:
                names = tuple(text(p) for p in parameters.named_children if p.type == "identifier")
                found.inlines[text(name)] = Inline(names, expression)
        elif node.type == "function_definition":
            helper = _one_line_helper(node)
            if helper is not None:
                found.inlines[helper[0]] = helper[1]
    return found


def _preorder(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if node.type not in ("function_definition", "preproc_def", "preproc_function_def"):
            stack.extend(reversed(node.children))


def expression_of(source: str) -> Node | None:
    """The expression a macro's replacement text spells, parsed on its own."""
    tree = parse_cuda(f"long long __value = ({source.strip()});".encode())
    if tree.root_node.has_error:
        return None
    declaration = tree.root_node.named_children[0] if tree.root_node.named_children else None
    declarator = declaration.child_by_field_name("declarator") if declaration is not None else None
    return declarator.child_by_field_name("value") if declarator is not None else None


def _one_line_helper(definition: Node) -> tuple[str, Inline] | None:
    """`__device__ int idx(int i, int j, int n) { return i * n + j; }` -> ("idx", Inline(...))."""
    if not any(text(c) == "__device__" for c in definition.children):
        return None
    declarator, body = definition.child_by_field_name("declarator"), definition.child_by_field_name("body")
    if declarator is None or body is None or declarator.type != "function_declarator":
        return None
    statements = [s for s in body.named_children if s.type != "comment"]
    if len(statements) != 1 or statements[0].type != "return_statement" or not statements[0].named_children:
        return None
    name, parameters = (
        declarator.child_by_field_name("declarator"),
        declarator.child_by_field_name("parameters"),
    )
    if name is None or parameters is None:
        return None
    names: list[str] = []
    for parameter in parameters.named_children:
        inner = parameter.child_by_field_name("declarator")
        while inner is not None and inner.type != "identifier":
            inner = inner.child_by_field_name("declarator")
        if inner is None:
            return None
        names.append(text(inner))
    return text(name), Inline(tuple(names), statements[0].named_children[0])


Bound = Form | Pointer


@dataclass
class Values:
    """Evaluates expressions to forms under the current bindings of locals."""

    atoms: Atoms
    definitions: Definitions
    pointers: frozenset[str]  # the kernel's pointer parameters
    bindings: dict[str, Bound] = field(default_factory=dict)
    # reports each load: (node, base, offset, site), site the kernel's own call a macro or helper it is
    # read through was expanded from (its node is the expansion's, parsed apart), else None
    on_load: Callable[[Node, str, Form, Node | None], None] | None = None
    on_unmodelled: Callable[[Node], None] | None = None  # reports each load it cannot place
    # builtins the launch fixes (a 1-D grid: blockIdx.y is 0, gridDim.y is 1), so that a block number made
    # one line of a 2-D grid (`blockIdx.x + blockIdx.y * gridDim.x`) reads as the 1-D one it is there
    fixed: Mapping[str, Form] = field(default_factory=dict)
    # the file's `__constant__` arrays: read-only to every thread, so a read of one is a value (an opaque
    # atom of its index) that work may move between threads with, not a load the analysis lost track of
    constants: frozenset[str] = frozenset()
    _depth: int = 0
    _site: Node | None = None  # the outermost call being expanded, in the kernel's own text

    def form(self, node: Node, scope: dict[str, Bound] | None = None) -> Form:
        """The value of an integer expression; an opaque atom where it is not a polynomial."""
        node = unwrap(node)
        kind = node.type
        if kind == "number_literal":
            return _number(text(node), self.atoms)
        if kind == "identifier":
            return self._name(text(node), scope)
        if kind == "field_expression":
            written = text(node).replace(" ", "")
            if written in self.fixed:
                return self.fixed[written]
            return Form.atom(written) if written in THREAD_ATOMS else self.atoms.opaque(written, ())
        if kind == "unary_expression":
            operator, argument = node.child_by_field_name("operator"), node.child_by_field_name("argument")
            inner = self.form(argument, scope) if argument is not None else Form()
            if operator is not None and operator.type == "-":
                return -inner
            if operator is not None and operator.type == "+":
                return inner
            return self.atoms.opaque(f"{text(operator) if operator else '?'}({inner.text()})", (inner,))
        if kind == "binary_expression":
            return self._binary(node, scope)
        if kind == "call_expression":
            return self._call(node, scope)
        if kind == "subscript_expression":
            return self._load(node, scope)
        if kind == "pointer_expression":
            operator, argument = node.child_by_field_name("operator"), node.child_by_field_name("argument")
            if operator is not None and operator.type == "*" and argument is not None:
                place = self.place(argument, scope)
                if place is not None:
                    return self._loaded(node, place)
                self._unmodelled(node)
        inputs = [self.form(child, scope) for child in node.named_children if child.type != "comment"]
        return self.atoms.opaque(text(node), inputs, memory=True)

    def place(self, node: Node, scope: dict[str, Bound] | None = None) -> Pointer | None:
        """The parameter and element offset a pointer expression points at (`x + row * C`, `x_row`)."""
        node = unwrap(node)
        if node.type == "identifier":
            name = text(node)
            bound = (scope or {}).get(name, self.bindings.get(name))
            if isinstance(bound, Pointer):
                return bound
            return Pointer(name, Form()) if name in self.pointers and bound is None else None
        if node.type == "binary_expression":
            operator = node.child_by_field_name("operator")
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if operator is None or left is None or right is None or operator.type not in "+-":
                return None
            base = self.place(left, scope)
            if base is not None:
                step = self.form(right, scope)
                return Pointer(base.base, base.offset + (step if operator.type == "+" else -step))
            base = self.place(right, scope)
            if base is not None and operator.type == "+":
                return Pointer(base.base, base.offset + self.form(left, scope))
        if node.type == "pointer_expression":
            operator, argument = node.child_by_field_name("operator"), node.child_by_field_name("argument")
            if operator is not None and operator.type == "&" and argument is not None:
                argument = unwrap(argument)
                if argument.type == "subscript_expression":
                    return self.subscript_place(argument, scope)
        return None

    def subscript_place(self, node: Node, scope: dict[str, Bound] | None = None) -> Pointer | None:
        """`a[i]`: the element it names (nested subscripts of flat pointers are not modelled)."""
        array, index = node.child_by_field_name("argument"), node.child_by_field_name("indices")
        if array is None or index is None:
            return None
        index_nodes = [c for c in index.named_children if c.type != "comment"]
        if len(index_nodes) != 1:
            return None
        base = self.place(array, scope)
        if base is None:
            return None
        return Pointer(base.base, recombine(base.offset + self.form(index_nodes[0], scope), self.atoms))

    def _load(self, node: Node, scope: dict[str, Bound] | None) -> Form:
        place = self.subscript_place(node, scope)
        if place is None:
            if not self._constant_read(node, scope):
                self._unmodelled(node)
            inputs = [self.form(c, scope) for c in node.named_children if c.type != "comment"]
            return self.atoms.opaque(text(node), inputs, memory=True)
        return self._loaded(node, place)

    def _constant_read(self, node: Node, scope: dict[str, Bound] | None) -> bool:
        """`mask[i * K + j]` of a `__constant__ float mask[...]` the kernel does not shadow."""
        array = node.child_by_field_name("argument")
        name = text(array) if array is not None and array.type == "identifier" else None
        return name in self.constants and name not in (scope or {}) and name not in self.bindings

    def _unmodelled(self, node: Node) -> None:
        if self.on_unmodelled is not None:
            self.on_unmodelled(node)

    def _loaded(self, node: Node, place: Pointer) -> Form:
        if self.on_load is not None:
            self.on_load(node, place.base, place.offset, self._site)
        return self.atoms.opaque(f"{place.base}[{place.offset.text()}]", (place.offset,), memory=True)

    def _name(self, name: str, scope: dict[str, Bound] | None) -> Form:
        bound = (scope or {}).get(name, self.bindings.get(name))
        if isinstance(bound, Form):
            return bound
        if bound is None and name in self.definitions.constants and self._depth < 16:
            self._depth += 1
            try:
                return self.form(self.definitions.constants[name], {})
            finally:
                self._depth -= 1
        return Form.atom(name)

    def _binary(self, node: Node, scope: dict[str, Bound] | None) -> Form:
        operator = node.child_by_field_name("operator")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if operator is None or left is None or right is None:
            return self.atoms.opaque(text(node), ())
        return self.combined(operator.type, self.form(left, scope), self.form(right, scope))

    def combined(self, op: str, a: Form, b: Form) -> Form:
        """`a op b` for a binary operator's text (`id /= w` is `combined("/", id, w)`)."""
        if op == "+":
            return recombine(a + b, self.atoms)
        if op == "-":
            return recombine(a - b, self.atoms)
        if op == "*":
            return recombine(a * b, self.atoms)
        if op == "/":
            return quotient(a, b, self.atoms)
        if op == "%":
            return remainder(a, b, self.atoms)
        shift = b.value()
        if op == "<<" and shift is not None and 0 <= shift < 63:
            return a * Form.constant(1 << shift)
        if op == ">>" and shift is not None and 0 <= shift < 63:
            return quotient(a, Form.constant(1 << shift), self.atoms)
        return self.atoms.opaque(f"({a.text()}) {op} ({b.text()})", (a, b))

    def _call(self, node: Node, scope: dict[str, Bound] | None) -> Form:
        function, argument_list = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        name = text(function) if function is not None else ""
        arguments = [c for c in argument_list.named_children if c.type != "comment"] if argument_list else []
        forms = [self.form(a, scope) for a in arguments]
        inline = self.definitions.inlines.get(name)
        if inline is not None and len(inline.parameters) == len(arguments) and self._depth < 16:
            inner: dict[str, Bound] = dict(zip(inline.parameters, forms, strict=True))
            self._depth += 1
            saved, self.bindings = self.bindings, {}
            site = self._site
            self._site = site if site is not None else node
            try:
                return self.form(inline.body, inner)
            finally:
                self.bindings = saved
                self._site = site
                self._depth -= 1
        return self.atoms.opaque(f"{name}({', '.join(f.text() for f in forms)})", forms)


def _number(literal: str, atoms: Atoms) -> Form:
    digits = literal.rstrip("uUlL")
    try:
        return Form.constant(int(digits, 0))
    except ValueError:
        return atoms.opaque(literal, ())  # a float
