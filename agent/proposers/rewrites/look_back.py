"""Each block summing every element before it -> a single-pass look-back across the blocks.

A first draft of a scan over many blocks often gets each block's carry by summing the whole array before
the block: `if (tid == 0) { float s = 0; for (int j = 0; j < blockIdx.x * CHUNK; ++j) s += in[j];
carry = s; }`. That is O(n) reads a block and O(n^2 / CHUNK) in all: the last block reads the whole array
while the rest of it waits. Driven by the analysis (agent/analysis/): wherever a thread-0 `if` at the top
of the kernel (the one `shared_loop` finds) holds a counted loop from 0 to `blockIdx.x * S` whose only
statement adds `a[j]` of a 32-bit array the kernel never writes into an accumulator of that type, whatever
the names, the macros or the spelling of the bound.

Rewritten to the decoupled look-back of single-pass scans (Merrill and Garland, "Single-pass Parallel
Prefix Scan with Decoupled Look-back", 2016): warp 0 of each block sums the block's own S elements and
publishes the sum in a status word, then adds its predecessors' published sums, 32 words at a time,
until it meets one that holds a whole prefix, and publishes its own prefix for the blocks after it. A
block reads O(S) elements and a few words, whatever its index. The loop becomes `s += <that sum>`; what
thread 0 did with it stays as written. The status words are the module's own (`__device__`), cleared by
the last block of each launch; a grid with more blocks than words falls back to the warp summing the
prefix itself.
"""

from __future__ import annotations

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.facts import SUM, Loop
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.analysis.values import unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._combine import declared_type
from cuda_agent.agent.proposers.rewrites.shared_loop import Solo, returns, solos, thread_name
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    apply_to_body,
    build_candidate,
    declarator_name,
    element_type,
    fresh_names,
    identifiers,
    line_indent,
    walk,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:look-back"
# Status words a launch may use (8 bytes each, 512 KiB of module memory): 65536 blocks of 512 elements
# is a scan of 32M elements in one pass; a larger grid takes the fallback.
CAPACITY = 65536
# How a 32-bit value rides in the low half of a status word, and comes back, by the array's element type.
_BITS = {
    "float": ("__float_as_uint({})", "__uint_as_float((unsigned int)({}))"),
    "int": ("(unsigned int)({})", "(int)(unsigned int)({})"),
    "int32_t": ("(unsigned int)({})", "(int32_t)(unsigned int)({})"),
    "unsigned": ("(unsigned int)({})", "(unsigned int)({})"),
    "unsigned int": ("(unsigned int)({})", "(unsigned int)({})"),
    "uint32_t": ("(unsigned int)({})", "(uint32_t)({})"),
}
ASSUMPTIONS = (
    "blocks start in the order of blockIdx.x: a block waits only for blocks of a lower index (CUB's "
    "single-pass scan assumes the same)",
    "launches of this kernel do not overlap (one stream): the look-back's status words are the module's, "
    "cleared by the last block of each launch",
    "the sum before each block is reassociated block by block (within the spec's tolerance)",
)


class _Unsupported(Exception):
    """Not this shape, or not provably the same results; the message says why (for debugging)."""


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    launch = target.spec.launch
    if any(b != 1 for b in launch.block[1:]) or launch.block[0] % 32 or launch.block[0] > 1024:
        return []  # warp 0 is 32 whole lanes of a 1-D block
    if any(str(g).strip() != "1" for g in launch.grid[1:]):
        return []  # blocks are ordered and counted along x alone
    for solo in solos(tree, facts):
        for loop in solo.loops:
            try:
                body, helper, per_block = _rewrite(tree, facts, solo, loop)
            except _Unsupported:
                continue
            return [
                build_candidate(
                    tree,
                    body=body,
                    launch=launch,
                    description=(
                        f"the sum before each block from the blocks before it (a single-pass look-back): "
                        f"{per_block} elements and a few status words read a block, instead of all before it"
                    ),
                    proposer=PROPOSER,
                    helpers=helper,
                    assumptions=ASSUMPTIONS,
                )
            ]
    return []


def _rewrite(tree: KernelTree, facts: KernelFacts, solo: Solo, loop: Loop) -> tuple[str, str, str]:
    if any(
        returns(statement)
        for statement in tree.body.named_children
        if statement.end_byte <= solo.statement.start_byte
    ):
        # a block that may leave early proves nothing about the elements the block before it owns: its
        # loop would have read them, the look-back reads them in that block
        raise _Unsupported("a return before the carry")
    share = _per_block(loop)
    per_block = _spelled_share(tree, loop, share)
    array, accumulator = _summed(tree, facts, loop)
    parameter = tree.parameter(array)
    kind = element_type(parameter)
    if kind is None or kind not in _BITS:
        raise _Unsupported(f"{array} is not an array of a 32-bit type")
    declared = declared_type(tree, accumulator)
    if declared is None or " ".join(declared.split()) != kind:
        raise _Unsupported(f"{accumulator} is not a {kind}: the look-back would sum in another type")
    if any(a.write and a.array == array for a in facts.accesses):
        raise _Unsupported(f"the kernel writes {array}")
    taken = identifiers(tree.root) | tree.names()
    status, done, capacity, helper_name, before = fresh_names(
        taken, "look_back_status", "look_back_done", "LOOK_BACK_CAPACITY", "sum_before_block", "before_block"
    )
    helper = _helper(kind, status, done, capacity, helper_name)
    thread = thread_name(facts, solo)
    indent = line_indent(tree, solo.statement)
    unit = tree.indent_unit()
    statement = tree.data[solo.statement.start_byte : solo.statement.end_byte]
    start, end = (
        loop.node.start_byte - solo.statement.start_byte,
        loop.node.end_byte - solo.statement.start_byte,
    )
    replaced = (statement[:start] + f"{accumulator} += {before};".encode() + statement[end:]).decode("utf-8")
    replaced = replaced.replace("\n", "\n" + unit)
    text = (
        f"// warp 0 gets the sum of {array} before this block from the blocks before it ({helper_name})\n"
        f"{indent}if ({thread} < 32) {{\n"
        f"{indent}{unit}const {kind} {before} = {helper_name}({array}, {per_block});\n"
        f"{indent}{unit}{replaced}\n"
        f"{indent}}}"
    )
    edits: list[Edit] = [(solo.statement.start_byte, solo.statement.end_byte, text)]
    return apply_to_body(tree, edits), helper, share


def _per_block(loop: Loop) -> str:
    """S of a loop `for (j = 0; j < blockIdx.x * S; ++j)`: a positive number or the block's size."""
    if loop.start.value() != 0 or loop.step.value() != 1:
        raise _Unsupported("not a loop from 0 by 1")
    per_block = loop.bound.coefficient("blockIdx.x")
    if per_block is None or loop.bound != Form.atom("blockIdx.x") * per_block:
        raise _Unsupported("the bound is not the block's index times its share")
    value = per_block.value()
    if value is not None and value > 0:
        return str(value)
    if per_block == Form.atom("blockDim.x"):
        return "blockDim.x"
    raise _Unsupported("a block's share that is not a number or the block's size")


def _spelled_share(tree: KernelTree, loop: Loop, value: str) -> str:
    """The block's share as the kernel spells it (`BLOCK_SIZE` of `start = blockIdx.x * BLOCK_SIZE`, through
    locals), so that a launch tuned later through that macro keeps it right; else its value."""
    condition = loop.node.child_by_field_name("condition")
    node = condition.child_by_field_name("right") if condition is not None else None
    seen: set[str] = set()
    while node is not None and unwrap(node).type == "identifier" and tree.text(unwrap(node)) not in seen:
        name = tree.text(unwrap(node))
        seen.add(name)
        declarators = [
            n for n in walk(tree.body) if n.type == "init_declarator" and declarator_name(n) == name
        ]
        node = declarators[0].child_by_field_name("value") if len(declarators) == 1 else None
    node = unwrap(node) if node is not None else None
    if (
        node is None
        or node.type != "binary_expression"
        or tree.text(node.child_by_field_name("operator") or node) != "*"
    ):
        return value
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    sides = [tree.text(unwrap(n)) for n in (left, right) if n is not None]
    if len(sides) != 2 or "blockIdx.x" not in sides:
        return value
    other = sides[1] if sides[0] == "blockIdx.x" else sides[0]
    return other if other.replace("_", "").replace(".", "").isalnum() else f"({other})"


def _summed(tree: KernelTree, facts: KernelFacts, loop: Loop) -> tuple[str, str]:
    """(the array, the accumulator) of a loop whose one statement is `acc += a[j]`."""
    if len(loop.reductions) != 1 or loop.reductions[0].combine != SUM or loop.carried:
        raise _Unsupported("not one sum")
    (reduction,) = loop.reductions
    if reduction.combiner != "+" or len(reduction.statements) != 1:
        raise _Unsupported("not a plain sum")
    body = (
        [n for n in loop.body.named_children if n.type != "comment"]
        if loop.body.type == "compound_statement"
        else [loop.body]
    )
    if len(body) != 1 or body[0].type != "expression_statement":
        raise _Unsupported("the loop does more than add")
    accesses = facts.accesses_in(loop)
    if len(accesses) != 1 or not accesses[0].read or accesses[0].offset != Form.atom(loop.variable):
        raise _Unsupported("the loop does not read one array at its variable")
    (access,) = accesses
    statement = reduction.statements[0]
    value = _added(tree, statement, reduction.accumulators[0])
    if value is None or unwrap(value).start_byte != access.node.start_byte:
        raise _Unsupported("what is added is not the element itself")
    return access.array, reduction.accumulators[0]


def _added(tree: KernelTree, statement: Node, accumulator: str) -> Node | None:
    """`a[j]` of `acc += a[j]` or `acc = acc + a[j]`."""
    if statement.type != "assignment_expression":
        return None
    operator = statement.child_by_field_name("operator")
    right = statement.child_by_field_name("right")
    if operator is None or right is None:
        return None
    if operator.type == "+=":
        return right
    right = unwrap(right)
    if operator.type == "=" and right.type == "binary_expression":
        left, plus, other = (right.child_by_field_name(f) for f in ("left", "operator", "right"))
        if (
            plus is not None
            and plus.type == "+"
            and left is not None
            and tree.text(unwrap(left)) == accumulator
        ):
            return other
    return None


def _helper(kind: str, status: str, done: str, capacity: str, name: str) -> str:
    bits, value = _BITS[kind]
    return f"""\
// The sum of a[0 .. blockIdx.x * per_block), for the 32 lanes of a block's warp 0 (each gets it): a
// decoupled look-back. Each block publishes the sum of its own per_block elements in a status word, then
// adds its predecessors' sums, 32 words at a time, until it meets one that holds a whole prefix, and
// publishes its own prefix. A word holds a flag (1: the block's own sum, 2: with everything before it) in
// its high half and the value's bits in its low half. A block waits only for blocks of a lower index,
// which start first; the last block to finish clears the words for the next launch.
#define {capacity} {CAPACITY}
__device__ unsigned long long {status}[{capacity}];
__device__ unsigned int {done};

__device__ {kind} {name}(const {kind}* a, long long per_block)
{{
    const int lane = threadIdx.x % 32;
    const long long block = blockIdx.x;
    {kind} before = 0;
    if (gridDim.x > {capacity}) {{
        // more blocks than status words: the warp sums the elements before the block itself
        for (long long j = lane; j < block * per_block; j += 32) before += a[j];
        for (int offset = 16; offset > 0; offset >>= 1)
            before += __shfl_xor_sync(0xffffffffu, before, offset);
        return before;
    }}
    // the block's own sum; the last block's is no other block's prefix, and is not read
    {kind} own = 0;
    if (block + 1 < gridDim.x) {{
        // unrolled: the lane's loads all in flight at once, not one latency each (16 for 512 elements)
        #pragma unroll 16
        for (long long k = lane; k < per_block; k += 32) own += a[block * per_block + k];
        for (int offset = 16; offset > 0; offset >>= 1) own += __shfl_xor_sync(0xffffffffu, own, offset);
        const unsigned long long flag = (block == 0 ? 2ull : 1ull) << 32;  // the first block's is a prefix
        if (lane == 0) atomicExch(&{status}[block], flag | {bits.format("own")});
    }}
    for (long long last = block - 1; last >= 0; last -= 32) {{
        const long long at = last - lane;  // lane 0 reads the nearest block
        unsigned long long word = 0;
        if (at >= 0) {{
            do {{
                word = *(volatile unsigned long long*)&{status}[at];
            }} while ((word >> 32) == 0);
        }}
        const unsigned int prefixes = __ballot_sync(0xffffffffu, (word >> 32) == 2);
        // the nearest whole prefix, and the sums of the blocks between it and this one
        const int nearest = prefixes ? __ffs(prefixes) - 1 : 31;
        {kind} part = (at >= 0 && lane <= nearest) ? {value.format("word")} : 0;
        for (int offset = 16; offset > 0; offset >>= 1) part += __shfl_xor_sync(0xffffffffu, part, offset);
        before += part;
        if (prefixes) break;
    }}
    if (block > 0 && block + 1 < gridDim.x && lane == 0)
        atomicExch(&{status}[block], (2ull << 32) | {bits.format("before + own")});
    // the last block to finish clears the words: every other block has read all it needed
    __threadfence();
    unsigned int finished = 0;
    if (lane == 0) finished = atomicAdd(&{done}, 1u);
    finished = __shfl_sync(0xffffffffu, finished, 0);
    if (finished == gridDim.x - 1) {{
        for (long long b = lane; b < gridDim.x; b += 32) {status}[b] = 0;
        if (lane == 0) {done} = 0;
        __threadfence();
    }}
    return before;
}}
"""
