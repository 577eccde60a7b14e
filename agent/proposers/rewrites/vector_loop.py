"""A strided loop over contiguous elements -> the same loop over 16-byte vectors.

Driven by the analysis: a loop whose threads start at neighbouring elements and step past each other
(`for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)`, `for (i =
threadIdx.x; i < d; i += blockDim.x)`, a warp's `for (c = lane; c < cols; c += 32)`), with independent
iterations (reductions allowed) and every access `p[base + i]` for arrays of one element size: each
thread then takes 16 bytes of consecutive elements a step (8 halves, 4 floats) through one vector load
or store per array, the body run for each element from registers. Where the vectors would pass the end
or a pointer is not 16-byte aligned (a row of odd length), that step runs the original body.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names, declared_values
from cuda_agent.agent.analysis.analyse import ELEMENT_BYTES
from cuda_agent.agent.analysis.facts import Access, Loop
from cuda_agent.agent.analysis.forms import THREAD_ATOMS, Form
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    accessed_array,
    always_assigns,
    candidate_from,
    fresh_names,
    identifiers_in,
    line_indent,
    local_names,
    shared_arrays,
    single_declaration,
    walk,
    writes,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:vector-loop"
VECTOR_BYTES = 16
UNROLL = 4  # vector steps unrolled where the alignment is checked once: their loads in flight together
_VECTOR_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short"}


class _Unsupported(Exception):
    """Not a loop this rewrite can vectorise; the message says why (for debugging)."""


@dataclass(frozen=True)
class _Stream:
    """One array element the body touches each iteration: `x_row[i]`, as a register array."""

    name: str  # the register array's name
    type: str  # the element type
    place: str  # `&x_row[i]` with i the vector's first element
    loaded: bool
    stored: bool
    nodes: tuple[Node, ...]  # the subscripts replaced by `name[e]`
    # what else the vector step must check: the array is touched only under a bound of its own index
    # (`i < n ? x[i] : 0` in a loop to 256), so the whole vector must be within that bound
    bounds: tuple[str, ...] = ()
    # updated only by `atomicAdd(&p[i], v);`: the values summed in registers, then one 16-byte atomic
    added: bool = False
    bytes: int = VECTOR_BYTES  # a step's share of the array: 16, or less for narrower elements (a mask)

    @property
    def vector(self) -> str:
        """The unsigned type of the step's bytes, loaded or stored at once."""
        return _VECTOR_TYPES[self.bytes]


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None:
        return []
    tree, facts = found
    parameters = {p.name for p in target.kernel.parameters}
    if any(accessed_array(n) in parameters for n in facts.unmodelled):
        return []  # a parameter's element the analysis could not place may be one this loop moves
    edits: list[Edit] = []
    widths: list[int] = []
    taken = tree.names()
    for loop in facts.loops:
        try:
            loop_edits, width = _vectorised(tree, facts, loop, taken)
        except _Unsupported:
            continue
        edits += loop_edits
        widths.append(width)
    if not edits:
        return []
    loops = "loops" if len(widths) > 1 else "loop"
    description = (
        f"{VECTOR_BYTES}-byte loads and stores in the strided {loops} ({max(widths)} elements a step)"
    )
    return [candidate_from(target, tree.apply_to_file(edits), description=description, proposer=PROPOSER)]


def _vectorised(tree: KernelTree, facts: KernelFacts, loop: Loop, taken: set[str]) -> tuple[list[Edit], int]:
    unplaced = [n for n in facts.unmodelled if loop.node.start_byte <= n.start_byte < loop.node.end_byte]
    shared = _shared_reads(tree, loop, unplaced)
    inner = [o for o in facts.loops if loop.node.start_byte < o.node.start_byte < loop.node.end_byte]
    if not loop.independent or inner:
        raise _Unsupported("dependent iterations or a nested loop")
    if any(n.type in ("continue_statement", "break_statement", "return_statement") for n in walk(loop.body)):
        raise _Unsupported("a jump in the body")
    if loop.variable in assigned_names(loop.body):
        raise _Unsupported("the body moves the loop variable")
    position = _thread_position(loop, facts)
    accesses = facts.accesses_in(loop)
    if not accesses and not shared:
        raise _Unsupported("no accesses")
    sizes = {a.element_bytes for a in accesses} | {ELEMENT_BYTES.get(t) for t, _ in shared.values()}
    if None in sizes:
        raise _Unsupported("an array of elements of unknown size")
    # the widest elements take 16 bytes a step; narrower ones (a byte mask beside halves) fewer, at once
    width = VECTOR_BYTES // max(s for s in sizes if s is not None)
    if width < 2 or any(width * s not in _VECTOR_TYPES for s in sizes if s is not None):
        raise _Unsupported("elements as wide as a vector, or too narrow for a step of them")
    for access in accesses:
        if access.node.type == "call_expression" and _added_to(tree, access.node) is None:
            raise _Unsupported(f"{access.array} is updated otherwise than by a float atomicAdd statement")
        if access.stride(loop.variable) != Form.constant(1) or access.node.type not in (
            "subscript_expression",
            "call_expression",
        ):
            raise _Unsupported(f"{access.array} is not read at base + {loop.variable}")
        if _cast(access.node):  # `((int4*)input)[i]`: its elements are not the parameter's
            raise _Unsupported(f"{access.array} is read through a pointer cast")
    for array in {a.array for a in accesses if a.write}:
        # Another thread now takes each element: only this loop, at this one offset, may touch it.
        if len({a.offset.text() for a in accesses if a.array == array}) != 1 or any(
            a.array == array and a not in accesses for a in facts.accesses
        ):
            raise _Unsupported(f"{array} is stored here and touched elsewhere")
    names = local_names(tree, *(f"{loop.variable}0", "e"))
    first, element = names[f"{loop.variable}0"], names["e"]
    streams = _streams(tree, loop, accesses, first, taken, width)
    for name, (kind, nodes) in shared.items():
        (stream,) = fresh_names(taken, f"{name}_v")
        share = width * (ELEMENT_BYTES.get(kind) or VECTOR_BYTES)
        streams.append(_Stream(stream, kind, f"&{name}[{first}]", True, False, tuple(nodes), bytes=share))
    return _edits(tree, loop, streams, position, width, first, element), width


def _shared_reads(tree: KernelTree, loop: Loop, unplaced: list[Node]) -> dict[str, tuple[str, list[Node]]]:
    """Reads of shared memory at the loop's own element (`x_row[i]` of a row staged there, a user's
    `tile[i]`), by array: (element type, the reads). Nothing stores to the array in the loop and no barrier
    runs in it, so reading 16 bytes at a time reads what each element read did. Any other access the
    analysis could not place leaves the loop alone."""
    arrays = shared_arrays(tree)
    stored = {accessed_array(target) for target in writes(loop.body, tree)}
    found: dict[str, tuple[str, list[Node]]] = {}
    for node in unplaced:
        array, index = node.child_by_field_name("argument"), node.child_by_field_name("indices")
        name = text(array) if array is not None and array.type == "identifier" else ""
        parent = node.parent
        address = parent is not None and parent.type == "pointer_expression" and text(parent)[0] == "&"
        if (
            node.type != "subscript_expression"
            or name not in arrays
            or name in stored
            or address
            or index is None
            or [text(n) for n in index.named_children] != [loop.variable]
            or _conditions(node, loop)
        ):
            raise _Unsupported("an access in the loop the analysis could not place, or a store to it")
        found.setdefault(name, (arrays[name], []))[1].append(node)
    if any(
        n.type == "call_expression" and text(n).startswith(("__syncthreads", "__syncwarp"))
        for n in walk(loop.body)
    ):
        raise _Unsupported("a barrier in the loop")
    return found


def _cast(subscript: Node) -> bool:
    """Whether the subscripted pointer is a cast of another (`((int4*)x)[i]`)."""
    argument = subscript.child_by_field_name("argument")
    while argument is not None and argument.type == "parenthesized_expression" and argument.named_children:
        argument = argument.named_children[0]
    return argument is not None and argument.type == "cast_expression"


def _thread_position(loop: Loop, facts: KernelFacts) -> str:
    """The thread's place among those sharing the loop (`threadIdx.x`, `lane`, the global index), as
    text, when the loop's step is exactly the number of them: then they cover the range together."""
    position = Form({m: c for m, c in loop.start.terms.items() if any(_threads(a, facts) for a in m)})
    step = loop.step
    atoms = position.atoms()
    if position == Form.atom("threadIdx.x") and step == Form.atom("blockDim.x"):
        return "threadIdx.x"
    for axis in "xyz":  # the blocks along an axis sharing the range (a grid-stride loop; a row's parts)
        blocks = Form.atom(f"blockIdx.{axis}") * Form.atom("blockDim.x") + Form.atom("threadIdx.x")
        if position == blocks and step == Form.atom("blockDim.x") * Form.atom(f"gridDim.{axis}"):
            return f"(blockIdx.{axis} * blockDim.x + threadIdx.x)"
    # a row's parts in neighbouring blocks (rewrite:row-blocks): `blockIdx.x % parts * blockDim.x +
    # threadIdx.x` stepping by `blockDim.x * parts`; the start is the position alone, so the widened loop
    # starts at start * width and this text is not written out
    part = (position - Form.atom("threadIdx.x")).coefficient("blockDim.x")
    if part is not None and len(part.terms) == 1 and position == loop.start:
        (atom,) = part.atoms() if len(part.atoms()) == 1 else ("",)
        operation = facts.atoms.operations.get(atom)
        if operation is not None and operation[0] == "%" and step == Form.atom("blockDim.x") * operation[2]:
            return position.text()
    if len(atoms) == 1 and len(position.terms) == 1 and position.terms.get(tuple(atoms)) == 1:
        (atom,) = atoms
        if atom == f"⟨(threadIdx.x) % ({step.text()})⟩" and step.value() is not None:
            return f"(threadIdx.x % {step.text()})"
    raise _Unsupported("the threads do not start side by side and step past each other")


def _threads(atom: str, facts: KernelFacts) -> bool:
    return atom in THREAD_ATOMS or atom.startswith("⟨(threadIdx")


def _streams(
    tree: KernelTree, loop: Loop, accesses: list[Access], first: str, taken: set[str], width: int
) -> list[_Stream]:
    by_place: dict[str, list[Access]] = {}
    for access in accesses:
        by_place.setdefault(f"{access.array}[{access.offset.text()}]", []).append(access)
    streams = []
    for group in by_place.values():
        parameter = tree.parameter(group[0].array)
        if parameter is None:
            raise _Unsupported("an array that is not a parameter")
        node = group[0].node
        added = [_added_to(tree, a.node) for a in group if a.node.type == "call_expression"]
        if added and len(added) != len(group):
            raise _Unsupported(f"{group[0].array} is added to atomically and also read or stored")
        if added:
            node = added[0][0]
        array, index = node.child_by_field_name("argument"), node.child_by_field_name("indices")
        assert array is not None and index is not None
        place = f"&{tree.text(array)}[{_at_first(tree, loop, index.named_children[0], first)}]"
        stored = any(a.write for a in group)
        conditional = any(a.write and not _unconditional(a.node, loop) for a in group)
        loaded = _loaded(group, loop, conditional)
        bounds = _vector_bounds(tree, loop, group, index.named_children[0], first, width)
        (name,) = fresh_names(taken, f"{_stem(tree.text(array))}_v")
        nodes = tuple(a.node for a in group)
        share = width * (group[0].element_bytes or VECTOR_BYTES)
        if added:
            if parameter.type not in ("float", "float32_t") or share != VECTOR_BYTES:
                raise _Unsupported("an atomic add to elements other than float, four a step")
            streams.append(_Stream(name, parameter.type, place, False, False, nodes, bounds, added=True))
            continue
        streams.append(_Stream(name, parameter.type, place, loaded, stored, nodes, bounds, bytes=share))
    return streams


def _loaded(group: list[Access], loop: Loop, conditional: bool) -> bool:
    """Whether the step must load the element: it is read, or stored only under a condition (the whole
    vector is stored back), unless a statement of the body that always stores it comes before any read
    (`c[i] = a; h[i] = f(c[i]);`, `if (m[i] < p) y[i] = 0; else y[i] = x[i];`): that store defines the
    whole vector, and a read after it reads what it stored."""
    reads = [a for a in group if a.read]
    stores = [a.node for a in group if a.write and not a.read]
    body = list(loop.body.named_children) if loop.body.type == "compound_statement" else [loop.body]
    first = next((s for s in body if always_assigns(s, lambda place: place in stores)), None)
    if first is None:
        return bool(reads) or conditional
    return any(a.node.start_byte < first.end_byte for a in reads)


def _vector_bounds(
    tree: KernelTree, loop: Loop, group: list[Access], index: Node, first: str, width: int
) -> tuple[str, ...]:
    """Where every access of the element runs only under a bound of its own index (`i < n ? x[i] : 0`,
    `if (i >= n) ... else`), that bound checked for the whole vector: the loop's own range may pass the
    array's end (a loop to 256 over a block's slots, the last block partly outside). Conditions on data
    (`if (x[i] > 0) y[i] = 1;`) leave every element of the loop's range to be touched, as before."""
    guarded = [_conditions(a.node, loop) for a in group]
    if any(not conditions for conditions in guarded):
        return ()
    at = _at_first(tree, loop, index, first)
    checks = []
    for condition, holds in (c for conditions in guarded for c in conditions):
        bound = _upper_bound(tree, condition, holds)
        if bound is None or _spelled(_at_first(tree, loop, bound[0], first)) != _spelled(at):
            continue
        _, limit, strict = bound
        if loop.variable in {text(n) for n in walk(limit) if n.type == "identifier"}:
            raise _Unsupported("a bound that moves with the loop")
        wrapped = at if _spelled(at) != "".join(at.split()) else f"({at})"
        slack = "" if strict else " + 1"
        checks.append(f"{wrapped} + {width} <= ({_at_first(tree, loop, limit, first)}){slack}")
    return tuple(dict.fromkeys(checks))


def _conditions(node: Node, loop: Loop) -> list[tuple[Node, bool]]:
    """The conditions under which the node runs within the loop's body, each with whether it must hold
    (True) or fail (False): `c ? node : _`, `if (c) node`, `c && node`, and their negated sides."""
    found: list[tuple[Node, bool]] = []
    child, parent = node, node.parent
    while parent is not None and child != loop.body:
        branching = parent.type in ("conditional_expression", "if_statement")
        if branching and child != parent.child_by_field_name("condition"):
            condition = parent.child_by_field_name("condition")
            if condition is not None:
                found.append((condition, child == parent.child_by_field_name("consequence")))
        elif parent.type == "binary_expression" and child == parent.child_by_field_name("right"):
            operator, left = parent.child_by_field_name("operator"), parent.child_by_field_name("left")
            if operator is not None and left is not None and operator.type in ("&&", "||"):
                found.append((left, operator.type == "&&"))
        child, parent = parent, parent.parent
    return found


def _upper_bound(tree: KernelTree, condition: Node, holds: bool) -> tuple[Node, Node, bool] | None:
    """(index, limit, strict) for a condition that, as it must come out, says `index < limit` (strict)
    or `index <= limit`: `i < n` holding, `i >= n` failing, `n > i` holding."""
    condition = unwrap(condition)
    if condition.type == "condition_clause" and condition.named_children:
        condition = unwrap(condition.named_children[-1])
    operator = condition.child_by_field_name("operator")
    left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    if condition.type != "binary_expression" or operator is None or left is None or right is None:
        return None
    below = {"<": (True, True), "<=": (True, False), ">=": (False, True), ">": (False, False)}
    above = {">": (True, True), ">=": (True, False), "<=": (False, True), "<": (False, False)}
    if operator.type in below and below[operator.type][0] == holds:
        return left, right, below[operator.type][1]
    if operator.type in above and above[operator.type][0] == holds:
        return right, left, above[operator.type][1]
    return None


def _spelled(written: str) -> str:
    """The text without spaces and without parentheses around the whole (for comparing spellings)."""
    compact = "".join(written.split())
    while compact.startswith("(") and compact.endswith(")") and _balanced(compact[1:-1]):
        compact = compact[1:-1]
    return compact


def _balanced(written: str) -> bool:
    depth = 0
    for char in written:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def _at_first(tree: KernelTree, loop: Loop, index: Node, first: str) -> str:
    """The index at the vector's first element, outside the body: the loop variable read as `first`, and
    the body's own locals (`int i = base + t;`) written out as their values."""
    values = declared_values(loop.body)
    reassigned = assigned_names(loop.body)

    def substitute(node: Node) -> str | None:
        if _is_name(node, loop.variable):
            return first
        name = text(node) if node.type == "identifier" else None
        if name is None or name not in values:
            return None
        if name in reassigned:
            raise _Unsupported(f"{name}, which the index reads, changes in the body")
        return f"({tree.substituted(values[name], substitute)})"

    return tree.substituted(index, substitute)


def _is_name(node: Node, name: str) -> bool:
    return node.type == "identifier" and text(node) == name


def _stem(expression: str) -> str:
    word = "".join(c if c.isalnum() or c == "_" else " " for c in expression).split()
    return word[-1] if word else "v"


def _unconditional(node: Node, loop: Loop) -> bool:
    """Whether the store runs on every iteration (its statement sits directly in the loop's body)."""
    parent = node.parent
    while parent is not None and parent.type != "expression_statement":
        parent = parent.parent
    holder = parent.parent if parent is not None else None
    return holder is not None and (holder == loop.body or parent == loop.body)


def _edits(
    tree: KernelTree, loop: Loop, streams: list[_Stream], position: str, width: int, first: str, element: str
) -> list[Edit]:
    initializer = loop.node.child_by_field_name("initializer")
    condition = loop.node.child_by_field_name("condition")
    update = loop.node.child_by_field_name("update")
    assert initializer is not None and condition is not None and update is not None
    start = _start_text(tree, initializer)
    step = _step_text(tree, update, loop.variable)
    bound = _bound_text(tree, condition, loop.variable)
    indent = line_indent(tree, loop.node)
    unit = tree.indent_unit()
    body = _body_text(tree, loop, streams, element)
    original = tree.text(loop.body)
    kind = _declared_type(tree, loop, initializer)
    v = loop.variable
    if len({s.bytes for s in streams}) == 1:  # one mask for all: `((a | b) & 15) == 0`
        aligned = (
            f"(({' | '.join(f'(unsigned long long)({s.place})' for s in streams)}) & {streams[0].bytes - 1})"
        )
    else:  # each address aligned for its own share of the step
        aligned = (
            "(" + " | ".join(f"((unsigned long long)({s.place}) & {s.bytes - 1})" for s in streams) + ")"
        )
    within = "".join(f" && {bound}" for s in streams for bound in s.bounds)
    alone = all(any(a in THREAD_ATOMS or a.startswith("⟨") for a in m) for m in loop.start.terms)
    begin = f"{start} * {width}" if alone else f"{start} + {position} * {width - 1}"
    advance = f"{first} += ({step}) * {width}"
    vector = _vector_step(streams, body, kind, v, width, first, element, unit)
    scalar = f"for ({kind} {v} = {first}; {v} < {bound} && {v} < {first} + {width}; ++{v}) " + _reindented(
        original, indent, indent + unit + unit
    )
    intro = (
        f"// {width} elements a step: one {_per_array(streams)} load or store per array, the body on "
        "registers"
    )
    if _moves_only_by_steps(tree, loop, streams, first):
        # The alignment checked once: the vector loop then has nothing but the bound to test, so that its
        # steps unroll and several loads of each thread are in flight at once.
        lines = [
            intro,
            "{",
            f"{unit}{kind} {first} = {begin};",
            f"{unit}// a step moves every array by whole vectors: aligned at the first step, aligned at all",
            f"{unit}if ({aligned} == 0) {{",
            f"{unit}{unit}#pragma unroll {UNROLL}",
            f"{unit}{unit}for (; {first} + {width} <= {bound}{within}; {advance}) {{",
            *(f"{unit}{line}" for line in vector),
            f"{unit}{unit}}}",
            f"{unit}}}",
            f"{unit}// the last elements, or pointers not aligned for vectors: the loop as it was",
            f"{unit}for (; {first} < {bound}; {advance}) {{",
            f"{unit}{unit}{scalar}",
            f"{unit}}}",
            "}",
        ]
    else:
        lines = [
            intro,
            f"for ({kind} {first} = {begin}; {first} < {bound}; {advance}) {{",
            f"{unit}if ({first} + {width} <= {bound}{within} && {aligned} == 0) {{",
            *vector,
            f"{unit}}} else {{",
            f"{unit}{unit}// the last elements, or pointers not aligned for vectors: the loop as it was",
            f"{unit}{unit}{scalar}",
            f"{unit}}}",
            "}",
        ]
    text_out = ("\n" + indent).join(lines)
    return [(loop.node.start_byte, loop.node.end_byte, text_out)]


def _vector_step(
    streams: list[_Stream],
    body: list[str],
    kind: str,
    v: str,
    width: int,
    first: str,
    element: str,
    unit: str,
) -> list[str]:
    """One vector step: each array's bytes loaded at once, the body on the registers, the stores."""
    lines = []
    for stream in streams:
        zeros = " = {}" if stream.added else ""  # the sums of this step's adds, none yet
        lines.append(f"{unit}{unit}alignas({stream.bytes}) {stream.type} {stream.name}[{width}]{zeros};")
        if stream.loaded:
            load = f"*reinterpret_cast<const {stream.vector}*>({stream.place})"
            lines.append(f"{unit}{unit}*reinterpret_cast<{stream.vector}*>({stream.name}) = {load};")
    lines += [
        f"{unit}{unit}#pragma unroll",
        f"{unit}{unit}for (int {element} = 0; {element} < {width}; ++{element}) {{",
        *([f"{unit}{unit}{unit}const {kind} {v} = {first} + {element};"] if _uses(body, v) else []),
        *(f"{unit}{unit}{unit}{line}" for line in body),
        f"{unit}{unit}}}",
    ]
    for stream in streams:
        if stream.stored:
            store = f"*reinterpret_cast<const {stream.vector}*>({stream.name})"
            lines.append(f"{unit}{unit}*reinterpret_cast<{stream.vector}*>({stream.place}) = {store};")
        if stream.added:  # 16-byte float atomics are sm_90's; before it, one atomic an element as before
            lines += [
                "#if __CUDA_ARCH__ >= 900",
                f"{unit}{unit}atomicAdd(reinterpret_cast<float4*>({stream.place}), "
                f"*reinterpret_cast<const float4*>({stream.name}));",
                "#else",
                f"{unit}{unit}for (int {element} = 0; {element} < {width}; ++{element}) "
                f"atomicAdd(({stream.place}) + {element}, {stream.name}[{element}]);",
                "#endif",
            ]
    return lines


def _moves_only_by_steps(tree: KernelTree, loop: Loop, streams: list[_Stream], first: str) -> bool:
    """Whether every vector's address moves with the loop variable alone: nothing else its index reads is
    assigned in the body, so a step (whole vectors) keeps each array's alignment as the first step had it."""
    read = {name for s in streams for name in identifiers_in(tree, s.place)} - {first}
    return not read & assigned_names(loop.body)


def _added_to(tree: KernelTree, call: Node) -> tuple[Node, Node] | None:
    """(the element, the value) of `atomicAdd(&p[i], v);`, a statement of its own; None otherwise."""
    function = call.child_by_field_name("function")
    arguments = call.child_by_field_name("arguments")
    if function is None or arguments is None or tree.text(function) != "atomicAdd":
        return None
    if (
        call.parent is None
        or call.parent.type != "expression_statement"
        or len(arguments.named_children) != 2
    ):
        return None
    address, value = arguments.named_children
    address = unwrap(address)
    operator = address.child_by_field_name("operator") if address.type == "pointer_expression" else None
    element = address.child_by_field_name("argument") if operator is not None else None
    if operator is None or operator.type != "&" or element is None or element.type != "subscript_expression":
        return None
    return element, value


def _per_array(streams: list[_Stream]) -> str:
    """`16-byte`, or `16- or 8-byte` where narrower elements take fewer bytes a step."""
    shares = sorted({s.bytes for s in streams}, reverse=True)
    return (
        f"{shares[0]}-byte"
        if len(shares) == 1
        else " or ".join(f"{b}-" for b in shares[:-1]) + f" or {shares[-1]}-byte"
    )


def _uses(lines: list[str], name: str) -> bool:
    return any(name in "".join(c if c.isalnum() or c == "_" else " " for c in line).split() for line in lines)


def _reindented(original: str, old: str, new: str) -> str:
    lines = original.split("\n")
    return "\n".join(
        [lines[0], *((new + line[len(old) :]) if line.startswith(old) else line for line in lines[1:])]
    )


def _body_text(
    tree: KernelTree,
    loop: Loop,
    streams: list[_Stream],
    element: str,
    replacements: dict[tuple[int, int], str] | None = None,
) -> list[str]:
    """The body's statements with each element access read from or written to its register array (or
    with the text `replacements` gives each (start, end) of an access, where given)."""
    if replacements is None:
        replacements = {(n.start_byte, n.end_byte): f"{s.name}[{element}]" for s in streams for n in s.nodes}
    body = loop.body
    inner = body.named_children if body.type == "compound_statement" else [body]
    lines: list[str] = []
    base = None

    def registered(node: Node) -> str | None:
        if node.type == "call_expression" and (added := _added_to(tree, node)) is not None:
            register = replacements.get((node.start_byte, node.end_byte))
            if register is not None:
                return f"{register} += {tree.substituted(added[1], registered)}"
        return (
            replacements.get((node.start_byte, node.end_byte))
            if node.type == "subscript_expression"
            else None
        )

    for statement in inner:
        if statement.type == "comment":
            continue
        written = tree.substituted(statement, registered)
        indent = line_indent(tree, statement)
        base = indent if base is None else base
        for n, line in enumerate(written.split("\n")):
            lines.append(line if n == 0 else (line[len(base) :] if line.startswith(base) else line.lstrip()))
    return lines


def _bound_text(tree: KernelTree, condition: Node, variable: str) -> str:
    """`n` of `i < n` (the only spelling taken here: the bound is repeated in the new loop's tests)."""
    op, left, right = (condition.child_by_field_name(f) for f in ("operator", "left", "right"))
    if condition.type != "binary_expression" or op is None or op.type != "<" or left is None or right is None:
        raise _Unsupported("a bound other than `i < n`")
    if tree.text(left).strip() != variable:
        raise _Unsupported("a bound other than `i < n`")
    written = tree.text(right)
    return written if right.type in ("identifier", "number_literal", "field_expression") else f"({written})"


def _start_text(tree: KernelTree, initializer: Node) -> str:
    if initializer.type == "declaration":
        (declarator,) = initializer.children_by_field_name("declarator")
        value = declarator.child_by_field_name("value")
    else:
        value = initializer.child_by_field_name("right")
    if value is None:
        raise _Unsupported("no start")
    return f"({tree.text(value)})" if value.type == "binary_expression" else tree.text(value)


def _step_text(tree: KernelTree, update: Node, variable: str) -> str:
    if update.type == "assignment_expression":
        operator, right = update.child_by_field_name("operator"), update.child_by_field_name("right")
        if operator is not None and operator.type == "+=" and right is not None:
            return tree.text(right)
    raise _Unsupported("a step other than `+=`")


def _declared_type(tree: KernelTree, loop: Loop, initializer: Node) -> str:
    """The loop variable's type: declared in the loop's header, or before it (`int j; for (j = 0; ...)`,
    C89's way) when nothing reads it after the loop (the new loops declare their own)."""
    if initializer.type == "declaration":
        type_node = initializer.child_by_field_name("type")
        return text(type_node) if type_node is not None else "int"
    for node in walk(tree.body):
        declared = single_declaration(node, tree) if node.type == "declaration" else None
        if declared is not None and declared[1] == loop.variable and node.end_byte <= loop.node.start_byte:
            after = (n for n in walk(tree.body) if n.start_byte >= loop.node.end_byte)
            if any(n.type == "identifier" and text(n) == loop.variable for n in after):
                raise _Unsupported("the loop variable is read after the loop")
            return declared[0]
    raise _Unsupported("the loop variable is declared elsewhere")
