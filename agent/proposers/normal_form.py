"""Proposers on a kernel read in a normal form: the same computation in the spelling the analysis and the
rewrites read.

First drafts spell common shapes otherwise, and every rewrite would pass them by:
- loop macros (`CUDA_KERNEL_LOOP(i, n) { ... }`, Caffe's and mmcv's) written out as the `for` they stand
  for (agent/spec/loop_macros.py);
- a grid-stride loop written as a `while` (`int i = ...; while (i < n) { ...; i += blockDim.x *
  gridDim.x; }`) read as its `for`, where the index is declared for it alone (not read after the loop,
  nothing else changes it, no `continue` skips the step);
- a `__syncthreads();` as the kernel's last statement left out: nothing runs after it, so it orders
  nothing (element-wise kernels copied from shared-memory ones keep it);
- for the analysis-driven rewrites only (`grid_stride_form`), a grid-stride loop over x as the kernel's
  outer loop (`for (int i = gid; i < n; i += blockDim.x * gridDim.x) { ... }`, the style of NVIDIA's
  samples and of most modern code) read as one iteration a thread (`int i = gid; if (i < n) { ... }`),
  launched over a grid that covers n, for a rewrite that reads nothing in the loop as written (the loop's
  own `continue` or `break` a `return` where the loop ends the kernel). The two
  compute the same under that launch, and every rewrite made on it carries its launch into the file (a
  candidate that would not is dropped): a row sum written so was offered no rewrite at all, its guarded
  twin a dozen.

The spec was inferred from the text as written; the proposers run on the normal form, and their
candidates carry it (the same computation the compiler saw), with their own change.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from cuda_agent.agent.analysis import assigned_names
from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda, walk
from cuda_agent.agent.proposers.block_width import block_width_form
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
    proposer: Callable[[KernelTarget], list[Candidate]], target: KernelTarget, grid_stride: bool = False
) -> list[Candidate]:
    """The proposer's candidates for the kernel, made on its normal form where it has one; with
    `grid_stride` (the analysis-driven rewrites), where that gives none, those made on its grid-stride
    loop read as a thread an element that bring their own launch (or run on a covering grid)."""
    normal = normal_form(target) or target
    if grid_stride:  # `blockIdx.x * TILE + threadIdx.x` under blocks TILE wide: the global index
        normal = block_width_form(normal) or normal
    found = proposer(normal)
    stepped = grid_stride_form(target) if grid_stride and not found else None
    if stepped is None:
        return found
    assert stepped.spec is not None and target.spec is not None
    covering = stepped.spec.launch == target.spec.launch
    return [c for c in proposer(stepped) if c.launch is not None or covering]


_STEPPED: BoundedMemo[tuple[str, str, int], tuple[KernelTarget | None]] = BoundedMemo(64)
# The global index along each axis, as first drafts spell it (spaces and parentheses taken out), and the
# grid's width along it: a grid-stride loop's start and step.
_GLOBAL = {
    axis: frozenset(
        f"{a}+{b}"
        for product in (f"blockIdx.{axis}*blockDim.{axis}", f"blockDim.{axis}*blockIdx.{axis}")
        for a, b in ((product, f"threadIdx.{axis}"), (f"threadIdx.{axis}", product))
    )
    for axis in "xy"
}
_GRID = {
    axis: frozenset({f"blockDim.{axis}*gridDim.{axis}", f"gridDim.{axis}*blockDim.{axis}"}) for axis in "xy"
}


def grid_stride_form(target: KernelTarget) -> KernelTarget | None:
    """The kernel's normal form with its outer grid-stride loop over x (or over y holding one over x) as
    one iteration a thread, its spec's grid along each covering the loop's bound; None where it has no
    such loop (or a bound is not made of the spec's sizes)."""
    key = (str(target.path), target.source, target.kernel.start_byte)
    return _STEPPED.get_or_make(key, lambda: (_stepped(target),))[0]


def _stepped(target: KernelTarget) -> KernelTarget | None:
    base = normal_form(target) or target
    if base.spec is None or "gridDim" not in base.source:
        return None
    body = _body(base, base.source)
    loops = _top_level(body, "for_statement") if body is not None else []
    if body is None or len(loops) != 1:
        return None
    data = base.source.encode("utf-8")
    constants = _constant_locals(body, loops[0])
    steps = _grid_strides(data, body, loops[0], constants)
    if steps is None:
        return None
    edits: list[Edit] = []
    grid = list(base.spec.launch.grid)
    for axis, (made, bound) in steps.items():
        spec_bound = _in_spec_terms(bound, base, constants)
        if spec_bound is None:
            return None
        edits += made
        at = "xy".index(axis)
        grid += ["1"] * (at + 1 - len(grid))
        grid[at] = f"ceil_div({spec_bound}, block.{axis})"
    for begin, end, written in sorted(edits, reverse=True):
        data = data[:begin] + written.encode("utf-8") + data[end:]
    stepped = reloaded_target(base, data.decode("utf-8"))
    if stepped is None or stepped.spec is None:
        return None
    launch = replace(stepped.spec.launch, grid=tuple(grid))
    return replace(stepped, spec=replace(stepped.spec, launch=launch))


def _grid_strides(
    data: bytes, body: Node, loop: Node, constants: dict[str, Node]
) -> dict[str, tuple[list[Edit], Node]] | None:
    """The edits and bound of each axis's grid-stride loop read as a thread an element: the loop over x,
    or the loop over y whose body holds the loop over x as its one loop. `constants`: the body's
    unchanged locals before the loop (`_constant_locals`)."""
    # the kernel's last statement: its one iteration a thread may leave early by returning
    last = [n for n in body.named_children if n.type != "comment"][-1] == loop
    along_x = _one_a_thread(data, body, loop, "x", constants, exits_return=last)
    if along_x is not None:
        return {"x": along_x}
    along_y = _one_a_thread(data, body, loop, "y", constants)
    rows = loop.child_by_field_name("body")
    if along_y is None or rows is None or rows.type != "compound_statement":
        return None
    inner = _top_level(rows, "for_statement")
    along_x = (
        _one_a_thread(data, rows, inner[0], "x", _constant_locals(rows, inner[0]))
        if len(inner) == 1
        else None
    )
    if along_x is None:
        return None
    cols_index = _declares(inner[0].child_by_field_name("initializer") or inner[0])
    alone = [n for n in rows.named_children if n.type != "comment"] == inner
    if alone and not any(cols_index in identifiers(n) for n in body.named_children if n != loop):
        # the y loop holds the x loop alone: one check of both, as a 2-D kernel's guard is written (the
        # idioms read that spelling), where the x index's name is free at the kernel's top level
        (_, *y_rest), (_, *x_rest) = along_y[0], along_x[0]
        combined = _both_checked(data, loop, inner[0])
        return {"x": ([combined, *x_rest], along_x[1]), "y": (y_rest, along_y[1])}
    return {"x": along_x, "y": along_y}


def _both_checked(data: bytes, rows: Node, cols: Node) -> Edit:
    """`for (T r = gy; r < R; ...) { for (T c = gx; c < C; ...) BODY }` as `T r = gy; T c = gx; if (r < R &&
    c < C) BODY`."""
    heads, checks = [], []
    for loop in (rows, cols):
        init, condition = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
        assert init is not None and condition is not None  # as _one_a_thread found them
        heads.append(_statement_text(init))
        checks.append(text(condition))
    inside = cols.child_by_field_name("body")
    assert inside is not None
    indent = _indent(data, rows)
    written = f"{heads[0]};\n{indent}{heads[1]};\n{indent}if ({checks[0]} && {checks[1]}) {text(inside)}"
    return (rows.start_byte, rows.end_byte, written)


def _body(target: KernelTarget, source: str) -> Node | None:
    """The kernel's body in `source`, which starts where the target's does."""
    start = target.kernel.body_span.start_byte
    node: Node | None = parse_cuda(source).root_node.descendant_for_byte_range(start, start + 1)
    while node is not None and not (node.type == "compound_statement" and node.start_byte == start):
        node = node.parent
    return node


def _one_a_thread(
    data: bytes, body: Node, loop: Node, axis: str, constants: dict[str, Node], exits_return: bool = False
) -> tuple[list[Edit], Node] | None:
    """The edits making `for (T i = gid; i < bound; i += blockDim.x * gridDim.x) BODY` into `T i = gid;
    if (i < bound) BODY` (a `stride` local the step alone read taken out too), and the bound; None where
    the loop is not such a loop, or where the index is not the loop's alone or BODY leaves or steps it."""
    parts = [loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body")]
    if any(part is None for part in parts):
        return None
    init, condition, update, inside = parts
    assert init is not None and condition is not None and update is not None and inside is not None
    declared = _declared(init)
    if declared is None or not _held(declared[1], constants, _GLOBAL[axis]):
        return None
    index = declared[0]
    incremented = _increment(update)
    if incremented is None or incremented[0] != index or not _held(incremented[1], constants, _GRID[axis]):
        return None
    step = incremented[1]
    local = constants.get(text(step))  # `int stride = blockDim.x * gridDim.x;`
    left, bound = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    relation = condition.child_by_field_name("operator")
    if condition.type != "binary_expression" or left is None or bound is None or relation is None:
        return None
    if text(left) != index or relation.type != "<":
        return None
    exits = [n for n in walk(inside) if _leaves_loop(n, loop)]
    if (exits and not exits_return) or _assigns(inside, index):
        return None  # no `if` spells the loop's own continue or break; a changed index steps otherwise
    if any(index in identifiers(n) for n in body.named_children if n != loop):
        return None  # the name declared again elsewhere: the loop's own cannot move out of the loop
    head, indent = _statement_text(init), _indent(data, loop)
    edits = [(loop.start_byte, inside.start_byte, f"{head};\n{indent}if ({text(condition)}) ")]
    # one iteration a thread, the kernel's last statement: leaving the iteration is leaving the kernel
    edits += [(n.start_byte, n.end_byte, "return;") for n in exits]
    # a stride local read nowhere else (its declaration and the loop name it) goes with the loop's step
    readers = sum(text(step) in identifiers(n) for n in body.named_children)
    if local is not None and readers == 2 and text(step) not in identifiers(inside):
        edits.append(_line_removed(data, local))
    return edits, bound


def _leaves_loop(node: Node, loop: Node) -> bool:
    """Whether the node is a `continue` or `break` of this loop (not of a loop inside it, nor a switch's
    `break`)."""
    if node.type not in ("continue_statement", "break_statement"):
        return False
    parent = node.parent
    while parent is not None and parent != loop:
        if parent.type in ("for_statement", "while_statement", "do_statement", "for_range_loop"):
            return False
        if parent.type == "switch_statement" and node.type == "break_statement":
            return False
        parent = parent.parent
    return parent == loop


def _squeezed(written: str) -> str:
    """The expression without spaces, parentheses and integer casts: `(size_t)blockIdx.x * blockDim.x`
    reads as `blockIdx.x*blockDim.x`."""
    return "".join(c for c in _CAST.sub("", written) if c not in " \t\n()")


_CAST = re.compile(
    r"\(\s*(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:size_t|ptrdiff_t|u?int(?:32|64)_t|long\s+long|long|int|unsigned)"
    r"\s*\)|static_cast<[^<>]*>"
)


def _held(node: Node, constants: dict[str, Node], spellings: frozenset[str]) -> bool:
    """Whether the expression is one of the spellings, written there or as an unchanged local holding it
    (`int tid = blockIdx.x * blockDim.x + threadIdx.x;`, `int stride = blockDim.x * gridDim.x;`)."""
    if node.type == "identifier" and text(node) in constants:
        node = _value_of(constants[text(node)])
    return _squeezed(text(node)) in spellings


# What a bound may be made of to be written in the spec's sizes: names, numbers, +, - and * (C's integer
# division and remainder would not read the same there).
_BOUND_NODES = frozenset({"identifier", "number_literal", "binary_expression", "parenthesized_expression"})


def _in_spec_terms(bound: Node, target: KernelTarget, locals_: dict[str, Node]) -> str | None:
    """The bound with each parameter it names replaced by that scalar's value in the spec (`rows` ->
    `rows`, `n` -> `(n_rows * n_cols)`), and each local it names (`const int total = n * c;`, among
    `locals_`' declarations) by its value so written; None where a name is neither, or the bound is not
    a sum or a product of them and numbers."""
    assert target.spec is not None
    values = {a.name: a.value for a in target.spec.arguments if a.role == "scalar" and a.value is not None}
    nodes = list(walk(bound))
    if any(n.type not in _BOUND_NODES and n.is_named for n in nodes):
        return None
    if any(n.type in ("/", "%", "<<", ">>", "&", "|", "^") for n in nodes):
        return None
    written, at, source = "", bound.start_byte, bound.text or b""
    for name in (n for n in nodes if n.type == "identifier"):
        if text(name) in values:
            value: str | None = str(values[text(name)])
        elif text(name) in locals_:
            rest = {k: v for k, v in locals_.items() if k != text(name)}
            value = _in_spec_terms(_value_of(locals_[text(name)]), target, rest)
        else:
            value = None
        if value is None:
            return None
        written += source[at - bound.start_byte : name.start_byte - bound.start_byte].decode("utf-8")
        written += value if value.replace("_", "").isalnum() else f"({value})"
        at = name.end_byte
    return written + source[at - bound.start_byte :].decode("utf-8")


def _constant_locals(body: Node, loop: Node) -> dict[str, Node]:
    """The locals the body declares before the loop with a value and never changes: their declarations,
    by name."""
    siblings = list(body.named_children)
    declared = ((_declares(node), node) for node in siblings[: siblings.index(loop)])
    return {name: node for name, node in declared if name is not None and not _assigns(body, name)}


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
    body = _body(target, source)
    if body is None:
        return None
    data = source.encode("utf-8")
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
    step = _increment(statements[-1]) if statements else None
    if step is None:
        return []
    index = step[0]
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
    if any(n.type == "continue_statement" and _leaves_loop(n, loop) for n in walk(inside)):
        return []  # a `continue` skips the while's step; a for's would take it
    if any(_assigns(n, index) for n in statements[:-1]):
        return []
    head = _statement_text(declaration)
    for_text = f"for ({head}; {text(condition)[1:-1].strip()}; {text(statements[-1]).rstrip(';')})"
    last = statements[-1]
    return [
        _line_removed(data, declaration),
        (loop.start_byte, inside.start_byte, for_text + " "),
        _line_removed(data, last),
    ]


def _declared(node: Node) -> tuple[str, Node] | None:
    """The name and value of a single-variable declaration with a value (`int i = ...;`)."""
    declarators = node.children_by_field_name("declarator") if node.type == "declaration" else []
    if len(declarators) != 1 or declarators[0].type != "init_declarator":
        return None
    name, value = (declarators[0].child_by_field_name(f) for f in ("declarator", "value"))
    if name is None or name.type != "identifier" or value is None:
        return None
    return text(name), value


def _declares(node: Node) -> str | None:
    """The name a single-variable declaration with a value declares."""
    declared = _declared(node)
    return declared[0] if declared is not None else None


def _value_of(declaration: Node) -> Node:
    """The value of a declaration `_declared` reads."""
    declared = _declared(declaration)
    assert declared is not None
    return declared[1]


def _increment(node: Node) -> tuple[str, Node] | None:
    """(i, step) of `i += step` or `i = i + step` (as an expression or its statement)."""
    expression = (
        node.named_children[0] if node.type == "expression_statement" and node.named_children else node
    )
    if expression.type != "assignment_expression":
        return None
    left, right = expression.child_by_field_name("left"), expression.child_by_field_name("right")
    operator = expression.child_by_field_name("operator")
    if left is None or right is None or operator is None or left.type != "identifier":
        return None
    name = text(left)
    if operator.type == "+=":
        return name, right
    first, plus, second = (right.child_by_field_name(f) for f in ("left", "operator", "right"))
    if operator.type != "=" or right.type != "binary_expression" or None in (first, plus, second):
        return None
    assert first is not None and plus is not None and second is not None
    return (name, second) if text(first) == name and plus.type == "+" else None


def _statement_text(node: Node) -> str:
    """A declaration's text without its semicolon."""
    return text(node).rstrip().rstrip(";").strip()


def _indent(data: bytes, node: Node) -> str:
    """What stands before the node on its line."""
    return data[data.rfind(b"\n", 0, node.start_byte) + 1 : node.start_byte].decode("utf-8")


def _assigns(node: Node, name: str) -> bool:
    """Whether the statement changes the name, or takes its address (it may change through that)."""
    taken = any(n.type == "pointer_expression" and text(n).replace(" ", "") == f"&{name}" for n in walk(node))
    return taken or name in assigned_names(node)


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
