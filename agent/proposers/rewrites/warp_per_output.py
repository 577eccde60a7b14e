"""A thread per output looping over its inputs -> a warp per output, the loop split across its 32 lanes.

Driven by the analysis (agent/analysis/): it applies wherever a thread owns an output (one or two global
thread indices, each bounded by the bounds check) and loops over independent iterations (a row, a head
dimension, a channel list, a dot product) whose reductions have a known combine: sums, products, max and
min, argmax and argmin with their index, bitwise folds. Whatever the spelling of the indices, the
bounds, the pointer offsets or the combine.

Rewritten in place, the user's text kept: the owner indices come from the warp's number, each such loop
starts at `lane` and steps by 32 (neighbouring lanes touch neighbouring elements where the loop walks
memory contiguously), each accumulator is combined across the warp with `__shfl_xor_sync` right after
its loop (every lane then holds the result, as later statements expect), and stores outside the loops
are done by lane 0. A warp owns one output, so the bounds check and any early return are warp-uniform
and full-mask shuffles are safe. The same with a group of 8 lanes, a whole block (the warps' results
merged through shared memory) or, for outputs fewer than the SMs, a cluster of 8 blocks (the blocks'
results merged through distributed shared memory, `_combine._across_cluster`). A loop starting at the
thread's own place (`for (k = row * K; ...)`, a CSR row's `row_ptr[row]`) counts as moving with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import zip_longest
from typing import NamedTuple

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.facts import (
    FIND_FIRST,
    Access,
    Loop,
)
from cuda_agent.agent.analysis.forms import LANE, Form
from cuda_agent.agent.analysis.values import unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, as_factor, at_benchmark, bound_terms
from cuda_agent.agent.proposers.rewrites._combine import (
    BLOCK,
    Unsupported,
    across_lanes,
    check_initial,
    search_flag,
    strided,
)
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    apply_to_body,
    build_candidate,
    line_indent,
    local_names,
    reads_axes,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:warp-per-output"


class Shape(NamedTuple):
    width: int  # lanes per output: 32, 8, or BLOCK (the whole block, or the whole cluster)
    block: int  # threads per block
    cluster: int = 1  # blocks per output (a thread block cluster), with width BLOCK


# A whole warp for long loops, 8 lanes for short ones (a head dimension of 64) where 32 lanes would idle;
# 4 warps a block suits outputs that are few; a whole block per output, for rows so long (a vocabulary)
# that a warp each would leave the GPU half idle.
SHAPES = (Shape(32, 256), Shape(32, 128), Shape(8, 256), Shape(BLOCK, 256), Shape(BLOCK, 1024))
# Outputs fewer than the GPU's SMs (batch norm's 64 channels, each 100,000 values) leave most SMs idle
# even at a block each: a cluster of 8 blocks (the portable most, sm_90) then shares each output, the
# blocks' results merged through distributed shared memory; every block goes on with the result, so a
# second pass over the same output (the variance about the mean) needs no second kernel.
CLUSTER_SHAPES = (Shape(BLOCK, 512, 8), Shape(BLOCK, 256, 8))
FEW_OUTPUTS = 132  # an H100's or H200's SMs
CLUSTER_WORTHY = 32768  # elements an output, at the least, for 8 blocks of 256 threads to share
# A split loop this long (at the benchmark's sizes) puts a block per output first: a warp's loads in
# flight are too few to cover the memory's latency, a block's warps are not.
LONG_LOOP = 8192
# From this long (a 256-thread block's sweep of 16-byte loads of fp32) a block per output is as likely a
# winner as a warp: the first two candidates, the ones the search chains at once, are then one of each.
# RMS norm over 4096 halves: a block per row (with the vector loop) 1.40x faster than a warp per row,
# which alone had been chained.
BLOCK_WORTHY_LOOP = 1024


# An inner loop split under a strided outer one is this long at least (a pooling window is not a row).
NESTED_TRIP = 32


class _Unsupported(Unsupported):
    """Not this shape, or not provably the same results; the message says why (for debugging)."""


@dataclass(frozen=True)
class _Owner:
    name: str
    axis: str
    count: str  # the bound in kernel terms (parameters and macros)
    spec: str  # the same in the spec's terms
    bound: Form  # the same as the analysis has it


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    candidates = []
    for shape in _shapes(tree, facts):
        width, block, cluster = shape
        try:
            body, owners, batch, distributed, assumptions = _rewrite(tree, facts, width, cluster)
        except (_Unsupported, Unsupported):
            return []
        owned = owners[0].spec if len(owners) == 1 else " * ".join(as_factor(o.spec) for o in owners)
        grid = [f"ceil_div({owned}, block.x // {width})" if width else owned]
        if cluster > 1:
            grid = [f"{as_factor(owned)} * {cluster}"]
        if batch:
            launch = target.spec.launch
            grid += ["1"] * (max(batch) - 1)
            for axis in range(1, max(batch) + 1):
                grid[axis : axis + 1] = [launch.grid[axis] if axis in batch else "1"]
        per = ", ".join(o.name for o in reversed(owners))
        loops = ", ".join(dict.fromkeys(loop.variable for loop in distributed))
        candidate = build_candidate(
            tree,
            body=body,
            launch=LaunchSpec(block=(block, *([1] * (len(grid) - 1))), grid=tuple(grid)),
            description=f"one {_group(width, cluster)} per {per}, block {block}: loop {loops} split across "
            "the lanes",
            proposer=PROPOSER,
            assumptions=assumptions,
        )
        if cluster > 1:
            clustered = _with_cluster_dims(tree, candidate.source, cluster)
            if clustered is None:
                continue
            candidate = replace(candidate, source=clustered, min_arch=90)
        candidates.append(candidate)
    if len(candidates) > len(SHAPES):
        return candidates  # few outputs: the clusters lead
    trips = [at_benchmark(tree, loop.trip) if loop.trip is not None else None for loop in distributed]
    shortest = min((t for t in trips if t is not None), default=None) if None not in trips else None
    if shortest is not None and shortest >= BLOCK_WORTHY_LOOP:
        # a block and a warp in turn, so that the first two (the ones the search takes further at once)
        # are one of each; for the longest loops the blocks lead, 256 threads first: with 16-byte loads
        # its threads each sweep the row 31 times, 8 blocks an SM, where 1024 threads leave 2 blocks an
        # SM waiting on their few loads (cross-entropy over 32000 logits, fused: 0.108 ms against 0.166
        # ms on the H100)
        shaped = list(zip(SHAPES, candidates, strict=True))
        blocks = [c for shape, c in shaped if shape.width == BLOCK]
        warps = [c for shape, c in shaped if shape.width != BLOCK]
        pairs = zip_longest(blocks, warps) if shortest >= LONG_LOOP else zip_longest(warps, blocks)
        candidates = [c for pair in pairs for c in pair if c is not None]
    return candidates


def _shapes(tree: KernelTree, facts: KernelFacts) -> tuple[Shape, ...]:
    """SHAPES, led by CLUSTER_SHAPES where the outputs are fewer than the SMs and each is long."""
    if facts.guard is None:
        return SHAPES  # not rewritten at all (`_rewrite` says why)
    try:
        owners, batch = output_owners(tree, facts)
    except (_Unsupported, Unsupported):
        return SHAPES
    outputs = 1
    for owner in owners:
        count = at_benchmark(tree, owner.bound)
        outputs = outputs * count if count is not None else FEW_OUTPUTS
    spec = tree.target.spec
    for axis in batch:  # a batch along y or z multiplies the outputs
        try:
            outputs *= evaluate(spec.launch.grid[axis], spec.sizes) if spec is not None else FEW_OUTPUTS
        except (ExpressionError, ArithmeticError, IndexError):
            outputs *= FEW_OUTPUTS
    if outputs >= FEW_OUTPUTS:
        return SHAPES
    top = [loop for loop in facts.loops if loop.depth == 0 and _distributable(loop)]
    if not top or min(_elements(tree, facts, loop) for loop in top) < CLUSTER_WORTHY:
        return SHAPES
    return (*CLUSTER_SHAPES, *SHAPES)


def _elements(tree: KernelTree, facts: KernelFacts, loop: Loop) -> int:
    """The iterations of the loop and the loops nested in it that it is made of (batch norm's images and
    their pixels), at the benchmark's sizes; 0 where a trip count is not known there."""
    trip = at_benchmark(tree, loop.trip) if loop.trip is not None else None
    if trip is None:
        return 0
    start, end = loop.node.start_byte, loop.node.end_byte
    inside = [o for o in facts.loops if o.depth == loop.depth + 1 and start <= o.node.start_byte < end]
    return trip * max((_elements(tree, facts, inner) for inner in inside), default=1)


def _with_cluster_dims(tree: KernelTree, source: str, cluster: int) -> str | None:
    """The candidate's kernel declared with its cluster's size, right after `__global__` (None where the
    kernel's header does not spell it out)."""
    kernel = tree.target.kernel  # the candidate's text up to the body is the original's
    found = re.search(rb"\b__global__\b", tree.data[kernel.span.start_byte : kernel.body_span.start_byte])
    if found is None:
        return None
    at = kernel.span.start_byte + found.end()
    data = source.encode("utf-8")
    return (data[:at] + f" __attribute__((cluster_dims({cluster}, 1, 1)))".encode() + data[at:]).decode()


def _rewrite(
    tree: KernelTree, facts: KernelFacts, width: int, cluster: int = 1
) -> tuple[str, list[_Owner], set[int], list[Loop], tuple[str, ...]]:
    if facts.uses_shared or facts.barriers or facts.guard is None:
        raise _Unsupported("shared memory, barriers or no bounds check")
    if facts.atomics and not _atomics_are_updates(tree):
        raise _Unsupported("an atomic whose old value is read")
    if facts.thread_uses or facts.unmodelled:
        raise _Unsupported("thread builtins read outside the index declarations")
    owners, batch = output_owners(tree, facts)
    top = [loop for loop in facts.loops if loop.depth == 0]
    distributed = [loop for loop in top if _distributable(loop)]
    if not distributed:
        raise _Unsupported("no loop to split across a warp")
    strided_loops = {loop.node.start_byte: _strided_loop(tree, facts, loop) for loop in distributed}
    if not any(_walks_contiguously(facts, strided_loops[loop.node.start_byte]) for loop in distributed):
        raise _Unsupported("no split loop walks memory contiguously")
    _check_nothing_repeated(tree, facts, top, distributed)
    _check_memory(facts, distributed)
    names = local_names(
        tree,
        "warp",
        "lane",
        "offset",
        "other",
        "other_at",
        "other_sum",
        "joint",
        "group_mask",
        "part",
        "w",
        "group",
        "found",
        "other_found",
        "rank",
        "block_part",
    )
    edits = owner_edits(tree, facts, owners, names, width, cluster)
    assumptions: set[str] = set()
    for loop in distributed:
        # the lanes stride the loop itself, or the one loop nested in it that walks memory contiguously;
        # either way each lane's partial results are combined after the whole loop
        edits += _loop_edits(tree, strided_loops[loop.node.start_byte], names, width, cluster)
        for reduction in loop.reductions:
            check_initial(tree, loop, reduction)
            if reduction.combine == FIND_FIRST:
                edits += search_flag(tree, loop, reduction, names["found"])
            combined, assumption = across_lanes(tree, loop, reduction, names, width, cluster=cluster)
            edits.append((loop.node.end_byte, loop.node.end_byte, combined))
            if assumption:
                assumptions.add(assumption)
    edits += lane_zero_stores(tree, facts, distributed, names["lane"])
    split = [strided_loops[loop.node.start_byte] for loop in distributed]
    return apply_to_body(tree, edits), owners, batch, split, tuple(sorted(assumptions))


def _atomics_are_updates(tree: KernelTree) -> bool:
    """Whether every atomic is a statement of its own (`atomicAdd(&dw[row * D + c], g);`): an update
    the lane running it does once, in a split loop's iteration or, outside one, on lane 0 (its stores
    are lane 0's). An old value read back (`int slot = atomicAdd(&count, 1);`) would be each lane's."""
    for node in walk(tree.body):
        function = node.child_by_field_name("function") if node.type == "call_expression" else None
        if function is None or not tree.text(function).split("::")[-1].startswith("atomic"):
            continue
        if node.parent is None or node.parent.type != "expression_statement":
            return False
    return True


def output_owners(tree: KernelTree, facts: KernelFacts) -> tuple[list[_Owner], set[int]]:
    """The global thread indices (x first), each with its bound from the bounds check, and the grid axes
    (1 for y, 2 for z) that are a batch: `int bh = blockIdx.z;`, kept as they are."""
    guard = facts.guard
    assert guard is not None
    owners: list[_Owner] = []
    batch: set[int] = set()
    for index in facts.indices:
        if not index.direct:
            continue  # derived from another index by name: follows it
        plain = [a for a in "yz" if index.form == Form.atom(f"blockIdx.{a}")]
        if plain:
            batch.add("xyz".index(plain[0]))
            continue
        if index.axis not in ("x", "y") or len(index.declaration.children_by_field_name("declarator")) != 1:
            raise _Unsupported(f"{index.name} is not a global index along x or y")
        bound = guard.bound_of(index.name)
        if bound is None:
            raise _Unsupported(f"{index.name} has no bound in the bounds check")
        count, spec = _count(tree, bound.bound)
        owners.append(_Owner(index.name, index.axis, count, spec, bound.bound))
    axes = sorted(o.axis for o in owners)
    if axes not in (["x"], ["x", "y"]) or (len(axes) == 2 and 1 in batch):
        raise _Unsupported("not one index along x, or one along x and one along y")
    launch = tree.target.spec.launch if tree.target.spec else None
    if launch is None or any(len(launch.grid) <= axis for axis in batch):
        raise _Unsupported("a batch axis the launch does not have")
    if any(b != 1 for b in launch.block[len(axes) :]) and reads_axes(tree, "yz"[len(axes) - 1 :]):
        # threads along an axis the kernel never reads only repeat its work (PolyBench launches its 1-D
        # kernels with 32 x 8 blocks): the warps' own launch drops them
        raise _Unsupported("threads along an axis that is not an index")
    return sorted(owners, key=lambda o: o.axis), batch


def _count(tree: KernelTree, bound: Form) -> tuple[str, str]:
    try:
        kernel_text, spec_text = bound_terms(tree, bound)
    except NotInSizes as exc:
        raise _Unsupported(str(exc)) from exc
    return as_factor(kernel_text), spec_text


def _distributable(loop: Loop) -> bool:
    """Independent iterations, a unit step, and reductions whose combine the warp can finish."""
    return loop.independent and loop.step.value() == 1


def _strided_loop(tree: KernelTree, facts: KernelFacts, loop: Loop) -> Loop:
    """The loop the lanes stride: the loop itself, or, where it walks memory with a stride (a batch of
    rows: `for (b ...) for (p ...) acc += in[(b * C + c) * P + p]`), the one loop nested in it that walks
    memory contiguously, when every access and every update of the outer loop's accumulators is in that
    inner loop and nothing is stored in either (each lane then sums its share of every row)."""
    if _walks_contiguously(facts, loop):
        return loop
    start, end = loop.node.start_byte, loop.node.end_byte
    inside = [o for o in facts.loops if o.depth == loop.depth + 1 and start <= o.node.start_byte < end]
    if len(inside) != 1:
        return loop
    (inner,) = inside
    trip = at_benchmark(tree, inner.trip) if inner.trip is not None else None
    if trip is None or trip < NESTED_TRIP:
        return loop  # a 3-wide window: the lanes would idle
    updates = [node for r in loop.reductions for node in r.statements]
    if any(not inner.node.start_byte <= node.start_byte < inner.node.end_byte for node in updates):
        return loop  # updated once a row too: every lane would add it
    accesses = facts.accesses_in(loop)
    reduced = {(r.combine, r.accumulators) for r in inner.reductions}
    if (
        not _distributable(inner)
        or not _walks_contiguously(facts, inner)
        or any(a.write for a in accesses)
        or len(facts.accesses_in(inner)) != len(accesses)
        or any((r.combine, r.accumulators) not in reduced for r in loop.reductions)
        or len(inner.reductions) != len(loop.reductions)
    ):
        return loop
    return inner


def _walks_contiguously(facts: KernelFacts, loop: Loop) -> bool:
    """Whether splitting the loop coalesces something: an access that moves by one element per
    iteration but by more than one between neighbouring threads (a row read by a thread per row), and no
    access that neighbouring threads already read together and the loop walks with a stride."""
    gains = False
    for access in facts.accesses_in(loop):
        along, across = access.stride(loop.variable), _across_lanes(facts, access, loop)
        if _unit(along) and (across is None or across.value() not in (0, 1)):
            gains = True
        if _unit(across) and (along is None or along.value() not in (0, 1)):
            return False
    return gains


def _across_lanes(facts: KernelFacts, access: Access, loop: Loop) -> Form | None:
    """The access's stride between neighbouring threads with its loop's start counted: a loop starting at
    the thread's own place (`for (k = row * K; k < row * K + K; ++k) a[k]`, a CSR row's `rowptr[row]`)
    moves every address with the thread, though the offset `k` alone does not. None where the start is
    read from memory the thread picks (a row pointer): unknown, as for a gather."""
    across = access.stride(LANE)
    if across is None or access.stride(loop.variable) in (None, Form()):
        return across
    for atom in loop.start.atoms():
        if atom.startswith("⟨") and LANE in facts.atoms.depends.get(atom, frozenset()):
            return None
    return access.offset.substitute(loop.variable, loop.start).coefficient(LANE)


def _check_nothing_repeated(
    tree: KernelTree, facts: KernelFacts, top: list[Loop], distributed: list[Loop]
) -> None:
    """A loop left whole runs on every lane of the group: one that reads memory and is as long as a split
    one would cost each lane what the whole output cost one thread (an online softmax whose first pass
    the analysis does not see as a reduction: 0.12x on the H200, a block per row redoing it 1024 times)."""
    longest = max(
        (at_benchmark(tree, loop.trip) or 0 for loop in distributed if loop.trip is not None), default=0
    )
    for loop in top:
        if loop in distributed or not facts.accesses_in(loop):
            continue
        trip = at_benchmark(tree, loop.trip) if loop.trip is not None else None
        if trip is None or trip >= longest:
            raise _Unsupported(f"loop {loop.variable} would be repeated by every lane")


def _unit(stride: Form | None) -> bool:
    return stride is not None and stride.value() == 1


def _check_memory(facts: KernelFacts, distributed: list[Loop]) -> None:
    """Every store is in a split loop or outside all loops (lane 0 does those); an array that is stored is
    read back only where the same lane stored it (the same offset in a split loop with the same start)."""
    split = {loop.node.start_byte: loop for loop in distributed}

    def holder(access: Access) -> Loop | None:
        loop = facts.outermost_loop(access)
        return split.get(loop.node.start_byte) if loop is not None else None

    written: dict[str, list[Access]] = {}
    for access in facts.accesses:
        if not access.write:
            continue
        if access.loops and holder(access) is None:
            raise _Unsupported(f"a store to {access.array} in a loop that is not split")
        written.setdefault(access.array, []).append(access)
    for array, stores in written.items():
        # One lane owns each stored element: stores in split loops all at one place and start (else two
        # lanes could write one element, unordered), and none of them also stored by lane 0 outside.
        places = set()
        for store in stores:
            loop = holder(store)
            places.add(None if loop is None else (loop.start.text(), _renamed(store, loop).text()))
        if len(places) > 1 and any(p is not None for p in places):
            raise _Unsupported(f"{array} is stored at several places by different lanes")
    for access in facts.accesses:
        stores = written.get(access.array)
        if not stores or not access.read or access.write:
            continue
        mine = holder(access)
        if mine is None:
            # Lane 0 stores and reads it in program order, if the read is in a store it does alone.
            if any(holder(s) is not None for s in stores) or not _in_a_store(facts, access):
                raise _Unsupported(f"{access.array} is stored and read outside a split loop")
            continue
        here = _renamed(access, mine)
        same_lane = any(
            (theirs := holder(s)) is not None and theirs.start == mine.start and _renamed(s, theirs) == here
            for s in stores
        )
        if not same_lane:
            raise _Unsupported(f"{access.array} is read where another lane may have stored it")


def _renamed(access: Access, loop: Loop) -> Form:
    """The access's offset with its split loop's variable under one name, to compare across loops."""
    return access.offset.substitute(loop.variable, Form.atom("k"))


def _in_a_store(facts: KernelFacts, access: Access) -> bool:
    """Whether the access is in an expression statement that stores outside the loops (lane 0's)."""
    statement = access.node
    while statement.parent is not None and statement.type != "expression_statement":
        statement = statement.parent
    return statement.type == "expression_statement" and any(
        a.write and not a.loops and statement.start_byte <= a.node.start_byte < statement.end_byte
        for a in facts.accesses
    )


def owner_edits(
    tree: KernelTree,
    facts: KernelFacts,
    owners: list[_Owner],
    names: dict[str, str],
    width: int,
    cluster: int = 1,
) -> list[Edit]:
    """The owner indices from the group's number (x fastest), and the lane declared before them."""
    warp, lane = names["warp"] if width == 32 else names["group"], names["lane"]
    declarations = {i.name: i.declaration for i in facts.indices}
    edits: list[Edit] = []
    first = min((declarations[o.name] for o in owners), key=lambda d: d.start_byte)
    indent = line_indent(tree, first)
    lanes = f"const int {lane} = threadIdx.x % {width};\n{indent}" if width else ""
    if width and width < 32:
        # the shuffles name only this group's lanes: a neighbouring group may have returned already
        mask = f"0x{(1 << width) - 1:x}u << (threadIdx.x % 32 - {lane})"
        lanes += f"const unsigned {names['group_mask']} = {mask};\n{indent}"
    number = f"blockIdx.x * (blockDim.x / {width}) + threadIdx.x / {width}" if width else "blockIdx.x"
    if not width:
        lanes = f"const int {lane} = threadIdx.x;  // the block's threads share this output's loops\n{indent}"
    if cluster > 1:
        number = f"blockIdx.x / {cluster}"
        lanes = (
            f"// the {cluster} blocks of a cluster (ranks blockIdx.x % {cluster}) share this output's loops\n"
            f"{indent}const int {lane} = blockIdx.x % {cluster} * blockDim.x + threadIdx.x;\n{indent}"
        )
    if len(owners) == 1:
        (owner,) = owners
        value = _initialiser(declarations[owner.name])
        edits.append((value.start_byte, value.end_byte, number))
        edits.append((first.start_byte, first.start_byte, lanes))
        return edits
    x, y = owners
    header = (
        f"// one {_group(width, cluster)} per ({y.name}, {x.name}); its lanes share the loops below\n{indent}"
        f"const int {warp} = {number};\n{indent}{lanes}"
    )
    edits.append((first.start_byte, first.start_byte, header))
    value = _initialiser(declarations[x.name])
    edits.append((value.start_byte, value.end_byte, f"{warp} % {x.count}"))
    value = _initialiser(declarations[y.name])
    edits.append((value.start_byte, value.end_byte, f"{warp} / {x.count}"))
    return edits


def _group(width: int, cluster: int) -> str:
    """What shares an output, as the descriptions and comments name it."""
    if cluster > 1:
        return f"cluster of {cluster} blocks"
    return {32: "warp", BLOCK: "block"}.get(width, f"group of {width} lanes")


def _initialiser(declaration: Node) -> Node:
    (declarator,) = declaration.children_by_field_name("declarator")
    value = declarator.child_by_field_name("value")
    if value is None:
        raise _Unsupported("an index without an initialiser")
    return value


def _loop_edits(tree: KernelTree, loop: Loop, names: dict[str, str], width: int, cluster: int) -> list[Edit]:
    """`for (int k = a; k < n; ++k)` -> `for (int k = a + lane; k < n; k += 32)`."""
    step = str(width) if width else ("blockDim.x" if cluster == 1 else f"blockDim.x * {cluster}")
    return strided(tree, loop, names["lane"], step)


def lane_zero_stores(tree: KernelTree, facts: KernelFacts, distributed: list[Loop], lane: str) -> list[Edit]:
    """Stores outside the split loops are left to lane 0: each element is then written once."""
    edits: list[Edit] = []
    done: set[int] = set()
    for access in facts.accesses:
        if not access.write or access.loops:
            continue
        statement = access.node
        while statement.parent is not None and statement.type != "expression_statement":
            statement = statement.parent
        if statement.type != "expression_statement" or statement.start_byte in done:
            continue
        if any(
            n.type in ("assignment_expression", "update_expression") and _assigns_local(tree, n)
            for n in walk(statement)
        ):
            raise _Unsupported("a store that also updates a local")
        done.add(statement.start_byte)
        edits.append((statement.start_byte, statement.start_byte, f"if ({lane} == 0) "))
        parent = statement.parent
        if parent is not None and parent.type != "compound_statement":
            edits[-1] = (statement.start_byte, statement.start_byte, f"{{ if ({lane} == 0) ")
            edits.append((statement.end_byte, statement.end_byte, " }"))
    return edits


def _assigns_local(tree: KernelTree, node: Node) -> bool:
    field = "left" if node.type == "assignment_expression" else "argument"
    target = node.child_by_field_name(field)
    return target is not None and unwrap(target).type == "identifier"
