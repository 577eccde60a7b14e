"""A transpose-like 2-D copy with strided stores -> a 32x32 shared-memory tile with one column of padding.

Recognised: a 2-D kernel (`col` from the x axis, `row` from y), bounds-checked `row < rows && col < cols`,
whose only work is `out[col * rows + row] = f(in[row * cols + col])` (any index spelling that is
that linear form; f may use scalar parameters, e.g. `alpha * in[...]`). Or, whatever the code, a kernel
whose spec says it transposes: its oracle is the transpose of its one input (`src.T`, `src.t()`,
`src.transpose(0, 1)`, ...), into an output of the swapped shape, with the two extents as parameters.
How such a kernel gets there (a shared tile without padding, say) does not matter: the candidate is
verified against the oracle like any other.

Rewritten: a block of 32x8 threads reads a 32x32 tile with coalesced rows (4 elements a thread), writes
it transposed from shared memory so the stores are coalesced too; the +1 column keeps the transposed
reads free of bank conflicts. Every load and store is bounds-checked, for sizes that are not multiples
of 32.
"""

from __future__ import annotations

import ast

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.parsing import linear_form
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    declared_names,
    element_type,
    guarded_region,
    index_variables,
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
    found = (_recognise(tree) or _declared(tree)) if tree is not None else None
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


def _declared(tree: KernelTree) -> dict[str, str] | None:
    """The transpose the spec declares: one input, one output of the swapped 2-D shape and the same
    dtype, an oracle that transposes the input, and no parameter but the two buffers and their extents."""
    spec = tree.target.spec
    if spec is None or not spec.oracle or len(spec.oracle) != 1:
        return None
    ((out_name, oracle),) = spec.oracle.items()
    src, dst = spec.argument(_transposed_name(oracle) or ""), spec.argument(out_name)
    if src is None or dst is None or src.role != "input" or dst.role != "output":
        return None
    if len(src.shape) != 2 or tuple(dst.shape) != tuple(reversed(src.shape)) or src.dtype != dst.dtype:
        return None
    extents = {str(a.value).strip(): a.name for a in spec.arguments if a.role == "scalar"}
    rows, cols = (extents.get(str(size).strip()) for size in src.shape)
    if rows is None or cols is None or len(spec.arguments) != 2 + len({rows, cols}):
        return None
    element = element_type(tree.parameter(src.name))
    if element is None or element != element_type(tree.parameter(dst.name)):
        return None
    names = local_names(tree, "row", "col")
    return {
        "row": names["row"], "col": names["col"], "rows": rows, "cols": cols, "src": src.name,
        "dst": dst.name, "element": element, "before": "", "after": "",
    }  # fmt: skip


def _transposed_name(oracle: str) -> str | None:
    """`x` when the PyTorch expression is the 2-D transpose of the tensor `x`: `x.T`, `x.mT`, `x.t()`,
    `torch.t(x)`, `x.transpose(0, 1)`, `torch.transpose(x, -1, -2)`, `x.permute(1, 0)`, any of them
    followed by `.contiguous()` or `.clone()`."""
    try:
        node = ast.parse(oracle.strip(), mode="eval").body
    except SyntaxError:
        return None
    while _is_call(node, ("contiguous", "clone"), 0):
        node = node.func.value  # type: ignore[attr-defined]
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        return _name(node.value)
    if _is_call(node, ("t",), 0):
        return _name(node.func.value)  # type: ignore[attr-defined]
    if _is_call(node, ("transpose",), 2) and _swaps(node.args):  # type: ignore[attr-defined]
        return _name(node.func.value)  # type: ignore[attr-defined]
    if _is_call(node, ("permute",), 2) and [_number(a) for a in node.args] == [1, 0]:  # type: ignore[attr-defined]
        return _name(node.func.value)  # type: ignore[attr-defined]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_torch(node.func):
        called = (node.func.attr, len(node.args))
        if called == ("t", 1) or (called == ("transpose", 3) and _swaps(node.args[1:])):
            return _name(node.args[0])
    return None


def _is_call(node: ast.AST, methods: tuple[str, ...], arguments: int) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in methods
        and len(node.args) == arguments
        and not node.keywords
        and not _is_torch(node.func)
    )


def _is_torch(function: ast.AST) -> bool:
    return isinstance(function, ast.Attribute) and _name(function.value) == "torch"


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _number(node: ast.AST) -> int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return -inner if inner is not None else None
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _swaps(dims: list[ast.expr]) -> bool:
    """The two dimensions of a 2-D tensor, in either order and either spelling (0 or -2, 1 or -1)."""
    found = sorted(d % 2 for d in (_number(a) for a in dims) if d is not None)
    return len(dims) == 2 and found == [0, 1]


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
