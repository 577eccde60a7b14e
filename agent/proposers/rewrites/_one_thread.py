"""What a rewrite that has one thread run several threads' work in turn checks (`row_loop`: a row's
elements; `stride_loop`: a few elements along x): the thread's index is declared once and never moved, and
the work does nothing that depends on which threads run it together."""

from __future__ import annotations

from collections.abc import Callable

from cuda_agent.agent.analysis import assigned_names
from cuda_agent.agent.analysis.facts import ThreadIndex
from cuda_agent.agent.proposers.tree import KernelTree, inside_loop, is_barrier, single_declaration, walk
from tree_sitter import Node

# Each would run with other threads than the original's: warp- and block-level operations.
EFFECTS = ("__shfl", "__ballot", "__any", "__all", "__syncwarp", "__activemask", "__match", "__reduce")
EFFECTS += ("__syncthreads", "__threadfence", "cooperative_groups", "warpSize", "this_thread_block")


# Calls whose every execution counts: a statement making one may run neither fewer times nor more.
SIDE_EFFECTS = ("atomic", "printf", "assert", "curand")


class Unsupported(Exception):
    """Not this shape, or not provably the same elements computed; the message says why."""


def declared_once(tree: KernelTree, index: ThreadIndex) -> ThreadIndex:
    """The index, where it is declared alone at the kernel's top level and never assigned after."""
    if index.declaration.parent != tree.body or single_declaration(index.declaration, tree) is None:
        raise Unsupported("the index is not declared alone at the kernel's top level")
    if index.name in assigned_names(tree.body):
        raise Unsupported("the index is assigned after its declaration")
    return index


def check_statements(
    tree: KernelTree, statements: list[Node], returns: Callable[[Node], bool] = lambda _: False
) -> None:
    """No return but those `returns` allows (it would end the thread's other elements), no jump out of
    the statements, no barrier, no warp- or block-level operation, nothing `volatile` (a thread may wait
    for another)."""
    for statement in statements:
        for node in walk(statement):
            if node.type == "return_statement" and not returns(node):
                raise Unsupported("a return in the work (it would end the thread's other elements)")
            if node.type in ("break_statement", "continue_statement") and not inside_loop(node, statement):
                raise Unsupported("a jump out of the work")
            if node.type == "identifier" and tree.text(node).startswith(EFFECTS):
                raise Unsupported(f"{tree.text(node)}: a warp- or block-level operation")
            if node.type == "expression_statement" and is_barrier(node, tree):
                raise Unsupported("a barrier")
            if node.type == "type_qualifier" and tree.text(node) == "volatile":
                raise Unsupported("volatile: the thread may wait on another")


def pure_declaration(tree: KernelTree, statement: Node) -> bool:
    """A declaration whose values have no effect but the names they give (run once a thread or once an
    element, the same)."""
    return (
        statement.type == "declaration"
        and pure(tree, statement)
        and "static" not in tree.text(statement).split()
    )


def pure(tree: KernelTree, node: Node) -> bool:
    """Code that changes nothing when it runs: no assignment, no increment, no atomic, print or draw."""
    names = [tree.text(n) for n in walk(node) if n.type == "identifier"]
    return not any(name.startswith(SIDE_EFFECTS) for name in names) and not any(
        n.type in ("assignment_expression", "update_expression") for n in walk(node)
    )
