"""`#pragma unroll N` above `for` loops whose trip count the compiler can bound: the loop limit is a
number, a template value parameter or a `#define`d constant. Unrolling such loops lets the compiler
issue several iterations' loads at once and keep small arrays in registers. Loops already annotated
are left as they are; loops bounded by a runtime value are left alone.
"""

from __future__ import annotations

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.proposers.tree import Edit, KernelTree, candidate_from, kernel_tree, walk_with_comments
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "unroll"
FACTORS = (4, 8)
_COMPARISONS = frozenset({"<", "<=", ">", ">=", "!="})


def propose_unroll(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    if tree is None:
        return []
    constants = _compile_time_names(tree)
    loops = [
        loop
        for loop in walk_with_comments(tree.body)
        if loop.type == "for_statement"
        and tree.starts_line(loop)
        and not _annotated(loop)
        and _bounded(tree, loop, constants)
    ]
    if not loops:
        return []
    candidates = []
    for factor in FACTORS:
        edits: list[Edit] = [
            (loop.start_byte, loop.start_byte, f"#pragma unroll {factor}\n{tree.indent_at(loop.start_byte)}")
            for loop in loops
        ]
        count = "the loop" if len(loops) == 1 else f"{len(loops)} loops"
        candidates.append(
            candidate_from(
                target,
                tree.apply_to_file(edits),
                description=f"#pragma unroll {factor} on {count} with a compile-time bound",
                proposer=PROPOSER,
            )
        )
    return candidates


def _compile_time_names(tree: KernelTree) -> set[str]:
    """Template value parameters of the kernel and object-like macros of the file."""
    names = {p.name for p in tree.target.kernel.template_parameters if p.kind == "value"}
    root = parse_cuda(tree.data).root_node
    for node in walk_with_comments(root):
        if node.type == "preproc_def" and node.child_by_field_name("value") is not None:
            name = node.child_by_field_name("name")
            if name is not None:
                names.add(tree.text(name))
    return names


def _annotated(loop: Node) -> bool:
    before = loop.prev_sibling
    return before is not None and before.type == "preproc_call" and b"unroll" in (before.text or b"")


def _bounded(tree: KernelTree, loop: Node, constants: set[str]) -> bool:
    """Whether the loop's trip count has a compile-time bound: `v < CONST` / `v <= CONST` (counting up to
    a constant), or `v > CONST` / `v >= CONST` when v also starts at a constant (counting down)."""
    condition = loop.child_by_field_name("condition")
    if condition is None or condition.type != "binary_expression":
        return False
    operator = condition.child_by_field_name("operator")
    left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    if operator is None or left is None or right is None:
        return False
    op = tree.text(operator)
    if left.type != "identifier":  # `CONST > v` reads as `v < CONST`
        left, right, op = right, left, {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
    if left.type != "identifier" or op not in _COMPARISONS or not _constant(tree, right, constants):
        return False
    if op in ("<", "<="):
        return True
    start = _initial_value(loop, tree.text(left))
    return start is not None and _constant(tree, start, constants)


def _initial_value(loop: Node, variable: str) -> Node | None:
    """The value the loop variable starts from, when the for's initializer gives one."""
    initializer = loop.child_by_field_name("initializer")
    if initializer is None:
        return None
    for node in walk_with_comments(initializer):
        if node.type == "init_declarator":
            name = node.child_by_field_name("declarator")
            if name is not None and name.text == variable.encode():
                return node.child_by_field_name("value")
        if node.type == "assignment_expression":
            name = node.child_by_field_name("left")
            if name is not None and name.text == variable.encode():
                return node.child_by_field_name("right")
    return None


def _constant(tree: KernelTree, node: Node, constants: set[str]) -> bool:
    """An integer expression of literals and compile-time names only (`TILE`, `BLOCK / 2`, `32`)."""
    leaves = [n for n in walk_with_comments(node) if n.child_count == 0]
    has_value = False
    for leaf in leaves:
        if leaf.type == "number_literal":
            has_value = True
        elif leaf.type == "identifier":
            if tree.text(leaf) not in constants:
                return False
            has_value = True
        elif leaf.type not in ("+", "-", "*", "/", "(", ")", "<<", ">>", "%"):
            return False
    return has_value
