"""Recognise the one-thread-per-element shape that grid-stride loops and vector loads rewrite:

    int i = blockIdx.x * blockDim.x + threadIdx.x;        (any operand order)
    if (i < n) { body }                                   (the kernel's last statement)
or
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    body...                                               (the rest of the kernel)

The body must compute element i from i alone: it may not read the thread/block built-ins, use shared
memory or barriers, return, or change i. Anything else and the kernel is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.proposers.tree import (
    THREAD_BUILTINS,
    KernelTree,
    inside_loop,
    mentions,
    walk_with_comments,
)
from tree_sitter import Node

_GLOBAL_INDEX = frozenset(
    {
        "blockIdx.x*blockDim.x+threadIdx.x",
        "blockDim.x*blockIdx.x+threadIdx.x",
        "threadIdx.x+blockIdx.x*blockDim.x",
        "threadIdx.x+blockDim.x*blockIdx.x",
    }
)
_NEGATED = {">=": "<", ">": "<=", "<=": ">", "<": ">="}


@dataclass(frozen=True)
class ThreadPerElement:
    declaration: Node  # `int i = ...;`
    index: str  # "i"
    index_type: str  # "int", as written, without const
    initializer: Node  # `blockIdx.x * blockDim.x + threadIdx.x`
    guard: Node  # the if statement
    condition: str  # the in-range test as written or negated from the early return: "i < n"
    bound: str  # "n"
    statements: tuple[Node, ...]  # the work for element i, comments among it included
    end_byte: int  # the end of the guarded region: the if statement, or the kernel's last statement
    early_return: bool


def thread_per_element(tree: KernelTree) -> ThreadPerElement | None:
    # Comments are kept among the guarded statements (rewrites carry them along), not between the
    # declaration and the guard.
    statements = [n for n in tree.body.named_children if n.type != "comment"]
    for position, node in enumerate(statements[:-1]):
        declared = _index_declaration(tree, node)
        if declared is None:
            continue
        index, index_type, initializer = declared
        guard = statements[position + 1]
        rest = [n for n in tree.body.named_children if n.start_byte > guard.end_byte]
        found = _guarded(tree, guard, index, rest)
        if found is None:
            return None
        condition, bound, body, early_return = found
        if all(s.type == "comment" for s in body) or not all(self_contained(tree, s, index) for s in body):
            return None
        end = guard.end_byte if not early_return else body[-1].end_byte
        return ThreadPerElement(
            node, index, index_type, initializer, guard, condition, bound, tuple(body), end, early_return
        )
    return None


def _index_declaration(tree: KernelTree, node: Node) -> tuple[str, str, Node] | None:
    if node.type != "declaration":
        return None
    declarators = node.children_by_field_name("declarator")
    if len(declarators) != 1 or declarators[0].type != "init_declarator":
        return None
    name = declarators[0].child_by_field_name("declarator")
    value = declarators[0].child_by_field_name("value")
    type_node = node.child_by_field_name("type")
    if name is None or value is None or type_node is None or name.type != "identifier":
        return None
    if "".join(tree.text(value).split()) not in _GLOBAL_INDEX:
        return None
    return tree.text(name), tree.text(type_node), value


def _guarded(
    tree: KernelTree, guard: Node, index: str, rest: list[Node]
) -> tuple[str, str, list[Node], bool] | None:
    """(in-range condition, bound, the guarded statements, early-return form)."""
    if guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None:
        return None
    clause = guard.child_by_field_name("condition")
    test = clause.named_children[0] if clause is not None and clause.named_child_count == 1 else None
    if test is None or test.type != "binary_expression":
        return None
    left, right = test.child_by_field_name("left"), test.child_by_field_name("right")
    operator = test.child_by_field_name("operator")
    if left is None or right is None or operator is None:
        return None
    op = tree.text(operator)
    if tree.text(right) == index:  # `n > i` reads as `i < n`
        left, right, op = right, left, {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
    if tree.text(left) != index or mentions(tree, right, {index}):
        return None
    bound = tree.text(right)
    consequence = guard.child_by_field_name("consequence")
    if consequence is None:
        return None
    if op == "<" and not rest:
        inner = consequence.named_children if consequence.type == "compound_statement" else [consequence]
        return f"{index} < {bound}", bound, list(inner), False
    if op == ">=" and _is_return(consequence) and rest:
        return f"{index} {_NEGATED[op]} {bound}", bound, rest, True
    return None


def _is_return(node: Node) -> bool:
    if node.type == "compound_statement":
        inner = [n for n in node.named_children if n.type != "comment"]
        return len(inner) == 1 and _is_return(inner[0])
    return node.type == "return_statement" and node.named_child_count == 0


def self_contained(tree: KernelTree, statement: Node, index: str) -> bool:
    """Whether the statement computes element `index` without thread identity, barriers, shared memory,
    early exits or writes to the index (each would change meaning in a loop or with more elements)."""
    if mentions(tree, statement, THREAD_BUILTINS | {"__syncthreads", "__syncwarp"}):
        return False
    for node in walk_with_comments(statement):
        if node.type in ("return_statement", "goto_statement") or tree.text(node) == "__shared__":
            return False
        if node.type in ("break_statement", "continue_statement") and not inside_loop(node, statement):
            return False
        if node.type in ("assignment_expression", "update_expression"):
            target = node.child_by_field_name("left") or node.child_by_field_name("argument")
            if target is not None and target.type == "identifier" and tree.text(target) == index:
                return False
    return True
