"""Proposers on kernels that take PyTorch packed accessors, through the pointer kernel they stand for.

The rewrites read pointer subscripts (`x[row * cols + j]`); a kernel of a PyTorch extension reads
`x[row][j]` through `torch::PackedTensorAccessor32<...> x`. So a proposer is given the kernel as the
inference reads it (agent/spec/accessors.py: each accessor a pointer, each dimension an `int` size, the
flat indices of contiguous tensors), with a spec to match (the accessors' shapes, the sizes as scalars),
and each rewrite it makes is brought back as code the extension can keep: its body becomes a
`__device__` function on pointers, `<kernel>_on_pointers`, placed before the kernel, and the kernel,
its signature unchanged, calls it with the accessors' data and sizes (`x.data()`, `x.size(1)`):

    template <typename scalar_t>
    __global__ void row_sums_kernel(const torch::PackedTensorAccessor32<scalar_t, 2, ...> x, ...) {
        row_sums_kernel_on_pointers<scalar_t>(x.data(), sums.data(), x.size(0), x.size(1));
    }

A rewrite of the body writes the accessor spec above the kernel, with the rewrite's launch (the kernel
that calls a function reads as no pattern). A rewrite that leaves the body as it was (a block, a flag)
keeps the kernel as written. A written spec's pointer form carries the added sizes as entries of its
[args], taken out again on the way back. The pointer form each rewrite came from is kept (a few hundred,
by the rewrite's text), so proposers chained after it (follow-ups, combinations) work on that form
rather than on the wrapper.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.kernels import Kernel, find_kernels
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.spec.accessors import Flattened, pointer_kernel
from cuda_agent.agent.spec.model import ArgumentSpec
from cuda_agent.agent.spec.render import render_spec
from cuda_agent.agent.targets import KernelTarget, load_targets

SUFFIX = "_on_pointers"
_GLOBAL = re.compile(r"\b__global__\b")
_LAUNCH_BOUNDS = re.compile(r"\b__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*")


@dataclass(frozen=True)
class _PointerForm:
    target: KernelTarget  # the kernel on pointers, with its spec
    calls: tuple[str, ...]  # what the kernel passes for each of its parameters: `x.data()`, `x.size(1)`, `n`
    # A written spec gets the added sizes as scalar entries of its [args] (so the pointer form's file reads
    # back with its spec, as proposers that edit the spec's launch check): the lines added, to take out.
    added: str = ""


# The pointer form of each accessor-form file this process made or read, by the file's text: chained
# proposers reload a rewrite's file and need the form it came from.
_FORMS: BoundedMemo[str, _PointerForm] = BoundedMemo(256)


def has_accessors(target: KernelTarget) -> bool:
    return any(parameter.accessor is not None for parameter in target.kernel.parameters)


def through_pointers(
    proposer: Callable[[KernelTarget], list[Candidate]], target: KernelTarget
) -> list[Candidate]:
    """The proposer's candidates for an accessor kernel, made on its pointer form and brought back."""
    form = _pointer_form(target)
    if form is None:  # not readable as pointers (the inference said why): launch and flag changes only
        return proposer(target)
    assert target.spec is not None  # a form is made for kernels with a spec
    name = target.kernel.name
    original, accessor_kernel = _kernel_text(form.target.source, name), _kernel_text(target.source, name)
    brought_back = f"{name}{SUFFIX}" in (accessor_kernel or "")
    candidates = []
    for candidate in proposer(form.target):
        rewritten = _kernel_text(candidate.source, name)
        if rewritten is None:
            continue
        pointer_source = candidate.source.replace(form.added, "", 1) if form.added else candidate.source
        # else a launch or a flag: the kernel as the user wrote it. A file brought back before (a chain's
        # base) has its body in the form's kernel, and the kernel as written only calls it: brought back too.
        body_rewritten = rewritten != original or brought_back
        # the rewrite's pointer file read back, when something needs it: its spec comment, its form
        reread = None
        if body_rewritten or target.spec.inferred:
            reread = load_targets(target.path, candidate.source, infer=False).find(name)
        commented = _accessor_spec_comment(pointer_source, target, body_rewritten, reread)
        if body_rewritten:
            source = _brought_back(commented, target, form)
            if source is not None and reread is not None:
                _remember(source, reread, target, form)
        else:
            source = _with_kernel(commented, name, accessor_kernel)
        if source is not None:
            candidates.append(replace(candidate, source=source))
    return candidates


def _remember(source: str, rewritten: KernelTarget, target: KernelTarget, form: _PointerForm) -> None:
    """Keep the pointer form a brought-back file came from: its kernel as rewritten (proposers edit by its
    positions) and its spec as written there (a rewrite's launch), else the form's own."""
    if rewritten.spec is None:
        rewritten = replace(rewritten, spec=form.target.spec)
    made = replace(form, target=replace(rewritten, note=form.target.note))
    _FORMS.get_or_make(_key(source, target.kernel.name), lambda: made)


def _key(source: str, kernel: str) -> str:
    return f"{hashlib.sha256(source.encode('utf-8')).hexdigest()}:{kernel}"


def _pointer_form(target: KernelTarget) -> _PointerForm | None:
    known = _FORMS.get(_key(target.source, target.kernel.name))
    if known is not None:
        return known
    if target.spec is None:
        return None
    read = pointer_kernel(target.kernel, target.source)
    if isinstance(read, str):
        return None
    flat, kernel = read
    values = _size_values(target, flat)
    if values is None:
        return None
    source, added, spec = flat.source, "", target.spec
    if not target.spec.inferred:  # the comment gets the sizes' entries, and is read back from the file
        source, added = _with_size_entries(target, flat.source, values)
        written = load_targets(target.path, source, infer=False).find(target.kernel.name) if added else None
        if written is None or written.spec is None:
            return None
        pointer_target = written
    else:
        arguments = [replace(argument, accessor_bits=0) for argument in spec.arguments]
        arguments += [ArgumentSpec(size, "scalar", "int32", value=values[size]) for size in flat.sizes]
        pointer_target = KernelTarget(target.path, source, kernel, replace(spec, arguments=tuple(arguments)))
    form = _PointerForm(replace(pointer_target, note=target.note), _calls(target.kernel, flat), added)
    return _FORMS.get_or_make(_key(target.source, target.kernel.name), lambda: form)


def _with_size_entries(target: KernelTarget, source: str, values: dict[str, str]) -> tuple[str, str]:
    """`source` with a scalar entry for each added size after the written spec's last [args] entry, and
    the text added ("" where the entries could not be placed: a spec comment after the kernel)."""
    assert target.spec is not None
    spans = [target.spec.value_spans.get(("args", p.name)) for p in target.kernel.parameters]
    if any(span is None for span in spans):
        return source, ""
    end = max(span.end_byte for span in spans if span is not None)
    data = source.encode("utf-8")
    line_end = data.find(b"\n", end)
    if end > target.kernel.start_byte or line_end < 0:
        return source, ""
    added = "".join(
        f'\n{size} = {{ role = "scalar", dtype = "int32", value = "{value}" }}'
        for size, value in values.items()
    )
    return (data[:line_end].decode("utf-8") + added + data[line_end:].decode("utf-8")), added


def _size_values(target: KernelTarget, flat: Flattened) -> dict[str, str] | None:
    """Each added size's value: the spec's shape entry for the dimensions the kernel indexes alike (None
    where the spec gives them different sizes)."""
    assert target.spec is not None
    values: dict[str, str] = {}
    for argument in target.spec.arguments:
        for size, written in zip(flat.dims.get(argument.name, ()), argument.shape, strict=False):
            if size.isdigit():
                continue
            if values.setdefault(size, written) != written:
                return None
    return {size: values[size] for size in flat.sizes} if set(values) == set(flat.sizes) else None


def _calls(kernel: Kernel, flat: Flattened) -> tuple[str, ...]:
    calls = [f"{p.name}.data()" if p.accessor is not None else p.name for p in kernel.parameters]
    for size in flat.sizes:
        name, dim = next((n, d) for n, dims in flat.dims.items() for d, s in enumerate(dims) if s == size)
        calls.append(f"{name}.size({dim})")
    return tuple(calls)


def _only_kernel(source: str, name: str) -> Kernel | None:
    found = [k for k in find_kernels(source) if k.name == name]
    return found[0] if len(found) == 1 else None


def _kernel_text(source: str, name: str) -> str | None:
    kernel = _only_kernel(source, name)
    return (
        None
        if kernel is None
        else source.encode("utf-8")[kernel.start_byte : kernel.end_byte].decode("utf-8")
    )


def _accessor_spec_comment(
    source: str, target: KernelTarget, body_rewritten: bool, written: KernelTarget | None
) -> str:
    """The rewrite's file with the accessor kernel's spec written above it. A rewrite that changes the
    launch writes an inferred spec out there (agent/rewrite.py): the pointer form's, with its added sizes;
    it becomes the accessor kernel's, with that launch. A rewrite of the body alone gets one too: the
    kernel that calls the function on pointers reads as no pattern, and the file must say what it was
    verified with. (A written spec is the user's comment, its launch values edited in place.) `written`:
    the rewrite's file read back (for an inferred spec, `source` is that file)."""
    assert target.spec is not None
    if not target.spec.inferred:
        return source
    data = source.encode("utf-8")
    if written is not None and written.spec is not None and written.spec.span is not None:
        start, end = written.spec.span.start_byte, written.spec.span.end_byte
        comment = render_spec(replace(target.spec, launch=written.spec.launch))
    elif not body_rewritten:
        return source
    else:
        kernel = _only_kernel(source, target.kernel.name)
        if kernel is None:
            return source
        start = end = kernel.start_byte
        comment = render_spec(target.spec) + "\n"
    return data[:start].decode("utf-8") + comment + data[end:].decode("utf-8")


def _with_kernel(source: str, name: str, text: str | None) -> str | None:
    """`source` with the kernel's definition replaced by `text`."""
    kernel = _only_kernel(source, name)
    if kernel is None or text is None:
        return None
    data = source.encode("utf-8")
    return data[: kernel.start_byte].decode("utf-8") + text + data[kernel.end_byte :].decode("utf-8")


def _brought_back(source: str, target: KernelTarget, form: _PointerForm) -> str | None:
    """The rewrite's file with its kernel as a `__device__` function on pointers, called by the kernel."""
    kernel = _only_kernel(source, target.kernel.name)
    if kernel is None:
        return None
    data = source.encode("utf-8")
    name = target.kernel.name
    head = data[kernel.start_byte : kernel.name_span.start_byte].decode("utf-8")
    rest = data[kernel.name_span.end_byte : kernel.end_byte].decode("utf-8")
    if not _GLOBAL.search(head):
        return None
    bounds = _LAUNCH_BOUNDS.search(head)
    function = (
        _LAUNCH_BOUNDS.sub("", _GLOBAL.sub("__device__ __forceinline__", head, count=1))
        + name
        + SUFFIX
        + rest
    )
    original = target.source.encode("utf-8")
    signature = original[target.kernel.start_byte : target.kernel.body_span.start_byte].decode("utf-8")
    signature = _LAUNCH_BOUNDS.sub("", signature)
    if bounds is not None:  # the rewrite's launch bounds belong to the kernel
        signature = _GLOBAL.sub(f"__global__ {bounds.group(0).strip()}", signature, count=1)
    template = (
        f"<{', '.join(t.name for t in target.kernel.template_parameters)}>"
        if target.kernel.template_parameters
        else ""
    )
    call = f"{name}{SUFFIX}{template}({', '.join(form.calls)});"
    wrapper = f"{signature}{{\n    // the body, on the accessors' data and sizes\n    {call}\n}}"
    return (
        data[: kernel.start_byte].decode("utf-8")
        + function
        + "\n\n"
        + wrapper
        + data[kernel.end_byte :].decode("utf-8")
    )
