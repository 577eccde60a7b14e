"""Specs from the program: what the host code around a kernel's launch says about how it runs.

A kernel in a real file is launched by host code: `main()` or a launcher sets the sizes (`const int rows =
8192`, `#define N (1 << 24)`, `constexpr`), allocates the buffers (`cudaMalloc(&d_x, rows * cols *
sizeof(float))`), builds the launch (`dim3 grid((n + threads - 1) / threads)`) and passes literal scalars
(`1e-6f`). This module reads that with tree-sitter, following names to their definitions (locals before
the launch, the launcher's parameters to its callers' arguments, the file's #defines and constants), and
builds the spec the program itself implies: the sizes with the program's values, the launch as the
program writes it (in terms of the sizes and the block, so it can still be tuned), scalar values, shapes
from the allocations, the instantiation from the launch's template arguments. Several launches give the
largest as the benchmark and the others as verify sizes. Every value says where it came from.

What cannot be followed (a size read from argv with no default, a value computed at run time, a buffer
allocated elsewhere) is a reason; the caller then falls back to the signature-based inference.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cuda_agent.agent.kernels import Kernel, kernel_body, launch_calls
from cuda_agent.agent.parsing import ancestors, parse_cuda, walk
from cuda_agent.agent.spec.dtypes import (
    dtype_of_c_type,
    dtype_through_aliases,
    is_float,
    through_aliases,
    vector_of_c_type,
)
from cuda_agent.agent.spec.expressions import ExpressionError, parse_expression
from cuda_agent.agent.spec.infer import (
    BOOL_INIT,
    FLOAT_SCALAR_INIT,
    BodyAnalysis,
    classify_parameters,
    instantiation,
    is_bool_pointer,
    role_of,
    size_name_for,
    unwrapped,
)
from cuda_agent.agent.spec.model import ArgumentSpec, InitSpec, KernelSpec, LaunchSpec, SpecResolveError
from cuda_agent.agent.spec.resolve import resolve
from cuda_agent.agent.spec.validate import split_template_arguments
from cuda_agent.sandbox.plan import DTYPE_BYTES
from tree_sitter import Node, Tree

MAX_CALLER_DEPTH = 3  # launcher -> its caller -> theirs
RUNTIME_CALLS = frozenset({"atoi", "atol", "atoll", "strtol", "strtoul", "stoi", "stol", "getenv", "rand"})
RUNTIME_NAMES = frozenset({"argc", "argv"})
CEIL_DIVS = frozenset({"ceil_div", "cdiv", "div_up", "divup", "DIV_UP", "CEIL_DIV", "ceildiv", "iDivUp"})
MIN_MAX = {"min": "min", "max": "max", "std::min": "min", "std::max": "max", "fminf": None, "fmaxf": None}
_VECTORS = frozenset({"vector", "device_vector", "host_vector"})
_ALLOCATORS = frozenset({"cudaMalloc", "cudaMallocManaged", "cudaMallocAsync", "cudaMallocHost"})
_INTEGER = re.compile(r"^(0[xX][0-9a-fA-F']+|0[bB][01']+|[0-9']+)[uUlL]*$")


class NotFollowed(Exception):
    """A value the host code does not determine here (the message says which and why)."""


# -- the file's host code ---------------------------------------------------------------------------------


@dataclass
class _Definition:
    key: tuple[object, ...]  # identifies the definition: the same name in two functions is two values
    value: Node | None  # the expression it is initialised (or last assigned) with; None: not known
    scope: _Scope | None  # where `value` is read
    line: int  # 1-based, for "where it came from"
    dims: tuple[Node, ...] | None = None  # a dim3's components
    why: str = ""  # when value is None: why it is not known
    c_type: str = ""  # as declared ("float", "const int"), where known: float or integer arithmetic


class ProgramHost:
    """The file-level facts: #defines, constants, typedefs, the functions, the launches and who calls a
    function. Read once per file text and shared by its kernels; everything is found from the tree's top
    level and by looking up names' bytes, never by walking every function body (a 5,000-line file is
    analysed on every keystroke)."""

    def __init__(self, tree: Tree, data: bytes, place: str = "") -> None:
        self.tree, self.data = tree, data
        self.place = place  # " of runner.cu" where the launches are in another file than the kernel
        self._define_texts: dict[str, tuple[str, int]] = {}  # name -> (value text, line); parsed when used
        # `#define imin(a, b) (a < b ? a : b)`: name -> (parameters, body text), expanded where called
        self.function_macros: dict[str, tuple[tuple[str, ...], str]] = {}
        self._define_spans: dict[str, tuple[int, int]] = {}  # name -> its value's bytes, spaces trimmed
        self._defines: dict[str, _Definition] = {}
        self.constants: dict[str, _Definition] = {}
        self._constant_global: dict[str, bool] = {}  # file-level variable -> declared const or constexpr
        self.typedefs: dict[str, str] = {}
        self.structs: dict[str, list[str]] = {}  # struct name -> its fields, in order
        self.functions: dict[str, Node] = {}
        self._globals: list[bytes] = []  # the texts of the file-level declarations, for the digest
        # Byte ranges inference reads outside kernels: the declarations, and (as dependencies() meets them)
        # the functions launching kernels and their callers. An edit elsewhere cannot change its answers.
        self.relevant: list[tuple[int, int]] = []
        self._scan(tree.root_node)
        self._forget_set_at_run_time(tree.root_node)
        self.globals_digest = hashlib.blake2b(b"\0".join(self._globals), digest_size=16).digest()
        self._launches: dict[str, list[Node]] | None = None
        self._callers: dict[str, list[Node]] | None = None
        self._dependencies: dict[int, bytes] = {}  # per launching function: its text and its callers'

    def function_around(self, node: Node) -> Node | None:
        """The function definition around a node of this file's tree (see `_enclosing_function`)."""
        return _enclosing_function(node, self.tree.root_node)

    def launches(self, kernel: str) -> list[Node]:
        """The call_expressions launching `kernel` (its name without namespace or template arguments)."""
        if self._launches is None:
            self._launches = {}
            for name, call in launch_calls(self.tree.root_node, self.data):
                self._launches.setdefault(name, []).append(call)
        return self._launches.get(kernel, [])

    @property
    def launched(self) -> frozenset[str]:
        return frozenset(self._all_launches())

    @property
    def launchers(self) -> frozenset[str]:
        """The names of the host functions that launch kernels."""
        names = {
            _function_name(f.child_by_field_name("declarator"), self)
            for calls in self._all_launches().values()
            for f in map(self.function_around, calls)
            if f is not None
        }
        return frozenset(names - {""})

    def callers(self, function: str) -> list[Node]:
        """The calls of a host function. All launching functions' callers are found in one pass over the
        file's bytes (a prefilter for `name(`), each match confirmed by the tree."""
        if self._callers is None:
            self._callers = self._calls_of(set(self.launchers))
        if function not in self._callers:  # a caller's caller
            self._callers.update(self._calls_of({function}))
        return self._callers[function]

    def _calls_of(self, names: set[str]) -> dict[str, list[Node]]:
        found: dict[str, list[Node]] = {name: [] for name in names}
        if not names:
            return found
        alternatives = b"|".join(re.escape(n.encode()) for n in sorted(names))
        pattern = re.compile(rb"\b(" + alternatives + rb")\s*(?:<[^;{}()]*>\s*)?\(")  # `f(` or `f<32>(`
        for match in pattern.finditer(self.data):
            node = self.tree.root_node.descendant_for_byte_range(match.start(1), match.end(1))
            if node is None or node.type != "identifier" or node.parent is None:
                continue
            function = node.parent if node.parent.type == "template_function" else node
            call = function.parent
            if (
                call is not None
                and call.type == "call_expression"
                and call.child_by_field_name("function") == function
            ):
                found[match.group(1).decode()].append(call)
        return found

    def _all_launches(self) -> dict[str, list[Node]]:
        self.launches("")
        assert self._launches is not None
        return self._launches

    def dependencies(self, kernel: str) -> bytes:
        """A digest of what inference from the program reads for `kernel`: the file-level declarations,
        the functions that launch it and, up the chain, the functions that call those."""
        parts = [self.globals_digest]
        for function in {
            f.start_byte: f for f in map(self.function_around, self.launches(kernel)) if f
        }.values():
            parts.append(self._function_dependencies(function, MAX_CALLER_DEPTH))
        return hashlib.blake2b(b"\0".join(parts), digest_size=16).digest()

    def _function_dependencies(self, function: Node, depth: int) -> bytes:
        if function.start_byte not in self._dependencies:
            self.relevant.append((function.start_byte, function.end_byte))
            # Its line too: the inferred spec says where its values came from ("at line 20").
            parts = [
                str(function.start_point[0]).encode(),
                self.data[function.start_byte : function.end_byte],
            ]
            name = _function_name(function.child_by_field_name("declarator"), self)
            if name and depth > 0:
                # Which calls there are, wherever they are: one appearing or vanishing (inside a string
                # left open) changes the calling contexts even where no function around them changed.
                parts += [
                    _function_name(f.child_by_field_name("declarator"), self).encode() if f else b"(none)"
                    for f in map(self.function_around, self.callers(name))
                ]
                callers = {f.start_byte: f for f in map(self.function_around, self.callers(name)) if f}
                parts += [
                    self._function_dependencies(f, depth - 1) for f in callers.values() if f != function
                ]
            self._dependencies[function.start_byte] = hashlib.blake2b(
                b"\0".join(parts), digest_size=16
            ).digest()
        return self._dependencies[function.start_byte]

    @staticmethod
    def text(node: Node | None) -> str:
        """A node's text; through the node, as a #define's value is a node of its own small parse."""
        return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""

    def _scan(self, root: Node) -> None:
        # An explicit stack of the scopes being read, not recursion: namespaces and `#if` blocks nest as
        # deep as the file says (generated code), and each scope is read in place, in source order.
        pending = [iter(root.named_children)]
        while pending:
            child = next(pending[-1], None)
            if child is None:
                pending.pop()
                continue
            kind = child.type
            if kind in ("preproc_def", "declaration", "type_definition", "alias_declaration"):
                self._globals.append(self.data[child.start_byte : child.end_byte])
                self.relevant.append((child.start_byte, child.end_byte))
            if kind == "preproc_function_def":
                self._function_macro(child)
            if kind == "preproc_def":
                self._define(child)
            elif kind == "declaration":
                qualifiers = {self.text(c) for c in child.children if c.type == "type_qualifier"}
                for name, value, line, c_type in _declared(child, self):
                    self.constants[name] = _Definition(("global", name), value, None, line, c_type=c_type)
                    self._constant_global[name] = bool(qualifiers & {"const", "constexpr"})
                self._dim3(child, self.constants, ("global",), None)
            elif kind == "type_definition":
                self._typedef(child)
                inner = child.child_by_field_name("type")
                names = [self.text(d) for d in child.children_by_field_name("declarator")]
                if inner is not None and inner.type == "struct_specifier":
                    for name in names:
                        self._struct(inner, name)
            elif kind == "struct_specifier":
                self._struct(child, self.text(child.child_by_field_name("name")))
            elif kind == "alias_declaration":
                name, alias = child.child_by_field_name("name"), child.child_by_field_name("type")
                if name is not None and alias is not None:
                    self.typedefs[self.text(name)] = _base_type(self.text(alias))
            elif kind == "function_definition":
                declarator = child.child_by_field_name("declarator")
                name = _function_name(declarator, self)
                if name:
                    self.functions.setdefault(name, child)
            elif kind in ("namespace_definition", "linkage_specification", "declaration_list",
                          "preproc_if", "preproc_ifdef", "preproc_else", "template_declaration"):  # fmt: skip
                body = child.child_by_field_name("body")
                pending.append(iter((body if body is not None else child).named_children))

    def _forget_set_at_run_time(self, root: Node) -> None:
        """A global that is not const and that a function assigns (`cuda_num_SMs = props.multiProcessorCount;`
        in a setup function, `cudaGetDeviceCount(&devices)`) has no value the program states: its
        initialiser is a placeholder. The assigning statements join `relevant`: the answer depends on them."""
        variables = {
            name
            for name, definition in self.constants.items()
            if definition.key == ("global", name) and not self._constant_global.get(name, False)
        }
        if not variables:
            return
        for node in walk(root):
            target = None
            if node.type == "assignment_expression" or node.type == "update_expression":
                target = node.child_by_field_name(
                    "left" if node.type == "assignment_expression" else "argument"
                )
            elif node.type == "pointer_expression" and self.text(node).startswith("&"):
                target = node.child_by_field_name("argument")
            if target is None or target.type != "identifier" or self.text(target) not in variables:
                continue
            if _enclosing_function(node, root) is None:
                continue
            name = self.text(target)
            line = node.start_point[0] + 1
            why = f"{name} is a global the program sets at run time (line {line})"
            self.constants[name] = _Definition(("global", name), None, None, line, why=why)
            self.relevant.append((node.start_byte, node.end_byte))

    def _struct(self, node: Node, name: str) -> None:
        """A struct's field names in declaration order (`MlpConfig cfg{4096, 11008}` sets them in order)."""
        body = node.child_by_field_name("body")
        if not name or body is None:
            return
        fields = [
            self.text(declarator)
            for declaration in body.named_children
            if declaration.type == "field_declaration"
            for declarator in declaration.children_by_field_name("declarator")
            if declarator.type == "field_identifier"
        ]
        self.structs[name] = fields
        self.relevant.append((node.start_byte, node.end_byte))
        self._globals.append(self.data[node.start_byte : node.end_byte])

    def _define(self, node: Node) -> None:
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is not None and value is not None:
            self._define_texts[self.text(name)] = (self.text(value).strip(), node.start_point[0] + 1)
            if dtype_of_c_type(self.text(value).strip()) is not None:
                # `#define DATA_TYPE float`: a type's name, as a typedef gives one (PolyBench's way)
                self.typedefs.setdefault(self.text(name), self.text(value).strip())
            raw = self.data[value.start_byte : value.end_byte]
            start = value.start_byte + len(raw) - len(raw.lstrip())
            self._define_spans[self.text(name)] = (start, start + len(raw.strip()))

    def _function_macro(self, node: Node) -> None:
        name, listed = node.child_by_field_name("name"), node.child_by_field_name("parameters")
        value = node.child_by_field_name("value")
        if name is None or listed is None or value is None:
            return
        parameters = tuple(self.text(p) for p in listed.named_children if p.type == "identifier")
        self.function_macros[self.text(name)] = (parameters, self.text(value).strip())

    def expand(self, name: str, arguments: list[Node]) -> Node | None:
        """A function-like macro's call as the expression it stands for (each argument in parentheses)."""
        parameters, body = self.function_macros.get(name, ((), ""))
        if not body or len(parameters) != len(arguments):
            return None
        given = {p: f"({self.text(a)})" for p, a in zip(parameters, arguments, strict=True)}
        expanded = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: given.get(m.group(0), m.group(0)), body)
        return _parse_expression_text(expanded)

    def include(self, header: ProgramHost) -> None:
        """Take the #defines, constants and type aliases of a header this file includes (the kernel's own
        file, when the launches are here); this file's own win."""
        for name, value in header._define_texts.items():
            self._define_texts.setdefault(name, value)
        for name, definition in header.constants.items():
            self.constants.setdefault(name, definition)
        for name, alias in header.typedefs.items():
            self.typedefs.setdefault(name, alias)

    def define_value_span(self, name: str) -> tuple[int, int] | None:
        """The bytes of `#define NAME value`'s value in the file (to write a new value there)."""
        return self._define_spans.get(name)

    def define(self, name: str) -> _Definition | None:
        """A `#define NAME value` as a definition, its value parsed as an expression on first use."""
        if name not in self._defines and name in self._define_texts:
            text, line = self._define_texts[name]
            self._defines[name] = _Definition(("define", name), _parse_expression_text(text), None, line)
        return self._defines.get(name)

    def _typedef(self, node: Node) -> None:
        declarators = [c for c in node.children_by_field_name("declarator")]
        base = node.child_by_field_name("type")
        if base is None:
            return
        for declarator in declarators:
            if declarator.type == "type_identifier":
                self.typedefs[self.text(declarator)] = _base_type(self.text(base))

    def _dim3(
        self, declaration: Node, into: dict[str, _Definition], key: tuple[object, ...], scope: _Scope | None
    ) -> None:
        if self.text(declaration.child_by_field_name("type")).replace("const ", "").strip() != "dim3":
            return
        for child in declaration.named_children:
            name, components = _dim3_declarator(child, self)
            if name:
                into[name] = _Definition((*key, name, child.start_byte), None, scope,
                                         child.start_point[0] + 1, dims=components)  # fmt: skip

    def dtype_of(self, c_type: str) -> str | None:
        return dtype_through_aliases(c_type, self.typedefs)

    def element_bytes(self, c_type: str) -> int | None:
        """sizeof an element: a number's, or a vector type's (`float4`: 16)."""
        dtype = self.dtype_of(c_type)
        if dtype is not None:
            return DTYPE_BYTES[dtype]
        vector = vector_of_c_type(through_aliases(c_type, self.typedefs))
        return DTYPE_BYTES[vector[0]] * vector[1] if vector is not None else None


def _runs_once(loop: Node, name: str, file: ProgramHost) -> bool:
    """Whether the counted loop's test fails on its second iteration, as far as numbers say: `j < 1`."""
    condition = loop.child_by_field_name("condition")
    if condition is None or condition.type != "binary_expression":
        return False
    left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    operator = condition.child_by_field_name("operator")
    if left is None or right is None or operator is None or file.text(left) != name:
        return False
    try:
        bound = int(file.text(right).rstrip("uUlL"), 0)
    except ValueError:
        return False
    return (operator.type == "<" and bound <= 1) or (operator.type == "<=" and bound <= 0)


def _min_or_max(node: Node, file: ProgramHost) -> tuple[str, Node, Node] | None:
    """`a < b ? a : b` (min), `a > b ? a : b` (max), either way round: (min/max, a, b)."""
    condition = unwrapped(node.child_by_field_name("condition"))  # type: ignore[arg-type]
    chosen = [node.child_by_field_name(f) for f in ("consequence", "alternative")]
    if condition.type != "binary_expression" or None in chosen:
        return None
    left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    operator = _text_of(condition, "operator", file)
    if left is None or right is None or operator not in ("<", "<=", ">", ">="):
        return None

    def same(a: Node, b: Node) -> bool:
        return "".join(file.text(unwrapped(a)).split()) == "".join(file.text(unwrapped(b)).split())

    first, second = chosen  # type: ignore[misc]
    if same(first, left) and same(second, right):  # the left one when it is the smaller
        return ("min" if operator in ("<", "<=") else "max"), left, right
    if same(first, right) and same(second, left):
        return ("max" if operator in ("<", "<=") else "min"), left, right
    return None


def _parse_expression_text(text: str) -> Node | None:
    """A #define's text as an expression node (its own small parse)."""
    if not text:
        return None
    tree = parse_cuda(f"auto __cuda_agent_value = {text};")
    declarator = next((n for n in walk(tree.root_node) if n.type == "init_declarator"), None)
    value = declarator.child_by_field_name("value") if declarator is not None else None
    if value is None or value.has_error:
        return None
    return value


def _base_type(text: str) -> str:
    words = [
        w for w in text.replace("*", " ").split() if w not in ("const", "volatile", "struct", "typename")
    ]
    return " ".join(words)


def _function_name(declarator: Node | None, file: ProgramHost) -> str:
    while declarator is not None and declarator.type not in ("function_declarator",):
        declarator = declarator.child_by_field_name("declarator")
    if declarator is None:
        return ""
    name = declarator.child_by_field_name("declarator")
    return file.text(name).split("::")[-1] if name is not None else ""


def _declared(declaration: Node, file: ProgramHost) -> Iterator[tuple[str, Node | None, int, str]]:
    """(name, initial value, line, type) of each plain variable or array a declaration introduces; an
    array's value is its `{...}` list."""
    c_type = _base_type(file.text(declaration.child_by_field_name("type")))
    for child in declaration.children_by_field_name("declarator"):
        if child.type == "init_declarator":
            name = child.child_by_field_name("declarator")
            value = child.child_by_field_name("value")
            if name is not None and name.type == "array_declarator" and value is not None:
                inner = name.child_by_field_name("declarator")
                if inner is not None and inner.type == "identifier" and value.type == "initializer_list":
                    yield file.text(inner), value, child.start_point[0] + 1, c_type
            elif name is not None and name.type == "identifier" and value is not None:
                if value.type == "argument_list":  # `int n(1024);`
                    container = c_type.split("<")[0].split("::")[-1] in _VECTORS
                    # `std::vector<float> h(n, 0.f)`, `thrust::device_vector<int> d(n, 1)`: its count
                    one = value.named_child_count == 1 or (container and value.named_child_count > 1)
                    value = value.named_children[0] if one else None
                elif value.type == "initializer_list" and value.named_child_count == 1:  # `int n{1024};`
                    value = value.named_children[0]
                yield file.text(name), value, child.start_point[0] + 1, c_type
        elif child.type == "identifier":
            yield file.text(child), None, child.start_point[0] + 1, c_type
        elif child.type == "pointer_declarator":  # `float *d_a;`: known by its element type (sizeof(*d_a))
            inner = child.child_by_field_name("declarator")
            if inner is not None and inner.type == "identifier":
                yield file.text(inner), None, child.start_point[0] + 1, c_type
        elif child.type == "function_declarator" and c_type.split("<")[0].split("::")[-1] in _VECTORS:
            # `std::vector<double> y(rows);` parses as a function taking a `rows`: the count it is made with
            name = child.child_by_field_name("declarator")
            parameters = child.child_by_field_name("parameters")
            listed = [n for n in parameters.named_children if n.type != "comment"] if parameters else []
            typed = listed[0].child_by_field_name("type") if len(listed) == 1 else None
            unnamed = bool(listed) and listed[0].child_by_field_name("declarator") is None
            if name is not None and name.type == "identifier" and typed is not None and unnamed:
                yield file.text(name), typed, child.start_point[0] + 1, c_type


def _dim3_declarator(child: Node, file: ProgramHost) -> tuple[str, tuple[Node, ...] | None]:
    """`grid(a, b)`, `grid{a, b}`, `grid = dim3(a, b)`, `block(BLOCK)` (which parses as a function
    declaration): the name and the component expressions."""
    if child.type == "init_declarator":
        name = child.child_by_field_name("declarator")
        value = child.child_by_field_name("value")
        if value is not None and value.type == "call_expression":
            value = value.child_by_field_name("arguments")
        if name is None or value is None or value.type not in ("argument_list", "initializer_list"):
            return "", None
        return file.text(name), tuple(c for c in value.named_children if c.type != "comment")
    if child.type == "function_declarator":  # `dim3 block(BLOCK);`
        name, parameters = child.child_by_field_name("declarator"), child.child_by_field_name("parameters")
        if name is None or parameters is None:
            return "", None
        components = []
        for parameter in parameters.named_children:
            typed = parameter.child_by_field_name("type")
            if typed is None or parameter.child_by_field_name("declarator") is not None:
                return "", None
            components.append(typed)
        return file.text(name), tuple(components)
    return "", None


# -- scopes: what a name means at one point of a function --------------------------------------------------


class _Scope:
    """The names visible at one point of a host function: its declarations before that point (the last
    assignment wins, except one under `if (argc ...)`), its parameters bound to one caller's arguments, then
    the file's constants and #defines."""

    def __init__(
        self,
        file: ProgramHost,
        function: Node,
        before: int,
        caller: tuple[Node, _Scope] | None,
        choices: Mapping[str, int] | None = None,
    ) -> None:
        self.file, self.function, self.before = file, function, before
        self.caller = caller
        self.names: dict[str, _Definition] = {}
        # `for (int n : sizes)` around the point: each loop variable's element count, and the one taken.
        self.loops: dict[str, int] = {}
        self.choices = dict(choices or {})
        self.description = (
            f"{_function_name(function.child_by_field_name('declarator'), file) or 'a function'}()"
        )
        self._parameters(caller)
        body = function.child_by_field_name("body")
        if body is not None:
            self._body(body)

    def _parameters(self, caller: tuple[Node, _Scope] | None) -> None:
        declarator = self.function.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        parameters = declarator.child_by_field_name("parameters") if declarator is not None else None
        arguments: list[Node] = []
        if caller is not None:
            listed = caller[0].child_by_field_name("arguments")
            arguments = (
                [a for a in listed.named_children if a.type != "comment"] if listed is not None else []
            )
        for index, parameter in enumerate(parameters.named_children if parameters is not None else ()):
            self._bind(parameter, arguments[index] if index < len(arguments) else None, caller)
        # `template <int TILE> void run_sgemm(...)` called as `run_sgemm<32>(...)`: TILE is 32 there.
        template = self.function.parent
        if template is not None and template.type == "template_declaration":
            listed = template.child_by_field_name("parameters")
            given = _template_arguments(caller[0].child_by_field_name("function")) if caller else []
            for index, parameter in enumerate(listed.named_children if listed is not None else ()):
                if parameter.type in ("parameter_declaration", "optional_parameter_declaration"):
                    self._bind(parameter, given[index] if index < len(given) else None, caller)

    def _bind(self, parameter: Node, argument: Node | None, caller: tuple[Node, _Scope] | None) -> None:
        name_node = next((n for n in walk(parameter) if n.type == "identifier"), None)
        if name_node is None:
            return
        name = self.file.text(name_node)
        key = ("parameter", self.function.start_byte, name)
        c_type = _base_type(self.file.text(parameter.child_by_field_name("type")))
        if caller is not None and argument is not None:
            line = caller[0].start_point[0] + 1
            self.names[name] = _Definition(key, argument, caller[1], line, c_type=c_type)
        elif parameter.type == "optional_parameter_declaration" and parameter.child_by_field_name(
            "default_value"
        ):
            default = parameter.child_by_field_name("default_value")
            self.names[name] = _Definition(key, default, self, parameter.start_point[0] + 1, c_type=c_type)
        else:
            why = f"{name} is a parameter of {self.description}, which nothing in the file calls"
            self.names[name] = _Definition(
                key, None, None, parameter.start_point[0] + 1, why=why, c_type=c_type
            )

    def _body(self, body: Node) -> None:
        for node in walk(body):
            if node.start_byte >= self.before:
                break
            if node.type == "for_range_loop" and node.end_byte > self.before:
                self._range_loop(node)
                continue
            if node.type == "for_statement" and node.end_byte > self.before:
                self._counted_loop(node)
            if node.type == "declaration" and node.parent is not None and node.parent.type != "for_statement":
                for name, value, line, c_type in _declared(node, self.file):
                    why = "" if value is not None else f"{name} is declared without a value"
                    key = ("local", node.start_byte, name)
                    self.names[name] = _Definition(key, value, self, line, why=why, c_type=c_type)
                self.file._dim3(node, self.names, ("local", node.start_byte), self)
            elif node.type == "assignment_expression" and _text_of(node, "operator", self.file) == "=":
                left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
                if (
                    left is None
                    or right is None
                    or left.type != "identifier"
                    or _under_runtime_if(node, self.file)
                ):
                    continue
                name = self.file.text(left)
                previous = self.names.get(name)
                key = previous.key if previous else ("local", node.start_byte, name)
                self.names[name] = _Definition(key, right, self, node.start_point[0] + 1)

    def _counted_loop(self, loop: Node) -> None:
        """`for (int j = 0; j < count; j++)` around the point (a program trying each of its block sizes,
        `int block_size = block_sizes[j];`): j as on its first two iterations, one calling context each
        (as for a range loop): a launch whose block differs between them is the program's own choice,
        which a rewrite's launch leaves as written."""
        initializer = loop.child_by_field_name("initializer")
        if initializer is None or initializer.type != "declaration":
            return
        for name, value, line, c_type in _declared(initializer, self.file):
            if value is None:
                continue
            step = self.choices.get(name, 0)
            if step and _runs_once(loop, name, self.file):
                step = 0
            self.loops[name] = 1 if _runs_once(loop, name, self.file) else 2
            chosen = value if not step else _parse_expression_text(f"({self.file.text(value)}) + {step}")
            key = ("loop", loop.start_byte, name)
            self.names[name] = _Definition(key, chosen, self, line, c_type=c_type)

    def _range_loop(self, loop: Node) -> None:
        """`for (int n : sizes)` with `sizes = {1000003, 1 << 20}` (or the list written in place): n takes
        each element, one calling context each (the caller enumerates them through `choices`)."""
        declarator, listed = loop.child_by_field_name("declarator"), loop.child_by_field_name("right")
        if declarator is None or declarator.type != "identifier" or listed is None:
            return
        name = self.file.text(declarator)
        if listed.type == "identifier":
            definition = self.lookup(self.file.text(listed))
            listed = definition.value if definition is not None else None
        if listed is None or listed.type != "initializer_list":
            return
        elements = [e for e in listed.named_children if e.type != "comment"]
        if not elements:
            return
        self.loops[name] = len(elements)
        chosen = elements[min(self.choices.get(name, 0), len(elements) - 1)]
        key = ("loop", loop.start_byte, name)
        c_type = _base_type(self.file.text(loop.child_by_field_name("type")))
        self.names[name] = _Definition(key, chosen, self, loop.start_point[0] + 1, c_type=c_type)

    def lookup(self, name: str) -> _Definition | None:
        return self.names.get(name) or self.file.constants.get(name) or self.file.define(name)


def _template_arguments(function: Node | None) -> list[Node]:
    """The template arguments of a called `f<32, float>`, innermost name of a qualified one."""
    node = function
    while node is not None and node.type == "qualified_identifier":
        node = node.child_by_field_name("name")
    listed = (
        node.child_by_field_name("arguments")
        if node is not None and node.type == "template_function"
        else None
    )
    return [a for a in listed.named_children if a.type != "comment"] if listed is not None else []


def _text_of(node: Node, field_name: str, file: ProgramHost) -> str:
    return file.text(node.child_by_field_name(field_name))


def _under_runtime_if(node: Node, file: ProgramHost) -> bool:
    """`if (argc > 1) n = atoi(argv[1]);`: the program's default is the value before it."""
    parent = node.parent
    while parent is not None and parent.type != "function_definition":
        if parent.type == "if_statement":
            condition = parent.child_by_field_name("condition")
            if condition is not None and _mentions_runtime(condition, file):
                return True
        parent = parent.parent
    return False


def _runtime_default(conditional: Node, file: ProgramHost) -> Node | None:
    """The branch of `argc > 1 ? atoi(argv[1]) : D` that is the program's default (D), if it is one."""
    condition = conditional.child_by_field_name("condition")
    consequence = conditional.child_by_field_name("consequence")
    alternative = conditional.child_by_field_name("alternative")
    if (
        condition is None
        or consequence is None
        or alternative is None
        or not _mentions_runtime(condition, file)
    ):
        return None
    return alternative if _mentions_runtime(consequence, file) else consequence


def _mentions_runtime(node: Node, file: ProgramHost) -> bool:
    for child in walk(node):
        if child.type == "identifier" and file.text(child) in RUNTIME_NAMES:
            return True
        if (
            child.type == "call_expression"
            and file.text(child.child_by_field_name("function")) in RUNTIME_CALLS
        ):
            return True
    return False


# -- host expressions as spec expressions ------------------------------------------------------------------


@dataclass
class _Translation:
    """Host expressions -> spec expressions. `sizes`: definitions that are the spec's sizes; `block`:
    definitions that are the launch's block (a dim3 or a scalar), whose components become block.x/y/z."""

    file: ProgramHost
    sizes: dict[tuple[object, ...], str] = field(default_factory=dict)
    block: dict[tuple[object, ...], tuple[str, ...]] = field(default_factory=dict)
    origins: list[str] = field(default_factory=list)
    depth: int = 0

    def expression(self, node: Node, scope: _Scope | None) -> str:
        self.depth += 1
        try:
            if self.depth > 64:
                raise NotFollowed("the definitions nest too deep")
            return self._expression(node, scope)
        finally:
            self.depth -= 1

    def _expression(self, node: Node, scope: _Scope | None) -> str:
        kind, text = node.type, self.file.text(node)
        if kind == "number_literal":
            return str(_integer(text) if _INTEGER.match(text.replace("'", "")) else _whole(text))
        if kind in ("true", "false"):  # a bool argument: the flag's byte
            return "1" if kind == "true" else "0"
        if kind == "parenthesized_expression":
            return f"({self.expression(node.named_children[0], scope)})"
        if kind in ("cast_expression",):
            return self.expression(node.child_by_field_name("value"), scope)  # type: ignore[arg-type]
        if kind == "sizeof_expression":
            return str(self.sizeof(node, scope))
        if kind in ("identifier", "type_identifier"):  # `dim3 block(TILE, TILE);` reads as a declaration
            return self.name(text, scope)
        if kind == "field_expression":
            return self.field(node, scope)
        if kind == "binary_expression":
            operator = _text_of(node, "operator", self.file)
            spelled = _OPERATORS.get(operator)
            if spelled is None:
                raise NotFollowed(f"the operator {operator} in {text!r}")
            left = self.expression(node.child_by_field_name("left"), scope)  # type: ignore[arg-type]
            right = self.expression(node.child_by_field_name("right"), scope)  # type: ignore[arg-type]
            return f"{left} {spelled} {right}"
        if kind == "unary_expression" and _text_of(node, "operator", self.file) in ("-", "+", "~"):
            operand = self.expression(node.child_by_field_name("argument"), scope)  # type: ignore[arg-type]
            return f"{_text_of(node, 'operator', self.file)}{operand}"
        if kind == "conditional_expression":
            return self.conditional(node, scope)
        if kind == "call_expression":
            return self.call(node, scope)
        if kind == "subscript_expression":
            return self.subscript(node, scope)
        raise NotFollowed(f"{text!r} ({kind.replace('_', ' ')})")

    def name(self, name: str, scope: _Scope | None) -> str:
        definition = (
            scope.lookup(name)
            if scope is not None
            else self.file.constants.get(name) or self.file.define(name)
        )
        if definition is None:
            raise NotFollowed(f"{name} is not defined in the host code before the launch")
        if definition.key in self.sizes:
            return self.sizes[definition.key]
        if definition.key in self.block and len(self.block[definition.key]) == 1:
            return self.block[definition.key][0]
        if definition.value is None:
            raise NotFollowed(definition.why or f"{name} has no value the program states")
        inner = self.expression(definition.value, definition.scope)
        return inner if _atomic(inner) else f"({inner})"

    def field(self, node: Node, scope: _Scope | None) -> str:
        """`block.x` of a dim3 the program declared."""
        argument, name = (
            node.child_by_field_name("argument"),
            self.file.text(node.child_by_field_name("field")),
        )
        if argument is None or argument.type != "identifier":
            raise NotFollowed(f"{self.file.text(node)!r}")
        definition = scope.lookup(self.file.text(argument)) if scope is not None else None
        if definition is None:
            raise NotFollowed(f"{self.file.text(argument)} is not defined before the launch")
        if name not in ("x", "y", "z"):
            aggregate = _aggregate(definition)
            if aggregate is not None:
                return self.member(aggregate, name, node)
            raise NotFollowed(f"{self.file.text(node)!r}")
        axis = "xyz".index(name)
        if definition.key in self.block:
            dims = self.block[definition.key]
            return dims[axis] if axis < len(dims) else "1"
        if definition.dims is None and (aggregate := _aggregate(definition)) is not None:
            return self.member(aggregate, name, node)  # a struct's field named x, y or z
        if definition.dims is None:
            raise NotFollowed(f"{self.file.text(node)!r}: {self.file.text(argument)} is not a dim3")
        if axis >= len(definition.dims):
            return "1"
        inner = self.expression(definition.dims[axis], definition.scope)
        return inner if _atomic(inner) else f"({inner})"

    def member(self, definition: _Definition, name: str, node: Node) -> str:
        """`cfg.hidden_size` of `const MlpConfig cfg{4096, 11008};` (in field order, or designated)."""
        assert definition.value is not None
        elements = [e for e in definition.value.named_children if e.type != "comment"]
        for element in elements:  # `{.hidden_size = 4096, ...}`
            if element.type == "initializer_pair":
                designator = element.child_by_field_name("designator")
                if designator is not None and self.file.text(designator).lstrip(".") == name:
                    value = element.child_by_field_name("value")
                    if value is not None:
                        return self._atomic_expression(value, definition.scope)
        fields = self.file.structs.get(_base_type(definition.c_type), [])
        if name not in fields or fields.index(name) >= len(elements):
            raise NotFollowed(f"{self.file.text(node)!r}: the program does not say which value {name} has")
        return self._atomic_expression(elements[fields.index(name)], definition.scope)

    def _atomic_expression(self, node: Node, scope: _Scope | None) -> str:
        inner = self.expression(node, scope)
        return inner if _atomic(inner) else f"({inner})"

    def subscript(self, node: Node, scope: _Scope | None) -> str:
        """`block_sizes[0]` of a local `int block_sizes[] = {128, 256}`."""
        argument, indices = node.child_by_field_name("argument"), node.child_by_field_name("indices")
        definition = (
            scope.lookup(self.file.text(argument)) if scope is not None and argument is not None else None
        )
        if definition is None or definition.value is None or definition.value.type != "initializer_list":
            raise NotFollowed(f"{self.file.text(node)!r}")
        index_node = indices.named_children[0] if indices is not None and indices.named_children else None
        if index_node is None:
            raise NotFollowed(f"{self.file.text(node)!r}")
        # Its own translation (the index's names are not sizes), at this depth: `a[a[a[...]]]` is bounded.
        index = _value(_Translation(self.file, depth=self.depth).expression(index_node, scope))
        elements = [e for e in definition.value.named_children if e.type != "comment"]
        if not 0 <= index < len(elements):
            raise NotFollowed(f"{self.file.text(node)!r} is past the end of its list")
        inner = self.expression(elements[index], definition.scope)
        return inner if _atomic(inner) else f"({inner})"

    def conditional(self, node: Node, scope: _Scope | None) -> str:
        """`argc > 1 ? atoi(argv[1]) : 1 << 20`: the program's default; `a < b ? a : b`: min(a, b)."""
        picked = _min_or_max(node, self.file)
        if picked is not None:
            spelled, left, right = picked
            return f"{spelled}({self.expression(left, scope)}, {self.expression(right, scope)})"
        chosen = _runtime_default(node, self.file)
        if chosen is None:
            raise NotFollowed(f"a conditional value {self.file.text(node)!r}")
        self.origins.append(f"the default of {self.file.text(node)!r}")
        return self.expression(chosen, scope)

    def call(self, node: Node, scope: _Scope | None) -> str:
        callee = self.file.text(node.child_by_field_name("function"))
        listed = node.child_by_field_name("arguments")
        arguments = [a for a in listed.named_children if a.type != "comment"] if listed is not None else []
        if callee.split("::")[-1] in ("ceil", "ceilf") and len(arguments) == 1:
            quotient = unwrapped(arguments[0])
            if quotient.type == "binary_expression" and _text_of(quotient, "operator", self.file) == "/":
                # `ceil(n / 16.0)`, `(int)ceil((float)n / BLOCK)`: how people write a ceiling division.
                a = self.expression(quotient.child_by_field_name("left"), scope)  # type: ignore[arg-type]
                b = self.expression(quotient.child_by_field_name("right"), scope)  # type: ignore[arg-type]
                return f"ceil_div({a}, {b})"
        if callee.split("::")[-1] in CEIL_DIVS and len(arguments) == 2:
            a, b = (self.expression(x, scope) for x in arguments)
            return f"ceil_div({a}, {b})"
        spelled = MIN_MAX.get(callee)
        if spelled and len(arguments) >= 2:
            return f"{spelled}({', '.join(self.expression(x, scope) for x in arguments)})"
        if callee in ("int", "size_t", "unsigned", "static_cast<int>", "static_cast<size_t>") and arguments:
            return self.expression(arguments[0], scope)
        function = node.child_by_field_name("function")
        if function is not None and function.type == "field_expression" and not arguments:
            owner = function.child_by_field_name("argument")
            method = self.file.text(function.child_by_field_name("field"))
            definition = scope.lookup(self.file.text(owner)) if scope and owner else None
            if (
                method in ("size", "numel")
                and definition is not None
                and definition.value is not None
                and _base_type(definition.c_type).split("<")[0].split("::")[-1] in _VECTORS
            ):
                # `std::vector<float> h(n)` ... `h.size()`: the count it was constructed with.
                return self._atomic_expression(definition.value, definition.scope)
        if callee.split("::")[-1] in RUNTIME_CALLS:
            raise NotFollowed(f"{self.file.text(node)!r} is read at run time")
        expanded = self.file.expand(callee, arguments)
        if expanded is not None:
            return f"({self.expression(expanded, scope)})"
        raise NotFollowed(f"the call {self.file.text(node)!r}")

    def sizeof(self, node: Node, scope: _Scope | None = None) -> int:
        described = node.child_by_field_name("type") or node.child_by_field_name("value")
        # `sizeof(pixel_t)` with a typedef'd name parses as sizeof of a parenthesized identifier.
        text = _base_type(self.file.text(described).strip("() ")) if described is not None else ""
        pointee = _pointee(described, self.file) if described is not None and scope is not None else None
        if pointee is not None:  # `sizeof(*d_a)`, `sizeof(d_a[0])`: the element d_a is declared to point to
            definition = scope.lookup(pointee) if scope is not None else None
            text = _base_type(definition.c_type) if definition is not None and definition.c_type else text
        dtype = self.file.dtype_of(text)
        if dtype is None:
            vector = vector_of_c_type(text)
            if vector is not None:
                return DTYPE_BYTES[vector[0]] * vector[1]
            raise NotFollowed(f"sizeof({text or self.file.text(node)})")
        return DTYPE_BYTES[dtype]


# C's integer operators in the spec's spelling; the bitwise ones round sizes up (`(V + 63) & ~63`).
_OPERATORS = {"+": "+", "-": "-", "*": "*", "/": "//", "%": "%", "<<": "<<", ">>": ">>", "&": "&", "|": "|"}
_OPERATORS["^"] = "^"


def _integer(text: str) -> int:
    cleaned = text.replace("'", "")
    if not _INTEGER.match(cleaned):
        raise NotFollowed(f"{text} is not an integer")
    digits = cleaned.rstrip("uUlL")
    if digits.lower().startswith("0x"):
        return int(digits, 16)
    if digits.lower().startswith("0b"):
        return int(digits, 2)
    if len(digits) > 1 and digits.startswith("0"):
        return int(digits, 8)
    return int(digits)


def _whole(text: str) -> int:
    """`16.0` or `16.f` where a count is meant (`ceil(n / 16.0)`): the integer it is; else not followed."""
    try:
        value = _float(text)
    except ValueError:
        raise NotFollowed(f"{text} is not a number") from None
    if not value.is_integer():
        raise NotFollowed(f"{text} is not a whole number")
    return int(value)


def _float(text: str) -> float:
    return float(text.rstrip("fFlL").replace("'", ""))


def _atomic(text: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z_0-9.]*|\d+", text))


def _bare(text: str) -> str:
    """Without parentheses that enclose the whole expression: `(width * height)` -> `width * height`."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for index, character in enumerate(text):
            depth += {"(": 1, ")": -1}.get(character, 0)
            if depth == 0 and index < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def _value(expression: str, sizes: Mapping[str, int] | None = None) -> int:
    try:
        return parse_expression(expression, list(sizes or {}), allow_block=False).evaluate(sizes or {})
    except (ExpressionError, ArithmeticError) as exc:
        raise NotFollowed(f"{expression}: {exc}") from None


# -- one launch site, in one calling context ---------------------------------------------------------------


@dataclass(frozen=True)
class ProgramPoint:
    """What one launch of the kernel, reached through one chain of callers, says."""

    sizes: dict[str, int]
    shapes: dict[str, tuple[str, ...]]  # pointer parameter -> shape (spec expressions of the sizes)
    scalars: dict[str, float | int | str]  # scalar parameter -> value (a number, or a size name)
    block: tuple[int, ...]
    grid: tuple[str, ...]
    shared_bytes: str
    instantiate: str | None
    where: str  # "the launch in launch_rmsnorm() at line 20, called from main() at line 33"
    origins: tuple[str, ...]
    unknown: tuple[str, ...] = ()  # sizes the program does not state (a partial reading), with why


def _enclosing_function(node: Node, root: Node) -> Node | None:
    """The function definition around `node` (or `node` itself), by one descent from the tree's `root`:
    climbing parent by parent costs the depth squared (tree-sitter finds each parent from the root),
    seconds for a launch nested in 10,000 blocks."""
    lineage = [*ancestors(root, node), node]
    return next((n for n in reversed(lineage) if n.type == "function_definition"), None)


def _contexts(call: Node, file: ProgramHost, depth: int = 0) -> Iterator[_Scope]:
    """The scopes a launch inside `function` is seen in: one per chain of callers that reaches it (the
    launcher's own scope, unbound, where no one calls it) and per element of a range loop around it."""
    function = file.function_around(call)
    if function is None:
        return
    name = _function_name(function.child_by_field_name("declarator"), file)
    # A call outside any function (host code broken mid-edit) is no calling context.
    callers = (
        [c for c in file.callers(name) if not _inside(c, function) and file.function_around(c) is not None]
        if name
        else []
    )
    if not callers or depth >= MAX_CALLER_DEPTH:
        yield from _each_choice(lambda choices: _Scope(file, function, call.start_byte, None, choices))
        return
    for caller in callers:
        for outer in _contexts(caller, file, depth + 1):
            yield from _each_choice(
                lambda choices, outer=outer, caller=caller: _Scope(
                    file, function, call.start_byte, (caller, outer), choices
                )
            )


MAX_LOOP_CHOICES = 16


def _each_choice(make: Callable[[Mapping[str, int]], _Scope]) -> Iterator[_Scope]:
    """The scope for every combination of its range loops' elements (a few at most)."""
    first = make({})
    yield first
    combinations = [{}]
    for name, count in first.loops.items():
        combinations = [{**c, name: i} for c in combinations for i in range(count)][:MAX_LOOP_CHOICES]
    for choices in combinations[1:]:
        yield make(choices)


def _inside(node: Node, container: Node) -> bool:
    return container.start_byte <= node.start_byte and node.end_byte <= container.end_byte


def _chain(scope: _Scope) -> str:
    """`launch_rmsnorm() (called from main() at line 32)`."""
    text, current = scope.description, scope
    seen = {id(scope)}
    while True:
        binding = next((d for d in current.names.values() if d.key[0] == "parameter" and d.scope), None)
        # a scope met again (a header's kernel launched by a function its own file's code calls back)
        # ends the chain: following it grew the text without end
        if binding is None or binding.scope is None or id(binding.scope) in seen:
            return text
        text += f" (called from {binding.scope.description} at line {binding.line})"
        current = binding.scope
        seen.add(id(current))


def read_launch(
    kernel: Kernel,
    call: Node,
    scope: _Scope,
    file: ProgramHost,
    template_types: Mapping[str, str],
    partial: bool = False,
) -> ProgramPoint:
    """The spec facts of one launch in one context; NotFollowed with the reason where they stop.
    `partial`: a size the program does not state (`x.size(0)`, argv with no default) is left out of
    `sizes` with the reason in `unknown`, instead of stopping; what depends on it still names it."""
    translation = _Translation(file)
    listed = call.child_by_field_name("arguments")
    arguments = [a for a in listed.named_children if a.type != "comment"] if listed is not None else []
    if len(arguments) != len(kernel.parameters):
        raise NotFollowed(
            f"the launch passes {len(arguments)} arguments for {len(kernel.parameters)} parameters"
        )
    config_node = next(c for c in call.children if c.type == "kernel_call_syntax")
    config = [c for c in config_node.named_children if c.type != "comment"]
    if len(config) < 2:
        raise NotFollowed("the launch has no block")
    taken = {p.name for p in kernel.parameters}
    unknown: list[str] = []
    sizes: dict[str, int] = {}
    scalars: dict[str, float | int | str] = {}
    for parameter, argument in zip(kernel.parameters, arguments, strict=True):
        if parameter.accessor is not None:  # its sizes are a tensor's, which the host code does not size
            raise NotFollowed(
                f"{parameter.name} is a PyTorch accessor: its sizes come from the caller's tensor"
            )
        if parameter.is_pointer:
            continue
        dtype = file.dtype_of(template_types.get(parameter.type, parameter.type))
        if dtype is None:
            raise NotFollowed(f"scalar parameter {parameter.text!r} is not a number")
        if is_float(dtype):
            scalars[parameter.name] = _float_value(argument, scope, file)
            continue
        size = size_name_for(parameter.name, taken)
        try:
            value = _value(translation.expression(argument, scope), sizes)  # `d = C / NH`: NH a size already
        except NotFollowed as exc:
            if not partial:
                raise
            unknown.append(f"{parameter.name}: {exc}")
            value = None
        for key in _definition_chain(argument, scope):
            translation.sizes.setdefault(key, size)
        if value is not None:
            sizes[size] = value
        scalars[parameter.name] = size
    block_dims = _dims_of(config[1], scope, file, translation)
    block = tuple(_value(d, sizes) for d in block_dims)  # `dim3 block(std::min(d, 1024))`
    for key in _definition_chain(config[1], scope):
        translation.block[key] = tuple(f"block.{axis}" for axis in "xyz"[: len(block)])
    # `dim3 block(threads)`: threads is block.x wherever the grid or shared memory use it (a name giving
    # two axes, `dim3 block(TILE, TILE)`, stays a number: tuning one axis must not move the other).
    axes: dict[tuple[object, ...], set[int]] = {}
    for axis, component in enumerate(_block_components(config[1], scope, file)):
        for key in _definition_chain(component[0], component[1]):
            axes.setdefault(key, set()).add(axis)
    for key, used in axes.items():
        if len(used) == 1:
            translation.block.setdefault(key, (f"block.{'xyz'[used.pop()]}",))
    grid = tuple(_dims_of(config[0], scope, file, translation))
    shared = translation.expression(config[2], scope) if len(config) > 2 else "0"
    rank = max(len(block), len(grid))
    block = block + (1,) * (rank - len(block))
    grid = grid + ("1",) * (rank - len(grid))
    # A buffer's extent is a number of the sizes, never of the block (`(N / TILE)` partial sums, with TILE
    # also the block, are N / 128 elements whatever block a candidate is tried with).
    extents = _Translation(file, sizes=translation.sizes, origins=translation.origins)
    shapes = {} if unknown else {
        p.name: _shape(argument, scope, file, extents, file.element_bytes(template_types.get(p.type, p.type)))
        for p, argument in zip(kernel.parameters, arguments, strict=True)
        if p.is_pointer
    }  # fmt: skip
    return ProgramPoint(
        sizes=sizes,
        shapes={k: v for k, v in shapes.items() if v is not None},
        scalars=scalars,
        block=block,
        grid=grid,
        shared_bytes=shared,
        instantiate=_launch_instantiation(kernel, call, scope, file, translation.block, template_types),
        where=f"the launch in {_chain(scope)} at line {call.start_point[0] + 1}{file.place}",
        origins=tuple(translation.origins),
        unknown=tuple(unknown),
    )


def _aggregate(definition: _Definition) -> _Definition | None:
    """The `{4096, 11008}` a struct variable was initialised with, through the names it was passed as
    (`run(p)` binds a launcher's `const Problem& p` to the caller's `p`)."""
    for _ in range(MAX_CALLER_DEPTH + 2):
        value = definition.value
        if value is None:
            return None
        if value.type == "initializer_list":
            return definition
        if value.type != "identifier" or definition.scope is None:
            return None
        found = definition.scope.lookup(definition.scope.file.text(value))
        if found is None:
            return None
        definition = found
    return None


def _block_components(node: Node, scope: _Scope, file: ProgramHost) -> list[tuple[Node, _Scope]]:
    """The component expressions of a dim3 block (a variable's, or `dim3(a, b)` at the launch)."""
    if node.type == "identifier":
        definition = scope.lookup(file.text(node))
        if definition is not None and definition.dims is not None and definition.scope is not None:
            return [(d, definition.scope) for d in definition.dims]
    if node.type == "call_expression" and file.text(node.child_by_field_name("function")) == "dim3":
        listed = node.child_by_field_name("arguments")
        return [(d, scope) for d in listed.named_children] if listed is not None else []
    return []


def _definition_chain(node: Node, scope: _Scope) -> list[tuple[object, ...]]:
    """The definitions a plain name passes through (a launcher's parameter, then its caller's variable)."""
    keys: list[tuple[object, ...]] = []
    current: Node | None = node
    current_scope: _Scope | None = scope
    while current is not None and current.type in ("identifier", "type_identifier") and current_scope:
        definition = current_scope.lookup(current_scope.file.text(current))
        if definition is None:
            break
        keys.append(definition.key)
        current, current_scope = definition.value, definition.scope
    return keys


def _dims_of(node: Node, scope: _Scope, file: ProgramHost, translation: _Translation) -> list[str]:
    """A launch dimension as spec expressions: a dim3 variable's components, `dim3(a, b)`, or a scalar."""
    if node.type == "identifier":
        definition = scope.lookup(file.text(node))
        if definition is not None and definition.dims is not None:
            return [translation.expression(d, definition.scope) for d in definition.dims]
    if node.type == "call_expression" and file.text(node.child_by_field_name("function")) == "dim3":
        listed = node.child_by_field_name("arguments")
        return [translation.expression(d, scope) for d in listed.named_children] if listed is not None else []
    return [translation.expression(node, scope)]


def _float_value(argument: Node, scope: _Scope, file: ProgramHost) -> float | int | str:
    """A float scalar's value as the host computes it (`1.0f / sqrtf((float)hs)`, `2.0f`, a name bound to
    one); "" where the program does not state it (then it is drawn)."""
    try:
        value, _ = _Arithmetic(file).value(argument, scope)
    except (NotFollowed, ArithmeticError, ValueError):
        return ""
    return float(value) if math.isfinite(value) else ""


_FLOAT_TYPES = frozenset({"float", "double", "half", "__half", "__nv_bfloat16", "long double"})
_MATH: dict[str, Callable[..., float]] = {
    "sqrtf": math.sqrt, "sqrt": math.sqrt, "rsqrtf": lambda v: 1.0 / math.sqrt(v), "expf": math.exp,
    "exp": math.exp, "logf": math.log, "log": math.log, "powf": math.pow, "pow": math.pow,
    "fabsf": abs, "fabs": abs, "abs": abs, "fminf": min, "fmaxf": max, "fmin": min, "fmax": max,
    "std::sqrt": math.sqrt, "std::exp": math.exp, "std::log": math.log, "std::pow": math.pow,
}  # fmt: skip


@dataclass
class _Arithmetic:
    """Host arithmetic evaluated as C does it: integer division between integers, float otherwise."""

    file: ProgramHost
    depth: int = 0

    def value(self, node: Node, scope: _Scope | None) -> tuple[float, bool]:
        """(the value, whether it is a float)."""
        self.depth += 1
        try:
            if self.depth > 64:
                raise NotFollowed("the definitions nest too deep")
            return self._value(node, scope)
        finally:
            self.depth -= 1

    def _value(self, node: Node, scope: _Scope | None) -> tuple[float, bool]:
        kind, text = node.type, self.file.text(node)
        if kind == "number_literal":
            if _INTEGER.match(text.replace("'", "")):
                return float(_integer(text)), False
            return _float(text), True
        if kind in ("true", "false"):
            return (1.0 if kind == "true" else 0.0), False
        if kind == "parenthesized_expression":
            return self.value(node.named_children[0], scope)
        if kind == "cast_expression":
            value, _ = self.value(node.child_by_field_name("value"), scope)  # type: ignore[arg-type]
            cast = _base_type(self.file.text(node.child_by_field_name("type")))
            return (value, True) if cast in _FLOAT_TYPES else (float(math.trunc(value)), False)
        if kind in ("identifier", "type_identifier"):
            definition = scope.lookup(text) if scope is not None else self.file.constants.get(text)
            if definition is None or definition.value is None:
                raise NotFollowed(f"{text} has no value the program states")
            value, is_float = self.value(definition.value, definition.scope)
            return value, is_float or definition.c_type in _FLOAT_TYPES
        if kind == "unary_expression" and _text_of(node, "operator", self.file) in ("-", "+", "~"):
            value, is_float = self.value(node.child_by_field_name("argument"), scope)  # type: ignore[arg-type]
            return (-value if _text_of(node, "operator", self.file) == "-" else value), is_float
        if kind == "binary_expression":
            operator = _text_of(node, "operator", self.file)
            left, left_float = self.value(node.child_by_field_name("left"), scope)  # type: ignore[arg-type]
            right, right_float = self.value(node.child_by_field_name("right"), scope)  # type: ignore[arg-type]
            is_float = left_float or right_float
            if operator == "/" and not is_float:
                return float(math.trunc(left / right)), False
            combine = {"+": lambda: left + right, "-": lambda: left - right, "*": lambda: left * right,
                       "/": lambda: left / right}.get(operator)  # fmt: skip
            if combine is None:
                raise NotFollowed(f"the operator {operator} in {text!r}")
            return combine(), is_float
        if kind == "call_expression":
            callee = self.file.text(node.child_by_field_name("function"))
            listed = node.child_by_field_name("arguments")
            arguments = (
                [a for a in listed.named_children if a.type != "comment"] if listed is not None else []
            )
            if callee in _MATH and arguments:
                return float(_MATH[callee](*(self.value(a, scope)[0] for a in arguments))), True
        if kind == "conditional_expression" and (chosen := _runtime_default(node, self.file)) is not None:
            return self.value(chosen, scope)
        raise NotFollowed(f"{text!r}")


def _shape(
    argument: Node, scope: _Scope, file: ProgramHost, translation: _Translation, element_bytes: int | None
) -> tuple[str, ...] | None:
    """A pointer argument's extent from its allocation (`cudaMalloc(&d_x, rows * cols * sizeof(float))`),
    in elements, as a 1-D shape over the sizes; None where the program does not show it."""
    if element_bytes is None:
        return None
    held = _container_count(argument, scope, file)
    if held is not None:
        try:
            return (_bare(translation.expression(held[0], held[1])),)
        except NotFollowed:
            return None
    target, target_scope = _pointer_root(argument, scope, file)
    if target is None or target_scope is None:
        return None
    body = target_scope.function.child_by_field_name("body")
    for node in walk(body) if body is not None else ():
        if node.type != "call_expression" or node.start_byte >= target_scope.before:
            continue
        if file.text(node.child_by_field_name("function")).split("::")[-1] not in _ALLOCATORS:
            continue
        listed = node.child_by_field_name("arguments")
        pieces = [a for a in listed.named_children if a.type != "comment"] if listed is not None else []
        if len(pieces) < 2 or _allocated_name(pieces[0], file) != target:
            continue
        try:
            return (_bare(_element_count(pieces[1], target_scope, translation, element_bytes)),)
        except NotFollowed:
            return None
    return None


def _pointee(node: Node, file: ProgramHost) -> str | None:
    """`*p` or `p[0]` (in parentheses or not): p."""
    node = unwrapped(node)
    dereferenced = node.type == "pointer_expression" and file.text(node).startswith("*")
    element = dereferenced or node.type == "subscript_expression"
    inner = node.child_by_field_name("argument") if element else None
    inner = unwrapped(inner) if inner is not None else None
    return file.text(inner) if inner is not None and inner.type == "identifier" else None


def _container_count(argument: Node, scope: _Scope, file: ProgramHost) -> tuple[Node, _Scope | None] | None:
    """The element count a container was made with, where the argument is its data:
    `thrust::raw_pointer_cast(d.data())`, `raw_pointer_cast(&d[0])`, `d.data().get()`, `v.data()`."""
    node = unwrapped(argument)
    while True:
        if node.type == "call_expression":
            function = node.child_by_field_name("function")
            listed = node.child_by_field_name("arguments")
            arguments = [a for a in listed.named_children if a.type != "comment"] if listed else []
            if function is None:
                return None
            if file.text(function).split("::")[-1] == "raw_pointer_cast" and len(arguments) == 1:
                node = unwrapped(arguments[0])
                continue
            if function.type == "field_expression" and not arguments:
                method = file.text(function.child_by_field_name("field"))
                owner = function.child_by_field_name("argument")
                if method in ("data", "get") and owner is not None:
                    node = unwrapped(owner)
                    continue
            return None
        if node.type == "pointer_expression" and file.text(node).startswith("&"):
            element = node.child_by_field_name("argument")
            indices = element.child_by_field_name("indices") if element is not None else None
            if element is None or element.type != "subscript_expression" or indices is None:
                return None
            if file.text(indices).strip("[] ") != "0":
                return None
            node = unwrapped(element.child_by_field_name("argument"))  # type: ignore[arg-type]
            continue
        break
    if node.type != "identifier":
        return None
    definition = scope.lookup(file.text(node))
    if (
        definition is None
        or definition.value is None
        or _base_type(definition.c_type).split("<")[0].split("::")[-1] not in _VECTORS
    ):
        return None
    return definition.value, definition.scope


def _pointer_root(argument: Node, scope: _Scope, file: ProgramHost) -> tuple[str | None, _Scope | None]:
    """The variable a pointer argument is, through launcher parameters to the caller's variable."""
    node: Node | None = argument
    current: _Scope | None = scope
    while node is not None and current is not None:
        while node.type in ("cast_expression", "parenthesized_expression"):
            inner = (
                node.child_by_field_name("value")
                if node.type == "cast_expression"
                else node.named_children[0]
            )
            node = inner
        if node.type != "identifier":
            return None, None
        name = file.text(node)
        definition = current.lookup(name)
        if definition is None or definition.key[0] != "parameter" or definition.value is None:
            return name, current
        node, current = definition.value, definition.scope
    return None, None


def _allocated_name(first: Node, file: ProgramHost) -> str | None:
    """`&d_x`, `(void**)&d_x`, `reinterpret_cast<void**>(&d_x)` -> d_x."""
    for node in walk(first):
        if node.type == "pointer_expression" and file.text(node).startswith("&"):
            operand = node.child_by_field_name("argument")
            return file.text(operand) if operand is not None and operand.type == "identifier" else None
    return None


def _element_count(size: Node, scope: _Scope, translation: _Translation, element_bytes: int) -> str:
    """Bytes as elements: the product with its sizeof factor taken out, else divided by the element size."""
    node = size
    current = scope
    for _ in range(8):  # follow `bytes` to its definition
        while node.type == "parenthesized_expression":
            node = node.named_children[0]
        if node.type != "identifier":
            break
        definition = current.lookup(translation.file.text(node))
        if definition is None or definition.value is None or definition.key in translation.sizes:
            break
        node, current = definition.value, definition.scope  # type: ignore[assignment]
    factors = _factors(node)
    sizeof = next((f for f in factors if f.type == "sizeof_expression"), None)
    if sizeof is not None and translation.sizeof(sizeof, current) == element_bytes:
        # each factor whole: `(2 * C + 1) * sizeof(float)` is not `2 * C + 1` elements
        rest = [translation._atomic_expression(f, current) for f in factors if f is not sizeof]
        return " * ".join(rest) if rest else "1"
    total = translation.expression(node, current)
    return total if element_bytes == 1 else f"({total}) // {element_bytes}"


def _factors(node: Node) -> list[Node]:
    """The operands of a product, left to right, through parentheses and casts. A stack, not recursion:
    `n * 4 * 4 * ...` nests one level a factor."""
    factors, pending = [], [node]
    while pending:
        node = pending.pop()
        while node.type in ("parenthesized_expression",):
            node = node.named_children[0]
        if node.type == "cast_expression":
            pending.append(node.child_by_field_name("value"))  # type: ignore[arg-type]
        elif node.type == "binary_expression" and node.child_by_field_name("operator").type == "*":  # type: ignore[union-attr]
            pending += [node.child_by_field_name("right"), node.child_by_field_name("left")]  # type: ignore[list-item]
        else:
            factors.append(node)
    return factors


def _launch_instantiation(
    kernel: Kernel,
    call: Node,
    scope: _Scope,
    file: ProgramHost,
    block: Mapping[tuple[object, ...], tuple[str, ...]] | None = None,
    deduced: Mapping[str, str] | None = None,
) -> str | None:
    """`k<float, BLOCK><<<...>>>` with `#define BLOCK 256` -> "k<float, 256>"; a value argument that is
    the launch's block (`k<kBlock><<<rows, kBlock>>>`) is written block.x, so tuning the block tunes it.
    Type arguments the launch leaves out come from `deduced` (see `_deduced_types`) where all of them do."""
    if not kernel.template_parameters:
        return None
    given = _template_arguments(call.child_by_field_name("function"))
    trailing = kernel.template_parameters[len(given) :]
    found = [(deduced or {}).get(p.name, p.name) for p in trailing]
    if trailing and all(p.kind == "type" and t != p.name for p, t in zip(trailing, found, strict=True)):
        explicit = _launch_instantiation(kernel, call, scope, file, block) if given else None
        inner = explicit[explicit.index("<") + 1 : -1] + ", " if explicit else ""
        return f"{kernel.qualified_name}<{inner}{', '.join(file.typedefs.get(t, t) for t in found)}>"
    if not given:
        return None
    values = []
    constants = _Translation(file)  # a template argument is a number, never the spec's size or block
    for parameter, argument in zip(kernel.template_parameters, given, strict=False):
        if parameter.kind == "type":  # `k<half_t>` with `using half_t = __half;`: the type it names
            named_type = file.typedefs.get(_base_type(file.text(argument)), file.text(argument))
            if not _declared_type(file, named_type):
                return None  # `k<scalar_t>` in an AT_DISPATCH lambda: a type a macro declares, not the file
            values.append(named_type)
            continue
        named = argument.named_children[0] if argument.type == "type_descriptor" else argument
        axes = [block[key] for key in _definition_chain(named, scope) if key in (block or {})]
        if axes and len(axes[0]) == 1:
            values.append(axes[0][0])
        elif argument.type == "type_descriptor":  # `k<TILE>`: a name the grammar cannot tell from a type
            values.append(str(_value(constants.name(file.text(argument).strip(), scope))))
        else:
            values.append(str(_value(constants.expression(argument, scope))))
    return f"{kernel.qualified_name}<{', '.join(values)}>"


def _declared_type(file: ProgramHost, name: str) -> bool:
    """A type the file's compile knows by that name: a C type, or one the file declares (a struct, a
    class, an alias, a typedef)."""
    base = _base_type(name)
    if dtype_of_c_type(base) is not None or name in file.typedefs.values() or base in file.typedefs:
        return True
    if not re.fullmatch(r"[A-Za-z_]\w*", base):
        return True  # a qualified or templated name (`std::complex<float>`, `ns::T`): not ours to judge
    declared = rf"\b(struct|class|union|enum)\s+{base}\b|\busing\s+{base}\s*=|\btypedef\b[^;]*\b{base}\s*;"
    return re.search(declared.encode(), file.data) is not None


# -- the spec ------------------------------------------------------------------------------------------------


def infer_from_program(
    kernel: Kernel, source: str, tree: Tree | None = None, host: ProgramHost | None = None
) -> tuple[KernelSpec | None, str]:
    """The spec the program's launches of `kernel` imply, or (None, why not). `host`: the file's host
    facts when the caller has them (read once, they serve every kernel)."""
    tree = tree or parse_cuda(source)
    host = host or ProgramHost(tree, source.encode("utf-8"))
    points, why = read_program_points(kernel, host)
    if not points:
        return None, why
    return spec_from_points(kernel, tree, points, host.typedefs)


def read_program_points(kernel: Kernel, host: ProgramHost) -> tuple[tuple[ProgramPoint, ...], str]:
    """What each launch of `kernel` says, in each chain of callers; or no points and why. Depends on the
    kernel's signature and the host code only (not its body), so a caller may keep it across body edits."""
    calls = host.launches(kernel.name)
    if not calls:
        return (), "nothing in the file launches it"
    points: list[ProgramPoint] = []
    reasons: list[str] = []
    for call in calls:
        template_types = _template_types(kernel, call, host)
        for scope in _contexts(call, host):
            try:
                points.append(read_launch(kernel, call, scope, host, template_types))
            except NotFollowed as exc:
                reasons.append(f"line {call.start_point[0] + 1}: {exc}")
    if not points:
        return (), "the launches do not say enough: " + "; ".join(dict.fromkeys(reasons))
    return tuple(points), ""


def _template_types(kernel: Kernel, call: Node, file: ProgramHost) -> dict[str, str]:
    """Template type parameters as the launch instantiates them (T -> float), plus the file's typedefs."""
    types = dict(file.typedefs)
    if kernel.template_parameters:
        given = _template_arguments(call.child_by_field_name("function"))
        for parameter, argument in zip(kernel.template_parameters, given, strict=False):
            if parameter.kind == "type":
                types[parameter.name] = _base_type(file.text(argument))
        left = {p.name for p in kernel.template_parameters[len(given) :] if p.kind == "type"}
        if left:
            types |= _deduced_types(kernel, call, file, left)
    return types


def _deduced_types(kernel: Kernel, call: Node, file: ProgramHost, left: set[str]) -> dict[str, str]:
    """Type parameters the launch leaves to deduction (`k<<<grid, block>>>(dinp, ...)` for `template
    <typename Tdinp> __global__ void k(Tdinp* dinp, ...)`): each from the declared type of a pointer
    argument passed for a `T*` parameter (`floatX* dinp` in the launcher: Tdinp is floatX). A parameter
    two arguments would deduce differently stays unknown."""
    function = _enclosing_function(call, file.tree.root_node)
    listed = call.child_by_field_name("arguments")
    if function is None or listed is None:
        return {}
    scope = _Scope(file, function, call.start_byte, None)
    arguments = [a for a in listed.named_children if a.type != "comment"]
    found: dict[str, set[str]] = {}
    for parameter, argument in zip(kernel.parameters, arguments, strict=False):
        if parameter.type not in left or not parameter.is_pointer or argument.type != "identifier":
            continue
        definition = scope.lookup(file.text(argument))
        if definition is not None and definition.c_type:
            found.setdefault(parameter.type, set()).add(definition.c_type)
    return {name: next(iter(kinds)) for name, kinds in found.items() if len(kinds) == 1}


def spec_from_points(
    kernel: Kernel, tree: Tree, points: Sequence[ProgramPoint], typedefs: Mapping[str, str]
) -> tuple[KernelSpec | None, str]:
    """The spec of the launches' points, with roles from the kernel's body (`tree` holds it)."""

    # The benchmark: the launch that moves the most (its buffers' elements, then its sizes); the other
    # launches with the same sizes and grid are verify sizes, at which the benchmark's shapes are evaluated.
    def weight(point: ProgramPoint) -> tuple[int, int]:
        total = 0
        for shape in point.shapes.values():
            with contextlib.suppress(ExpressionError, ArithmeticError):
                total += parse_expression(shape[0], point.sizes).evaluate(point.sizes)
        return total, math.prod(point.sizes.values())

    points = sorted(points, key=weight, reverse=True)
    benchmark = points[0]
    same = [p for p in points[1:] if p.grid == benchmark.grid and p.sizes.keys() == benchmark.sizes.keys()]
    verify = tuple(dict(p.sizes) for p in same if p.sizes != benchmark.sizes)
    template_types = {}
    if benchmark.instantiate is not None or not kernel.template_parameters:
        instantiate = benchmark.instantiate
    else:
        instantiate, template_types = instantiation(kernel)
        if instantiate is None:
            return None, "the launch does not name the template's arguments"
    types = {**typedefs, **template_types}
    if instantiate is not None and kernel.template_parameters:
        inner = instantiate[instantiate.index("<") + 1 : -1]
        values = split_template_arguments(inner)
        for parameter, value in zip(kernel.template_parameters, values, strict=False):
            if parameter.kind == "type":
                types[parameter.name] = value
    classified = classify_parameters(
        kernel.parameters, types, lambda c_type: dtype_through_aliases(c_type, typedefs)
    )
    if isinstance(classified, str):
        return None, classified
    pointers, int_scalars, float_scalars = classified
    dtypes = {p.name: dtype for p, dtype in pointers + int_scalars + float_scalars}
    body = kernel_body(kernel, tree)
    if body is None:
        return None, "the kernel has no body"
    analysis = BodyAnalysis(body, [p.name for p, _ in pointers])
    arguments = []
    for parameter in kernel.parameters:
        name, dtype = parameter.name, dtypes[parameter.name]
        if not parameter.is_pointer:
            value = benchmark.scalars.get(name, "")
            if value == "" and is_float(dtype):
                arguments.append(ArgumentSpec(name, "scalar", dtype, init=FLOAT_SCALAR_INIT))
            else:
                arguments.append(ArgumentSpec(name, "scalar", dtype, value=value))  # type: ignore[arg-type]
            continue
        shape = benchmark.shapes.get(name)
        if shape is None and parameter.type in {t.name for t in kernel.template_parameters}:
            why = f"{benchmark.where}: the launch does not say what {parameter.type} (the type of {name}) is"
            return None, why
        if shape is None:
            return (
                None,
                f"{benchmark.where}: the program does not show how big {name} is (no cudaMalloc of it)",
            )
        use = analysis.uses[name]
        vector = vector_of_c_type(through_aliases(types.get(parameter.type, parameter.type), typedefs))
        if vector is not None:  # counted in vectors: each is `lanes` components
            shape = (*shape, str(vector[1]))
        init = BOOL_INIT if is_bool_pointer(parameter) else InitSpec.default(dtype)
        arguments.append(ArgumentSpec(name, role_of(parameter, use), dtype, shape, init))  # type: ignore[arg-type]
    if not any(a.role in ("output", "inout") for a in arguments):
        return None, "no pointer is written by the body, so there is no output to check"
    shown = ", ".join(f"{name} = {value}" for name, value in benchmark.sizes.items())
    launch_text = f"block {' × '.join(map(str, benchmark.block))}"
    more = f"; {len(verify)} other launch(es) as verify sizes" if verify else ""
    origins = f" ({'; '.join(dict.fromkeys(benchmark.origins))})" if benchmark.origins else ""
    note = f"spec inferred from {benchmark.where}: {shown or 'no sizes'}, {launch_text}{more}{origins}"
    grid = tuple(_over_block(g, benchmark.block, axis) for axis, g in enumerate(benchmark.grid))
    spec = KernelSpec(
        kernel=kernel.name,
        arguments=tuple(arguments),
        launch=LaunchSpec(benchmark.block, grid, benchmark.shared_bytes),
        sizes=dict(benchmark.sizes),
        size_expressions={name: str(value) for name, value in benchmark.sizes.items()},
        instantiate=instantiate,
        verify_sizes=verify,
        inferred=True,
        inference_note=note,
    )
    try:
        resolve(spec)
    except SpecResolveError as exc:
        return None, f"{benchmark.where}: the spec it implies does not resolve: {exc.error.message}"
    return replace(spec), note


# -- what the program says when its sizes are only known at run time ----------------------------------------


def read_partial_point(kernel: Kernel, host: ProgramHost) -> ProgramPoint | None:
    """The first launch read with its run-time sizes left out (a PyTorch extension's `x.size(0)`, argv
    with no default): its launch, literal scalars and instantiation still hold."""
    for call in host.launches(kernel.name):
        types = _template_types(kernel, call, host)
        for scope in _contexts(call, host):
            with contextlib.suppress(NotFollowed):
                return read_launch(kernel, call, scope, host, types, partial=True)
    return None


def with_program_launch(spec: KernelSpec, point: ProgramPoint) -> KernelSpec:
    """A signature-inferred `spec` with what a partial reading of the program does state: the block, the
    grid and shared memory where they are written over sizes the spec has, float scalars the launch
    passes as numbers, the instantiation. Each part is kept only if the spec still resolves with it."""
    names = list(spec.sizes)

    def over_sizes(expression: str) -> bool:
        try:
            parse_expression(expression, names, allow_block=True)
        except ExpressionError:
            return False
        return True

    taken: list[str] = []
    updated = spec
    if all(over_sizes(g) for g in point.grid) and over_sizes(point.shared_bytes):
        launch = LaunchSpec(point.block, point.grid, point.shared_bytes)
        if _resolves(replace(updated, launch=launch)):
            updated = replace(updated, launch=launch)
            taken.append(f"block {' × '.join(map(str, point.block))}, grid and shared memory")
    arguments = []
    for argument in updated.arguments:
        value = point.scalars.get(argument.name)
        if argument.role == "scalar" and is_float(argument.dtype) and isinstance(value, (int, float)):
            arguments.append(replace(argument, value=value, init=None))
            taken.append(f"{argument.name} = {value}")
        else:
            arguments.append(argument)
    if _resolves(replace(updated, arguments=tuple(arguments))):
        updated = replace(updated, arguments=tuple(arguments))
    instantiated = replace(updated, instantiate=point.instantiate)
    if point.instantiate and point.instantiate != updated.instantiate and _resolves(instantiated):
        updated = instantiated
        taken.append(point.instantiate)
    if not taken:
        return spec
    missing = "; ".join(point.unknown)
    note = (
        f"{spec.inference_note}; from {point.where}: {', '.join(taken)} (its sizes are only known at run "
        f"time: {missing}, so the sizes are defaults: set them to the ones you run)"
    )
    return replace(updated, inference_note=note)


def _over_block(grid: str, block: tuple[int, ...], axis: int) -> str:
    """A grid axis written with the block's number (`ceil(n / 16.0)` beside `dim3 block(16, 16)`, or
    `(n + 255) / 256` beside a block of 256) as the same division by block.x/y/z: the same launch, which
    stays consistent when the block is tuned."""
    extent = block[axis] if axis < len(block) else 1
    if extent <= 1:
        return grid
    try:
        tree = ast.parse(grid.strip(), mode="eval").body
    except SyntaxError:
        return grid
    name = f"block.{'xyz'[axis]}"
    if (
        isinstance(tree, ast.Call)
        and isinstance(tree.func, ast.Name)
        and tree.func.id == "ceil_div"
        and len(tree.args) == 2
        and isinstance(tree.args[1], ast.Constant)
        and tree.args[1].value == extent
    ):
        return f"ceil_div({ast.unparse(tree.args[0])}, {name})"
    if (  # (n + 255) // 256
        isinstance(tree, ast.BinOp)
        and isinstance(tree.op, ast.FloorDiv)
        and isinstance(tree.right, ast.Constant)
        and tree.right.value == extent
        and isinstance(tree.left, ast.BinOp)
        and isinstance(tree.left.op, ast.Add)
        and isinstance(tree.left.right, ast.Constant)
        and tree.left.right.value == extent - 1
    ):
        return f"ceil_div({ast.unparse(tree.left.left)}, {name})"
    return grid


def _resolves(spec: KernelSpec) -> bool:
    try:
        resolve(spec)
    except SpecResolveError:
        return False
    return True
