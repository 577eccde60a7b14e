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

A macro that stamps out host functions (`#define WRAPPER(tag) void run_##tag(torch::Tensor x) { ... }`,
invoked as `WRAPPER(f32)`, often without a semicolon) would bring them back wherever it is expanded, so its
body is read as code and the same parts are blanked there: the macro then expands to its device code only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import lru_cache

from cuda_agent.agent.kernels import Span
from cuda_agent.agent.parsing import ancestors, parse_cuda
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
_DEVICE_SPECIFIER_WORDS = frozenset(specifier.encode() for specifier in _DEVICE_SPECIFIERS)
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
_MACRO_DEFINITIONS = frozenset({"preproc_def", "preproc_function_def"})
# A macro body read as code, byte for byte: a line continuation's backslash becomes a space, a token paste
# (with the blanks around it: `run_ ## tag`) and a stringification's `#` become underscores, which keep
# the pasted or stringified parts one identifier.
_CONTINUATION = re.compile(rb"\\(?=[ \t]*\r?\n)")
_PASTE = re.compile(rb"[ \t]*##[ \t]*")
_STRINGIFY = re.compile(rb"#(?=[A-Za-z_])")
# Where a macro whose body defines a function would define a member or sit in a body, not at namespace scope.
_NESTED_SCOPES = frozenset({"field_declaration_list", "compound_statement"})
# Where a mention of a macro's name is not an expansion of it.
_NOT_CODE = frozenset({"comment", "string_literal", "string_content", "raw_string_literal", "char_literal"})


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

    A macro defined at namespace scope whose body defines such host code (or, with `without_torch`, a
    binding block or host declaration) keeps only the rest of its body, when every expansion of it is at
    namespace scope: one expanded inside a class stamps out members, which stay.

    A template kernel instantiated only by a blanked host launcher is no longer instantiated: compile
    it through a name expression (NVRTC) or an explicit instantiation."""
    data = source.encode("utf-8")
    tree = parse_cuda(data)
    blanked = bytearray(data)
    for definition in _host_only_definitions(tree.root_node, relaxed_constexpr):
        # Every directive starts with `#`: without one, skip the walk over the function's nodes.
        has_hash = data.find(b"#", definition.start_byte, definition.end_byte) != -1
        keep = _directives(definition) if has_hash else iter(())
        _blank(blanked, definition.start_byte, definition.end_byte, keep)
    if without_torch:
        for node in _torch_host_parts(tree.root_node):
            _blank(blanked, node.start_byte, node.end_byte, keep=iter(()))
    for start, end in _macro_host_parts(tree.root_node, data, without_torch, relaxed_constexpr):
        # The continuations' backslashes stay, so that the macro's device code after the part stays in it.
        keep = ((at.start(), at.end()) for at in _CONTINUATION.finditer(data, start, end))
        _blank(blanked, start, end, keep)
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


def _macro_host_parts(
    root: Node, data: bytes, without_torch: bool, relaxed_constexpr: bool
) -> Iterator[tuple[int, int]]:
    """Byte ranges of `data`: the host code in the bodies of macros defined at namespace scope, what the
    device side would leave out were each expansion written out (module docstring)."""
    for definition in _at_namespace_scope(root, lambda node: node.type in _MACRO_DEFINITIONS):
        body = definition.child_by_field_name("value")
        # A function definition has a body in braces: most macros (constants, expressions) have none.
        if body is None or data.find(b"{", body.start_byte, body.end_byte) == -1:
            continue
        code = parse_cuda(_macro_body_as_code(data[body.start_byte : body.end_byte])).root_node
        if code.has_error:  # a fragment (`#define BEGIN(f) void f() {`) or what we cannot read: keep it
            continue
        parts = list(_host_only_definitions(code, relaxed_constexpr))
        if without_torch:
            parts += _torch_host_parts(code)
        if parts and _expanded_at_namespace_scope_only(root, data, definition):
            yield from ((body.start_byte + p.start_byte, body.start_byte + p.end_byte) for p in parts)


def _macro_body_as_code(body: bytes) -> bytes:
    """A macro's body as tree-sitter can read it, every byte where it was (the patterns' comment)."""
    body = _CONTINUATION.sub(b" ", body)
    body = _PASTE.sub(lambda paste: b"_" * len(paste.group()), body)
    return _STRINGIFY.sub(b"_", body)


def _expanded_at_namespace_scope_only(root: Node, data: bytes, definition: Node) -> bool:
    """Whether no mention of the macro's name (outside its definition, comments and strings) is inside a
    class or a function body. One in another macro's body counts as at namespace scope."""
    name_node = definition.child_by_field_name("name")
    if name_node is None or name_node.text is None:
        return False
    name = name_node.text
    at = data.find(name)
    while at != -1:
        end = at + len(name)
        whole = not _is_identifier_byte(data, at - 1) and not _is_identifier_byte(data, end)
        if whole and not definition.start_byte <= at < definition.end_byte:
            mention = root.descendant_for_byte_range(at, end)
            if mention is not None and mention.type not in _NOT_CODE:
                lineage = ancestors(root, mention)
                if any(node.type in _NESTED_SCOPES for node in lineage):
                    return False
        at = data.find(name, end)
    return True


def _is_identifier_byte(data: bytes, at: int) -> bool:
    if not 0 <= at < len(data):
        return False
    byte = data[at]
    return byte == 0x5F or byte >= 0x80 or chr(byte).isalnum()


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
    return not any(child.type in _DEVICE_SPECIFIERS for child in head) and not _specifiers_swallowed(function)


def _specifiers_swallowed(function: Node) -> bool:
    """Whether error recovery read the function's `__global__`/`__device__` into the ERROR before it: after
    a macro invocation without a semicolon (`WRAPPER(f32)` then `__global__ void k()`), tree-sitter takes
    the specifier for a qualifier of `WRAPPER(f32)`, and the definition that follows looks host-only."""
    previous = function.prev_sibling
    if previous is None or previous.type != "ERROR" or previous.text is None:
        return False
    after_invocation = previous.text.rpartition(b")")[2]
    return any(word in _DEVICE_SPECIFIER_WORDS for word in after_invocation.split())


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


def _blank(buffer: bytearray, start: int, end: int, keep: Iterator[tuple[int, int]]) -> None:
    """Spaces over bytes [start, end) except line breaks and the `keep` ranges. One space per byte keeps
    the byte columns of anything later on the same line; CR and LF stay so line numbers do too."""
    original = bytes(buffer[start:end])
    buffer[start:end] = original.translate(_TO_SPACES)
    for kept_start, kept_end in keep:
        buffer[kept_start:kept_end] = original[kept_start - start : kept_end - start]
