"""Proposers on a kernel read in a normal form: the same computation in the spelling the analysis and the
rewrites read.

First drafts spell common shapes otherwise, and every rewrite would pass them by:
- loop macros (`CUDA_KERNEL_LOOP(i, n) { ... }`, Caffe's and mmcv's) written out as the `for` they stand
  for (agent/spec/loop_macros.py);
- a grid-stride loop written as a `while` (`int i = ...; while (i < n) { ...; i += blockDim.x *
  gridDim.x; }`) read as its `for`, where the index is declared for it alone (not read after the loop,
  nothing else changes it, no `continue` skips the step);
- a `__syncthreads();` as the kernel's last statement left out: nothing runs after it, so it orders
  nothing (element-wise kernels copied from shared-memory ones keep it).

The spec was inferred from the text as written; the proposers run on the normal form, and their
candidates carry it (the same computation the compiler saw), with their own change.
"""

from __future__ import annotations

from collections.abc import Callable

from cuda_agent.agent.analysis import assigned_names
from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda, walk
from cuda_agent.agent.proposers.tree import Edit, identifiers
from cuda_agent.agent.spec.loop_macros import loop_macros_written_out
from cuda_agent.agent.targets import KernelTarget, reloaded_target
from tree_sitter import Node

# A search asks once a proposer; the normal form is read once a kernel and text.
_FORMS: BoundedMemo[tuple[str, str, int], tuple[KernelTarget | None]] = BoundedMemo(64)


def normal_form(target: KernelTarget) -> KernelTarget | None:
    """The kernel read in its normal form, with a spec; None where it is in it already."""
    key = (str(target.path), target.source, target.kernel.start_byte)
    return _FORMS.get_or_make(key, lambda: (_normalised(target),))[0]


def through_normal_form(
    proposer: Callable[[KernelTarget], list[Candidate]], target: KernelTarget
) -> list[Candidate]:
    """The proposer's candidates for the kernel, made on its normal form where it has one."""
    normal = normal_form(target)
    return proposer(normal if normal is not None else target)


def _normalised(target: KernelTarget) -> KernelTarget | None:
    written = loop_macros_written_out(target.kernel, target.source)
    source = written if written is not None else target.source
    own = target.source.encode("utf-8")[target.kernel.start_byte : target.kernel.end_byte]
    if b"while" in own or b"__syncthreads" in own:  # most kernels: no parse here
        source = _statements_normalised(target, source) or source
    if source == target.source:
        return None
    normal = reloaded_target(target, source)  # the spec the kernel as written has
    return normal if normal is not None and normal.spec is not None else None


def _statements_normalised(target: KernelTarget, source: str) -> str | None:
    # Loop macros written out lengthen the body, never what comes before it: it starts where it did.
    start = target.kernel.body_span.start_byte
    node: Node | None = parse_cuda(source).root_node.descendant_for_byte_range(start, start + 1)
    while node is not None and not (node.type == "compound_statement" and node.start_byte == start):
        node = node.parent
    if node is None:
        return None
    body, data = node, source.encode("utf-8")
    edits = [edit for loop in _top_level(body, "while_statement") for edit in _while_as_for(data, body, loop)]
    edits += _trailing_barrier(data, body)
    if not edits:
        return None
    for begin, end, written in sorted(edits, reverse=True):
        data = data[:begin] + written.encode("utf-8") + data[end:]
    return data.decode("utf-8")


def _top_level(body: Node, kind: str) -> list[Node]:
    return [n for n in body.named_children if n.type == kind]


def _while_as_for(data: bytes, body: Node, loop: Node) -> list[Edit]:
    """`T i = init; ... while (cond) { ...; i += step; }` as `for (T i = init; cond; i += step) { ... }`,
    where `i` is declared at the top level before the loop for it alone; no edits otherwise."""
    condition, inside = loop.child_by_field_name("condition"), loop.child_by_field_name("body")
    if condition is None or inside is None or inside.type != "compound_statement":
        return []
    statements = [n for n in inside.named_children if n.type != "comment"]
    step = _step(statements[-1]) if statements else None
    if step is None:
        return []
    index, _ = step
    siblings = list(body.named_children)
    before = siblings[: siblings.index(loop)]
    declaration = next((n for n in reversed(before) if _declares(n) == index), None)
    if declaration is None:
        return []
    between = siblings[siblings.index(declaration) + 1 : siblings.index(loop)]
    after = siblings[siblings.index(loop) + 1 :]
    if any(index in identifiers(n) for n in between + after):
        return []  # read elsewhere: the index is not the loop's alone
    if index not in identifiers(condition):
        return []
    if any(n.type == "continue_statement" and _in_this_loop(n, loop) for n in walk(inside)):
        return []  # a `continue` skips the while's step; a for's would take it
    if any(_assigns(n, index) for n in statements[:-1]):
        return []
    head = text(declaration).rstrip().rstrip(";").strip()
    for_text = f"for ({head}; {text(condition)[1:-1].strip()}; {text(statements[-1]).rstrip(';')})"
    last = statements[-1]
    return [
        _line_removed(data, declaration),
        (loop.start_byte, inside.start_byte, for_text + " "),
        _line_removed(data, last),
    ]


def _declares(node: Node) -> str | None:
    """The name a single-variable top-level declaration with a value declares (`int i = ...;`)."""
    declarators = node.children_by_field_name("declarator") if node.type == "declaration" else []
    if len(declarators) != 1 or declarators[0].type != "init_declarator":
        return None
    name = declarators[0].child_by_field_name("declarator")
    return text(name) if name is not None and name.type == "identifier" else None


def _step(statement: Node) -> tuple[str, str] | None:
    """(i, step) of `i += step;` or `i = i + step;`."""
    expression = statement.named_children[0] if statement.type == "expression_statement" else None
    if expression is None or expression.type != "assignment_expression":
        return None
    left, right = expression.child_by_field_name("left"), expression.child_by_field_name("right")
    operator = expression.child_by_field_name("operator")
    if left is None or right is None or operator is None or left.type != "identifier":
        return None
    name = text(left)
    if operator.type == "+=":
        return name, text(right)
    first, plus, second = (right.child_by_field_name(f) for f in ("left", "operator", "right"))
    if operator.type != "=" or right.type != "binary_expression" or None in (first, plus, second):
        return None
    assert first is not None and plus is not None and second is not None
    return (name, text(second)) if text(first) == name and plus.type == "+" else None


def _assigns(node: Node, name: str) -> bool:
    """Whether the statement changes the name, or takes its address (it may change through that)."""
    taken = any(n.type == "pointer_expression" and text(n).replace(" ", "") == f"&{name}" for n in walk(node))
    return taken or name in assigned_names(node)


def _in_this_loop(node: Node, loop: Node) -> bool:
    """Whether a `continue` belongs to this loop, not to a loop inside it."""
    parent = node.parent
    while parent is not None and parent != loop:
        if parent.type in ("for_statement", "while_statement", "do_statement", "for_range_loop"):
            return False
        parent = parent.parent
    return parent == loop


def _trailing_barrier(data: bytes, body: Node) -> list[Edit]:
    """The body's last statement, where it is `__syncthreads();`, left out."""
    statements = [n for n in body.named_children if n.type != "comment"]
    if not statements or "".join(text(statements[-1]).split()) != "__syncthreads();":
        return []
    return [_line_removed(data, statements[-1])]


def _line_removed(data: bytes, node: Node) -> Edit:
    """The node's text taken out, with its line where nothing else is on it."""
    start = data.rfind(b"\n", 0, node.start_byte) + 1
    end = data.find(b"\n", node.end_byte)
    end = len(data) if end == -1 else end
    if data[start : node.start_byte].strip() or data[node.end_byte : end].strip():
        return (node.start_byte, node.end_byte, "")
    return (start, min(end + 1, len(data)), "")
