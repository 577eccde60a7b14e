"""A histogram with a global atomic per element -> bins privatised in shared memory, merged once per block.

Recognised: a thread-per-element kernel (bounds-checked index) whose only store is `atomicAdd(&bins[key],
v)` into a pointer parameter, with any per-element work computing `key` (and a guard like `if (key <
nbins)`). The number of bins is the spec's shape of `bins` and must be a value the kernel can see (a
scalar parameter with that value, or a literal); the bins must fit in 48 KiB of shared memory.

Rewritten: the block zeroes a shared copy of the bins, a grid-stride loop adds each element into it
(shared-memory atomics, fast and contended only within the block), and after a barrier each non-zero
bin is added to the global one: at most (blocks x bins) global atomics instead of one per element.
"""

from __future__ import annotations

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.idioms._grid_stride import (
    ElementLoop,
    element_loop,
    grid_stride_header,
    loop_body,
)
from cuda_agent.agent.proposers.tree import (
    RESIDENT_BLOCKS,
    KernelTree,
    build_candidate,
    element_type,
    fits_shared_memory,
    local_names,
    strip_parens,
    untemplated_kernel_tree,
)
from cuda_agent.agent.spec import LaunchSpec, constant_size
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "idiom:histogram"
BLOCK = 256
_BIN_TYPES = {"int": 4, "unsigned int": 4, "unsigned": 4, "float": 4}


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    loop = element_loop(tree) if tree is not None else None
    if tree is None or loop is None or target.spec is None or loop.function != "atomicAdd":
        return []
    address = strip_parens(loop.address)
    inner = address.child_by_field_name("argument") if address.type == "pointer_expression" else None
    operator = address.child_by_field_name("operator") if address.type == "pointer_expression" else None
    if inner is None or operator is None or operator.type != "&" or inner.type != "subscript_expression":
        return []
    array, indices = inner.child_by_field_name("argument"), inner.child_by_field_name("indices")
    if array is None or indices is None or len(indices.named_children) != 1:
        return []
    bins = tree.text(array)
    kind = element_type(tree.parameter(bins))
    argument = target.spec.argument(bins)
    if kind not in _BIN_TYPES or argument is None or len(argument.shape) != 1:
        return []
    count, assumed = _bin_count(tree, argument.shape[0])
    if count is None:
        return []
    launch = LaunchSpec(
        block=(BLOCK,),
        grid=(f"min({target.spec.launch.grid[0]}, {RESIDENT_BLOCKS // 2})",),
        shared_bytes=f"({argument.shape[0]}) * {_BIN_TYPES[kind]}",
    )
    if not fits_shared_memory(target, launch):
        return []
    key = tree.text(indices.named_children[0])
    return [
        build_candidate(
            tree,
            body=_body(tree, loop, bins, kind, count, key),
            launch=launch,
            description="shared-memory privatised bins, merged with one global atomic per bin per block",
            proposer=PROPOSER,
            assumptions=(
                "every key is a valid bin, as the original's global atomics already require",
                *assumed,
            ),
        )
    ]


def _bin_count(tree: KernelTree, shape: str) -> tuple[str | None, tuple[str, ...]]:
    """What the kernel can write for the number of bins, and the assumption that adds: a literal; a scalar
    parameter whose spec value is the bins' shape; or, for a kernel that never sees the count (it trusts
    its keys), the spec's value when it is the same at every size, as a literal the user is told about."""
    if shape.strip().isdigit():
        return shape.strip(), ()
    spec = tree.target.spec
    assert spec is not None
    for parameter in tree.target.kernel.parameters:
        argument = spec.argument(parameter.name)
        if argument and argument.role == "scalar" and str(argument.value).strip() == shape.strip():
            return parameter.name, ()
    value = constant_size(spec, shape)
    if value is None:
        return None, ()
    return str(value), (f"{value} bins ({shape} = {value} at every size of the spec)",)


def _body(tree: KernelTree, loop: ElementLoop, bins: str, kind: str, count: str, key: str) -> str:
    n = local_names(tree, "local_bins", "b", "count")
    local, b = n["local_bins"], n["b"]
    value = tree.text(loop.value)
    return f"""{{
    // A block-private copy of the bins in shared memory (the launch gives bins * {_BIN_TYPES[kind]} bytes).
    extern __shared__ {kind} {local}[];
    for (int {b} = threadIdx.x; {b} < {count}; {b} += blockDim.x) {local}[{b}] = 0;
    __syncthreads();

    {grid_stride_header(loop)} {{
{loop_body(tree, loop, f"atomicAdd(&{local}[{key}], {value})", "        ")}
    }}
    __syncthreads();

    // One global atomic per bin this block touched.
    for (int {b} = threadIdx.x; {b} < {count}; {b} += blockDim.x) {{
        const {kind} {n["count"]} = {local}[{b}];
        if ({n["count"]} != 0) atomicAdd(&{bins}[{b}], {n["count"]});
    }}
}}"""
