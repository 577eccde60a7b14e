"""Vector loads and stores along the rows of 2-D element-wise kernels: each thread handles W consecutive
columns of its row (8 halves, 4 floats or 2 doubles through one 16-byte access; also a half-width 8-byte
variant), with the original per-element code kept for rows that are not aligned for the vector access.

Recognised:

    int col = blockIdx.x * blockDim.x + threadIdx.x;      (any operand order; `row` from the y axis)
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) { work }                (or `if (row >= rows || col >= cols) return; work`)

where the work reads and writes buffers only at the thread's element, `p[row * cols + col]` (any spelling
of that linear form, also through a local `int idx = row * cols + col;`), reads per-column values at
`bias[col]` and per-row or fixed values at indices of `row` and scalars (`scale[row]`), and uses no thread
identity, barriers or shared memory (see pattern.py).

Rewritten: `col` becomes the first of the thread's W columns and the grid's x shrinks W-fold. When every
row stride is a multiple of W and every buffer is aligned for the vector (decided once, the same for all
threads), each buffer's W elements come in through one load into a local array, the user's statements run
once a column on the array's elements, and the results go out through one store. Otherwise the thread runs
the user's code as written for each of its columns that is in range (the last columns of a row, or any
column of a matrix whose rows do not start aligned), so every element is computed exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.parsing import Monomial, linear_form
from cuda_agent.agent.proposers.transforms.grid_stride import coarsened_grid
from cuda_agent.agent.proposers.transforms.pattern import self_contained
from cuda_agent.agent.proposers.transforms.vectorize import (
    compound_assignment,
    rendered_statements,
    subscript_written,
)
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    always_assigns,
    candidate_from,
    declared_names,
    fresh_names,
    guarded_region,
    identifiers_in,
    index_variables,
    kernel_tree,
    single_declaration,
    statements,
    strip_parens,
    subscript_parts,
    walk,
    walk_with_comments,
    writes,
)
from cuda_agent.agent.spec import dtype_of_c_type
from cuda_agent.agent.spec.dtypes import INTEGER_DTYPES
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.sandbox.plan import DTYPE_BYTES
from tree_sitter import Node

PROPOSER = "vectorize-rows"
# Bytes a vector access moves, widest first, and the type that moves them.
VECTOR_BYTES = {16: "uint4", 8: "uint2"}

ROW, COLUMN = "row", "column"  # an access at the thread's element, or at its column of a per-column vector
Form = tuple[tuple[Monomial, int], ...]  # a linear index form, hashable
# What a per-row index (`scale[row]`) may not contain: calls and loads (which could differ per column),
# and assignments.
_UNSAFE_IN_FIXED_INDEX = frozenset(
    {"call_expression", "subscript_expression", "assignment_expression", "update_expression"}
)


@dataclass(frozen=True)
class RowWork:
    """The recognised kernel: its index names, the work and where the rewrite puts things."""

    row: str
    col: str
    col_type: str  # "int", as declared
    col_initializer: Node  # `blockIdx.x * blockDim.x + threadIdx.x`
    declarations_end: int  # the end of the later index declaration's line
    indent: str  # the index declarations' indentation
    bound: str  # the columns' bound in the guard: "cols"
    work: tuple[Node, ...]  # the guarded statements, comments among them included
    # The guard's statement when the rewrite replaces it with a block of its own (it is not a `{ ... }`
    # with the statements on lines of their own); None when the rewrite replaces the work in place.
    wrapped: Node | None
    aliases: tuple[Node, ...]  # top-level `int idx = row * cols + col;` declarations in the work


@dataclass
class Buffer:
    """A pointer parameter the work reads or writes at the thread's element or column."""

    name: str
    type: str  # element type as written: "half"
    kind: str  # ROW or COLUMN
    form: Form
    index: str  # the index of its first access, as written: "row * cols + col", "idx", "col"
    stride: str | None  # the row stride of a ROW access: "cols"
    accesses: list[Node] = field(default_factory=list)  # its subscripts at the element or column
    loaded: bool = False
    stored: bool = False


def propose_vectorize_rows(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    spec = target.spec
    if tree is None or spec is None or len(spec.launch.grid) != 2:
        return []
    work = _row_work(tree)
    buffers = _buffers(tree, work) if work is not None else None
    if work is None or buffers is None:
        return []
    sizes = {_element_bytes(tree, b.name) for b in buffers}
    element_bytes = sizes.pop() if len(sizes) == 1 else None
    if element_bytes is None:
        return []
    element = next(b.type for b in buffers if b.stored)
    candidates = []
    for vector_bytes, vector in VECTOR_BYTES.items():
        width = vector_bytes // element_bytes
        if width < 2:
            continue
        source = tree.apply_to_file(_edits(tree, work, buffers, width, vector_bytes, vector))
        launch = spec.launch
        grid = (coarsened_grid(launch.grid[0], width), *launch.grid[1:])
        candidates.append(
            candidate_from(
                target,
                source,
                description=f"{width}-wide {vector_bytes}-byte loads and stores along rows "
                f"({element} ×{width}), scalar path for unaligned rows",
                proposer=PROPOSER,
                launch=replace(launch, grid=grid),
            )
        )
    return candidates


# -- recognition ---------------------------------------------------------------------------------------


def _row_work(tree: KernelTree) -> RowWork | None:
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(indices) != 2:
        return None
    axes = {axis: name for name, (axis, _) in indices.items()}
    col, row = axes.get("x"), axes.get("y")
    if col is None or row is None or set(guarded.bounds) != {row, col}:
        return None
    if col in identifiers_in(tree, guarded.bounds[col]):
        return None
    declarations = [statement for _, statement in indices.values()]
    if set(guarded.prefix) != set(declarations) or any(_declarators(d) != 1 for d in declarations):
        return None
    col_declaration = indices[col][1]
    declared = single_declaration(col_declaration, tree)
    if declared is None or declared[2] is None:
        return None
    col_type, _, initializer = declared
    guard = statements(tree.body)[len(guarded.prefix)]
    consequence = guard.child_by_field_name("consequence")
    if guard.type != "if_statement" or consequence is None:
        return None
    early_return = [s.type for s in statements(consequence)] == ["return_statement"]
    if early_return:  # `if (row >= rows || col >= cols) return; work...`
        work = [n for n in tree.body.named_children if n.start_byte > guard.end_byte]
    else:
        work = list(consequence.named_children) if consequence.type == "compound_statement" else [consequence]
    statements_ = [n for n in work if n.type != "comment"]
    if not statements_:
        return None
    # The work is replaced in place when its statements are on lines of their own (comments above the
    # first one stay where they are); otherwise the guard's statement is replaced with a block.
    in_place = tree.starts_line(statements_[0]) and (
        early_return
        or (consequence.type == "compound_statement" and tree.starts_line(consequence.children[-1]))
    )
    if in_place:
        work, wrapped = work[work.index(statements_[0]) :], None
    elif early_return:
        return None  # `if (...) return; work...` on one line
    else:
        wrapped = consequence
    if not _self_contained_work(tree, statements_, row, col):
        return None
    aliases = _aliases(tree, statements_, row, col)
    if aliases is None:
        return None
    last = max(d.end_byte for d in declarations)
    line_end = tree.data.find(b"\n", last)
    return RowWork(
        row=row,
        col=col,
        col_type=col_type,
        col_initializer=initializer,
        declarations_end=len(tree.data) if line_end == -1 else line_end,
        indent=tree.indent_at(col_declaration.start_byte),
        bound=guarded.bounds[col],
        work=tuple(work),
        wrapped=wrapped,
        aliases=tuple(aliases),
    )


def _declarators(declaration: Node) -> int:
    return len(declaration.children_by_field_name("declarator"))


def _self_contained_work(tree: KernelTree, work: list[Node], row: str, col: str) -> bool:
    """The work computes the element from row and col alone (pattern.py's rules), changes neither them
    nor any scalar parameter, and declares no local that hides them or a parameter."""
    fixed = {row, col} | {p.name for p in tree.target.kernel.parameters}
    for node in work:
        if not self_contained(tree, node, col) or declared_names(node, tree) & fixed:
            return False
        if any(target.type == "identifier" and tree.text(target) in fixed for target in writes(node, tree)):
            return False
    return True


def _aliases(tree: KernelTree, work: list[Node], row: str, col: str) -> list[Node] | None:
    """The top-level `int idx = row * cols + col;` declarations (of an integer type): names for the
    element's index, which the vector path declares once (for the first column) before its loads. None
    when one is assigned to or declared again."""
    scalars = _scalars(tree)
    found: list[Node] = []
    for node in work:
        declared = single_declaration(node, tree)
        if declared is None or declared[2] is None or dtype_of_c_type(declared[0]) not in INTEGER_DTYPES:
            continue
        if _row_stride(linear_form(declared[2]), row, col, scalars) is not None:
            found.append(node)
    names = [_declared_name(tree, a) for a in found]
    if len(set(names)) != len(names):
        return None
    for node in work:
        if node in found:
            continue
        if declared_names(node, tree) & set(names):
            return None
        if any(target.type == "identifier" and tree.text(target) in names for target in writes(node, tree)):
            return None
    return found


def _declared_name(tree: KernelTree, declaration: Node) -> str:
    declared = single_declaration(declaration, tree)
    assert declared is not None
    return declared[1]


def _scalars(tree: KernelTree) -> set[str]:
    return {p.name for p in tree.target.kernel.parameters if not p.is_pointer}


def _row_stride(form: dict[Monomial, int] | None, row: str, col: str, scalars: set[str]) -> str | None:
    """The stride S of `row * S + col` (S a scalar parameter), given the index's linear form."""
    if form is None or len(form) != 2 or form.get((col,)) != 1:
        return None
    [(product, coefficient)] = [(m, c) for m, c in form.items() if m != (col,)]
    if coefficient != 1 or len(product) != 2 or row not in product:
        return None
    stride = product[1] if product[0] == row else product[0]
    return stride if stride in scalars and stride not in (row, col) else None


def _buffers(tree: KernelTree, work: RowWork) -> list[Buffer] | None:
    """Every buffer the work touches at the element or its column, in signature order; None when a pointer
    is used any other way (a neighbour, a transpose, pointer arithmetic, `y[idx]++`)."""
    parameters = {p.name: p for p in tree.target.kernel.parameters if p.is_pointer}
    scalars = _scalars(tree)
    aliases = {_declared_name(tree, a): a for a in work.aliases}
    alias_forms = {name: linear_form(_value(tree, a)) for name, a in aliases.items()}
    top_level = set(work.work)
    span = (work.work[0].start_byte, work.work[-1].end_byte)
    found: dict[str, Buffer] = {}
    fixed_reads: set[str] = set()
    conditional: set[str] = set()  # stored under a condition or in a loop
    for node in walk_with_comments(tree.body):
        if node.type != "identifier" or tree.text(node) not in parameters:
            continue
        name = tree.text(node)
        parameter = parameters[name]
        subscript = node.parent
        if not span[0] <= node.start_byte < span[1] or subscript is None or parameter.pointer_depth != 1:
            return None
        parts = subscript_parts(subscript)
        if parts is None or subscript.child_by_field_name("argument") != node:
            return None
        written = subscript_written(subscript)
        if written is None:
            return None
        index = strip_parens(parts[1])
        if index.type == "identifier" and tree.text(index) in aliases:
            form = alias_forms[tree.text(index)]
        else:
            form = linear_form(index)
        stride = _row_stride(form, work.row, work.col, scalars)
        if stride is not None:
            kind = ROW
        elif form == {(work.col,): 1}:
            kind = COLUMN
        elif not written and _fixed_index(tree, index, work.row, scalars):
            fixed_reads.add(name)  # the same value for every column: left as written
            continue
        else:
            return None
        assert form is not None
        key = tuple(sorted(form.items()))
        buffer = found.setdefault(name, Buffer(name, parameter.type, kind, key, tree.text(parts[1]), stride))
        if (buffer.kind, buffer.form) != (kind, key):
            return None
        buffer.accesses.append(subscript)
        if written:
            buffer.stored = True
        # A compound assignment reads too; so does a write under a condition or in a loop, since the vector
        # store writes every column and must write back what the kernel left unchanged (unless a
        # statement of the work always stores it: an if and its else both storing, checked below).
        statement = subscript.parent.parent if subscript.parent is not None else None
        if not written or compound_assignment(subscript):
            buffer.loaded = True
        elif statement not in top_level:
            conditional.add(name)
    for name in conditional:
        covered = set(found[name].accesses)
        if not any(always_assigns(s, lambda place, covered=covered: place in covered) for s in work.work):
            found[name].loaded = True
    buffers = [found[p.name] for p in tree.target.kernel.parameters if p.name in found]
    if not any(b.stored for b in buffers) or any(b.stored and b.kind == COLUMN for b in buffers):
        return None
    if fixed_reads & {b.name for b in buffers if b.stored}:
        return None
    return buffers


def _value(tree: KernelTree, declaration: Node) -> Node:
    declared = single_declaration(declaration, tree)
    assert declared is not None and declared[2] is not None
    return declared[2]


def _fixed_index(tree: KernelTree, index: Node, row: str, scalars: set[str]) -> bool:
    """Whether the index is the same for every column of the row: only `row`, scalars and literals."""
    for node in walk(index):
        if node.type in _UNSAFE_IN_FIXED_INDEX:
            return False
        if node.type == "identifier" and tree.text(node) not in scalars | {row}:
            return False
    return True


def _element_bytes(tree: KernelTree, name: str) -> int | None:
    """The size of a buffer's elements, from its C type (None for a template's T or a struct)."""
    parameter = tree.parameter(name)
    dtype = dtype_of_c_type(parameter.type) if parameter is not None else None
    return DTYPE_BYTES[dtype] if dtype is not None else None


# -- the rewrite ---------------------------------------------------------------------------------------


def _edits(
    tree: KernelTree, work: RowWork, buffers: list[Buffer], width: int, vector_bytes: int, vector: str
) -> list[Edit]:
    taken = tree.identifiers()
    names = [b.name for b in buffers]
    arrays = dict(zip(names, fresh_names(taken, *(f"{name}{width}" for name in names)), strict=True))
    aligned, lane, column = fresh_names(taken, "aligned", "j", "c")
    col = work.col
    bound = work.bound if work.bound.isidentifier() else f"({work.bound})"
    strides = sorted({b.stride for b in buffers if b.stride is not None})
    # When the columns' bound is the row stride and a multiple of the width, every thread's first column
    # (a multiple of the width below the bound) starts a whole vector; any other bound needs the check.
    full_check = "" if strides == [work.bound] else f" && {col} + {width} <= {bound}"
    multiples = "".join(f"{stride} % {width} == 0 && " for stride in strides)
    casts = " | ".join(f"(unsigned long long){b.name}" for b in buffers)

    unit = tree.indent_unit()
    guard = work.wrapped.parent if work.wrapped is not None else None
    guard_indent = tree.indent_at(guard.start_byte) if guard is not None else ""
    outer = guard_indent + unit if guard is not None else tree.indent_at(work.work[0].start_byte)
    inner, innermost = outer + unit, outer + 2 * unit

    at_element = {(a.start_byte, a.end_byte): arrays[b.name] for b in buffers for a in b.accesses}
    alias_names = {_declared_name(tree, a) for a in work.aliases}

    def in_vector(node: Node) -> str | None:
        """Column `col + lane` of the vector: the buffers' elements from the arrays."""
        if node.type == "subscript_expression" and (node.start_byte, node.end_byte) in at_element:
            return f"{at_element[(node.start_byte, node.end_byte)]}[{lane}]"
        if node.type == "identifier" and tree.text(node) in alias_names | {col}:
            return f"({tree.text(node)} + {lane})"
        return None

    def in_scalar(node: Node) -> str | None:
        return column if node.type == "identifier" and tree.text(node) == col else None

    aliases = set(work.aliases)
    per_column = [n for n in work.work if n not in aliases and not _trails(n, aliases)]
    lines = [f"{outer}if ({aligned}{full_check}) {{"]
    hoisted = [n for n in work.work if n in aliases or _trails(n, aliases)]
    lines += rendered_statements(tree, hoisted, inner, lambda _: None, comments=True)
    lines += [f"{inner}alignas({vector_bytes}) {b.type} {arrays[b.name]}[{width}];" for b in buffers]
    lines += [
        f"{inner}*reinterpret_cast<{vector}*>({arrays[b.name]}) = "
        f"*reinterpret_cast<const {vector}*>(&{b.name}[{b.index}]);"
        for b in buffers
        if b.loaded
    ]
    lines += [f"{inner}#pragma unroll", f"{inner}for (int {lane} = 0; {lane} < {width}; ++{lane}) {{"]
    lines += rendered_statements(tree, per_column, innermost, in_vector, comments=True)
    lines.append(f"{inner}}}")
    lines += [
        f"{inner}*reinterpret_cast<{vector}*>(&{b.name}[{b.index}]) = "
        f"*reinterpret_cast<const {vector}*>({arrays[b.name]});"
        for b in buffers
        if b.stored
    ]
    why = f"rows not aligned for {vector_bytes}-byte access"
    lines.append(
        f"{outer}}} else {{  // {'the last columns, or ' if full_check else ''}{why}: one column at a time"
    )
    lines.append(
        f"{inner}for ({work.col_type} {column} = {col}; {column} < {bound} && {column} < {col} + {width}; "
        f"++{column}) {{"
    )
    lines += rendered_statements(tree, work.work, innermost, in_scalar, comments=True)
    lines += [f"{inner}}}", f"{outer}}}"]

    if work.wrapped is not None:
        text = "{\n" + "\n".join(lines) + f"\n{guard_indent}}}"
        replaced: Edit = (work.wrapped.start_byte, work.wrapped.end_byte, text)
    else:
        replaced = (work.work[0].start_byte, work.work[-1].end_byte, "\n".join(lines)[len(outer) :])
    indent = work.indent
    return [
        (
            work.col_initializer.start_byte,
            work.col_initializer.end_byte,
            f"({tree.text(work.col_initializer)}) * {width}",
        ),
        (  # after the index declarations' line, so a comment at its end stays with it
            work.declarations_end,
            work.declarations_end,
            f"\n{indent}// {width} columns a thread; {vector_bytes}-byte loads and stores when the rows "
            f"and buffers are aligned for them"
            f"\n{indent}bool {aligned} = {multiples}(({casts}) & {vector_bytes - 1}) == 0;",
        ),
        replaced,
    ]


def _trails(node: Node, statements_: set[Node]) -> bool:
    """A comment at the end of one of the statements' lines."""
    previous = node.prev_sibling
    return (
        node.type == "comment"
        and previous is not None
        and previous in statements_
        and previous.end_point.row == node.start_point.row
    )
