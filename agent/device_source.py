"""The device-side translation unit of a `.cu` file, and byte-exact text edits.

NVRTC compiles device code only, and a host function in the file still has to type-check there: `main`
with `cudaMalloc`, `std::vector` or `printf` from `<cstdio>` fails. So `device_source` blanks every
host-only function definition with spaces, keeping each newline, so that every remaining token keeps
its line and UTF-8 byte column and compiler diagnostics point into the user's file unchanged.

A PyTorch extension (a file that includes `<torch/extension.h>`, `<ATen/...>`, `<c10/...>`) is compiled
without its host half too: torch's full headers take ~28 s under nvcc and need CUDA libraries' headers
(cusparse.h) that a CPU-only torch or a bare toolkit lacks, while its kernels rarely need more than a few
device types. `device_source(source, without_torch=True)` also blanks those includes, the binding blocks
(`PYBIND11_MODULE(...) { ... }`, `TORCH_LIBRARY(...) { ... }`) and host function declarations (device code
cannot call them, and their torch types are undeclared); agent/compile_environment.py supplies what the
kernels may still name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import lru_cache

from cuda_agent.agent.kernels import Span
from cuda_agent.agent.parsing import parse_cuda
from tree_sitter import Node

# Nodes whose children are declarations at namespace scope, where host functions live.
_SCOPE_TYPES = frozenset(
    {
        "translation_unit",
        "namespace_definition",
        "declaration_list",
        "linkage_specification",
        "preproc_if",
        "preproc_ifdef",
        "preproc_elif",
        "preproc_elifdef",
        "preproc_else",
    }
)
_DEVICE_SPECIFIERS = frozenset({"__global__", "__device__"})
_TEMPLATED_TYPES = frozenset({"function_definition", "template_declaration"})
_CONDITIONAL_DIRECTIVES = frozenset({"preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef"})
# Headers of PyTorch and of what its extension headers pull in (pybind11, CPython): host code only.
_TORCH_HEADER_FOLDERS = ("torch/", "ATen/", "c10/", "caffe2/", "pybind11/")
_TORCH_HEADER_FILES = frozenset({"Python.h"})
# Macros that open a block of host code binding an extension's functions to Python or to torch's dispatcher.
_BINDING_MACROS = frozenset(
    {
        b"PYBIND11_MODULE",
        b"TORCH_LIBRARY",
        b"TORCH_LIBRARY_IMPL",
        b"TORCH_LIBRARY_FRAGMENT",
        b"STABLE_TORCH_LIBRARY",
        b"STABLE_TORCH_LIBRARY_IMPL",
        b"STABLE_TORCH_LIBRARY_FRAGMENT",
    }
)
_DECLARATOR_WRAPPERS = frozenset({"pointer_declarator", "reference_declarator"})
_CONSTEXPR = (b"constexpr", b"consteval")


# A save compiles each of the file's kernels from the same text, each compile asking for its device side.
@lru_cache(maxsize=4)
def device_source(source: str, *, without_torch: bool = False, relaxed_constexpr: bool = False) -> str:
    """`source` with every host-only function definition replaced by spaces (newlines kept); with
    `without_torch`, also PyTorch's includes, binding blocks and host declarations (module docstring).
    With `relaxed_constexpr` (nvcc's --expt-relaxed-constexpr, under which device code may call a
    `constexpr` host function), `constexpr` and `consteval` functions are kept.

    Kept: `__global__`, `__device__` and `__host__ __device__` functions and their templates, variables,
    types, class templates, macros, includes, declarations, member functions inside classes, and any
    function whose head tree-sitter could not parse (e.g. `HD float f()` where `HD` is a macro for
    `__host__ __device__`): when unsure, keep. Preprocessor directives inside a blanked function stay,
    so a `#define` there still reaches the code after it and `#if`/`#endif` stay balanced.

    A template kernel instantiated only by a blanked host launcher is no longer instantiated: compile
    it through a name expression (NVRTC) or an explicit instantiation."""
    data = source.encode("utf-8")
    tree = parse_cuda(data)
    blanked = bytearray(data)
    for definition in _host_only_definitions(tree.root_node, relaxed_constexpr):
        # Every directive starts with `#`: without one, skip the walk over the function's nodes.
        has_hash = data.find(b"#", definition.start_byte, definition.end_byte) != -1
        _blank(blanked, definition, keep=_directives(definition) if has_hash else iter(()))
    if without_torch:
        for node in _torch_host_parts(tree.root_node):
            _blank(blanked, node, keep=iter(()))
    return blanked.decode("utf-8")


@lru_cache(maxsize=4)
def includes_torch(source: str) -> bool:
    """Whether the file includes a PyTorch header (`<torch/...>`, `<ATen/...>`, `<c10/...>`): an extension."""
    return any(_is_torch_include(node) for node in _includes(parse_cuda(source).root_node))


def _at_namespace_scope(scope: Node, picks: Callable[[Node], bool]) -> Iterator[Node]:
    """The nodes `picks` takes at namespace scope, in source order, looking inside namespaces, `extern "C"`
    blocks and preprocessor conditionals (not inside what it took). A stack of the scopes being read, not
    recursion: generated code nests them as deep as it likes."""
    pending = [iter(scope.children)]
    while pending:
        child = next(pending[-1], None)
        if child is None:
            pending.pop()
        elif picks(child):
            yield child
        elif child.type in _SCOPE_TYPES:
            pending.append(iter(child.children))


def _includes(scope: Node) -> Iterator[Node]:
    """The `#include` lines at namespace scope, inside preprocessor conditionals too."""
    return _at_namespace_scope(scope, lambda node: node.type == "preproc_include")


def _is_torch_include(include: Node) -> bool:
    path = include.child_by_field_name("path")
    if path is None or path.text is None:
        return False
    name = path.text.decode("utf-8", errors="replace").strip('<>"')
    return name.startswith(_TORCH_HEADER_FOLDERS) or name in _TORCH_HEADER_FILES


def _torch_host_parts(scope: Node) -> Iterator[Node]:
    """What an extension's device side leaves out besides host function definitions: torch's includes, the
    binding blocks and host function declarations, at namespace scope (inside conditionals too)."""
    return _at_namespace_scope(
        scope,
        lambda node: (
            _is_torch_include(node)
            if node.type == "preproc_include"
            else _is_binding_block(node) or _is_host_declaration(node)
        ),
    )


def _is_binding_block(node: Node) -> bool:
    """`PYBIND11_MODULE(name, m) { ... }`: tree-sitter reads it as a function without a return type."""
    if node.type != "function_definition" or node.child_by_field_name("type") is not None:
        return False
    declarator = node.child_by_field_name("declarator")
    name = declarator.child_by_field_name("declarator") if declarator is not None else None
    return name is not None and name.type == "identifier" and name.text in _BINDING_MACROS


def _is_host_declaration(node: Node) -> bool:
    """A function declared, not defined, without `__device__`/`__global__` (`torch::Tensor f(torch::Tensor);`,
    also under `template <...>`): device code cannot call it. One that did not parse cleanly is kept."""
    if node.type == "template_declaration":
        inner = next((child for child in node.named_children if child.type == "declaration"), None)
        if inner is None:
            return False
        node = inner
    if node.type != "declaration" or node.has_error:
        return False
    if any(child.type in _DEVICE_SPECIFIERS for child in node.children):
        return False
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type in _DECLARATOR_WRAPPERS:
        declarator = declarator.child_by_field_name("declarator")
    return declarator is not None and declarator.type == "function_declarator"


def replace_span(source: str, span: Span, new_text: str) -> str:
    """`source` with the bytes of `span` replaced by `new_text`. Spans count UTF-8 bytes, so the slicing
    happens on the encoded text; a span that cuts a character in two is refused."""
    data = source.encode("utf-8")
    if not 0 <= span.start_byte <= span.end_byte <= len(data):
        raise ValueError(f"span bytes {span.start_byte}..{span.end_byte} outside a {len(data)}-byte source")
    edited = data[: span.start_byte] + new_text.encode("utf-8") + data[span.end_byte :]
    try:
        return edited.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"span {span} does not start and end on character boundaries") from error


def _host_only_definitions(scope: Node, relaxed_constexpr: bool) -> Iterator[Node]:
    """The outermost node of each host-only function definition at namespace scope (with its
    `template <...>` or `extern "C"` prefix, which must go with it)."""
    # Definitions first: `extern "C" void f() {}` is a linkage_specification too, and its prefix must be
    # blanked with the function, not left to attach to the next declaration.
    return _at_namespace_scope(scope, lambda node: _is_host_only(_defined_function(node), relaxed_constexpr))


def _defined_function(node: Node) -> Node | None:
    """The function_definition that `node` is, or wraps (`template <...> f`, `extern "C" f`)."""
    while node.type == "template_declaration":  # `template <...> template <...> f`: as many as written
        inner = next((child for child in node.named_children if child.type in _TEMPLATED_TYPES), None)
        if inner is None:
            return None
        node = inner
    if node.type == "function_definition":
        return node
    if node.type == "linkage_specification":
        body = node.child_by_field_name("body")
        return body if body is not None and body.type == "function_definition" else None
    return None


def _is_host_only(function: Node | None, relaxed_constexpr: bool) -> bool:
    if function is None:
        return False
    if relaxed_constexpr and any(
        child.type == "type_qualifier" and child.text in _CONSTEXPR for child in function.children
    ):
        return False
    body = function.child_by_field_name("body")
    if body is None or body.type != "compound_statement":
        return False
    head = [child for child in function.children if child != body]
    # An unparsed head (`HD float f()`, HD a macro for `__host__ __device__`) or one without a return
    # type (`KERNEL(name) { ... }`, a macro) may hide a device function: keep what we cannot read.
    if any(child.has_error for child in head) or function.child_by_field_name("type") is None:
        return False
    return not any(child.type in _DEVICE_SPECIFIERS for child in head)


def _directives(definition: Node) -> Iterator[tuple[int, int]]:
    """Byte ranges of the preprocessor lines inside a definition: `#define`, `#undef` and the like whole,
    and for conditionals only their `#if ...`, `#else` and `#endif` lines (the code between them belongs
    to the function and goes). `#pragma` and `#include` go: they belong to the function's code."""
    stack = [definition]
    while stack:
        node = stack.pop()
        if node.type in ("preproc_def", "preproc_function_def"):
            yield node.start_byte, node.end_byte
            continue
        if node.type == "preproc_call":
            directive = node.child_by_field_name("directive")
            if directive is None or directive.text != b"#pragma":
                yield node.start_byte, node.end_byte
            continue
        if node.type in _CONDITIONAL_DIRECTIVES or node.type == "preproc_else":
            yield from _conditional_lines(node)
        stack.extend(node.children)


def _conditional_lines(conditional: Node) -> Iterator[tuple[int, int]]:
    """`#if COND` / `#ifdef NAME` / `#else` up to the end of the condition, and the `#endif` token."""
    head_end = conditional.child_by_field_name("condition") or conditional.child_by_field_name("name")
    first = conditional.children[0]
    yield first.start_byte, (head_end or first).end_byte
    for child in conditional.children:
        if child.type == "#endif":
            yield child.start_byte, child.end_byte


# Every byte but CR and LF becomes a space.
_TO_SPACES = bytes(byte if byte in b"\r\n" else 0x20 for byte in range(256))


def _blank(buffer: bytearray, node: Node, keep: Iterator[tuple[int, int]]) -> None:
    """Spaces over the node's bytes except line breaks and the `keep` ranges. One space per byte keeps
    the byte columns of anything later on the same line; CR and LF stay so line numbers do too."""
    original = bytes(buffer[node.start_byte : node.end_byte])
    buffer[node.start_byte : node.end_byte] = original.translate(_TO_SPACES)
    for start, end in keep:
        buffer[start:end] = original[start - node.start_byte : end - node.start_byte]
