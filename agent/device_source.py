"""The device-side translation unit of a `.cu` file, and byte-exact text edits.

NVRTC compiles device code only, and a host function in the file still has to type-check there: `main`
with `cudaMalloc`, `std::vector` or `printf` from `<cstdio>` fails. So `device_source` blanks every
host-only function definition with spaces, keeping each newline, so that every remaining token keeps
its line and UTF-8 byte column and compiler diagnostics point into the user's file unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
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


# A save compiles each of the file's kernels from the same text, each compile asking for its device side.
@lru_cache(maxsize=4)
def device_source(source: str) -> str:
    """`source` with every host-only function definition replaced by spaces (newlines kept).

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
    for definition in _host_only_definitions(tree.root_node):
        # Every directive starts with `#`: without one, skip the walk over the function's nodes.
        has_hash = data.find(b"#", definition.start_byte, definition.end_byte) != -1
        _blank(blanked, definition, keep=_directives(definition) if has_hash else iter(()))
    return blanked.decode("utf-8")


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


def _host_only_definitions(scope: Node) -> Iterator[Node]:
    """The outermost node of each host-only function definition at namespace scope (with its
    `template <...>` or `extern "C"` prefix, which must go with it)."""
    for child in scope.children:
        # Definitions first: `extern "C" void f() {}` is a linkage_specification too, and its prefix
        # must be blanked with the function, not left to attach to the next declaration.
        if _is_host_only(_defined_function(child)):
            yield child
        elif child.type in _SCOPE_TYPES:
            yield from _host_only_definitions(child)


def _defined_function(node: Node) -> Node | None:
    """The function_definition that `node` is, or wraps (`template <...> f`, `extern "C" f`)."""
    if node.type == "function_definition":
        return node
    if node.type == "template_declaration":
        inner = next((child for child in node.named_children if child.type in _TEMPLATED_TYPES), None)
        return _defined_function(inner) if inner else None
    if node.type == "linkage_specification":
        body = node.child_by_field_name("body")
        return body if body is not None and body.type == "function_definition" else None
    return None


def _is_host_only(function: Node | None) -> bool:
    if function is None:
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
