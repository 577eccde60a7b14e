"""One padding column on a 2-D `__shared__` tile that threads walk down a column of.

Shared memory has 32 banks of 4 bytes; in `tile[32][32]` of floats a column lies in one bank, so a warp
reading `tile[threadIdx.x][c]` is served one thread at a time (a 32-way conflict). `tile[32][32 + 1]`
shifts each row by one bank and the same read takes one pass. The transpose through shared memory is the
classic case. Applies when the tile is indexed only as `tile[r][c]` (no pointer or `sizeof` use could see
the changed layout) and some access puts a value depending on `threadIdx.x` in the row index.
"""

from __future__ import annotations

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import Edit, KernelTree, candidate_from, kernel_tree, walk
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "shared-padding"


def propose_shared_padding(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    if tree is None:
        return []
    lane_locals = _lane_dependent_locals(tree)
    edits: list[Edit] = []
    padded: list[str] = []
    for declaration, name, column_size in _shared_tiles(tree):
        uses = [n for n in walk(tree.body) if n.type == "identifier" and tree.text(n) == name]
        rows = [_row_index(use) for use in uses if not _inside(use, declaration)]
        if not rows or any(row is None for row in rows):
            continue  # used other than as tile[r][c]: the layout may be visible
        if not any(_depends_on_lane(tree, row, lane_locals) for row in rows if row is not None):
            continue  # no column walk across a warp: nothing to gain
        edits.append((column_size.end_byte, column_size.end_byte, " + 1"))
        padded.append(f"{name}[][{tree.text(column_size)} + 1]")
    if not edits:
        return []
    return [
        candidate_from(
            target,
            tree.apply_to_file(edits),
            description=f"padded shared tile {', '.join(padded)}: a warp reading down a column spreads over "
            "the banks instead of queueing on one",
            proposer=PROPOSER,
        )
    ]


def _shared_tiles(tree: KernelTree) -> list[tuple[Node, str, Node]]:
    """(declaration, name, the size node of the last dimension) of each `__shared__ T name[R][C];`."""
    tiles = []
    for node in walk(tree.body):
        if node.type != "declaration" or "__shared__" not in {tree.text(c) for c in node.children}:
            continue
        for declarator in node.children_by_field_name("declarator"):
            outer = declarator
            inner = outer.child_by_field_name("declarator")
            if outer.type != "array_declarator" or inner is None or inner.type != "array_declarator":
                continue
            name, column_size = inner.child_by_field_name("declarator"), outer.child_by_field_name("size")
            if name is not None and name.type == "identifier" and column_size is not None:
                tiles.append((node, tree.text(name), column_size))
    return tiles


def _row_index(use: Node) -> Node | None:
    """The row index r of a use `name[r][c]`; None for any other use of the name."""
    inner = use.parent
    if inner is None or inner.type != "subscript_expression" or inner.child_by_field_name("argument") != use:
        return None
    outer = inner.parent
    if (
        outer is None
        or outer.type != "subscript_expression"
        or outer.child_by_field_name("argument") != inner
    ):
        return None
    if outer.parent is not None and outer.parent.type == "subscript_expression":
        return None  # a third dimension
    indices = inner.child_by_field_name("indices")
    return indices.named_children[0] if indices is not None and len(indices.named_children) == 1 else None


def _lane_dependent_locals(tree: KernelTree) -> set[str]:
    """Locals whose initial value depends on threadIdx.x (`int tx = threadIdx.x;`), transitively."""
    found: set[str] = set()
    for node in walk(tree.body):
        if node.type != "init_declarator":
            continue
        name, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
        if name is not None and value is not None and _depends_on_lane(tree, value, found):
            found.add(tree.text(name))
    return found


def _depends_on_lane(tree: KernelTree, node: Node, lane_locals: set[str]) -> bool:
    for n in walk(node):
        if n.type == "field_expression" and tree.text(n).replace(" ", "") == "threadIdx.x":
            return True
        if n.type == "identifier" and tree.text(n) in lane_locals:
            return True
    return False


def _inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte
