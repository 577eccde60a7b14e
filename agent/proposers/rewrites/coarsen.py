"""A thread per output whose loop reads values that its neighbours along another launch axis read too ->
each thread computes F consecutive outputs along that axis (thread coarsening), those loads done once.

Driven by the analysis: the axis is a thread index along y or z, spelled as a global index (`oc =
blockIdx.y * blockDim.y + threadIdx.y`), a plain `blockIdx.y`, or the remainder of a block number taken
apart (`n = blockIdx.z / K; k = blockIdx.z % K`). The locals that depend on it (by value, or by the
conditions they are set under) become arrays of F; each statement that reads them runs once per value in
an unrolled loop, checked against the axis's bound (`k + f < K`); every other statement runs once, and
so does each load whose `Form` has no part in the axis: it is read into a register before its statement's
loop over the values. Each value keeps its statements in their order (nothing is reassociated), and the
values are independent: every store moves with the axis, and an array both read and written is touched
at one place only, each value's own element. The grid along the axis shrinks by F.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.dependence import dependent_locals
from cuda_agent.agent.analysis.facts import Access, Guard, ThreadIndex
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.analysis.preprocessor import kernel_definitions
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, bound_terms
from cuda_agent.agent.proposers.rewrites._combine import declared_type
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    apply_to_body,
    build_candidate,
    declarator_name,
    declared_names,
    fresh_names,
    has_any,
    identifiers,
    line_indent,
    size_expression,
    statements,
    walk,
)
from cuda_agent.agent.spec import ExpressionError, LaunchSpec, SpecResolveError, complete_sizes, resolve
from cuda_agent.agent.spec.expressions import evaluate
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:coarsen"
FACTORS = (2, 4, 8)  # consecutive values of the axis a thread computes
GLOBAL, BLOCK, SPLIT = "global", "block", "split"  # the axis's spellings, in the docstring's order
_EXITS = ("return_statement", "goto_statement")
_JUMPS = (*_EXITS, "break_statement", "continue_statement")
# where `k + f` needs no parentheses (a call's argument may be a macro's, pasted in as written)
_BARE = ("subscript_argument_list", "parenthesized_expression", "init_declarator")
_HEADED = ("if_statement", "for_statement")  # a header (`_HEADER`) and bodies (`_BODIES`)
_HEADER, _BODIES = ("initializer", "condition", "update"), ("consequence", "alternative", "body")


class _Unsupported(Exception):
    """Not this shape, or not provably the same results; the message says why (for debugging)."""


@dataclass(frozen=True)
class _Axis:
    index: ThreadIndex
    kind: str
    position: int  # the launch axis: 1 for y, 2 for z
    steps: tuple[str, ...]  # the atoms whose coefficients add up to an offset's change from value to value
    checks: tuple[str, ...]  # what each value must stay below, in the kernel's terms
    grid: str  # the new grid along the axis, `{F}` standing for the factor
    quotient: ThreadIndex | None = None  # SPLIT: `n = blockIdx.z / K`, if the kernel has one

    @property
    def atoms(self) -> frozenset[str]:
        """An offset depends on the axis when it holds one of these (or an opaque atom naming one)."""
        return frozenset({*self.steps, f"blockIdx.{'xyz'[self.position]}"})

    @property
    def declarations(self) -> list[Node]:
        """The declarations the rewrite edits: the index's, and a split's quotient's."""
        return [self.index.declaration, *([self.quotient.declaration] if self.quotient else [])]


@dataclass
class _Plan:
    axis: _Axis
    per_value: set[str]  # the locals that differ between the values, the axis among them
    arrays: dict[str, Node] = field(default_factory=dict)  # their declarations run once -> arrays of F
    units: list[Node] = field(default_factory=list)  # the statements run once per value
    hoisted: dict[tuple[int, int], tuple[Access, str]] = field(default_factory=dict)  # load -> register
    once: list[Access] = field(default_factory=list)  # the loads of statements run once

    def reused(self) -> list[Access]:
        """The loads in loops read once for all the values: what the coarsening saves."""
        loads = [a for a, _ in self.hoisted.values()] + self.once
        return sorted((a for a in loads if a.loops), key=lambda a: a.node.start_byte)

    def saving(self) -> tuple[int, int]:
        """The loads read once that differ across the lanes (a broadcast is cheap anyway), then all."""
        loads = self.reused()
        return sum(a.lane_stride != 0 for a in loads), len(loads)


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    guard = facts.guard
    if guard is None or facts.uses_shared or facts.barriers or facts.atomics or facts.thread_uses:
        return []
    if facts.unmodelled or _hidden_effects(tree):
        return []
    plans = []
    for axis in _axes(tree, facts, guard):
        try:
            plans.append(_plan(tree, facts, guard, axis))
        except _Unsupported:
            continue
    plan = max(plans, key=_Plan.saving, default=None)  # the first of the axes saving the most
    loads = plan.reused() if plan is not None else []
    if plan is None or not loads:
        return []
    name, launch = plan.axis.index.name, target.spec.launch
    f, groups = fresh_names(tree.names() | {r for _, r in plan.hoisted.values()}, "f", f"{name}_groups")
    reused = ", ".join(dict.fromkeys(tree.text(a.node) for a in loads))
    candidates = []
    for factor in FACTORS:
        grid = list(launch.grid)
        grid[plan.axis.position] = plan.axis.grid.format(F=factor)
        candidates.append(
            build_candidate(
                tree,
                body=apply_to_body(tree, _edits(tree, plan, factor, f, groups)),
                launch=LaunchSpec(launch.block, tuple(grid), launch.shared_bytes),
                description=f"each thread computes {factor} consecutive values of {name}, reading {reused} "
                "once for all of them",
                proposer=PROPOSER,
            )
        )
    return candidates


# -- the axis ------------------------------------------------------------------------------------------


def _axes(tree: KernelTree, facts: KernelFacts, guard: Guard) -> list[_Axis]:
    """The thread indices along y or z in one of the three spellings, with their bounds and new grids."""
    spec = tree.target.spec
    assert spec is not None
    found = []
    for index in (i for i in facts.indices if i.direct):
        for position in range(1, len(spec.launch.grid)):
            axis = _axis(tree, facts, guard, index, position)
            if axis is not None and not _changes_another(facts, axis):
                found.append(axis)
    return found


def _changes_another(facts: KernelFacts, axis: _Axis) -> bool:
    """Whether another index reads a builtin the rewrite changes (one computed from the axis by name is a
    per-value local; a split's quotient is rewritten with it)."""
    letter = "xyz"[axis.position]
    changed = [f"blockIdx.{letter}", f"gridDim.{letter}"] + [f"threadIdx.{letter}"] * (axis.kind == GLOBAL)
    own = {axis.index.name, axis.quotient.name if axis.quotient else ""}
    atoms = [a for i in facts.indices if i.direct and i.name not in own for a in i.form.atoms()]
    return any(c in atom for atom in atoms for c in changed)


def _axis(
    tree: KernelTree, facts: KernelFacts, guard: Guard, index: ThreadIndex, position: int
) -> _Axis | None:
    letter = "xyz"[position]
    block, thread = f"blockIdx.{letter}", f"threadIdx.{letter}"
    grid = tree.target.spec.launch.grid[position]  # type: ignore[union-attr]
    bounds = [b for b in guard.bounds if b.index == index.name]
    checks = tuple(b.bound_text for b in bounds)
    if index.axis == letter:  # a global index: as far as the bounds check says, where the grid reaches it
        extent = _covered(tree, position, bounds[0].bound) if bounds else None
        if extent is None:
            return None
        grid = f"ceil_div({extent}, block.{letter} * {{F}})"
        return _Axis(index, GLOBAL, position, (thread,), checks, grid)
    if index.form == Form.atom(block):  # the block number: as far as the grid goes, a parameter's value
        extent = _parameter_valued(tree, grid)
        grid = f"ceil_div({grid}, {{F}})"
        return _Axis(index, BLOCK, position, (block,), (extent, *checks), grid) if extent else None
    # `k = blockIdx.z % K`, the grid a multiple of K, and `n = blockIdx.z / K` if the kernel has one
    split = _operands(_value(index), "%")
    divisor = _parameter_spec(tree, split[1]) if split is not None and split[0] == block else None
    if split is None or divisor is None or len(index.form.atoms()) != 1:
        return None
    (atom,) = index.form.atoms()
    quotient = next((i for i in facts.indices if atom.replace(") % (", ") / (") in i.form.atoms()), None)
    groups = _grid_in_groups(grid, divisor)
    if groups is None or (quotient is not None and _operands(_value(quotient), "/") != split):
        return None
    return _Axis(index, SPLIT, position, (atom, block), (split[1], *checks), groups, quotient)


def _value(index: ThreadIndex) -> Node | None:
    """The index's initial value, also where one declaration declares several (`int i = ..., j = ...;`)."""
    declarators = index.declaration.children_by_field_name("declarator")
    mine = [d for d in declarators if declarator_name(d) == index.name]
    value = mine[0].child_by_field_name("value") if len(mine) == 1 else None
    return unwrap(value) if value is not None else None


def _operands(node: Node | None, operator: str) -> tuple[str, str] | None:
    """("blockIdx.z", "K") for `blockIdx.z % K` (with `operator` "%"), spaces dropped."""
    if node is None or node.type != "binary_expression":
        return None
    left, op, right = (node.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None or op.type != operator:
        return None
    return "".join(text(unwrap(left)).split()), "".join(text(unwrap(right)).split())


def _parameter_spec(tree: KernelTree, name: str) -> str | None:
    value = size_expression(tree, name)
    return value[1:-1] if value is not None else None


def _parameter_valued(tree: KernelTree, grid: str) -> str | None:
    """The scalar parameter whose spec value is the grid's extent (`filters` for `grid.y = "filters"`)."""
    want = ast.dump(ast.parse(grid, mode="eval"))
    for parameter in tree.target.kernel.parameters:
        value = None if parameter.is_pointer else _parameter_spec(tree, parameter.name)
        if value is not None and ast.dump(ast.parse(value, mode="eval")) == want:
            return parameter.name
    return None


def _grid_in_groups(grid: str, divisor: str) -> str | None:
    """`N * K` with K the divisor -> `N * ceil_div(K, {F})`: the block number now counts groups of F."""

    def factors(node: ast.expr) -> list[ast.expr]:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return factors(node.left) + factors(node.right)
        return [node]

    parts = factors(ast.parse(grid, mode="eval").body)
    want = ast.dump(ast.parse(divisor, mode="eval").body)
    at = next((n for n, part in enumerate(parts) if ast.dump(part) == want), None)
    if at is None:
        return None
    simple = (ast.Name, ast.Constant, ast.Call)
    written = [ast.unparse(p) if isinstance(p, simple) else f"({ast.unparse(p)})" for p in parts]
    written[at] = f"ceil_div({divisor}, {{F}})"
    return " * ".join(written)


def _covered(tree: KernelTree, position: int, bound: Form) -> str | None:
    """The bound in the spec's sizes, where the original grid reaches it at every size the spec runs (the
    new grid reaches just past it, so both compute the same outputs); else None."""
    spec = tree.target.spec
    assert spec is not None
    try:
        extent = bound_terms(tree, bound)[1]
        for sizes in (complete_sizes(spec, overrides) for overrides in [{}, *spec.verify_sizes]):
            launch = resolve(spec, sizes)[1]
            if launch.grid[position] * launch.block[position] < evaluate(extent, sizes):
                return None
    except (NotInSizes, SpecResolveError, ExpressionError):
        return None
    return extent


# -- what runs once, and what once per value -----------------------------------------------------------


def _plan(tree: KernelTree, facts: KernelFacts, guard: Guard, axis: _Axis) -> _Plan:
    if _value(axis.index) is None:  # the value scaled by the factor is not written in the declaration
        raise _Unsupported(f"{axis.index.name} has no initial value of its own to scale")
    top = statements(tree.body)
    at = top.index(guard.statement)
    consequence = guard.statement.child_by_field_name("consequence")
    assert consequence is not None
    body = top[at + 1 :] if guard.early_return else statements(consequence)
    name = axis.index.name
    own = axis.declarations
    if not all(d in top[:at] for d in own) or any(name in identifiers(s) for s in top[:at] if s not in own):
        raise _Unsupported("the axis is declared after the bounds check, or read before it")
    if any(name in identifiers(node) for node in guard.others):
        raise _Unsupported("the bounds check compares the axis with something other than its bound")
    per_value = dependent_locals(body, {name})
    everywhere, inside = _declared(tree.body), [n for s in body for n in _declared(s)]
    if everywhere.count(name) != 1 or any(
        everywhere.count(n) != 1 or n not in inside for n in per_value - {name}
    ):
        raise _Unsupported("a local that differs between the values is declared twice or before the check")
    plan = _Plan(axis, per_value)
    _sort(tree, facts, plan, body, tree.names())
    _check_memory(tree, facts, plan)
    return plan


def _declared(node: Node) -> list[str]:
    """The names declared in the node, once per declaration (a name declared twice is listed twice)."""
    declarations = (n for n in walk(node) if n.type == "declaration")
    names = (declarator_name(d) for n in declarations for d in n.children_by_field_name("declarator"))
    return [name for name in names if name]


def _header_names(statement: Node) -> set[str]:
    """The names a loop's header or an if's condition reads."""
    return set().union(*map(identifiers, filter(None, map(statement.child_by_field_name, _HEADER))))


def _sort(tree: KernelTree, facts: KernelFacts, plan: _Plan, block: list[Node], taken: set[str]) -> None:
    """Statements that read no per-value local run once, as written; an if or a loop whose header reads
    none runs once, its body sorted in turn; a declaration of one becomes an array; the rest runs once per
    value. The loads of a declaration or an expression statement the same for every value get registers."""
    for statement in block:
        if not identifiers(statement) & plan.per_value:
            if has_any(statement, _EXITS):
                raise _Unsupported("a return after the bounds check")
        elif statement.type == "compound_statement":
            _sort(tree, facts, plan, statements(statement), taken)
        elif statement.type in _HEADED and not _header_names(statement) & plan.per_value:
            for child in filter(None, map(statement.child_by_field_name, _BODIES)):
                _sort(
                    tree, facts, plan, child.named_children if child.type == "else_clause" else [child], taken
                )
        elif statement.type == "declaration":
            plan.arrays[_array(tree, statement)[1]] = statement
            _hoist(tree, facts, plan, statement, taken)
        elif has_any(statement, _JUMPS):
            raise _Unsupported("a jump out of a statement run once per value")
        else:
            plan.units.append(statement)
            if statement.type == "expression_statement":
                _hoist(tree, facts, plan, statement, taken)


def _hoist(tree: KernelTree, facts: KernelFacts, plan: _Plan, statement: Node, taken: set[str]) -> None:
    """Each load of the statement the same for every value, and always evaluated, gets a register."""
    last = -1
    for access in sorted(_within(tree, facts, statement), key=lambda a: a.node.start_byte):
        node = access.node
        if access.write or node.start_byte < last or identifiers(node) & plan.per_value:
            continue  # a store, inside a load already read once, or naming a per-value local
        if _depends(plan.axis, access.offset, access.hidden) or not _always(node, statement):
            continue
        base = node.child_by_field_name("argument")
        stem = text(base) if base is not None and base.type == "identifier" else access.array
        plan.hoisted[(node.start_byte, node.end_byte)] = (access, fresh_names(taken, f"{stem}_val")[0])
        last = node.end_byte


def _within(tree: KernelTree, facts: KernelFacts, node: Node) -> list[Access]:
    """The accesses written inside the node."""
    return [
        a for a in facts.accesses if node.start_byte <= a.node.start_byte < node.end_byte and _here(tree, a)
    ]


def _here(tree: KernelTree, access: Access) -> bool:
    """Whether the access is written in the kernel's body (not in a helper's, nor a macro's parsed text)."""
    node = access.node
    while node.parent is not None:
        node = node.parent
    return node == tree.root and tree.body.start_byte <= access.node.start_byte < tree.body.end_byte


def _always(node: Node, statement: Node) -> bool:
    """Whether the statement evaluates the node whenever it runs (not in a branch of `?:`, `&&`, `||`)."""
    while node != statement and node.parent is not None:
        parent, operator = node.parent, node.parent.child_by_field_name("operator")
        if parent.type == "conditional_expression" and node != parent.child_by_field_name("condition"):
            return False
        logical = operator is not None and operator.type in ("&&", "||")
        if parent.type == "binary_expression" and logical and node == parent.child_by_field_name("right"):
            return False
        node = parent
    return True


def _depends(axis: _Axis, offset: Form, hidden: frozenset[str]) -> bool:
    """Whether the offset may differ between the values: it holds an axis atom, directly or inside an
    opaque one (whose name spells its inputs; a split's quotient is the same for every value)."""
    quotient = axis.steps[0].replace(") % (", ") / (") if axis.kind == SPLIT else "\0"
    for atom in offset.atoms():
        if atom in axis.atoms or (
            atom[0] == "⟨" and any(a in atom.replace(quotient, "") for a in axis.atoms)
        ):
            return True
    return axis.kind != SPLIT and bool(axis.atoms & hidden)  # a split's quotient has the same roots


def _check_memory(tree: KernelTree, facts: KernelFacts, plan: _Plan) -> None:
    """Every store runs per value and moves with the axis (the values write apart); an array both read and
    written is touched at one place (each value its own element); and every access run once does not
    depend on the axis (nothing the names missed)."""
    regions, axis = [*plan.units, *plan.arrays.values()], plan.axis
    for access in facts.accesses:
        start, here = access.node.start_byte, _here(tree, access)
        per_value = here and any(r.start_byte <= start < r.end_byte for r in regions)
        if access.write:
            steps = [access.offset.coefficient(a) for a in axis.steps]
            rest = access.offset
            for atom in axis.atoms:
                rest = rest.without(atom)
            if not per_value or None in steps or _depends(axis, rest, access.hidden):
                raise _Unsupported(f"a store to {access.array} not per value, or not affine in the axis")
            if not sum((s for s in steps if s is not None), Form()).terms:
                raise _Unsupported(f"every value stores to the same element of {access.array}")
        elif here and not per_value:
            if _depends(axis, access.offset, access.hidden):
                raise _Unsupported(f"{tree.text(access.node)} depends on the axis through a name not seen")
            plan.once.append(access)
    for array in {a.array for a in facts.accesses if a.write}:
        touched = [a for a in facts.accesses if a.array == array]
        if any(a.read for a in touched) and len({a.offset.text() for a in touched}) > 1:
            raise _Unsupported(f"{array} is read and written at different places")


def _hidden_effects(tree: KernelTree) -> bool:
    """Whether something a statement's names do not show could tie it to the axis: a macro reading the
    kernel's locals, a call to a function of the file that may store or take references, or a local's
    address taken."""
    definitions, local = kernel_definitions(tree), declared_names(tree.body, tree)
    functions = {declarator_name(n) or "" for n in walk(tree.root) if n.type == "function_definition"}
    # not expanded by the analysis; an operator's definition has no name a call could spell
    calls = functions - set(definitions.inlines) - {""}
    for node in walk(tree.body):
        name = text(node) if node.type == "identifier" else ""
        inline = definitions.inlines.get(name)
        macro = definitions.constants.get(name) or (inline.body if inline else None)
        if macro is not None and (identifiers(macro) - set(inline.parameters if inline else ())) & local:
            return True
        if name in calls:
            return True
        argument = node.child_by_field_name("argument") if node.type == "pointer_expression" else None
        if argument is not None and text(node).startswith("&") and text(unwrap(argument)) in local:
            return True
    return False


# -- the rewrite ---------------------------------------------------------------------------------------


def _edits(tree: KernelTree, plan: _Plan, factor: int, f: str, groups: str) -> list[Edit]:
    axis, name = plan.axis, plan.axis.index.name
    value = _value(axis.index)
    assert value is not None  # `_plan` refused the axis otherwise
    first = min(axis.declarations, key=lambda d: d.start_byte)
    indent = line_indent(tree, first)
    header = f"// each thread computes {name} .. {name} + {factor - 1}, "
    header += f"sharing the work that does not depend on {name}\n{indent}"
    if axis.kind == SPLIT:  # the block number now counts (quotient, a group of F values)
        block, divisor = axis.steps[1], axis.checks[0]
        header += f"const int {groups} = ({divisor} + {factor - 1}) / {factor};\n{indent}"
        edits: list[Edit] = [(value.start_byte, value.end_byte, f"{block} % {groups} * {factor}")]
        quotient = _value(axis.quotient) if axis.quotient else None
        if quotient is not None:
            edits.append((quotient.start_byte, quotient.end_byte, f"{block} / {groups}"))
    else:
        scaled = tree.text(value) if value.type == "field_expression" else f"({tree.text(value)})"
        edits = [(value.start_byte, value.end_byte, f"{scaled} * {factor}")]
    edits.append((first.start_byte, first.start_byte, header))
    bounds = [c if c.replace("_", "").isalnum() else f"({c})" for c in dict.fromkeys(axis.checks)]
    check = " && ".join(f"{name} + {f} < {bound}" for bound in bounds)
    unit = tree.indent_unit()
    loop = ["#pragma unroll", f"for (int {f} = 0; {f} < {factor}; ++{f})"]
    for local, declaration in plan.arrays.items():
        head, _, initial = _array(tree, declaration)
        lines = [f"{head}[{factor}];", *_registers(tree, plan, declaration)]
        if initial is not None:
            lines += [*loop, f"{unit}if ({check}) {local}[{f}] = {_for_value(tree, plan, initial, f)};"]
        edits.append(_placed(tree, declaration, lines))
    for statement in plan.units:
        written = _for_value(tree, plan, statement, f).replace("\n", "\n" + unit)
        lines = [*_registers(tree, plan, statement), *loop, f"{unit}if ({check}) {written}"]
        edits.append(_placed(tree, statement, lines))
    return edits


def _placed(tree: KernelTree, statement: Node, lines: list[str]) -> Edit:
    """The lines in place of the statement, on lines of their own (a `#pragma` must start one), braced
    where the statement was the body of a loop or an if."""
    before, unit = statement.prev_sibling, tree.indent_unit()
    if statement.parent is not None and statement.parent.type != "compound_statement" and before is not None:
        inner = "\n" + line_indent(tree, before) + unit
        braced = inner.join(line.replace("\n", "\n" + unit) for line in lines)
        return before.end_byte, statement.end_byte, f" {{{inner}{braced}\n{line_indent(tree, before)}}}"
    indent = line_indent(tree, statement)
    written = ("\n" + indent).join(lines)
    return (
        statement.start_byte,
        statement.end_byte,
        (written if tree.starts_line(statement) else "\n" + indent + written),
    )


def _registers(tree: KernelTree, plan: _Plan, statement: Node) -> list[str]:
    """`const float x_val = x[i];` for each load of the statement read once for all the values."""
    lines = []
    for (start, _), (access, register) in sorted(plan.hoisted.items()):
        if statement.start_byte <= start < statement.end_byte:
            base = access.node.child_by_field_name("argument")
            pointer = text(base) if base is not None and base.type == "identifier" else ""
            parameter = tree.parameter(pointer)
            kind = parameter.type if parameter is not None else declared_type(tree, pointer) or "auto"
            lines.append(f"const {kind} {register} = {tree.text(access.node)};  // the same for each value")
    return lines


def _for_value(tree: KernelTree, plan: _Plan, node: Node, f: str) -> str:
    """The node's text for value f: the axis as `k + f`, a per-value local as `acc[f]`, a load read once
    as its register."""
    name = plan.axis.index.name

    def substitute(n: Node) -> str | None:
        hoisted = plan.hoisted.get((n.start_byte, n.end_byte))
        if hoisted is not None and hoisted[0].node == n:
            return hoisted[1]
        written = text(n) if n.type == "identifier" else ""
        if written == name:
            return f"{name} + {f}" if n.parent is not None and n.parent.type in _BARE else f"({name} + {f})"
        return f"{written}[{f}]" if written in plan.arrays else None

    return tree.substituted(node, substitute)


def _array(tree: KernelTree, declaration: Node) -> tuple[str, str, Node | None]:
    """`const float* w_k = w + k * C;` -> ("const float* w_k", "w_k", its value): the head of an array of
    such locals, without a `const` of the local itself (the array is filled in after it is declared)."""
    declarators = declaration.children_by_field_name("declarator")
    inner = declarators[0] if len(declarators) == 1 else None
    initial = None
    if inner is not None and inner.type == "init_declarator":
        inner, initial = inner.child_by_field_name("declarator"), inner.child_by_field_name("value")
    pointer = inner is not None and inner.type == "pointer_declarator"
    while inner is not None and inner.type == "pointer_declarator" and "const" not in text(inner).split():
        inner = inner.child_by_field_name("declarator")
    if inner is None or inner.type != "identifier" or (initial and initial.type == "initializer_list"):
        raise _Unsupported("several locals in one declaration, an array, a reference or a const pointer")
    head = tree.data[declaration.start_byte : inner.end_byte].decode("utf-8")
    if not pointer:  # `const int o = ...` qualifies the local: an array of it could not be filled in
        head = " ".join(word for word in head.split() if word != "const")
    return head, text(inner), initial
