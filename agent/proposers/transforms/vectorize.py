"""Vector loads and stores for element-wise kernels: each thread handles a vector's worth of consecutive
elements (4 floats through one float4, 2 halves through one __half2), with the original scalar code
kept for the tail (n not a multiple of the width) and for buffers that are not aligned for vector access.

Applies to the one-thread-per-element shape (see pattern.py) when every pointer the body touches has
the same element type and is only ever read or written at `p[i]`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.transforms.grid_stride import coarsened_grid
from cuda_agent.agent.proposers.transforms.pattern import ThreadPerElement, thread_per_element
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    accessed_array,
    always_assigns,
    candidate_from,
    kernel_tree,
    reindent,
    walk_with_comments,
    with_grid,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "vectorize"


# A node's text in a rewritten statement (its subtree is then not visited), or None to keep it.
Substitution = Callable[[Node], str | None]


@dataclass(frozen=True)
class VectorType:
    name: str  # "float4"
    width: int  # elements a vector
    lanes: str  # member names in order: "xyzw"
    bytes: int  # alignment the vector access needs


VECTOR_TYPES = {
    "float": VectorType("float4", 4, "xyzw", 16),
    "double": VectorType("double2", 2, "xy", 16),
    "half": VectorType("__half2", 2, "xy", 4),
    "__half": VectorType("__half2", 2, "xy", 4),
}


def propose_vectorize(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    if tree is None or target.spec is None or len(target.spec.launch.grid) != 1:
        return []
    match = thread_per_element(tree)
    if match is None:
        return []
    accesses = _accesses(tree, match)
    if accesses is None:
        return []
    loaded, stored = accesses
    pointers = {p.name: p for p in target.kernel.parameters if p.is_pointer}
    element_types = {pointers[name].type for name in loaded | stored}
    if len(element_types) != 1 or next(iter(element_types)) not in VECTOR_TYPES:
        return []
    vector = VECTOR_TYPES[next(iter(element_types))]
    source = tree.apply_to_file(_edits(tree, match, vector, loaded, stored))
    launch = target.spec.launch
    return [
        candidate_from(
            target,
            source,
            description=f"{vector.name} loads and stores ({vector.width} elements a thread), scalar tail",
            proposer=PROPOSER,
            launch=with_grid(launch, coarsened_grid(launch.grid[0], vector.width)),
        )
    ]


def _accesses(tree: KernelTree, match: ThreadPerElement) -> tuple[set[str], set[str]] | None:
    """(pointers read, pointers written) when every use of a pointer parameter in the kernel is `p[i]`
    inside the guarded work; None otherwise (strided, offset or indirect access; pointer arithmetic)."""
    pointers = {p.name for p in tree.target.kernel.parameters if p.is_pointer and p.pointer_depth == 1}
    region = (match.statements[0].start_byte, match.end_byte)
    loaded: set[str] = set()
    stored: set[str] = set()
    conditional: set[str] = set()  # stored under a condition
    for node in walk_with_comments(tree.body):
        if node.type != "identifier" or tree.text(node) not in pointers:
            continue
        name = tree.text(node)
        subscript = node.parent
        if not (region[0] <= node.start_byte < region[1]) or subscript is None:
            return None
        if subscript.type != "subscript_expression" or subscript.child_by_field_name("argument") != node:
            return None
        indices = subscript.child_by_field_name("indices")
        if indices is None or "".join(tree.text(indices).split()) != f"[{match.index}]":
            return None
        written = subscript_written(subscript)
        if written is None:
            return None
        if written:
            stored.add(name)
        # A compound assignment (`y[i] += ...`) reads too; so does a write under a condition, since
        # the vector store writes every lane and must write back what the kernel left unchanged...
        if not written or compound_assignment(subscript):
            loaded.add(name)
        elif not _top_level(subscript, match):
            conditional.add(name)
    # ... unless a statement of the work always stores it (`if (m[i] < p) y[i] = 0; else y[i] = x[i];`)
    for name in conditional - loaded:
        if not any(
            always_assigns(s, lambda place, name=name: accessed_array(place) == name)
            for s in match.statements
        ):
            loaded.add(name)
    if not stored:
        return None
    return loaded, stored


def subscript_written(subscript: Node) -> bool | None:
    """Whether `p[...]` is assigned to (`=` or a compound assignment), or only read; None for `p[...]++`
    and `&p[...]`, which no vectorization handles."""
    parent = subscript.parent
    if parent is None:
        return None
    if parent.type == "assignment_expression" and parent.child_by_field_name("left") == subscript:
        return True
    if parent.type == "update_expression" or parent.type == "pointer_expression":
        return None  # `y[i]++`, `&y[i]`: leave such kernels alone
    return False


def compound_assignment(subscript: Node) -> bool:
    """Whether an assigned `p[...]` is also read by its assignment (`p[...] += v`)."""
    operator = subscript.parent.child_by_field_name("operator") if subscript.parent else None
    return operator is not None and operator.type != "="


def _top_level(subscript: Node, match: ThreadPerElement) -> bool:
    """Whether the assignment is a statement of the guarded work itself, not under an if or a loop."""
    statement = subscript.parent.parent if subscript.parent else None
    return (
        statement is not None and statement.type == "expression_statement" and statement in match.statements
    )


def _edits(
    tree: KernelTree, match: ThreadPerElement, vector: VectorType, loaded: set[str], stored: set[str]
) -> list[Edit]:
    taken = tree.identifiers()
    order = [p.name for p in tree.target.kernel.parameters if p.name in loaded | stored]
    names = {p: _fresh(f"{p}{vector.width}", taken) for p in order}
    k = next(n for n in ("k", "j", "e", "idx", "elem") if n not in taken)  # the tail's element index
    i, n, width, vec = match.index, match.bound, vector.width, vector.name
    indent = tree.indent_at(match.declaration.start_byte)
    unit = tree.indent_unit()
    inner = indent + unit
    # Local declarations in the work would be declared once a lane: give each lane its own scope.
    scoped = any(s.type == "declaration" for s in match.statements)
    # (Comments go with the first lane and the tail, not four times over.)

    lines = [f"{indent}if (aligned && {i} + {width} <= {n}) {{"]
    for p in order:
        if p in loaded:
            lines.append(f"{inner}{vec} {names[p]} = *reinterpret_cast<const {vec}*>({p} + {i});")
        else:
            lines.append(f"{inner}{vec} {names[p]};")
    for lane in range(width):
        member = vector.lanes[lane]
        lane_index = i if lane == 0 else f"({i} + {lane})"
        depth = inner + unit if scoped else inner
        element = _lane(tree, match, lambda p, m=member: f"{names[p]}.{m}", lane_index)
        body = rendered_statements(tree, match.statements, depth, element, comments=lane == 0)
        lines += [f"{inner}{{", *body, f"{inner}}}"] if scoped else body
    for p in order:
        if p in stored:
            lines.append(f"{inner}*reinterpret_cast<{vec}*>({p} + {i}) = {names[p]};")
    lines.append(f"{indent}}} else {{  // the last elements, or buffers not aligned for {vec}")
    lines.append(f"{inner}for ({match.index_type} {k} = {i}; {k} < {n} && {k} < {i} + {width}; ++{k}) {{")
    tail = _lane(tree, match, lambda p: f"{p}[{k}]", k)
    lines += rendered_statements(tree, match.statements, inner + unit, tail, comments=True)
    lines += [f"{inner}}}", f"{indent}}}"]
    line_end = tree.data.find(b"\n", match.declaration.end_byte)
    line_end = len(tree.data) if line_end == -1 else line_end
    casts = " | ".join(f"(unsigned long long){p}" for p in order)
    return [
        (
            match.initializer.start_byte,
            match.initializer.end_byte,
            f"({tree.text(match.initializer)}) * {width}",
        ),
        (  # after the declaration's line, so a comment at its end stays with it
            line_end,
            line_end,
            f"\n{indent}// {width} elements a thread; {vec} access when every buffer is aligned for it"
            f"\n{indent}bool aligned = (({casts}) & {vector.bytes - 1}) == 0;",
        ),
        (match.guard.start_byte, match.end_byte, "\n".join(lines)[len(indent) :]),
    ]


def _lane(
    tree: KernelTree, match: ThreadPerElement, element: Callable[[str], str], index_text: str
) -> Substitution:
    """`p[i]` -> `element(p)`, any other use of the index -> `index_text`."""
    pointers = {p.name for p in tree.target.kernel.parameters if p.is_pointer}

    def substitute(node: Node) -> str | None:
        if node.type == "subscript_expression":
            argument = node.child_by_field_name("argument")
            indices = node.child_by_field_name("indices")
            if (
                argument is not None
                and indices is not None
                and tree.text(argument) in pointers
                and "".join(tree.text(indices).split()) == f"[{match.index}]"
            ):
                return element(tree.text(argument))
        if node.type == "identifier" and tree.text(node) == match.index and index_text != match.index:
            return index_text
        return None

    return substitute


def rendered_statements(
    tree: KernelTree,
    statements: Sequence[Node],
    new_indent: str,
    substitute: Substitution,
    comments: bool,
) -> list[str]:
    """The statements rewritten at `new_indent`, one entry per statement. Comments among them are kept
    when `comments` is set: one that ended a statement's line stays at the end of that line."""
    rendered: list[str] = []
    previous_row = -1
    for statement in statements:
        if statement.type == "comment":
            if not comments:
                continue
            if rendered and statement.start_point.row == previous_row:
                gap = statement.start_byte - statement.prev_sibling.end_byte if statement.prev_sibling else 1
                rendered[-1] += " " * gap + tree.text(statement)
                continue
        rendered.append(rewritten_statement(tree, statement, new_indent, substitute))
        previous_row = statement.end_point.row
    return rendered


def rewritten_statement(tree: KernelTree, statement: Node, new_indent: str, substitute: Substitution) -> str:
    """One statement at `new_indent`, with every node `substitute` gives a text for replaced by it."""
    return reindent(tree.substituted(statement, substitute), tree.indent_at(statement.start_byte), new_indent)


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name
