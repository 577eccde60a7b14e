"""A thread per pixel reading interleaved channels or bytes -> F pixels a thread, moved as whole words.

Image kernels read a pixel's channels one byte at a time (`rgb[3 * p]`, `rgb[3 * p + 1]`, ...) and store
one byte (`gray[p] = ...`): a warp's loads are 3 bytes apart and every access is narrower than a word,
so the memory system moves a fraction of what it could. Driven by the analysis: in a kernel with no loop,
a thread index along x, and every access of an array at `a * x + k + rest` (k from 0 to a - 1, the rest
free of x: the row's start), each thread takes F consecutive values of x, F the fewest that make every
array's span a whole number of 4-byte words (4 pixels: 12 bytes of RGB, 4 of grey). The spans are loaded
into registers word by word (16 or 8 bytes at once where they divide it), the kernel's statements run for
each of the F values reading and writing the registers, and the written spans are stored the same way.
Where the F values would pass the bound or a span is not aligned (an odd row width), the statements run
as written for each value instead. The grid along x shrinks by F.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names
from cuda_agent.agent.analysis.facts import Access, ThreadIndex
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import guarded_parts
from cuda_agent.agent.proposers.transforms.grid_stride import coarsened_grid
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    apply_to_body,
    build_candidate,
    declared_names,
    identifiers,
    line_indent,
    local_names,
    reindent,
    walk,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:word-spans"
_X_ATOMS = frozenset({"threadIdx.x", "blockIdx.x", "blockDim.x", "gridDim.x"})
_WORDS = {16: "uint4", 8: "uint2", 4: "unsigned int"}
MAX_SPAN = 64  # bytes of one array a thread holds in registers


class _Unsupported(Exception):
    """Not a kernel this rewrite applies to; the message says why (for debugging)."""


@dataclass(frozen=True)
class _Span:
    """One array's values for the thread's F pixels: `rest + a * x + k` for k < a."""

    array: str
    type: str  # the element type as declared
    lanes: int  # a: elements a pixel
    rest: Form  # the offset's part free of x (the row's start)
    size: int  # bytes an element
    written: bool
    places: dict[Node, int]  # each access's subscript -> its k

    def bytes(self, pixels: int) -> int:
        return pixels * self.lanes * self.size

    def word(self, pixels: int) -> int:
        return next(w for w in _WORDS if self.bytes(pixels) % w == 0)


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    try:
        x, spans, work = _recognise(tree, facts)
    except _Unsupported:
        return []
    first = next(f for f in (1, 2, 4, 8, 16) if all(s.bytes(f) % 4 == 0 for s in spans))
    if first == 1 and all(s.lanes == 1 for s in spans):
        return []  # whole words a pixel already: the vector transforms' case
    candidates = []
    for pixels in sorted({first, 4 * first}):
        if any(s.bytes(pixels) > MAX_SPAN for s in spans):
            continue
        launch = target.spec.launch
        if pixels > 1:
            launch = replace(launch, grid=(coarsened_grid(launch.grid[0], pixels), *launch.grid[1:]))
        candidates.append(
            build_candidate(  # the launch is written into the spec with the others' (optimize.py)
                tree,
                body=apply_to_body(tree, _edits(tree, facts, x, spans, work, pixels)),
                launch=launch,
                description=f"{pixels} values of {x.name} a thread, each array's span for them loaded and "
                f"stored as whole words ({', '.join(f'{s.array}: {s.bytes(pixels)} bytes' for s in spans)})",
                proposer=PROPOSER,
            )
        )
    return candidates


def _recognise(tree: KernelTree, facts: KernelFacts) -> tuple[ThreadIndex, list[_Span], list[Node]]:
    if facts.loops or facts.uses_shared or facts.barriers or facts.atomics or facts.unmodelled:
        raise _Unsupported("loops, shared memory, barriers or atomics")
    guard = facts.guard
    mapped = [i for i in facts.indices if i.direct and i.axis == "x"]
    if guard is None or len(mapped) != 1 or guard.bound_of(mapped[0].name) is None:
        raise _Unsupported("not one bounded thread index along x")
    (x,) = mapped
    work = _guarded_statements(tree, facts)
    _check_per_pixel(tree, x, work)
    by_array: dict[str, list[Access]] = {}
    for access in facts.accesses:
        by_array.setdefault(access.array, []).append(access)
    spans = [_span(tree, x, array, accesses, work) for array, accesses in by_array.items()]
    if not any(s.written for s in spans):
        raise _Unsupported("nothing stored")
    return x, spans, work


def _check_per_pixel(tree: KernelTree, x: ThreadIndex, work: list[Node]) -> None:
    """The work must be what one pixel does, run again for each: nothing leaves it early, it does not move
    the index, and no local computed from the index before it (which would hold the first pixel's value
    for all F) is read in it."""
    for statement in work:
        for node in walk(statement):
            if node.type in ("return_statement", "break_statement", "continue_statement", "goto_statement"):
                raise _Unsupported("the work leaves early")
    if any(x.name in assigned_names(statement) for statement in work):
        raise _Unsupported("the work moves the index")
    used = {name for statement in work for name in identifiers(statement)}
    for statement in tree.body.named_children:
        if statement.start_byte >= work[0].start_byte:
            break
        if statement.type != "declaration" or statement == x.declaration:
            continue
        if x.name in identifiers(statement) and set(declared_names(statement, tree)) & used:
            raise _Unsupported("a local computed from the index before the work is read in it")


def _span(tree: KernelTree, x: ThreadIndex, array: str, accesses: list[Access], work: list[Node]) -> _Span:
    parameter = tree.parameter(array)
    sizes = {a.element_bytes for a in accesses}
    if parameter is None or parameter.pointer_depth != 1 or len(sizes) != 1 or None in sizes:
        raise _Unsupported(f"{array}: not a pointer parameter of known element size")
    strides = [access.stride("threadIdx.x") for access in accesses]
    lanes = {stride.value() if stride is not None else None for stride in strides}
    if len(lanes) != 1 or (a := next(iter(lanes))) is None or a < 1:
        raise _Unsupported(f"{array}: not a fixed number of elements a pixel")
    rests = [a_.offset - Form.constant(a) * x.form for a_ in accesses]
    if any(r.atoms() & _X_ATOMS or any(atom.startswith("⟨") for atom in r.atoms()) for r in rests):
        raise _Unsupported(f"{array}: the offset is not a * x plus a part free of x")
    base = min(rests, key=lambda r: r.terms.get((), 0))
    ks = [(r - base).value() for r in rests]
    if any(k is None for k in ks) or set(ks) != set(range(a)):
        raise _Unsupported(f"{array}: the pixel's elements are not 0 to a - 1 past one place")
    written = any(access.write for access in accesses)
    if written and any(access.read or not _plain_store(access.node, work) for access in accesses):
        raise _Unsupported(f"{array}: read as well as written, or stored otherwise than by `=`")
    if written and len(ks) != len(set(ks)):
        raise _Unsupported(f"{array}: an element stored twice")
    places = {access.node: k for access, k in zip(accesses, ks, strict=True) if k is not None}
    size = next(iter(sizes))
    assert size is not None
    return _Span(array, parameter.type, a, base, size, written, places)


def _plain_store(node: Node, work: list[Node]) -> bool:
    """`p[...] = value;` as a statement of the work itself, not under a condition."""
    assignment = node.parent
    if assignment is None or assignment.type != "assignment_expression":
        return False
    operator = assignment.child_by_field_name("operator")
    return operator is not None and operator.type == "=" and assignment.parent in work


def _edits(
    tree: KernelTree, facts: KernelFacts, x: ThreadIndex, spans: list[_Span], work: list[Node], pixels: int
) -> list[Edit]:
    guard = facts.guard
    assert guard is not None
    bound = guard.bound_of(x.name)
    assert bound is not None
    unit = tree.indent_unit()
    indent = line_indent(tree, work[0])
    names = local_names(tree, "f", "aligned", *(f"{s.array}_span" for s in spans))
    f = names["f"]
    edits: list[Edit] = []
    if pixels > 1:
        value = x.declaration
        declarator = next(
            (d for d in value.children_by_field_name("declarator") if d.type == "init_declarator"), None
        )
        initializer = declarator.child_by_field_name("value") if declarator is not None else None
        if initializer is None:
            raise _Unsupported("the index is not declared with its value")
        edits.append((initializer.start_byte, initializer.end_byte, f"({tree.text(initializer)}) * {pixels}"))
    at = f"({x.name} + {f})" if pixels > 1 else x.name

    def body(spanned: bool, depth: str) -> list[str]:
        def substitute(node: Node) -> str | None:
            if node.type == "identifier" and tree.text(node) == x.name and pixels > 1:
                return at
            for span in spans:
                if spanned and node in span.places:
                    return f"{names[span.array + '_span']}[{span.lanes} * {f} + {span.places[node]}]"
            return None

        return [reindent(tree.substituted(s, substitute), tree.indent_at(s.start_byte), depth) for s in work]

    def place(span: _Span) -> str:
        rest = _spelled(span.rest, facts, before=work[0].start_byte)
        start = f"{span.lanes} * {x.name}" if span.lanes > 1 else x.name
        return f"{span.array} + {start}" if rest == "0" else f"{span.array} + ({rest}) + {start}"

    checks = [f"{x.name} + {pixels} <= {bound.bound_text}"] if pixels > 1 else []
    checks += [
        f"((unsigned long long)({place(s)}) & {s.word(pixels) - 1}) == 0"
        for s in spans
        if s.word(pixels) > s.size
    ]
    deep = indent + unit * 2
    lines = [
        f"// {pixels} values of {x.name} a thread: each array's elements for them moved as whole words"
        if pixels > 1
        else "// each array's elements moved as whole words",
        f"if ({' && '.join(checks) or 'true'}) {{",
    ]
    for span in spans:
        count, word = span.lanes * pixels, span.word(pixels)
        register = names[span.array + "_span"]
        lines.append(f"{unit}alignas({word}) {span.type} {register}[{count}];")
        if not span.written:
            lines += _moved(span, register, place(span), pixels, unit, load=True)
    loop = f"for (int {f} = 0; {f} < {pixels}; ++{f}) {{"
    lines += [f"{unit}#pragma unroll", f"{unit}{loop}"] if pixels > 1 else [f"{unit}{{ const int {f} = 0;"]
    lines += [line[len(indent) :] for line in body(True, deep)]
    lines.append(f"{unit}}}")
    for span in spans:
        if span.written:
            lines += _moved(span, names[span.array + "_span"], place(span), pixels, unit, load=False)
    lines.append("} else {")
    tail = f"for (int {f} = 0; {f} < {pixels} && {at} < {bound.bound_text}; ++{f}) {{"
    lines += [f"{unit}{tail}"] if pixels > 1 else [f"{unit}{{"]
    lines += [line[len(indent) :] for line in body(False, deep)]
    lines += [f"{unit}}}", "}"]
    text = f"\n{indent}".join(lines)
    edits.append((work[0].start_byte, work[-1].end_byte, text))
    return edits


def _moved(span: _Span, register: str, place: str, pixels: int, unit: str, *, load: bool) -> list[str]:
    """The span's words between memory and the register array."""
    word = span.word(pixels)
    kind, count = _WORDS[word], span.bytes(pixels) // word
    memory = f"reinterpret_cast<{'const ' if load else ''}{kind}*>({place})"
    registers = f"reinterpret_cast<{'' if load else 'const '}{kind}*>({register})"
    w = "w_"
    copy = f"{registers}[{w}] = {memory}[{w}];" if load else f"{memory}[{w}] = {registers}[{w}];"
    if count == 1:
        return [f"{unit}{copy.replace(f'[{w}]', '[0]')}"]
    return [f"{unit}#pragma unroll", f"{unit}for (int {w} = 0; {w} < {count}; ++{w}) {copy}"]


def _guarded_statements(tree: KernelTree, facts: KernelFacts) -> list[Node]:
    """The statements the bounds check guards, where they are a block of their own (the spans' code
    replaces them with several statements)."""
    guard = facts.guard
    assert guard is not None
    consequence = guard.statement.child_by_field_name("consequence")
    if not guard.early_return and (consequence is None or consequence.type != "compound_statement"):
        raise _Unsupported("the guarded work is not a block")
    rest = guarded_parts(tree, facts)[2]
    if not rest:
        raise _Unsupported("nothing guarded")
    return rest


def _spelled(rest: Form, facts: KernelFacts, before: int) -> str:
    """The row's start in the user's names where it is a multiple of a y or z index declared before the
    work (`3*width*row`), else as the analysis wrote it out (builtins and parameters)."""
    for index in facts.indices:
        if not index.direct or index.axis not in ("y", "z") or index.declaration.start_byte >= before:
            continue
        factor = rest.coefficient(f"threadIdx.{index.axis}")
        if factor is None or not factor.terms:
            continue
        remainder = rest - factor * index.form
        if any(atom.endswith(f".{index.axis}") for atom in remainder.atoms()):
            continue
        scaled = index.name if factor.value() == 1 else f"{factor.text()}*{index.name}"
        return scaled if not remainder.terms else f"{scaled} + {remainder.text()}"
    return rest.text()
