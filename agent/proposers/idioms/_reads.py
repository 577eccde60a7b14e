"""What the stencil idioms ask about reads of an input: which pointer is a read-only input, where a
name occurs, under which conditions a read is evaluated."""

from __future__ import annotations

from cuda_agent.agent.proposers.tree import (
    KernelTree,
    calls,
    element_type,
    walk,
    writes,
)
from tree_sitter import Node

ELEMENT_BYTES = {"float": 4, "double": 8, "int": 4, "unsigned int": 4, "unsigned": 4, "half": 2, "__half": 2}
INDEX_TYPES = frozenset({"int", "long", "long long", "int64_t", "ptrdiff_t"})


def has_barriers_or_shared(tree: KernelTree) -> bool:
    return bool(calls(tree.body, ["__syncthreads", "__syncwarp"])) or "__shared__" in tree.text(tree.body)


def read_only_input(tree: KernelTree, name: str) -> str | None:
    """The element type of a pointer the spec calls an input that no output may alias."""
    spec = tree.target.spec
    argument = spec.argument(name) if spec is not None else None
    if spec is None or argument is None or argument.role != "input":
        return None
    if any(other.may_alias == name for other in spec.arguments):
        return None
    element = element_type(tree.parameter(name))
    return element if element in ELEMENT_BYTES else None


def occurrences(tree: KernelTree, name: str) -> list[Node]:
    return [n for n in walk(tree.body) if n.type == "identifier" and tree.text(n) == name]


def written_names(tree: KernelTree) -> set[str]:
    return {tree.text(w) for w in writes(tree.body, tree) if w.type == "identifier"}


def path_conditions(read: Node, stop: Node) -> list[tuple[Node, bool]]:
    """The conditions under which `read` is evaluated, from `stop` down: (condition, must be true);
    empty when it is read unconditionally. ValueError for an `if` with an initialiser (not followed)."""
    found: list[tuple[Node, bool]] = []
    child, node = read, read.parent
    while node is not None and node != stop:
        if node.type in ("if_statement", "conditional_expression"):
            condition = node.child_by_field_name("condition")
            consequence = node.child_by_field_name("consequence")
            alternative = node.child_by_field_name("alternative")
            if condition is not None and node.type == "if_statement":
                values = [c for c in condition.named_children if c.type != "comment"]
                if len(values) != 1:
                    raise ValueError("an if with an initialiser")
                condition = values[0]
            for branch, truth in ((consequence, True), (alternative, False)):
                if condition is not None and branch is not None and inside(child, branch):
                    found.append((condition, truth))
        elif node.type == "binary_expression":
            op, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
            # `a && x[j]` reads x[j] only where a holds, `a || x[j]` only where it does not.
            if op is not None and op.type in ("&&", "||") and left and right and inside(child, right):
                found.append((left, op.type == "&&"))
        child, node = node, node.parent
    return found[::-1]


def inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte
