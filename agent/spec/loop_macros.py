"""A kernel's loop macros written out as the `for` they stand for.

Caffe and the code built on it (and Detectron, mmcv, many layer libraries) write their element loops as
`CUDA_KERNEL_LOOP(index, n) { ... }`, a macro for the grid-stride loop `for (int index = blockIdx.x *
blockDim.x + threadIdx.x; index < (n); index += blockDim.x * gridDim.x)`. The parser reads the use as a
nested function definition, so the analysis saw no loop and no bound: no spec, no rewrite. Here each such
use in a kernel's body is replaced by its expansion, the arguments put for the macro's parameters, on the
same line (diagnostics keep their lines). The macro comes from the file's own `#define` (a function-like
macro whose text is a `for` header), else from the well-known definitions below (they live in headers a
project may not have here). A rewrite made on this text shows the loop written out.
"""

from __future__ import annotations

import re
from functools import lru_cache

from cuda_agent.agent.kernels import Kernel, kernel_body
from cuda_agent.agent.parsing import parse_cuda, walk
from tree_sitter import Node, Tree

_GRID_STRIDE = (
    "for (int {i} = blockIdx.x * blockDim.x + threadIdx.x; {i} < ({n}); {i} += blockDim.x * gridDim.x)"
)
# The loop macros of public headers, as (parameters, expansion): Caffe's `CUDA_KERNEL_LOOP`, Detectron's
# and mmcv's `CUDA_1D_KERNEL_LOOP`.
KNOWN: dict[str, tuple[tuple[str, ...], str]] = {
    "CUDA_KERNEL_LOOP": (("i", "n"), _GRID_STRIDE.format(i="i", n="n")),
    "CUDA_1D_KERNEL_LOOP": (("i", "n"), _GRID_STRIDE.format(i="i", n="n")),
}
_FOR = re.compile(r"^\s*for\s*\(")


def loop_macros_written_out(kernel: Kernel, source: str, tree: Tree | None = None) -> str | None:
    """The file with the kernel's loop-macro uses written out as `for` headers; None where it has none."""
    own = source.encode("utf-8")[kernel.start_byte : kernel.end_byte].decode("utf-8", errors="replace")
    if not _uses(source).search(own):
        return None  # most kernels: no walk of the file
    tree = tree or parse_cuda(source)
    macros = {**KNOWN, **_defined(tree)}
    body = kernel_body(kernel, tree)
    if body is None:
        return None
    edits = []
    for node in walk(body):
        use = _use(node, macros) if node.type == "function_definition" and node != body.parent else None
        if use is not None:
            edits.append(use)
    if not edits:
        return None
    data = source.encode("utf-8")
    for start, end, text in sorted(edits, reverse=True):
        data = data[:start] + text.encode("utf-8") + data[end:]
    return data.decode("utf-8")


@lru_cache(maxsize=8)  # a file of thousands of kernels is read once, not once a kernel
def _uses(source: str) -> re.Pattern[str]:
    """A use of a loop macro the file may have: the well-known ones and its own function-like `#define`s."""
    names = set(KNOWN) | set(re.findall(r"^\s*#\s*define\s+(\w+)\(", source, re.MULTILINE))
    return re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, names))) + r")\s*\(")


def _defined(tree: Tree) -> dict[str, tuple[tuple[str, ...], str]]:
    """The file's function-like macros whose text is a `for` header, by name."""
    found = {}
    for node in walk(tree.root_node):
        if node.type != "preproc_function_def":
            continue
        name, parameters, value = (node.child_by_field_name(f) for f in ("name", "parameters", "value"))
        if name is None or parameters is None or value is None:
            continue
        expansion = " ".join(_text(value).replace("\\\n", " ").split())
        if _FOR.match(expansion):
            found[_text(name)] = (tuple(_text(p) for p in parameters.named_children), expansion)
    return found


def _use(node: Node, macros: dict[str, tuple[tuple[str, ...], str]]) -> tuple[int, int, str] | None:
    """`MACRO(a, b) { ... }` as the parser reads it (a function definition inside the body): the span of
    `MACRO(a, b)` and its expansion."""
    declarator, body = node.child_by_field_name("declarator"), node.child_by_field_name("body")
    if (
        declarator is None
        or body is None
        or declarator.type != "function_declarator"
        or node.child_by_field_name("type") is not None
    ):
        return None
    name, listed = declarator.child_by_field_name("declarator"), declarator.child_by_field_name("parameters")
    if name is None or listed is None or _text(name) not in macros:
        return None
    parameters, expansion = macros[_text(name)]
    arguments = _arguments(_text(listed))
    if len(arguments) != len(parameters):
        return None
    values = dict(zip(parameters, arguments, strict=True))
    written = re.sub(r"\b\w+\b", lambda m: values.get(m.group(0), m.group(0)), expansion)
    return node.start_byte, body.start_byte, written + " "


def _arguments(listed: str) -> list[str]:
    """`(index, n * (c + 1))` -> ["index", "n * (c + 1)"]: split at the commas outside parentheses."""
    inner, depth, parts, current = listed.strip()[1:-1], 0, [], ""
    for char in inner:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()] if current.strip() or parts else []


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8")
