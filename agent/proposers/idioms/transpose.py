"""A transpose-like 2-D copy with strided stores -> a 32x32 shared-memory tile with one column of padding.

Recognised: a 2-D kernel (`col` from the x axis, `row` from y), bounds-checked `row < rows && col < cols`,
whose only work is `out[col * rows + row] = f(in[row * cols + col])` (any index spelling that is
that linear form; f may use scalar parameters, e.g. `alpha * in[...]`).

Rewritten: a block of 32x8 threads reads a 32x32 tile with coalesced rows (4 elements a thread), writes
it transposed from shared memory so the stores are coalesced too; the +1 column keeps the transposed
reads free of bank conflicts. Every load and store is bounds-checked, for sizes that are not multiples
of 32.
"""

from __future__ import annotations

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    declared_names,
    element_type,
    guarded_region,
    index_variables,
    linear_form,
    local_names,
    size_expression,
    strip_parens,
    subscript_parts,
    untemplated_kernel_tree,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "idiom:transpose"


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    found = _recognise(tree) if tree is not None else None
    if tree is None or found is None:
        return []
    rows, cols = size_expression(tree, found["rows"]), size_expression(tree, found["cols"])
    if rows is None or cols is None:
        return []
    launch = LaunchSpec(block=(32, 8), grid=(f"ceil_div({cols}, 32)", f"ceil_div({rows}, 32)"))
    return [
        build_candidate(
            tree,
            body=_body(tree, found),
            launch=launch,
            description="32x32 shared-memory tile (+1 padding): coalesced loads and stores",
            proposer=PROPOSER,
        )
    ]


def _recognise(tree: KernelTree) -> dict[str, str] | None:
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(guarded.statements) != 1 or len(indices) != 2:
        return None
    axes = {axis: name for name, (axis, _) in indices.items()}
    col, row = axes.get("x"), axes.get("y")
    if col is None or row is None or set(guarded.bounds) != {row, col}:
        return None
    if any(s not in [d for _, d in indices.values()] for s in guarded.prefix):
        return None
    statement = guarded.statements[0]
    assignment = (
        strip_parens(statement.named_children[0]) if statement.type == "expression_statement" else None
    )
    if assignment is None or assignment.type != "assignment_expression":
        return None
    op = assignment.child_by_field_name("operator")
    left, right = assignment.child_by_field_name("left"), assignment.child_by_field_name("right")
    store = subscript_parts(left) if left is not None else None
    if op is None or op.type != "=" or store is None or right is None:
        return None
    reads = [n for n in walk(right) if n.type == "subscript_expression"]
    load = subscript_parts(reads[0]) if len(reads) == 1 else None
    if load is None:
        return None
    rows, cols = guarded.bounds[row], guarded.bounds[col]
    # in[row * cols + col] and out[col * rows + row]: coefficient 1 on the fast index, the other's bound.
    if linear_form(load[1]) != _form(row, cols, col) or linear_form(store[1]) != _form(col, rows, row):
        return None
    element = element_type(tree.parameter(load[0]))
    if element is None or element != element_type(tree.parameter(store[0])):
        return None
    # The element expression may use parameters (alpha), not the indices or other locals.
    read_span = (reads[0].start_byte, reads[0].end_byte)
    others = {
        tree.text(n)
        for n in walk(right)
        if n.type == "identifier" and not read_span[0] <= n.start_byte < read_span[1]
    }
    if others & ({row, col} | declared_names(tree.body, tree)):
        return None
    expression = tree.text(right)
    read = tree.text(reads[0])
    offset = reads[0].start_byte - right.start_byte
    return {
        "row": row, "col": col, "rows": rows, "cols": cols, "src": load[0], "dst": store[0],
        "element": element, "before": expression[:offset], "after": expression[offset + len(read):],
    }  # fmt: skip


def _form(slow: str, stride: str, fast: str) -> dict[tuple[str, ...], int] | None:
    if not stride.isidentifier():
        return None
    return {tuple(sorted((slow, stride))): 1, (fast,): 1}


def _body(tree: KernelTree, f: dict[str, str]) -> str:
    n = local_names(tree, "tile", "j")
    tile, j = n["tile"], n["j"]
    row, col, rows, cols = f["row"], f["col"], f["rows"], f["cols"]
    value = f"{f['before']}{tile}[threadIdx.x][threadIdx.y + {j}]{f['after']}"
    return f"""{{
    // A 32x32 tile through shared memory, 32x8 threads, 4 elements each: rows of {f["src"]} in, rows of
    // {f["dst"]} out, both coalesced. The extra column makes the column-wise reads conflict-free.
    __shared__ {f["element"]} {tile}[32][32 + 1];
    int {col} = blockIdx.x * 32 + threadIdx.x;
    int {row} = blockIdx.y * 32 + threadIdx.y;
    #pragma unroll
    for (int {j} = 0; {j} < 32; {j} += 8)
        if ({row} + {j} < {rows} && {col} < {cols})
            {tile}[threadIdx.y + {j}][threadIdx.x] = {f["src"]}[({row} + {j}) * {cols} + {col}];
    __syncthreads();

    // The same tile, transposed: this block writes rows blockIdx.x * 32 ... of {f["dst"]}.
    {row} = blockIdx.y * 32 + threadIdx.x;
    {col} = blockIdx.x * 32 + threadIdx.y;
    #pragma unroll
    for (int {j} = 0; {j} < 32; {j} += 8)
        if ({col} + {j} < {cols} && {row} < {rows})
            {f["dst"]}[({col} + {j}) * {rows} + {row}] = {value};
}}"""
