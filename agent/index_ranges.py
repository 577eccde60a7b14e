"""Integer inputs a kernel reads as positions into another buffer, drawn within that buffer.

An inferred spec draws an integer input's values at random; where the kernel uses them as positions
(`probs_row[targets[i]]`, `table[index[r] * D + c]`: a cross-entropy's labels, an embedding's token
ids), those values would send the original kernel outside its buffers, and the run would report the
user's kernel as faulty. Read from the analysis: in an access of another buffer whose element offset is
`position * stride + rest`, the position is drawn in [0, the number of rows): `extent / stride` for a
stride of sizes (`index[r] * D` into a `V * D` table: [0, V)), or, for a unit stride, the size that
every other term of the offset is a multiple of (`b*T*V + t*V + targets[i]`: [0, V)). Only inputs
left to the default draw (integers in [0, 100)) are changed, and only for an inferred spec (a written
one says what the user wants)."""

from __future__ import annotations

from dataclasses import replace

from cuda_agent.agent.analysis import analysed
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, bound_terms
from cuda_agent.agent.proposers.tree import KernelTree
from cuda_agent.agent.spec import KernelSpec, SpecResolveError, complete_sizes
from cuda_agent.agent.spec.dtypes import INTEGER_DTYPES
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from cuda_agent.agent.spec.model import InitSpec
from cuda_agent.agent.targets import KernelTarget


def with_index_ranges(target: KernelTarget) -> KernelSpec | None:
    """The target's inferred spec with its position inputs drawn within the buffers they index (the
    spec unchanged where there are none, or where it was written)."""
    spec = target.spec
    if spec is None or not spec.inferred:
        return spec
    positions = {
        a.name
        for a in spec.arguments
        if a.role == "input" and a.dtype in INTEGER_DTYPES and a.init in (None, InitSpec.default(a.dtype))
    }
    found = analysed(target) if positions else None
    if found is None:
        return spec
    tree, facts = found
    ranges: dict[str, str] = {}
    shapes = {a.name: " * ".join(f"({d})" for d in a.shape) for a in spec.arguments if a.shape}
    for access in facts.accesses:
        if access.array in positions or access.array not in shapes:
            continue
        for name in positions:
            high = _rows(tree, access.offset, name, shapes[access.array])
            if high is not None and _fits(spec, high, shapes[access.array]):
                ranges.setdefault(name, high)
    if not ranges:
        return spec
    arguments = tuple(
        replace(a, init=InitSpec("integers", low=0, high=ranges[a.name])) if a.name in ranges else a
        for a in spec.arguments
    )
    return replace(spec, arguments=arguments)


def _rows(tree: KernelTree, offset: Form, name: str, extent: str) -> str | None:
    """The number of rows the loaded position of `name` picks from, in the spec's sizes, or None."""
    loads = {a for monomial in offset.terms for a in monomial if a.startswith((f"{name}[", f"⟨{name}["))}
    if len(loads) != 1:
        return None
    (load,) = loads
    picked = {m: c for m, c in offset.terms.items() if load in m}
    if len(picked) != 1:
        return None
    ((monomial, scale),) = picked.items()
    if monomial.count(load) != 1 or scale <= 0:
        return None
    stride = Form({tuple(a for a in monomial if a != load): scale})
    rest = [m for m in offset.terms if load not in m]
    try:
        if stride == Form.constant(1):
            # every other term a multiple of one size: the position moves within a row of that length
            common = set.intersection(*(set(m) for m in rest)) if rest else set()
            sizes = [a for a in sorted(common) if _is_size(a)]
            return bound_terms(tree, Form.atom(sizes[0]))[1] if len(sizes) == 1 else None
        if not all(_is_size(a) for a in stride.atoms()):
            return None
        return f"({extent}) // ({bound_terms(tree, stride)[1]})"
    except NotInSizes:
        return None


def _is_size(atom: str) -> bool:
    """A parameter's name (not a builtin, a load or a quotient)."""
    return atom.isidentifier()


def _fits(spec: KernelSpec, high: str, extent: str) -> bool:
    """At every size the spec runs, at least one row, and no more rows than the buffer has elements."""
    try:
        return all(
            1 <= evaluate(high, sizes) <= evaluate(extent, sizes)
            for sizes in (spec.sizes, *(complete_sizes(spec, v) for v in spec.verify_sizes))
        )
    except (ExpressionError, SpecResolveError, ArithmeticError):
        return False
