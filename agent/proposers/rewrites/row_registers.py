"""Passes over a row that each read it from memory -> the row loaded once into registers, the passes
reading it there.

A softmax, a layer norm or an RMS norm split across a warp (or a block) reads its row once a pass. Where
the row is short enough at the benchmark's sizes, each thread can hold its share of it: PER 16-byte
vectors (`lane`'s at `(lane + u * 32) * 4`, u < PER), all loaded at once before the first pass, every
pass then running on them. That is how torch.compile's row kernels work, and it leaves the shared-memory
staging of `rewrite:row-stage` behind: on the H100 a hand-written softmax this way took 0.94 of the staged
one's time (2048 floats a row, a warp a row).

The same analysis as row-stage finds the passes and the rows (`row_stage._passes`, `_rows`). The
registers are a fast path: taken where the row fits them (its length at most PER vectors a thread, a
whole number of vectors, 16-byte aligned), so any other size runs the loops as written, and each pass
loads and stores its other arrays (`weight[i]`, `out_row[i]`) as 16-byte vectors too where they are
aligned. A thread's elements differ from the loops' (four neighbours, not one), so a reduction over the
row is regrouped, as vector-loop's is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.facts import Loop
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites import row_stage, vector_loop
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, as_factor, at_benchmark, bound_terms
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    accessed_array,
    apply_to_body,
    build_candidate,
    line_indent,
    local_names,
    shared_arrays,
    walk,
)
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "rewrite:row-registers"
VECTOR_BYTES = 16
# A thread's share of its rows, at most: 16 vectors (64 floats) leaves registers for the passes' own
# values at a full warp count (80 registers for a warp-per-row softmax of 2048 floats).
MAX_VECTORS = 16


class _Unsupported(Exception):
    """Not a kernel this rewrite can hold in registers; the message says why (for debugging)."""


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    try:
        return [_held(tree, facts)]
    except (_Unsupported, row_stage._Unsupported, vector_loop._Unsupported, NotInSizes):
        return []


@dataclass(frozen=True)
class _Layout:
    """Where a thread's share of the rows sits in its registers, and the names the rewrite declares."""

    width: int  # elements a vector
    per: str  # the constant: vectors a thread holds
    held: str  # the flag: the rows are held (fast path)
    u: str  # the vector's number
    e: str  # the element's within it
    first: str  # the vector's first element in the row
    start: str  # the passes' start and step as written (`lane`, `32`)
    step: str
    bound: str  # the row's length, in the kernel's terms
    registers: dict[str, str]  # each row's array: its registers

    def vectors(self) -> list[str]:
        """The opening of the loop over a thread's vectors, up to the line where its first element is."""
        return [
            "    #pragma unroll",
            f"    for (int {self.u} = 0; {self.u} < {self.per}; ++{self.u}) {{",
            f"        const int {self.first} = (({self.start}) + {self.u} * ({self.step})) * {self.width};",
        ]


def _held(tree: KernelTree, facts: KernelFacts) -> Candidate:
    target = tree.target
    assert target.spec is not None
    if any(accessed_array(n) not in shared_arrays(tree) for n in facts.unmodelled):
        raise _Unsupported("an access the analysis could not place")
    passes = row_stage._passes(tree, facts)
    group = row_stage._group(passes[0])
    row_stage._check_uniform_guard(facts, group)
    rows = row_stage._rows(tree, facts, passes, group)
    sizes = {a.element_bytes for row in rows for _, a in row.reads}
    if len(sizes) != 1 or None in sizes:
        raise _Unsupported("rows of several element sizes")
    (size,) = sizes
    assert size is not None
    width = VECTOR_BYTES // size
    threads = 32 if group.warp else target.spec.launch.block[0]
    length = at_benchmark(tree, passes[0].bound)
    if length is None:
        raise _Unsupported("a row length that is not made of sizes")
    vectors = -(-length // (threads * width))
    if vectors * len(rows) > MAX_VECTORS:
        raise _Unsupported("rows longer than a thread's registers hold")
    wanted = {row.array: _register_name(tree, row) for row in rows}
    names = local_names(tree, "PER", "held", "u", "e", f"{passes[0].variable}0", *wanted.values())
    start, step = row_stage._header(tree, passes[0])
    layout = _Layout(
        width=width,
        per=names["PER"],
        held=names["held"],
        u=names["u"],
        e=names["e"],
        first=names[f"{passes[0].variable}0"],
        start=start,
        step=step,
        # the passes share one header (row_stage._passes), so one bound
        bound=as_factor(bound_terms(tree, passes[0].bound)[0]),
        registers={array: names[name] for array, name in wanted.items()},
    )
    edits = [_load(tree, passes[0], rows, layout, vectors, group.warp)]
    taken = tree.names() | set(names.values())
    edits += [_pass(tree, facts, loop, rows, layout, taken) for loop in passes]
    rows_text = ", ".join(r.array for r in rows)
    who = "warp" if group.warp else "block"
    description = (
        f"{rows_text} loaded once into registers ({vectors} {VECTOR_BYTES}-byte vectors a thread, rows up to "
        f"{vectors * threads * width} elements), the {len(passes)} passes over the row reading them there "
        f"(a {who} a row)"
    )
    return build_candidate(
        tree,
        body=apply_to_body(tree, edits),
        launch=target.spec.launch,
        description=description,
        proposer=PROPOSER,
        assumptions=(
            f"the sums over the row are regrouped, {width} neighbouring elements a thread (within tolerance)",
        ),
    )


def _load(
    tree: KernelTree, loop: Loop, rows: list[row_stage._Row], layout: _Layout, vectors: int, warp: bool
) -> Edit:
    """Before the first pass: the fast path's condition, the registers, and the rows loaded into them."""
    x = layout
    group = "32" if warp else "blockDim.x"
    places = [row_stage._spelled_at(tree, row.reads[0], "0") for row in rows]
    aligned = " | ".join(f"(unsigned long long)(&{place})" for place in places)
    plural = len(rows) > 1
    subject, it = ("these rows", "they") if plural else ("the row", "it")
    lines = [
        f"// {subject} held in registers where {it} fit{'' if plural else 's'}, {x.per} {VECTOR_BYTES}-byte "
        "vectors a thread,",
        f"// the passes reading {'them' if plural else 'it'} there (other sizes: the loops as written)",
        f"constexpr int {x.per} = {vectors};",
        f"const bool {x.held} = {x.bound} <= {x.per} * {x.width} * {group} && {x.bound} % {x.width} == 0 && "
        f"(({aligned}) & {VECTOR_BYTES - 1}) == 0;",
    ]
    lines += [
        f"alignas({VECTOR_BYTES}) {row.element} {x.registers[row.array]}[{x.per} * {x.width}];"
        for row in rows
    ]
    lines += [f"if ({x.held}) {{", *x.vectors()]
    for row in rows:
        at = row_stage._spelled_at(tree, row.reads[0], x.first)
        lines += [
            f"        if ({x.first} < {x.bound})",
            f"            *reinterpret_cast<uint4*>(&{x.registers[row.array]}[{x.u} * {x.width}]) =",
            f"                *reinterpret_cast<const uint4*>(&{at});",
        ]
    lines += ["    }", "}"]
    indent = line_indent(tree, loop.node)
    at = loop.node.start_byte
    return (at, at, f"\n{indent}".join(lines) + f"\n{indent}")


def _pass(
    tree: KernelTree,
    facts: KernelFacts,
    loop: Loop,
    rows: list[row_stage._Row],
    layout: _Layout,
    taken: set[str],
) -> Edit:
    """One pass: on the registers where the row is held (its other arrays 16 bytes at a time, where they
    are aligned), else as written."""
    x = layout
    if any(n.type in ("continue_statement", "break_statement", "return_statement") for n in walk(loop.body)):
        raise _Unsupported("a jump in a pass")
    row_nodes = {
        (access.node.start_byte, access.node.end_byte): x.registers[row.array]
        for row in rows
        for variable, access in row.reads
        if variable == loop.variable
    }
    others = [a for a in facts.accesses_in(loop) if (a.node.start_byte, a.node.end_byte) not in row_nodes]
    for access in others:
        if access.node.type != "subscript_expression" or access.stride(loop.variable) != Form.constant(1):
            raise _Unsupported(f"{access.array} is not touched at base + {loop.variable} in a pass")
        if access.element_bytes is None or VECTOR_BYTES // access.element_bytes != x.width:
            raise _Unsupported(f"{access.array}'s elements are not the row's size")
    for array in {a.array for a in others if a.write}:
        # its elements now go to other threads: only this pass, at this one place, may touch them (a later
        # pass on the loops as written would read another thread's stores)
        places = {a.offset.text() for a in others if a.array == array}
        if len(places) != 1 or any(a.array == array and a not in others for a in facts.accesses):
            raise _Unsupported(f"{array} is stored in a pass and touched elsewhere")
    streams = vector_loop._streams(tree, loop, others, x.first, taken, x.width)
    registers = {
        **{span: f"{name}[{x.u} * {x.width} + {x.e}]" for span, name in row_nodes.items()},
        **{(n.start_byte, n.end_byte): f"{s.name}[{x.e}]" for s in streams for n in s.nodes},
    }
    body = vector_loop._body_text(tree, loop, [], x.e, registers)
    initializer = loop.node.child_by_field_name("initializer")
    assert initializer is not None  # row_stage._header read it
    kind = vector_loop._declared_type(tree, loop, initializer)
    step_lines = vector_loop._vector_step(streams, body, kind, loop.variable, x.width, x.first, x.e, "    ")
    # each array's alignment at the row's start, which a thread's vectors keep (`first` is a fresh name)
    at_start = [re.sub(rf"\b{x.first}\b", "0", s.place) for s in streams]
    aligned = "".join(f" && ((unsigned long long)({place}) & {VECTOR_BYTES - 1}) == 0" for place in at_start)
    indent = line_indent(tree, loop.node)
    original = vector_loop._reindented(tree.text(loop.node), indent, indent + "    ")
    lines = [
        f"if ({x.held}{aligned}) {{",
        *x.vectors(),
        f"        if ({x.first} < {x.bound}) {{",
        *(f"    {line}" for line in step_lines),
        "        }",
        "    }",
        "} else {",
        f"    {original}",
        "}",
    ]
    return (loop.node.start_byte, loop.node.end_byte, f"\n{indent}".join(lines))


def _register_name(tree: KernelTree, row: row_stage._Row) -> str:
    """`inp_row_r` for a row read as `inp_row[j]`: the name the kernel reads it by, held."""
    array = row.reads[0][1].node.child_by_field_name("argument")
    return f"{vector_loop._stem(tree.text(array)) if array is not None else row.array}_r"
