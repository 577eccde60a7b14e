"""A thread per element of a flat index taken apart as (row, column) -> a thread per row, looping over
the columns.

Outside code often launches one thread per output element and recovers the element's row and column
from the flat index (`int row = i / D; int col = i % D;`, or `(idx / OW) % OH` for an inner axis). Each
thread then redoes the row's own work: it divides, and it loads what the row depends on (an index into a
table, a token id) before the load it came for, a dependent chain of two loads an element. Vector loads
cannot apply either: the thread's element is not `p[i]` everywhere.

Rewritten as what it computes: one thread for each row of `D` elements, its own statements of the row
(those that read neither the column nor the flat index, leading the body) once, then a loop over the
columns running the user's statements as written, with `i / D` read as the row, `i % D` as the column,
`i / (k * D)` as `row / k` and `i % (k * D)` as `(row % k) * D + col` (exact: the column is below `D`),
and `i` itself, where still read, as `row * D + col`. Every element is computed once, by the same
statements. This is a plain loop a row, so `rewrite:warp-per-output` then splits it across a warp's
lanes (neighbouring lanes at neighbouring columns again) and `rewrite:vector-loop` widens its loads; the
search chains them.

Offered where the block and grid are 1-D, the kernel's index is the global x index, bounded by a
multiple of `D` (`if (i >= n * D) return;`, `if (i < B * T * C) { ... }`; or by a count of its own,
`if (i < total)`, that is one at every size the spec runs, an assumption the candidate states), every
division and remainder of it is by a multiple of one `D`, and the work after the bounds check has no
return, no jump out of it, no barrier, no shared memory, no warp-level operation and no other read of the
thread's identity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names
from cuda_agent.agent.analysis.facts import ThreadIndex
from cuda_agent.agent.analysis.forms import Atoms, Form, exact_quotient
from cuda_agent.agent.analysis.preprocessor import kernel_definitions
from cuda_agent.agent.analysis.values import Values, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import (
    NotInSizes,
    as_factor,
    as_operand,
    bound_terms,
    spelled,
)
from cuda_agent.agent.proposers.rewrites._one_thread import (
    Unsupported,
    check_statements,
    declared_once,
    pure_declaration,
)
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    declarator_name,
    identifiers,
    local_names,
    reindent,
    single_declaration,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from cuda_agent.agent.spec.model import SpecResolveError
from cuda_agent.agent.spec.resolve import complete_sizes
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:row-loop"
# At the benchmark's sizes, warps fewer than this (132 SMs, 8 warps an SM; a row split across a warp, or
# across a block of a warp per 32 of its columns) or rows shorter than a warp leave the split loop idle:
# the thread an element the user wrote keeps more of the GPU busy.
MIN_ROWS = 132 * 8
MIN_COLUMNS = 32
# Also a thread for each few neighbouring columns of a row: windows that overlap (pooling, stencils) share
# loads, and the row's own work is done once a few columns (3x3/2 max pooling on the H100: 2 columns
# 0.092 ms, the thread an element 0.109, torch.compile 0.097; 4 columns 0.118)
COLUMN_GROUPS = (2,)


@dataclass
class _Split:
    """How the flat index is taken apart, and the texts the rewrite substitutes for its pieces."""

    index: str
    columns: Form  # D
    columns_text: str  # D in the kernel's spelling, valid where the row's loop is
    row: str
    col: str
    pieces: dict[tuple[int, int], str] = field(default_factory=dict)  # span of `i / X`, `i % X` -> its text
    removed: set[int] = field(default_factory=set)  # start bytes of `int row = i / D;` and `int col = ...`


@dataclass(frozen=True)
class _Layout:
    """Where the kernel's statements go: the index, its bounds check, what stays before it, the work."""

    index: ThreadIndex
    guard: Node
    early_return: bool
    staying: list[Node]  # declarations between the index and the check that do not read the index
    work: list[Node]  # every statement that computes an element, in order


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    spec = target.spec
    if found is None or spec is None or len(spec.launch.block) != 1 or len(spec.launch.grid) != 1:
        return []
    tree, facts = found
    if facts.uses_shared or facts.barriers:
        return []
    try:
        return [_rewrite(tree, facts, spec.launch, group) for group in (1, *COLUMN_GROUPS)]
    except (Unsupported, NotInSizes):
        return []


def _rewrite(tree: KernelTree, facts: KernelFacts, launch: LaunchSpec, group: int = 1) -> Candidate:
    index = _flat_index(tree, facts)
    guard = facts.guard
    if guard is None or guard.others or len(guard.bounds) != 1 or guard.bounds[0].index != index.name:
        raise Unsupported("the bounds check is not on the flat index alone")
    body = [c for c in tree.body.named_children]
    code = [c for c in body if c.type != "comment"]
    at, checked = code.index(index.declaration), code.index(guard.statement)
    if checked < at:
        raise Unsupported("the bounds check comes before the index")
    middle = [c for c in body if index.declaration.end_byte <= c.start_byte < guard.statement.start_byte]
    if any(c.type not in ("declaration", "comment") for c in middle):
        raise Unsupported("statements with effects between the index and its bounds check")
    staying, middle = _apart(tree, middle, index.name)
    if guard.early_return:
        work = middle + [c for c in body if c.start_byte >= guard.statement.end_byte]
    else:
        consequence = guard.statement.child_by_field_name("consequence")
        assert consequence is not None
        inner = (
            list(consequence.named_children) if consequence.type == "compound_statement" else [consequence]
        )
        work = middle + inner
    _check_work(tree, facts, work, index.name)
    values = _values_before(tree, body[: body.index(index.declaration)])
    split = _split(tree, values, work, index, body[: body.index(index.declaration)])
    bound, bound_text = guard.bounds[0].bound, guard.bounds[0].bound_text
    rows = exact_quotient(bound, split.columns)
    assumptions: tuple[str, ...] = ()
    if rows is not None and "⟨" not in rows.text():
        rows_kernel, rows_spec = bound_terms(tree, rows)
        if bound_text.isidentifier() and bound_text not in {p.name for p in tree.target.kernel.parameters}:
            rows_kernel = f"{bound_text} / {split.columns_text}"  # `int N = B * T * C;` stays read
    else:  # a count of its own (`if (i < total)`): whole rows wherever the spec runs the kernel
        rows_kernel, rows_spec = _rows_by_sizes(tree, bound, bound_text, split)
        assumptions = (
            f"{bound_text} is a whole number of rows of {split.columns_text}, as at every size the spec "
            "runs the kernel",
        )
    _check_coverage(tree, launch, bound_text, rows_spec, split)
    layout = _Layout(index, guard.statement, guard.early_return, staying, work)
    text, hoisted = _body(tree, layout, split, rows_kernel, group)
    once = f" (the row's own {', '.join(hoisted)} once)" if hoisted else ""
    threads = rows_spec
    if group > 1:
        _, columns_spec = bound_terms(tree, split.columns)
        threads = f"{as_factor(rows_spec)} * ceil_div({columns_spec}, {group})"
    who = f"{group} neighbouring columns of a row" if group > 1 else "row"
    return build_candidate(
        tree,
        body=text,
        launch=LaunchSpec(block=launch.block, grid=(f"ceil_div({threads}, block.x)",)),
        description=(
            f"a thread for each {who} of {split.columns_text} elements{once}, its columns in a loop, "
            f"instead of a thread an element taking {split.index} apart"
        ),
        proposer=PROPOSER,
        assumptions=assumptions,
    )


# -- the flat index and its pieces ------------------------------------------------------------------------


def _flat_index(tree: KernelTree, facts: KernelFacts) -> ThreadIndex:
    flat = [i for i in facts.indices if i.direct]
    if len(flat) != 1 or flat[0].axis != "x":
        raise Unsupported("not one flat index along x")
    return declared_once(tree, flat[0])


def _check_work(tree: KernelTree, facts: KernelFacts, work: list[Node], index: str) -> None:
    # atomics are fine: one thread does the row's in turn
    spans = [(w.start_byte, w.end_byte) for w in work]
    if any(any(a <= n.start_byte < b for a, b in spans) for n in facts.thread_uses):
        raise Unsupported("the work reads the thread's identity")
    check_statements(tree, work)


def _values_before(tree: KernelTree, before: list[Node]) -> Values:
    """Forms of the index's divisors, through the locals declared before the index (`int N = C / NH;`)."""
    values = Values(Atoms(), kernel_definitions(tree), frozenset())
    mutable = assigned_names(tree.body)
    for statement in before:
        declared = single_declaration(statement, tree)
        if declared is not None and declared[2] is not None and declared[1] not in mutable:
            values.bindings[declared[1]] = values.form(declared[2])
    return values


def _split(
    tree: KernelTree, values: Values, work: list[Node], index: ThreadIndex, before: list[Node]
) -> _Split:
    """The divisions and remainders of the index in the work, by multiples of the smallest divisor D."""
    found: list[tuple[Node, str, Form, Node]] = []  # (node, operator, divisor, divisor node)
    for statement in work:
        for node in walk(statement):
            if node.type != "binary_expression":
                continue
            operator, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
            if operator is None or left is None or right is None or operator.type not in ("/", "%"):
                continue
            if unwrap(left).type == "identifier" and tree.text(unwrap(left)) == index.name:
                divisor = values.form(right)
                if divisor.is_constant() and (divisor.value() or 0) <= 0:
                    raise Unsupported("a division by a number that is not positive")
                if any(a.startswith("⟨") or "." in a for a in divisor.atoms()):
                    raise Unsupported("a divisor that is not made of sizes")
                found.append((node, operator.type, divisor, right))
    divisors = [d for _, _, d, _ in found]
    smallest = [d for d in divisors if all(exact_quotient(other, d) is not None for other in divisors)]
    if not smallest:
        raise Unsupported("the index is not taken apart by multiples of one size")
    columns = smallest[0]
    columns_node = next(n for _, _, d, n in found if d == columns)
    columns_text = as_factor(_in_scope(tree, columns_node, columns, before))
    row, col = _names(tree, work, found, columns)
    split = _Split(index.name, columns, columns_text, row, col)
    for node, operator, divisor, _ in found:
        k = exact_quotient(divisor, columns)
        assert k is not None
        k_text = as_operand(spelled(k, {}))
        if k == Form.constant(1):
            split.pieces[_span(node)] = row if operator == "/" else col
        elif operator == "/":
            split.pieces[_span(node)] = f"({row} / {k_text})"
        else:
            split.pieces[_span(node)] = f"(({row} % {k_text}) * {columns_text} + {col})"
    for statement in work:
        declared = single_declaration(statement, tree)
        if declared is not None and declared[1] in (row, col) and declared[2] is not None:
            split.removed.add(statement.start_byte)
    return split


def _names(
    tree: KernelTree, work: list[Node], found: list[tuple[Node, str, Form, Node]], columns: Form
) -> tuple[str, str]:
    """The user's own names for the row and the column (`int token = idx / D;`), else fresh ones."""
    mutable = assigned_names(tree.body)
    chosen: dict[str, str] = {}
    whole = {_span(n): op for n, op, d, _ in found if d == columns}
    for statement in work:
        declared = single_declaration(statement, tree)
        if declared is None or declared[2] is None or declared[1] in mutable:
            continue
        operator = whole.get(_span(unwrap(declared[2])))
        if operator is not None and operator not in chosen:
            chosen[operator] = declared[1]
    fresh = local_names(tree, "row", "col")
    return chosen.get("/", fresh["row"]), chosen.get("%", fresh["col"])


def _in_scope(tree: KernelTree, node: Node, form: Form, before: list[Node]) -> str:
    """The divisor as the user wrote it where the loop can read it (parameters, macros, locals declared
    before the index), else spelled out from its form."""
    known = {p.name for p in tree.target.kernel.parameters} | set(kernel_definitions(tree).constants)
    known |= {
        name
        for s in before
        if s.type == "declaration"
        for d in s.children_by_field_name("declarator")
        if (name := declarator_name(d)) is not None
    }
    if identifiers(node) <= known or not identifiers(node):
        return tree.text(node)
    text = spelled(form, {})
    if "⟨" in text:
        raise Unsupported("a divisor the loop cannot spell")
    return text


def _rows_by_sizes(tree: KernelTree, bound: Form, bound_text: str, split: _Split) -> tuple[str, str]:
    """(rows in the kernel's terms, in the spec's) for a bound that is not a multiple of D as a form but
    is one at the benchmark's sizes and at every verify size."""
    spec = tree.target.spec
    assert spec is not None
    elements, columns = bound_terms(tree, bound)[1], bound_terms(tree, split.columns)[1]
    for overrides in ({}, *spec.verify_sizes):
        try:
            sizes = complete_sizes(spec, overrides)
            whole = evaluate(columns, sizes) > 0 and evaluate(elements, sizes) % evaluate(columns, sizes) == 0
        except (ExpressionError, SpecResolveError, ArithmeticError, TypeError) as exc:
            raise Unsupported(f"the bound is not known at every size: {exc}") from exc
        if not whole:
            raise Unsupported("the bound is not a whole number of rows")
    return f"{as_factor(bound_text)} / {split.columns_text}", f"{as_factor(elements)} // {as_factor(columns)}"


def _check_coverage(tree: KernelTree, launch: LaunchSpec, bound: str, rows: str, split: _Split) -> None:
    """The original launch reaches every element the bound allows (at the benchmark's sizes): the rewrite
    computes all of them, so it must not compute ones the original never did. And the rows are enough,
    and long enough, to be worth a warp each."""
    spec = tree.target.spec
    assert spec is not None
    grid = re.sub(r"\bblock\.x\b", str(launch.block[0]), launch.grid[0])
    try:
        threads = evaluate(grid, spec.sizes) * launch.block[0]
        columns = evaluate(bound_terms(tree, split.columns)[1], spec.sizes)
        elements = evaluate(rows, spec.sizes) * columns
    except (ExpressionError, ArithmeticError, NotInSizes, TypeError) as exc:
        raise Unsupported(f"the launch's reach is not known: {exc}") from exc
    if threads < elements:
        raise Unsupported(f"the launch reaches {threads} of the {elements} elements below {bound}")
    # a long row fills a block of up to 1024 threads (a warp per 32 columns) once the loop is split
    if (elements // columns) * min(columns // 32, 32) < MIN_ROWS or columns < MIN_COLUMNS:
        raise Unsupported(f"{elements // columns} rows of {columns}: too few or too short to split")


# -- the new body -----------------------------------------------------------------------------------------


def _apart(tree: KernelTree, middle: list[Node], index: str) -> tuple[list[Node], list[Node]]:
    """The declarations between the index and its bounds check that do not read it, through the locals
    that do (they stay where they are: `int N = B * T * C;`), and those that do (they are the work's)."""
    reading = {index}
    staying, moved = [], []
    for statement in middle:
        if statement.type != "comment" and identifiers(statement) & reading:
            reading |= set(_declared(tree, statement))
            moved.append(statement)
        else:
            staying.append(statement)
    return staying, moved


def _body(tree: KernelTree, layout: _Layout, split: _Split, rows: str, group: int) -> tuple[str, list[str]]:
    index, early_return, work = layout.index, layout.early_return, layout.work
    unit = tree.indent_unit()
    outer = tree.indent_at(index.declaration.start_byte)
    declaration = tree.text(index.declaration)
    name_at = _declared_name_node(index.declaration)
    start = name_at.start_byte - index.declaration.start_byte
    prefix = declaration[:start]  # `const int `
    row_declaration = prefix + split.row + declaration[start + len(index.name) :]
    kept = [w for w in work if w.start_byte not in split.removed]
    hoisted, looped = _hoistable(tree, kept, split)
    if not any(s.type != "comment" for s in looped):
        raise Unsupported("nothing a column does")
    loop_type = prefix.replace("const", "").strip() or "int"
    inner = outer if early_return else outer + unit
    columns = split.columns_text
    if group > 1:  # the thread's number is the row's and, below it, which group of the row's columns
        fresh = local_names(tree, f"{split.row}_{group}s", f"{split.col}0")
        first, first_column = fresh[f"{split.row}_{group}s"], fresh[f"{split.col}0"]
        lines = [tree.data[tree.body.start_byte : index.declaration.start_byte].decode("utf-8")]
        lines[0] += prefix + first + declaration[start + len(index.name) :]
        groups = f"((({columns}) + {group - 1}) / {group})"
        lines.append(f"{outer}{loop_type} {split.row} = {first} / {groups};")
        lines.append(f"{outer}{loop_type} {first_column} = {first} % {groups} * {group};")
    else:
        lines = [
            tree.data[tree.body.start_byte : index.declaration.start_byte].decode("utf-8") + row_declaration
        ]
    lines += [_moved(tree, s, split, outer) for s in layout.staying]
    what = f"{group} neighbouring columns of a row" if group > 1 else f"row of {columns} elements"
    lines.append(f"{outer}// a thread for each {what}, looping over its columns")
    if early_return:
        lines.append(f"{outer}if ({split.row} >= {rows}) return;")
    else:
        lines.append(f"{outer}if ({split.row} < {rows}) {{")
    lines += [_moved(tree, s, split, inner) for s in hoisted]
    if group > 1:
        lines.append(f"{inner}#pragma unroll")
        lines.append(
            f"{inner}for ({loop_type} {split.col} = {first_column}; {split.col} < {first_column} + {group} "
            f"&& {split.col} < {columns}; ++{split.col}) {{"
        )
    else:
        lines.append(f"{inner}for ({loop_type} {split.col} = 0; {split.col} < {columns}; ++{split.col}) {{")
    still_read = any(
        n.type == "identifier" and tree.text(n) == split.index
        for s in looped
        for n in _unsubstituted(s, split)
    )
    if still_read:
        lines.append(
            f"{inner}{unit}{prefix}{split.index} = {split.row} * {split.columns_text} + {split.col};"
        )
    lines += [_moved(tree, s, split, inner + unit) for s in looped]
    lines.append(f"{inner}}}")
    if not early_return:
        lines.append(f"{outer}}}")
    return "\n".join(lines) + "\n}", [name for s in hoisted for name in _declared(tree, s)]


def _declared_name_node(declaration: Node) -> Node:
    (declarator,) = declaration.children_by_field_name("declarator")
    inner: Node | None = declarator
    while inner is not None and inner.type != "identifier":
        inner = inner.child_by_field_name("declarator")
    assert inner is not None
    return inner


def _hoistable(tree: KernelTree, kept: list[Node], split: _Split) -> tuple[list[Node], list[Node]]:
    """The leading declarations that read neither the column nor the flat index (a local that does is
    declared after them): the row's own work, done once before the loop; the rest, the loop's body."""
    count = 0
    while count < len(kept) and (kept[count].type == "comment" or _row_only(tree, kept[count], split)):
        count += 1
    while count and kept[count - 1].type == "comment":  # a comment above the loop's first statement stays
        count -= 1
    return kept[:count], kept[count:]


def _row_only(tree: KernelTree, statement: Node, split: _Split) -> bool:
    return (
        bool(_declared(tree, statement))
        and not {split.col, split.index} & _read_names(tree, statement, split)
        and pure_declaration(tree, statement)
    )


def _read_names(tree: KernelTree, statement: Node, split: _Split) -> set[str]:
    """The names the statement reads once the index's pieces are substituted."""
    return {tree.text(n) for n in _unsubstituted(statement, split) if n.type == "identifier"} | {
        name
        for (start, _), text in split.pieces.items()
        if statement.start_byte <= start < statement.end_byte
        for name in re.findall(r"[A-Za-z_]\w*", text)
    }


def _unsubstituted(statement: Node, split: _Split) -> list[Node]:
    """The statement's nodes outside the pieces the rewrite replaces."""
    result, skip_until = [], -1
    for node in walk(statement):
        if node.start_byte < skip_until:
            continue
        if node.type == "binary_expression" and _span(node) in split.pieces:
            skip_until = node.end_byte
            continue
        result.append(node)
    return result


def _span(node: Node) -> tuple[int, int]:
    return node.start_byte, node.end_byte


def _declared(tree: KernelTree, statement: Node) -> list[str]:
    """The locals a plain declaration (`const float* plane = ...;`, `int a = 0, b = 1;`) declares with
    values; empty for anything else (arrays, shared memory, a declarator without a value)."""
    if statement.type != "declaration" or {"static", "__shared__", "extern"} & set(
        tree.text(statement).split()
    ):
        return []
    declarators = statement.children_by_field_name("declarator")
    if not declarators or any(d.type != "init_declarator" for d in declarators):
        return []
    if any(n.type == "array_declarator" for d in declarators for n in walk(d)):
        return []
    return [name for d in declarators if (name := declarator_name(d)) is not None]


def _moved(tree: KernelTree, statement: Node, split: _Split, indent: str) -> str:
    def substitute(node: Node) -> str | None:
        if node.type == "parenthesized_expression" and node.named_child_count == 1:
            piece = split.pieces.get(_span(node.named_children[0]), "")
            return piece if piece.isidentifier() else None  # `(idx / OW) % OH` is `row % OH`
        return split.pieces.get(_span(node)) if node.type == "binary_expression" else None

    text = tree.substituted(statement, substitute)
    return reindent(text, tree.indent_at(statement.start_byte), indent)
