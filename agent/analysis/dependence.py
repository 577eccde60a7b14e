"""Which locals may depend on a value, through data and control: the question a rewrite asks before it
runs statements once instead of once a thread (shared-loop, block-to-loop) or once for several values
instead of once each (coarsen)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.proposers.tree import declarator_name, identifiers, walk
from tree_sitter import Node

# Statements with a header (read before and between their bodies) and the bodies it decides.
_HEADERS = {
    "if_statement": ("condition",),
    "for_statement": ("initializer", "condition", "update"),
    "while_statement": ("condition",),
    "do_statement": ("condition",),
}
_BODIES = ("consequence", "alternative", "body")


def dependent_locals(
    statements: Iterable[Node], seeds: Iterable[str] = (), is_source: Callable[[Node], bool] | None = None
) -> set[str]:
    """The seeds and every local whose value may depend on them or on a node `is_source` picks (a thread
    index, a load): set from one (`int i = base + tid;`), or set under a condition or in a loop whose
    header reads one (thread 0's `if`), to a fixpoint (a sum of such a local depends too)."""
    source = is_source or (lambda node: False)
    settings: list[tuple[set[str], set[str], bool]] = []  # (set here, read here or above, reads a source)

    def sourced(node: Node) -> bool:
        return any(source(n) for n in walk(node))

    def visit(node: Node, reads: set[str], from_source: bool) -> None:
        if node.type in ("compound_statement", "else_clause"):
            for child in node.named_children:
                visit(child, reads, from_source)
        elif node.type in _HEADERS:
            header = [part for f in _HEADERS[node.type] if (part := node.child_by_field_name(f)) is not None]
            inner = reads.union(*map(identifiers, header))
            inner_source = from_source or any(map(sourced, header))
            settings.extend((set_locals(part), inner, inner_source) for part in header)
            for body in filter(None, map(node.child_by_field_name, _BODIES)):
                visit(body, inner, inner_source)
        else:
            settings.append((set_locals(node), reads | identifiers(node), from_source or sourced(node)))

    for statement in statements:
        visit(statement, set(), False)
    found = set(seeds)
    while grown := {n for names, read, src in settings if src or read & found for n in names} - found:
        found |= grown
    return found


def set_locals(node: Node) -> set[str]:
    """The locals the node declares, assigns or increments (through a member too: `v.x = 0` sets v)."""
    found = {
        name
        for n in walk(node)
        if n.type == "declaration"
        for declarator in n.children_by_field_name("declarator")
        if (name := declarator_name(declarator))
    }
    for n in walk(node):
        if n.type not in ("assignment_expression", "update_expression"):
            continue
        target = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
        while target is not None and unwrap(target).type == "field_expression":
            target = unwrap(target).child_by_field_name("argument")
        if target is not None and unwrap(target).type == "identifier":
            found.add(text(unwrap(target)))
    return found
