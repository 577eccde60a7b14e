"""One thread per row looping over its columns -> one warp per row, coalesced loops, shuffle reductions.

Recognised: a 1-D kernel whose thread index is a row (`int row = blockIdx.x * blockDim.x + threadIdx.x;
if (row >= rows) return;` or `if (row < rows) { ... }`) and whose row-level loops are unit-step loops
(`for (int c = 0; c < cols; ++c)`) that only (a) fold into scalars declared outside the loop
(`acc += f(c)`, `acc = acc + f(c)`, `m = fmaxf(m, f(c))`, fmin/max/min alike) and (b) write elements
whose index involves the loop variable (`out[c] = f(c)`). Softmax, layer norm, row sums, RMS norm and
row max all have this shape; the multi-pass structure (max, sum of exp, normalise) is kept.

Rewritten in place, the user's text kept: the row becomes the warp's index, each column loop starts at
`lane` and steps by 32 (consecutive lanes read consecutive addresses), each accumulator is combined
across the warp with `__shfl_xor_sync` right after its loop (every lane gets the row's value, as the
next pass needs), and per-row writes outside the loops are done by lane 0. A row is owned by a whole
warp, so the bounds check's early return is warp-uniform and the full-mask shuffles are safe.
"""

from __future__ import annotations

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import (
    FULL_MASK,
    SUM,
    ZERO_LITERALS,
    Accumulation,
    Edit,
    KernelTree,
    accumulation,
    apply_to_body,
    build_candidate,
    calls,
    counted_loop,
    declared_names,
    guarded_region,
    has_any,
    identifiers,
    index_variables,
    line_indent,
    local_names,
    single_declaration,
    size_expression,
    strip_parens,
    untemplated_kernel_tree,
    walk,
    writes,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "idiom:row-wise"
BLOCK = 256  # 8 warps, 8 rows per block
_LOOPS = frozenset({"for_statement", "while_statement", "do_statement", "for_range_loop"})
_BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})


class _Unsupported(Exception):
    """The kernel is not (safely) this idiom; the message says why, for debugging."""


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    if tree is None or target.spec is None or len(target.spec.launch.block) != 1:
        return []
    try:
        body, rows = _rewrite(tree)
    except _Unsupported:
        return []
    launch = LaunchSpec(block=(BLOCK,), grid=(f"ceil_div({rows}, block.x // 32)",))
    return [
        build_candidate(
            tree,
            body=body,
            launch=launch,
            description="one warp per row: coalesced column loops, shuffle reductions",
            proposer=PROPOSER,
            assumptions=("float sums along a row are reassociated (within the spec's tolerance)",),
        )
    ]


def _rewrite(tree: KernelTree) -> tuple[str, str]:
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(indices) != 1:
        raise _Unsupported("no single row index with a bounds check")
    ((row, (axis, declaration)),) = indices.items()
    if axis != "x" or row not in guarded.bounds or len(guarded.bounds) != 1:
        raise _Unsupported("the row is not the x index")
    rows = size_expression(tree, guarded.bounds[row])
    if rows is None:
        raise _Unsupported("the row count is not a scalar of the spec")
    if has_any(tree.body, {"goto_statement"}) or calls(tree.body, ["__syncthreads", "__syncwarp"]):
        raise _Unsupported("synchronisation or goto")
    names = local_names(tree, "lane", "offset")
    lane, offset = names["lane"], names["offset"]

    edits: list[Edit] = []
    value = next(d.child_by_field_name("value") for d in declaration.children_by_field_name("declarator"))
    assert value is not None
    edits.append((value.start_byte, value.end_byte, "blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32"))
    indent = line_indent(tree, declaration)
    edits.append(
        (declaration.end_byte, declaration.end_byte, f"\n{indent}const int {lane} = threadIdx.x % 32;")
    )

    others = [s for s in guarded.prefix if s is not declaration]
    zeroed = _zero_initialised(tree)
    strided = 0
    for statement in [*others, *guarded.statements]:
        if statement.type == "for_statement":
            edits += _stride(tree, statement, lane, offset, zeroed)
            strided += 1
        else:
            edits += _row_level(tree, statement, lane)
    if strided == 0:
        raise _Unsupported("no loop over columns")
    return apply_to_body(tree, edits), rows


def _zero_initialised(tree: KernelTree) -> set[str]:
    """Scalars declared `= 0` and never assigned outside an accumulation: their sums need no reset."""
    zeroed = set()
    for node in walk(tree.body):
        declared = single_declaration(node, tree)
        if declared and declared[2] is not None and tree.text(declared[2]) in ZERO_LITERALS:
            zeroed.add(declared[1])
    return zeroed


def _row_level(tree: KernelTree, statement: Node, lane: str) -> list[Edit]:
    """A statement between the column loops: runs in every lane (values are warp-uniform); a store to
    memory is left to lane 0 so each element is written once."""
    if has_any(statement, _LOOPS):
        raise _Unsupported("a loop nested in a row-level statement")
    if identifiers(statement) & _BUILTINS or calls(statement, _atomics()):
        raise _Unsupported("thread indices or atomics outside the column loops")
    stores = [w for w in writes(statement, tree) if w.type != "identifier"]
    if not stores:
        return []
    if statement.type == "declaration":
        raise _Unsupported("a store inside a declaration")
    text = tree.text(statement)
    return [(statement.start_byte, statement.end_byte, f"if ({lane} == 0) {text}")]


def _atomics() -> list[str]:
    return ["atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicExch", "atomicCAS", "atomicOr"]


def _stride(tree: KernelTree, node: Node, lane: str, offset: str, zeroed: set[str]) -> list[Edit]:
    loop = counted_loop(node, tree)
    if loop is None or not loop.declares:
        raise _Unsupported("a row-level loop that is not `for (int c = a; c < b; ++c)`")
    if identifiers(loop.body) & _BUILTINS or calls(loop.body, _atomics()):
        raise _Unsupported("thread indices or atomics in a column loop")
    local = declared_names(loop.body, tree) | {loop.variable}
    folds = _accumulations(tree, loop.body)
    stored: set[str] = set()
    for target in writes(loop.body, tree):
        if target.type == "identifier":
            name = tree.text(target)
            if name not in local and not any(f.name == name for f in folds):
                raise _Unsupported(f"{name} carries a value between columns")
            continue
        parts = _subscript(tree, target)
        if parts is None or loop.variable not in identifiers(parts[1]):
            raise _Unsupported("a store whose index does not follow the column")
        stored.add(parts[0])
    _check_folds(tree, loop.body, folds)
    # A buffer written in this loop and read in it (a scan, `out[c] = out[c - 1] + ...`) carries values
    # between columns through memory: other lanes would read them too early.
    for node_ in walk(loop.body):
        parts = _subscript(tree, node_)
        if parts and parts[0] in stored and not _is_store_target(node_):
            raise _Unsupported("a buffer read and written in the same column loop")

    start = tree.text(loop.start).strip()
    update = node.child_by_field_name("update")
    assert update is not None
    edits: list[Edit] = [
        (loop.start.start_byte, loop.start.end_byte, lane if start == "0" else f"{start} + {lane}"),
        (update.start_byte, update.end_byte, f"{loop.variable} += 32"),
    ]
    indent = line_indent(tree, node)
    before, after = [], []
    for name, kind, combiner in _unique(folds):
        if kind == SUM and name not in zeroed:
            # Every lane starts from the value so far; only lane 0 may keep it or it is counted 32 times.
            before.append(f"if ({lane} != 0) {name} = 0;")
        shuffled = f"__shfl_xor_sync({FULL_MASK}, {name}, {offset})"
        combine = f"{name} += {shuffled};" if combiner == "+" else f"{name} = {combiner}({name}, {shuffled});"
        after.append(f"for (int {offset} = 16; {offset} > 0; {offset} >>= 1) {combine}")
    # After this loop every lane holds the whole row's value: a later loop adding into it needs the reset.
    zeroed -= {name for name, _, _ in _unique(folds)}
    if stored:
        # Later passes may read these elements from other lanes: make the stores visible to the warp.
        after.append("__syncwarp();")
    if before:
        edits.append((node.start_byte, node.start_byte, "".join(f"{line}\n{indent}" for line in before)))
    if after:
        edits.append((node.end_byte, node.end_byte, "".join(f"\n{indent}{line}" for line in after)))
    return edits


def _accumulations(tree: KernelTree, body: Node) -> list[Accumulation]:
    local = declared_names(body, tree)
    found = []
    for node in walk(body):
        folded = accumulation(node, tree)
        if folded is not None and folded.name not in local:
            found.append(folded)
    return found


def _check_folds(tree: KernelTree, body: Node, folds: list[Accumulation]) -> None:
    """An accumulator is only folded into: its partial value is never read inside the loop, and all its
    folds agree on the operation (`+` with `+`, `fmaxf` with `fmaxf`)."""
    kinds: dict[str, str] = {}
    for fold in folds:
        if kinds.setdefault(fold.name, fold.combiner) != fold.combiner:
            raise _Unsupported(f"{fold.name} is folded two ways")
        if fold.name in identifiers(fold.value):
            raise _Unsupported(f"{fold.name} is read while folding")
    statements = {f.statement for f in folds}
    for node in walk(body):
        inside = _inside_any(node, statements, stop=body.parent)
        if node.type == "identifier" and tree.text(node) in kinds and not inside:
            raise _Unsupported(f"{tree.text(node)} is read inside the loop")


def _inside_any(node: Node, owners: set[Node], stop: Node | None) -> bool:
    current: Node | None = node
    while current is not None and current != stop:
        if current in owners:
            return True
        current = current.parent
    return False


def _unique(folds: list[Accumulation]) -> list[tuple[str, str, str]]:
    seen: dict[str, tuple[str, str, str]] = {}
    for fold in folds:
        seen.setdefault(fold.name, (fold.name, fold.kind, fold.combiner))
    return list(seen.values())


def _subscript(tree: KernelTree, node: Node) -> tuple[str, Node] | None:
    node = strip_parens(node)
    if node.type != "subscript_expression":
        return None
    array, indices = node.child_by_field_name("argument"), node.child_by_field_name("indices")
    if array is None or indices is None or not indices.named_children:
        return None
    return tree.text(array), indices.named_children[0]


def _is_store_target(node: Node) -> bool:
    parent = node.parent
    while parent is not None and parent.type == "parenthesized_expression":
        node, parent = parent, parent.parent
    return (
        parent is not None
        and parent.type == "assignment_expression"
        and parent.child_by_field_name("left") == node
    )
