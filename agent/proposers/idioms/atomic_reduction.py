"""A sum/max/min into one address with a global atomic per element -> one atomic per block.

Recognised: a thread-per-element kernel (`i` from blockIdx/threadIdx, bounds-checked) whose only store is
one `atomicAdd(p, v)` / `atomicMax` / `atomicMin` to an address that does not depend on the element
(`p`, `&p[0]`), with any per-element work around it (declarations, conditions: `if (x[i] > 0)`).

Rewritten: a grid-stride loop folds the elements into a register (the atomic becomes `acc += v`),
then `__shfl_down_sync` reduces each warp, one shared-memory slot per warp collects the warps, the first
warp reduces those, and one thread issues the block's single atomic to the user's address. The grid is
capped at what the GPU holds at once, so the atomics on one address fall from n to about a thousand.
"""

from __future__ import annotations

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.idioms._grid_stride import (
    ElementLoop,
    element_loop,
    unrolled_grid_stride,
)
from cuda_agent.agent.proposers.tree import (
    FULL_MASK,
    RESIDENT_BLOCKS,
    KernelTree,
    build_candidate,
    element_type,
    identifiers,
    local_names,
    strip_parens,
    untemplated_kernel_tree,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "idiom:atomic-reduction"
BLOCK = 256
# The identity of each reduction, per element type (NVRTC has no <climits>: the limits are spelled out).
_INT_MIN, _LL_MIN = "(-2147483647 - 1)", "(-9223372036854775807ll - 1)"
_MAX_IDENTITY = {"int": _INT_MIN, "unsigned int": "0u", "unsigned": "0u", "long long": _LL_MIN}
_MIN_IDENTITY = {"int": "2147483647", "unsigned int": "0xffffffffu", "unsigned": "0xffffffffu"}
IDENTITY = {
    "atomicAdd": {"float": "0.0f", "double": "0.0", "int": "0", "unsigned int": "0u", "unsigned": "0u"},
    "atomicMax": {**_MAX_IDENTITY, "unsigned long long": "0ull"},
    "atomicMin": {**_MIN_IDENTITY, "long long": "9223372036854775807ll", "unsigned long long": "~0ull"},
}


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    loop = element_loop(tree) if tree is not None else None
    if tree is None or loop is None:
        return []
    return one_atomic_per_block(tree, loop, PROPOSER)


def one_atomic_per_block(
    tree: KernelTree, loop: ElementLoop, proposer: str, *, slots: str | None = None
) -> list[Candidate]:
    """The loop's elements folded in a register, then per warp and per block, and one atomic per block to
    the loop's address; none when the address is not one fixed element or the atomic has no identity for
    its type. `slots` names the per-warp shared array (a block reduction reuses its own array's name)."""
    spec = tree.target.spec
    if spec is None:
        return []
    pointer = single_address(tree, loop)
    element = element_type(tree.parameter(pointer)) if pointer else None
    identity = IDENTITY.get(loop.function, {}).get(element or "")
    if element is None or identity is None:
        return []
    launch = LaunchSpec(block=(BLOCK,), grid=(f"min({spec.launch.grid[0]}, {RESIDENT_BLOCKS})",))
    assumptions = ("the elements are combined in another order (float sums: within the spec's tolerance)",)
    return [
        build_candidate(
            tree,
            body=_body(tree, loop, element, identity, slots),
            launch=launch,
            description="grid-stride loop, warp-shuffle and block reduction, one atomic per block",
            proposer=proposer,
            assumptions=assumptions if loop.function == "atomicAdd" else (),
        )
    ]


def single_address(tree: KernelTree, loop: ElementLoop) -> str | None:
    """`p` for `p` or `&p[0]`: the atomic always hits the same element of a pointer parameter."""
    address = strip_parens(loop.address)
    if address.type == "pointer_expression":
        inner = address.child_by_field_name("argument")
        if inner is None or inner.type != "subscript_expression":
            return None
        array, indices = inner.child_by_field_name("argument"), inner.child_by_field_name("indices")
        index = indices.named_children[0] if indices is not None and indices.named_children else None
        if array is None or index is None or tree.text(index).strip() != "0":
            return None
        address = array
    if address.type != "identifier" or tree.parameter(tree.text(address)) is None:
        return None
    # Nothing but the pointer in the address: the same element for every thread.
    return tree.text(address) if not identifiers(loop.address) - {tree.text(address)} else None


def _body(tree: KernelTree, loop: ElementLoop, element: str, identity: str, slots: str | None) -> str:
    n = local_names(tree, "acc", "partial", "lane", "warp", "offset", "first", "stride", "k")
    if slots is not None:
        n["partial"] = slots
    acc = n["acc"]
    value = tree.text(loop.value)
    total = acc  # what the block adds: the sum, or the sum scaled once by a common factor
    if loop.function == "atomicAdd":
        scaled = _common_factor(tree, loop, element)
        if scaled is not None:  # `diff * diff / n` summed, then divided once a block
            value, total = scaled[0], f"{acc} {scaled[1]} {scaled[2]}"
        fold, combine = f"{acc} += {value}", f"{acc} += {{shuffled}};"
    else:
        op = "max" if loop.function == "atomicMax" else "min"
        fold = f"{acc} = {op}({acc}, static_cast<{element}>({value}))"
        combine = f"{acc} = {op}({acc}, {{shuffled}});"
    shuffled = f"__shfl_down_sync({FULL_MASK}, {acc}, {n['offset']})"
    warp_reduce = f"for (int {n['offset']} = 16; {n['offset']} > 0; {n['offset']} >>= 1) " + combine.format(
        shuffled=shuffled
    )
    return f"""{{
    // Each thread folds its elements into a register; the block combines them and adds once.
    {element} {acc} = {identity};
    {unrolled_grid_stride(tree, loop, fold, n)}

    // Warp, then block: lane 0 of each warp leaves its partial in shared memory; warp 0 combines them.
    __shared__ {element} {n["partial"]}[32];
    const int {n["lane"]} = threadIdx.x % 32, {n["warp"]} = threadIdx.x / 32;
    {warp_reduce}
    if ({n["lane"]} == 0) {n["partial"]}[{n["warp"]}] = {acc};
    __syncthreads();
    if ({n["warp"]} == 0) {{
        {acc} = {n["lane"]} < (blockDim.x + 31) / 32 ? {n["partial"]}[{n["lane"]}] : {identity};
        {warp_reduce}
        if ({n["lane"]} == 0) {loop.function}({tree.text(loop.address)}, {total});
    }}
}}"""


def _common_factor(tree: KernelTree, loop: ElementLoop, element: str) -> tuple[str, str, str] | None:
    """(term, operator, factor) for a floating-point element `term / factor` or `term * factor` whose
    factor is the same for every element (parameters and literals): the sum of the terms is scaled once
    instead of every term (a division an element, in an MSE's `diff * diff / n`)."""
    if element not in ("float", "double"):
        return None  # integer division does not distribute over a sum
    value = strip_parens(loop.value)
    operator = value.child_by_field_name("operator")
    left, right = value.child_by_field_name("left"), value.child_by_field_name("right")
    if value.type != "binary_expression" or operator is None or left is None or right is None:
        return None
    if operator.type not in ("/", "*"):
        return None
    parameters = {p.name for p in tree.target.kernel.parameters if not p.is_pointer}
    if any(n.type in ("call_expression", "subscript_expression") for n in walk(right)):
        return None
    if not identifiers(right) <= parameters or identifiers(right) & {loop.index}:
        return None
    if operator.type == "/" and not identifiers(left):
        return None  # `1.0f / n` would sum nothing
    return tree.text(left), operator.type, tree.text(right)
