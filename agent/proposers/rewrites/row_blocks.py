"""A block per row whose threads stride over the row -> several blocks per row.

LLM serving code and layer kernels give each row (a token, a channel) one block and let its threads
stride over the row's elements (`for (int i = threadIdx.x; i < d; i += blockDim.x)`). Where the
iterations are independent (no reduction, nothing shared between threads), the row's elements need not
all come from one block: a row of 11008 elements is 43 steps of a 256-thread block, the last step a
fraction, and a batch of a few rows keeps a few SMs busy. Here several blocks share the row: block
(row, part) starts at part's share of the elements and steps over all of the row's blocks, so every
element is still computed once, by the user's statements. The parts are neighbouring blocks of a 1-D
grid of rows × parts (block b is row b / parts: what read `blockIdx.x` reads that), or blocks along y.

Driven by the analysis: the block and the grid are 1-D; one top-level loop starts at `threadIdx.x` and
steps by `blockDim.x` (in any spelling the analysis propagates: `tid`, `stride`), its iterations
independent with no reduction; every store is inside that loop and nothing follows it; the kernel uses
no shared memory, barriers or warp-level operations and does not read gridDim. The number of parts is
the row's length over a block's elements times a few (a thread then takes a few elements, or one vector
of them once `rewrite:vector-loop` widens the loop: the search chains them).
"""

from __future__ import annotations

import re

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.facts import Loop
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, as_factor, bound_terms
from cuda_agent.agent.proposers.rewrites.swap_axes import WARP_WORK
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    apply_to_body,
    build_candidate,
    local_names,
    statements,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:row-blocks"
ELEMENTS_A_THREAD = (32, 8)  # a part's elements per thread: a few 16-byte steps; one vector of halves
FLAT_ELEMENTS = 8
_SHARED_WORK = re.compile(r"\b(gridDim|__syncthreads\w*)\b")  # besides a warp's (swap_axes)


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    spec = target.spec
    if found is None or spec is None or len(spec.launch.block) != 1 or len(spec.launch.grid) != 1:
        return []
    tree, facts = found
    loop = _row_loop(tree, facts)
    if loop is None:
        return []
    try:
        length_kernel, length = bound_terms(tree, loop.bound)
    except NotInSizes:
        return []
    header = _header(tree, loop)
    if header is None:
        return []
    value, step = header
    body = apply_to_body(
        tree,
        [
            (value.start_byte, value.end_byte, f"blockIdx.y * blockDim.x + {as_factor(tree.text(value))}"),
            (step.start_byte, step.end_byte, f"{as_factor(tree.text(step))} * gridDim.y"),
        ],
    )
    in_line = _in_line(tree, loop, header, length_kernel, length, FLAT_ELEMENTS)
    candidates = [in_line] if in_line is not None else []
    for elements in ELEMENTS_A_THREAD:
        parts = f"ceil_div({as_factor(length)}, block.x * {elements})"
        launch = LaunchSpec(
            block=spec.launch.block, grid=(spec.launch.grid[0], parts), shared_bytes=spec.launch.shared_bytes
        )
        description = (
            f"the row's loop {loop.variable} shared by several blocks along y ({elements} elements a "
            "thread), not one block a row"
        )
        candidates.append(
            build_candidate(tree, body=body, launch=launch, description=description, proposer=PROPOSER)
        )
    return candidates


def _block_macros(tree: KernelTree) -> set[str]:
    """Names the file #defines as something reading blockIdx."""
    return set(re.findall(r"^\s*#\s*define\s+(\w+)[^\n]*\bblockIdx\b", tree.target.source, re.MULTILINE))


def _in_line(
    tree: KernelTree, loop: Loop, header: tuple[Node, Node], length_kernel: str, length: str, elements: int
) -> Candidate | None:
    """The row's parts as neighbouring blocks of a 1-D grid (block b: row b / parts, part b % parts), so
    that blocks in flight at once sweep a row, as a flat element-wise launch does, and any number of rows
    fits the grid (blockIdx.y stops at 65535)."""
    spec = tree.target.spec
    assert spec is not None
    names = local_names(tree, "parts", "row_block")
    parts, row = names["parts"], names["row_block"]
    value, step = header
    part = f"blockIdx.x % {parts} * blockDim.x + {as_factor(tree.text(value))}"
    edits = [
        (value.start_byte, value.end_byte, part),
        (step.start_byte, step.end_byte, f"{as_factor(tree.text(step))} * {parts}"),
    ]
    macros = _block_macros(tree)
    for node in walk(tree.body):
        if node.type == "field_expression" and tree.text(node).replace(" ", "") == "blockIdx.x":
            edits.append((node.start_byte, node.end_byte, row))
        elif node.type == "identifier" and tree.text(node) in macros:
            return None  # `#define ROW blockIdx.x`: a block number this edit would not see
    unit = tree.indent_unit()
    step_elements = f"blockDim.x * {elements}"
    header = (
        f"\n{unit}// each row's loop shared by {parts} neighbouring blocks of the grid\n"
        f"{unit}const int {parts} = ({length_kernel} + {step_elements} - 1) / ({step_elements});\n"
        f"{unit}const int {row} = blockIdx.x / {parts};"
    )
    edits.append((tree.body.start_byte + 1, tree.body.start_byte + 1, header))
    threads = f"{as_factor(spec.launch.grid[0])} * ceil_div({as_factor(length)}, block.x * {elements})"
    return build_candidate(
        tree,
        body=apply_to_body(tree, edits),
        launch=LaunchSpec(block=spec.launch.block, grid=(threads,), shared_bytes=spec.launch.shared_bytes),
        description=(
            f"the row's loop {loop.variable} shared by neighbouring blocks ({elements} elements a thread), "
            "not one block a row"
        ),
        proposer=PROPOSER,
    )


def _row_loop(tree: KernelTree, facts: KernelFacts) -> Loop | None:
    """The top-level block-stride loop every store is in, if the kernel is otherwise as described."""
    if facts.uses_shared or facts.barriers or facts.unmodelled or _working_together(tree):
        return None
    top = [loop for loop in facts.loops if loop.depth == 0]
    if len(top) != 1:
        return None
    (loop,) = top
    if loop.start != Form.atom("threadIdx.x") or loop.step != Form.atom("blockDim.x"):
        return None
    if not loop.independent or loop.reductions or loop.carried:
        return None
    if loop.bound.atoms() & {"threadIdx.x", "blockIdx.x", "blockDim.x"}:
        return None
    inside = facts.accesses_in(loop)
    if any(access.write and access not in inside for access in facts.accesses):
        return None
    holder = loop.node.parent
    if holder is None or holder.type != "compound_statement" or statements(holder)[-1] != loop.node:
        return None  # something after the loop would run once a part, not once a row
    if _thread_read_outside(tree, loop):
        return None
    return loop


def _working_together(tree: KernelTree) -> bool:
    """Threads of a warp or a block exchanging values, or code reading the grid's extent."""
    body = tree.text(tree.body)
    return WARP_WORK.search(body) is not None or _SHARED_WORK.search(body) is not None


def _thread_read_outside(tree: KernelTree, loop: Loop) -> bool:
    """Whether threadIdx is read anywhere but the loop's initializer (directly, or through a local only
    the initializer reads: `int tid = threadIdx.x;`): there a part's threads are the row's as before;
    anywhere else a thread would do once a part what it did once a row."""
    initializer = loop.node.child_by_field_name("initializer")

    def in_initializer(node: Node) -> bool:
        return initializer is not None and initializer.start_byte <= node.start_byte < initializer.end_byte

    for node in walk(tree.body):
        if node.type != "field_expression" or not tree.text(node).replace(" ", "").startswith("threadIdx."):
            continue
        if in_initializer(node):
            continue
        declarator = node.parent
        if declarator is None or declarator.type != "init_declarator":
            return True
        name = tree.text(declarator.child_by_field_name("declarator"))
        uses = [n for n in walk(tree.body) if n.type == "identifier" and tree.text(n) == name]
        if not all(in_initializer(use) or use.parent == declarator for use in uses):
            return True
    return False


def _header(tree: KernelTree, loop: Loop) -> tuple[Node, Node] | None:
    """The loop's start value and step (`threadIdx.x`, `blockDim.x` in the user's spelling): what both
    layouts move by the part's share and multiply by the parts."""
    value = _initial_value(loop.node.child_by_field_name("initializer"), loop.variable, tree)
    step = _step(loop.node.child_by_field_name("update"), loop.variable, tree)
    return (value, step) if value is not None and step is not None else None


def _initial_value(initializer: Node | None, variable: str, tree: KernelTree) -> Node | None:
    """`threadIdx.x` of `int i = threadIdx.x` or `i = threadIdx.x`."""
    if initializer is None:
        return None
    for node in walk(initializer):
        if node.type == "init_declarator" and tree.text(node.child_by_field_name("declarator")) == variable:
            return node.child_by_field_name("value")
        if node.type == "assignment_expression" and tree.text(node.child_by_field_name("left")) == variable:
            operator = node.child_by_field_name("operator")
            return (
                node.child_by_field_name("right")
                if operator is not None and tree.text(operator) == "="
                else None
            )
    return None


def _step(update: Node | None, variable: str, tree: KernelTree) -> Node | None:
    """`blockDim.x` of `i += blockDim.x` or `i = i + blockDim.x`."""
    if update is None or update.type != "assignment_expression":
        return None
    left, right = update.child_by_field_name("left"), update.child_by_field_name("right")
    operator = update.child_by_field_name("operator")
    if left is None or right is None or operator is None or tree.text(left) != variable:
        return None
    if tree.text(operator) == "+=":
        return right
    if tree.text(operator) == "=" and right.type == "binary_expression":
        first, second = right.child_by_field_name("left"), right.child_by_field_name("right")
        plus = right.child_by_field_name("operator")
        if plus is not None and tree.text(plus) == "+" and first is not None and tree.text(first) == variable:
            return second
    return None
