"""Infer a spec for the common kernel shapes, from the signature and a look at the body's syntax tree.

Recognised (anything else is refused with a reason, so the user writes a spec):
* 1-D element-wise `(const T* a, ..., T* out, int n)` with a global index (blockIdx.x and threadIdx.x;
  a block number made one line of a 2-D grid, `blockIdx.x + blockIdx.y * gridDim.x`, is 1-D too), each
  buffer as long as its indices reach (`z[2 * i + 1]`: 2n), BLAS's strides and offsets
  (`X[OFFX + i * INCX]`) sizes of 1 (verified at 2) and values of 0;
* 2-D `(..., int rows, int cols)` (also height/width, M/N, ny/nx, ..., or any two names of which one alone
  scales an index, `r * K + c`: that one is cols) whose body uses threadIdx.y or blockIdx.y: a 2-D block
  over cols (x) and rows (y); more integers that only scale the y index (`dst[y * pitch + x]`) are
  pitches, a row's length at the benchmark and longer when verifying;
* row-wise `(..., int rows, int cols)` with a 1-D index: one thread per row (the global index is compared
  with rows), one block per row (blockIdx.x alone indexes rows), one thread per column, or a flattened
  element-wise loop over rows * cols;
* any of these with no integer parameter, its sizes the file's `#define N 1024` constants that the body
  reads (one or two of them, as above): the kernel is compiled for those sizes, so it is run and verified
  at them alone;
* one size `n` on 2-D blocks, both indices compared with it: an n x n square (a square matmul when a
  loop also counts to n);
* a contraction `(..., int M, int N, int K)` on 2-D blocks: a thread per (row, col), the rows and cols the
  sizes the y and x indices are compared with, the depth the one a loop counts to; each buffer's shape
  from the indices it reads (`A[row * K + k]` is M x K, `B[col * K + k]` N x K).

Roles come from the body: a const pointer is an input; a pointer the body writes is an output, or inout
when it also reads it (`y[i] += ...`, `y[i] = y[i] * 2`, atomics); a pointer only read is an input.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from cuda_agent.agent.kernels import Kernel, Parameter, find_kernels, kernel_body
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import Monomial, linear_form, parse_cuda, walk
from cuda_agent.agent.spec.accessors import pointer_kernel, to_accessors
from cuda_agent.agent.spec.dtypes import (
    dtype_of_c_type,
    dtype_through_aliases,
    is_float,
    through_aliases,
    vector_of_c_type,
)
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from cuda_agent.agent.spec.loop_macros import loop_macros_written_out
from cuda_agent.agent.spec.model import ArgumentSpec, InitSpec, KernelSpec, LaunchSpec
from cuda_agent.agent.spec.render import CHECK_ADVICE
from cuda_agent.agent.spec.several_sizes import block_for, several_sizes
from cuda_agent.agent.spec.validate import is_size_name
from cuda_agent.agent.spec.written_out import written_out
from tree_sitter import Node, Tree

ELEMENTS_1D, VERIFY_1D = 16_777_216, 1_000_003
ROWS_2D = COLS_2D = 4096
VERIFY_ROWS, VERIFY_COLS = 1023, 1021
# (rows, cols) spellings, matched exactly; rows is the y axis and the outer dimension.
SIZE_PAIRS = (
    ("rows", "cols"),
    ("nrows", "ncols"),
    ("n_rows", "n_cols"),
    ("num_rows", "num_cols"),
    ("rows", "columns"),
    ("height", "width"),
    ("h", "w"),
    ("H", "W"),
    ("M", "N"),
    ("m", "n"),
    ("ny", "nx"),
    ("NY", "NX"),
)
# A float scalar (alpha, eps, scale) is drawn positive and away from 0: eps = -0.3 would put NaNs in both
# kernels' outputs and prove nothing.
FLOAT_SCALAR_INIT = InitSpec("uniform", low=0.5, high=2.0)
_COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
_MOST_LVALUE_WRAPPERS = 32  # macro calls, casts and member accesses around a stored element
_SHORT_INDEX_BYTES = 64


@dataclass
class _Use:
    """What the body does with one pointer parameter (directly or through a local pointer derived from it)."""

    read: bool = False
    written: bool = False
    single_element: bool = True  # only ever p[0], *p or atomicX(p, ...): an accumulator, shape [1]
    # (the name subscripted, the index) of each `p[...]`, the name an alias's where it is one
    subscripts: list[tuple[str, Node]] = field(default_factory=list)
    moved: bool = False  # also reached by arithmetic on it (`p + i`, `*(p + 2 * i)`)
    mentions: set[str] = field(default_factory=set)  # identifiers in its index expressions
    passed: bool = False  # handed to a function other than an atomic (`softmax_device(n, x + b * n)`)


def infer_spec(
    kernel: Kernel,
    source: str,
    tree: Tree | None = None,
    typedefs: Mapping[str, str] | None = None,
    headers: Sequence[bytes] = (),
    path: Path | None = None,
) -> tuple[KernelSpec | None, str]:
    """(spec, note) when the kernel has a recognised shape; (None, why not) otherwise. `typedefs`: the
    file's type aliases (`typedef __nv_bfloat16 floatX;`), followed to the element type; `headers`: the
    texts of the file's own headers, whose #defines (a TILE, sizes) count as the file's; `path`: the
    file's, where the analysis looks for those headers itself. A kernel that calls the file's own
    `__device__` helpers and is refused is read again with those calls written out (spec/written_out.py);
    one taking PyTorch packed accessors is read as the pointer kernel it stands for (spec/accessors.py)."""
    if any(parameter.accessor is not None for parameter in kernel.parameters):
        return _through_accessors(kernel, source, tree, typedefs, headers, path)
    looped = loop_macros_written_out(kernel, source, tree)
    again = next((k for k in find_kernels(looped) if k.name == kernel.name), None) if looped else None
    if again is not None and looped is not None:  # `CUDA_KERNEL_LOOP(i, n) {`: read as the loop it is
        spec, note = infer_spec(again, looped, None, typedefs, headers, path)
        written = f"{note}; read with its loop macros written out"
        return (replace(spec, inference_note=written), written) if spec is not None else (None, note)
    spec, note = _inferred(kernel, source, tree, typedefs, headers, path)
    if spec is not None or kernel.has_errors:
        return spec, note
    expanded = written_out(kernel, source, tree)
    again = next((k for k in find_kernels(expanded) if k.name == kernel.name), None) if expanded else None
    if again is None:
        return spec, note
    spec, expanded_note = _inferred(again, expanded, None, typedefs, headers, path)
    if spec is None:
        return None, note
    written = f"{expanded_note}; read with its helper calls written out"
    return replace(spec, inference_note=written), written


def _through_accessors(
    kernel: Kernel,
    source: str,
    tree: Tree | None,
    typedefs: Mapping[str, str] | None,
    headers: Sequence[bytes],
    path: Path | None,
) -> tuple[KernelSpec | None, str]:
    read = pointer_kernel(kernel, source, tree)
    if isinstance(read, str):
        return None, read
    flat, pointers = read
    spec, note = infer_spec(pointers, flat.source, None, typedefs, headers, path)
    if spec is None:
        return None, f"{note} (read with its accessors as pointers)"
    spec = to_accessors(spec, kernel, flat)
    return spec, spec.inference_note


def _inferred(
    kernel: Kernel,
    source: str,
    tree: Tree | None,
    typedefs: Mapping[str, str] | None,
    headers: Sequence[bytes],
    path: Path | None,
) -> tuple[KernelSpec | None, str]:
    if kernel.has_errors:
        return None, "the kernel has syntax errors"
    instantiate, template_types = instantiation(kernel)
    if instantiate is None and kernel.template_parameters:
        return None, "a template with a value parameter and no default: say which instantiation to run"
    tree = tree or parse_cuda(source)
    body = kernel_body(kernel, tree)
    if body is None:
        return None, "the kernel has no body"
    if called := _called_parameters(kernel, body, template_types):
        names = ", ".join(called)
        return None, f"{names}: a functor (its type a template parameter, called in the body): write a spec"

    aliases = dict(typedefs or {})
    classified = classify_parameters(
        kernel.parameters,
        template_types,
        lambda c_type: dtype_through_aliases(c_type, aliases),
        lambda c_type: vector_of_c_type(through_aliases(c_type, aliases)),
    )
    if isinstance(classified, str):
        return None, classified
    pointers, int_scalars, float_scalars = classified

    def resolved(parameter: Parameter) -> str:
        return through_aliases(template_types.get(parameter.type, parameter.type), aliases)

    # A bool parameter picks a branch, it sizes nothing: run with it true (the branch that does more).
    flags = {parameter.name for parameter, _ in int_scalars if resolved(parameter) == "bool"}
    int_scalars = [(parameter, dtype) for parameter, dtype in int_scalars if parameter.name not in flags]
    lanes = {
        parameter.name: vector[1]
        for parameter, _ in pointers
        if (vector := vector_of_c_type(resolved(parameter))) is not None
    }

    parsed = tree
    analysis = BodyAnalysis(body, [p.name for p, _ in pointers], lambda: integer_defines(parsed, headers))
    taken = {parameter.name for parameter in kernel.parameters}
    size_of = {parameter.name: size_name_for(parameter.name, taken) for parameter, _ in int_scalars}
    if int_scalars:
        fixed, ordered = {}, False
    else:
        defined = (name for name, _ in file_defines(tree, headers))
        fixed, ordered = _fixed_sizes(body, defined, integer_defines(tree, headers), analysis)
    strided = analysis.strides_and_offsets([parameter.name for parameter, _ in int_scalars])
    if strided is not None:
        layout = _layout_strided(strided, analysis, size_of)
    elif len(int_scalars) == 1:
        layout = _layout_1d(size_of[int_scalars[0][0].name], analysis)
    elif len(int_scalars) == 2:
        layout = _layout_2d([parameter.name for parameter, _ in int_scalars], analysis)
        if isinstance(layout, str):  # (n, offset), (n, stride), (total, channels); (length, width)
            sizes = [p for p, _ in int_scalars]
            several = _layout_several(kernel, source, body, instantiate, sizes, size_of, analysis, path)
            layout = layout if isinstance(several, str) else several
    elif pitched := analysis.pitched([parameter.name for parameter, _ in int_scalars]):
        layout = _layout_pitched(pitched, analysis, size_of)
    elif len(int_scalars) >= 3 and analysis.uses_z:  # a volume: (z, y, x) over nz, ny, nx
        sizes = [p for p, _ in int_scalars]
        layout = _layout_several(kernel, source, body, instantiate, sizes, size_of, analysis, path)
    elif len(int_scalars) == 3 and analysis.uses_y:
        layout = _layout_contraction([size_of[parameter.name] for parameter, _ in int_scalars], analysis)
        if isinstance(layout, str):  # a batch row a block summing a third size; (w, h, delta) of an image
            sizes = [p for p, _ in int_scalars]
            several = _layout_several(kernel, source, body, instantiate, sizes, size_of, analysis, path)
            layout = layout if isinstance(several, str) else several
    elif fixed:
        names = list(fixed)
        layout = _layout_1d(names[0], analysis) if len(names) == 1 else _layout_2d(names, analysis, ordered)
        if not isinstance(layout, str):  # compiled for these sizes: run and verified at them alone
            layout = replace(layout, sizes=dict(fixed), verify=dict(fixed), summary=_fixed_summary(fixed))
    elif len(int_scalars) >= 3:
        sizes = [p for p, _ in int_scalars]
        layout = _layout_several(kernel, source, body, instantiate, sizes, size_of, analysis, path)
    else:
        names = ", ".join(parameter.name for parameter, _ in int_scalars) or "none"
        return None, f"expected one integer size (n) or two (rows, cols); found {len(int_scalars)} ({names})"
    if not isinstance(layout, str):
        layout = _stepped_block(layout, analysis)
    if isinstance(layout, str):
        return None, layout

    dtypes = {parameter.name: dtype for parameter, dtype in pointers + int_scalars + float_scalars}
    arguments = [
        _flag(p) if p.name in flags else _argument(p, dtypes[p.name], analysis, layout, size_of, lanes)
        for p in kernel.parameters
    ]
    if not any(argument.role in ("output", "inout") for argument in arguments):
        return None, "no pointer is written by the body, so there is no output to check"
    accumulators = [a for a in arguments if a.role == "inout" and a.shape == ("1",)]
    note = f"spec inferred from the {layout.pattern} pattern ({layout.summary}); {CHECK_ADVICE}"
    spec = KernelSpec(
        kernel=kernel.name,
        arguments=tuple(arguments),
        launch=LaunchSpec(layout.block, layout.grid),
        sizes=dict(layout.sizes),
        size_expressions={name: str(value) for name, value in layout.sizes.items()},
        instantiate=instantiate,
        verify_sizes=(dict(layout.verify),),
        reduction=_reduction(layout, bool(accumulators), analysis.sums_in_loops, size_of),
        inferred=True,
        inference_note=note,
    )
    return spec, note


_Typed = list[tuple[Parameter, str]]


def _reduction(
    layout: Layout, accumulators: bool, summed_over: set[str] | None, size_of: Mapping[str, str]
) -> str | None:
    """How many terms each output sums, to scale the tolerances that rewrites reordering a sum need:
    single-element accumulators sum every thread's value (all the sizes' product); a sum in loops, the
    product of the sizes their conditions name (a matmul's k, a convolution's channels), else (bounds of
    constants and #defines) the largest size."""
    if accumulators:
        return " * ".join(layout.sizes)
    if summed_over is None or not layout.sizes:
        return None
    named = sorted({size_of[name] for name in summed_over if size_of.get(name) in layout.sizes})
    if named:
        return " * ".join(named)
    return max(layout.sizes, key=lambda name: (layout.sizes[name], name))


def classify_parameters(
    parameters: tuple[Parameter, ...],
    template_types: Mapping[str, str],
    dtype_of: Callable[[str], str | None] = dtype_of_c_type,
    vector_of: Callable[[str], tuple[str, int] | None] = vector_of_c_type,
) -> tuple[_Typed, _Typed, _Typed] | str:
    """(pointers, integer scalars, float scalars) with their dtypes, or why a parameter does not fit.
    A pointer to a vector type has its component's dtype; a `bool` scalar is an integer one (uint8)."""
    pointers: _Typed = []
    int_scalars: _Typed = []
    float_scalars: _Typed = []
    for parameter in parameters:
        c_type = template_types.get(parameter.type, parameter.type)
        dtype = dtype_of(c_type)
        if dtype is None and parameter.is_pointer and (vector := vector_of(c_type)) is not None:
            dtype = vector[0]  # a float4* is float32; infer_spec adds the trailing axis of 4 (`lanes`)
        if not parameter.name:
            return f"parameter '{parameter.text}' has no name"
        if parameter.pointer_depth > 1 or (parameter.is_pointer and dtype is None):
            stars = "*" * parameter.pointer_depth
            return f"'{parameter.text}': element type {c_type}{stars} is not a plain number"
        if dtype is None:
            return f"scalar parameter '{parameter.text}' of type {c_type} is not a number"
        if parameter.is_pointer:
            pointers.append((parameter, dtype))
        else:
            (float_scalars if is_float(dtype) else int_scalars).append((parameter, dtype))
    if not pointers:
        return "no pointer parameters, so nothing to read or write"
    return pointers, int_scalars, float_scalars


@dataclass(frozen=True)
class Layout:
    pattern: str
    summary: str
    sizes: dict[str, int]
    verify: dict[str, int]
    block: tuple[int, ...]
    grid: tuple[str, ...]
    shape_of: dict[str, tuple[str, ...]]  # pointer name -> shape; missing: full shape
    full_shape: tuple[str, ...]
    values: dict[str, int] = field(default_factory=dict)  # integer parameters that are no size: their value


# All-pairs kernels: 2^28 pair interactions at the benchmark (the cap on a kernel's work over several
# sizes), 2^24 when verifying at an odd size.
ELEMENTS_PAIRS, VERIFY_PAIRS = 1 << 14, 4093


def _layout_1d(n: str, analysis: BodyAnalysis) -> Layout | str:
    if analysis.uses_y:
        return _layout_square(n, analysis)
    if not analysis.global_indices:
        return "no element-wise index (blockIdx.x * blockDim.x + threadIdx.x) in the body"
    extents = {name: analysis.extent_1d(name, n) for name in analysis.uses}
    # A loop each thread runs over n too (all pairs: n-body forces, nearest neighbours, distances), or
    # over the grid (tiles of bodies): n * n work, which at 2^24 threads would not finish in hours.
    quadratic = analysis.loops_from_zero_over({n, "gridDim"})
    elements, verify = (ELEMENTS_PAIRS, VERIFY_PAIRS) if quadratic else (ELEMENTS_1D, VERIFY_1D)
    return Layout(
        pattern="1-D element-wise",
        summary=f"{n} = {elements}" + (f", each thread looping over {n}: {n}² work" if quadratic else ""),
        sizes={n: elements},
        verify={n: verify},
        block=(256,),
        grid=(f"ceil_div({n}, block.x)",),
        shape_of={name: (extent,) for name, extent in extents.items() if extent is not None},
        full_shape=(n,),
    )


def _layout_several(
    kernel: Kernel,
    source: str,
    body: Node,
    instantiate: str | None,
    sizes: list[Parameter],
    size_of: Mapping[str, str],
    analysis: BodyAnalysis,
    path: Path | None,
) -> Layout | str:
    passed = sorted(name for name, use in analysis.uses.items() if use.passed)
    if passed:  # what the function does with the buffer is not seen here
        return f"{', '.join(passed)} handed to a function: write a spec"
    renamed = [p.name for p in sizes if size_of[p.name] != p.name]
    if renamed:  # the analysis' forms name the parameters; a size of another name would not match
        return f"integer parameters named like reserved words ({', '.join(renamed)}): write a spec"
    rank = 3 if analysis.uses_z else 2 if analysis.uses_y else 1
    found = several_sizes(kernel, source, body, instantiate, sizes, path, rank)
    if isinstance(found, str):
        names = ", ".join(p.name for p in sizes)
        return f"{found}; a {rank}-D kernel over {len(sizes)} integer sizes ({names})"
    grid = tuple(
        threads if axis in found.block_only else f"ceil_div({threads}, block.{axis})"
        for threads, axis in zip(found.threads, "xyz", strict=False)
    )
    return Layout(
        pattern=f"{rank}-D over several sizes",
        summary=found.summary,
        sizes=found.bench,
        verify=found.verify,
        block=block_for(rank, found.block_only),
        grid=grid,
        shape_of={array: (shape,) for array, shape in found.shapes.items()},
        full_shape=(" * ".join(f"({t})" for t in found.threads) if rank > 1 else found.threads[0],),
    )


@dataclass(frozen=True)
class _Strided:
    """A 1-D kernel in BLAS's spelling (`Y[OFFY + i * INCY] += ALPHA * X[OFFX + i * INCX]`)."""

    bound: str  # the size the global index is compared with
    strides: list[str]  # INCX, INCY
    offsets: list[str]  # OFFX, OFFY
    stride_of: dict[str, str]  # each strided buffer's stride


STRIDE, VERIFY_STRIDE = 1, 2


def _layout_strided(strided: _Strided, analysis: BodyAnalysis, size_of: Mapping[str, str]) -> Layout | str:
    """The elements one after another from the first (INCX = 1, OFFX = 0) at the benchmark, and verified
    also two apart (INCX = 2): a rewrite right only for contiguous elements does not pass."""
    n = size_of[strided.bound]
    layout = _layout_1d(n, analysis)
    if isinstance(layout, str):
        return layout
    strides = {name: size_of[name] for name in strided.strides}
    shape_of = {array: (f"{n} * {strides[stride]}",) for array, stride in strided.stride_of.items()}
    fixed = [
        *(f"{strides[name]} = {STRIDE}" for name in strided.strides),
        *(f"{o} = 0" for o in strided.offsets),
    ]
    return replace(
        layout,
        summary=f"{layout.summary}; {', '.join(fixed)}, verified also at a stride of {VERIFY_STRIDE}",
        sizes=layout.sizes | dict.fromkeys(strides.values(), STRIDE),
        verify=layout.verify | dict.fromkeys(strides.values(), VERIFY_STRIDE),
        shape_of=layout.shape_of | shape_of,
        values=dict.fromkeys(strided.offsets, 0),
    )


@dataclass(frozen=True)
class _Pitched:
    """A 2-D kernel whose rows lie a pitch apart (`dst[y * pitch + x]`, `feats[i * ldf + j]`)."""

    rows: str  # the size the y index is compared with
    cols: str  # the size the x index is compared with
    pitch_of: dict[str, str]  # each pitched buffer's pitch


PITCH_PAST_ROW = 3  # verified with rows this many elements longer than their contents


def _layout_pitched(pitched: _Pitched, analysis: BodyAnalysis, size_of: Mapping[str, str]) -> Layout | str:
    """The 2-D layout over (rows, cols), each pitch a size: as long as a row at the benchmark, a few
    elements longer when verifying (a rewrite that took the pitch for the row's length does not pass)."""
    rows, cols = size_of[pitched.rows], size_of[pitched.cols]
    layout = _layout_2d([rows, cols], analysis, ordered=True)
    if isinstance(layout, str):
        return layout
    pitches = sorted({size_of[p] for p in pitched.pitch_of.values()})
    past = layout.verify[cols] + PITCH_PAST_ROW
    return replace(
        layout,
        pattern="2-D pitched",
        summary=f"{layout.summary}; {', '.join(pitches)} = {cols}, verified also {PITCH_PAST_ROW} past a row",
        sizes=layout.sizes | dict.fromkeys(pitches, layout.sizes[cols]),
        verify=layout.verify | dict.fromkeys(pitches, past),
        shape_of=layout.shape_of
        | {array: (rows, size_of[pitch]) for array, pitch in pitched.pitch_of.items()},
    )


def _layout_2d(names: list[str], analysis: BodyAnalysis, ordered: bool = False) -> Layout | str:
    """`ordered`: `names` are (rows, cols) already (sizes fixed by #defines, see `_fixed_sizes`)."""
    pair = (names[0], names[1]) if ordered else next((p for p in SIZE_PAIRS if set(p) == set(names)), None)
    if pair is None and len(strides := analysis.row_strides(names)) == 1:
        cols = strides.pop()  # any spelling (N/K, n/emb_size): the one that scales an index is a row's length
        pair = (next(name for name in names if name != cols), cols)
    if pair is None:
        known = "rows/cols, height/width, M/N or ny/nx"
        return (
            f"two integer parameters ({', '.join(names)}) not named like {known}, and not one of them "
            "alone scaling an index (row * cols + col)"
        )
    rows, cols = pair
    sizes, verify, full = {rows: ROWS_2D, cols: COLS_2D}, {rows: VERIFY_ROWS, cols: VERIFY_COLS}, (rows, cols)
    dims = f"{rows} × {cols} = {ROWS_2D} × {COLS_2D}"

    def layout(
        pattern: str,
        grid: tuple[str, ...],
        shape_of: Mapping[str, tuple[str, ...]],
        block: tuple[int, ...] = (256,),
    ) -> Layout:
        summary = f"{dims}, block {' × '.join(map(str, block))}"
        return Layout(pattern, summary, sizes, verify, block, grid, dict(shape_of), full)

    if analysis.uses_y:
        # x runs along the columns, unless its index is the one compared with the rows (column-major code:
        # `B[IDX2C(i, j, m)]` with i along x and `i < m`)
        along_x, along_y = (rows, cols) if _compared_along(analysis, "x") == {rows} else (cols, rows)
        if analysis.a_block_a_row:  # `row = blockIdx.y`: a row of blocks each, one thread high
            grid = (f"ceil_div({along_x}, block.x)", along_y)
            return layout("2-D, a row of blocks a row", grid, {}, block=(256, 1))
        tile = analysis.tile(analysis.global_indices)
        if tile is None or tile == BLOCK_DIM:
            # blockDim steps, or steps this cannot read (`32*bx + 32*w*by`): the 32 x 8 block, as ever
            grid = (f"ceil_div({along_x}, block.x)", f"ceil_div({along_y}, block.y)")
            return layout("2-D", grid, {}, block=(32, 8))
        block, grid = _tiled_launch(tile, (along_y, along_x))
        verify = {rows: TILE_MULTIPLES[0] * tile, cols: TILE_MULTIPLES[1] * tile}
        return replace(layout("2-D", grid, {}, block=block), verify=verify)
    compared = analysis.compared_with_global_index
    if {rows, cols} <= compared:
        return layout("flattened element-wise", (f"ceil_div({rows} * {cols}, block.x)",), {})
    # an index that reads a loop's variable reaches as far as the loop's bound (`x[k * groups + i]`, k < n)
    reach = {name: analysis.reach(name) for name in analysis.uses}
    by_row = {name: (rows,) for name in analysis.uses if cols not in reach[name]}
    if rows in compared:
        # a vector read along a loop over the columns (`x[j]`, j < cols) is a row's length
        along = {name: (cols,) for name in analysis.uses if analysis.only_along(name, cols, {rows, cols})}
        return layout("one-thread-per-row", (f"ceil_div({rows}, block.x)",), by_row | along)
    if cols in compared:
        by_column = {name: (cols,) for name in analysis.uses if rows not in reach[name]}
        return layout("one-thread-per-column", (f"ceil_div({cols}, block.x)",), by_column)
    if analysis.block_indices:
        return layout("one-block-per-row", (rows,), by_row)
    return f"could not tell how threads map to {rows} and {cols} (no index compared with either)"


def _compared_along(analysis: BodyAnalysis, axis: str) -> set[str]:
    """The sizes the global indices along an axis are compared with (`if (i < m)`)."""
    return {
        bound
        for name in analysis.index_axes.get(axis, ())
        for bound in analysis.variable_bounds.get(name, ())
    }


CONTRACTION_SIZE, CONTRACTION_VERIFY = 1024, (129, 67, 100)  # a 2 GFLOP product; odd, ragged tiles
SQUARE_VERIFY = 129
_STEPPED_BY_A_CONSTANT = (
    "its 2-D indices step blocks by something other than blockDim or one constant for both axes "
    "(blockIdx.x * TILE): the block it needs is not known; write a spec"
)
BLOCK_DIM = 0  # `BodyAnalysis.tile` for indices that step blocks by blockDim: any block covers the range
# A kernel whose indices step blocks by a TILE (a shared-memory tiled matmul) often loads its tiles
# without bounds checks: it is verified at odd multiples of the tile, (rows, cols, depth) or n the first.
TILE_MULTIPLES = (9, 5, 7)


def _stepped_block(layout: Layout, analysis: BodyAnalysis) -> Layout | str:
    """A kernel whose indices step blocks by constants (`blockIdx.x * SUBTRACT_W + threadIdx.x`,
    `blockIdx.y * 16 + threadIdx.y`) covers its range only on blocks of those sides: the block they name
    along each such axis, the grid counted in them. (A block of other sides leaves rows unwritten, or
    writes some twice: the original then fails its own checks, or every rewrite does.) A loop striding
    through a tile of rows (TILE x BLOCK_ROWS) keeps the layout's rows."""
    steps = analysis.axis_steps()
    axes = ("x", "y", "z")[: len(layout.block)]
    fixed = {
        axis: step
        for axis, step in steps.items()
        if step is not None and step != BLOCK_DIM and not (axis == "y" and analysis.strides_a_tile(step))
    }
    if not fixed:
        return layout
    if not set(fixed) <= set(axes):
        return f"its indices step blocks by {fixed} along axes its layout has no block for; write a spec"
    block = tuple(fixed.get(axis, side) for axis, side in zip(axes, layout.block, strict=True))
    if block == layout.block and all(f"block.{axis}" not in " ".join(layout.grid) for axis in fixed):
        return layout
    if math.prod(block) > 1024:
        return f"its indices step blocks by {fixed}: a block of {math.prod(block)} threads, over 1024"
    grid = tuple(_counted_in(expression, fixed) for expression in layout.grid)
    sides = " × ".join(map(str, block))
    summary, found = re.subn(r"block \d+( × \d+)*", f"block {sides}", layout.summary, count=1)
    return replace(layout, block=block, grid=grid, summary=summary if found else f"{summary}, block {sides}")


def _counted_in(expression: str, steps: Mapping[str, int]) -> str:
    """A grid expression counted in the steps (`ceil_div(width, block.x)` -> `ceil_div(width, 32)`)."""
    for axis, step in steps.items():
        expression = expression.replace(f"block.{axis}", str(step))
    return expression


def _tiled_launch(tile: int, sizes: tuple[str, str]) -> tuple[tuple[int, int], tuple[str, str]]:
    """The block and grid of a 2-D kernel over (rows, cols): 16 x 16 where any block covers the range,
    else TILE x TILE with the grid counted in tiles (a launch tuned to another block would not cover it)."""
    rows, cols = sizes
    if tile == BLOCK_DIM:
        return (16, 16), (f"ceil_div({cols}, block.x)", f"ceil_div({rows}, block.y)")
    return (tile, tile), (f"ceil_div({cols}, {tile})", f"ceil_div({rows}, {tile})")


def _layout_square(n: str, analysis: BodyAnalysis) -> Layout | str:
    """One size on 2-D blocks: an n x n square whose y and x indices are both compared with n (a matrix
    sum, or a square matmul when a loop also counts to n: then 1024, its work is cubic)."""
    bound = {var for var, bounds in analysis.variable_bounds.items() if n in bounds}
    if not all(analysis.index_axes.get(axis, set()) & bound for axis in ("x", "y")):
        # A textbook's tiled matmul checks no bounds: it covers n x n in whole tiles, n a row's length.
        indices = analysis.index_axes.get("x", set()) | analysis.index_axes.get("y", set())
        unchecked = analysis.tile(indices) not in (None, BLOCK_DIM) and n in analysis.row_strides([n])
        if not (unchecked and all(analysis.index_axes.get(axis) for axis in ("x", "y"))):
            return f"the body indexes in 2-D (threadIdx.y/blockIdx.y) but the signature has one size ({n})"
        bound |= indices
    tile = analysis.tile(bound)
    if tile is None:
        return _STEPPED_BY_A_CONSTANT
    cubic = bool(bound & analysis.loop_variables)
    size = CONTRACTION_SIZE if cubic else ROWS_2D
    block, grid = _tiled_launch(tile, (n, n))
    return Layout(
        pattern="square 2-D" + (" contraction" if cubic else ""),
        summary=f"{n} × {n} = {size} × {size}, block {block[0]} × {block[1]}",
        sizes={n: size},
        verify={n: SQUARE_VERIFY if tile == BLOCK_DIM else TILE_MULTIPLES[0] * tile},
        block=block,
        grid=grid,
        shape_of={name: (n,) for name, use in analysis.uses.items() if analysis.only_along(name, n, {n})},
        full_shape=(n, n),
    )


def _layout_contraction(names: list[str], analysis: BodyAnalysis) -> Layout | str:
    """A thread per (row, col) of a product over a loop: see the module."""
    sizes = set(names)
    bound = {
        var: found.pop()
        for var, bounds in analysis.variable_bounds.items()
        if len(found := bounds & sizes) == 1
    }
    by_axis = {
        axis: {bound[v] for v in analysis.index_axes.get(axis, ()) if v in bound} for axis in ("x", "y")
    }
    loops = {bound[v] for v in analysis.loop_variables if v in bound}
    if any(len(found) != 1 for found in by_axis.values()) or len(loops) != 1:
        listed = ", ".join(names)
        return (
            f"three integer parameters ({listed}): not a thread per (row, col) compared with two of them and "
            "a loop to the third"
        )
    (rows,), (cols,), (depth,) = by_axis["y"], by_axis["x"], loops
    tile = analysis.tile(set(bound))
    if tile is None:
        return _STEPPED_BY_A_CONSTANT
    if len({rows, cols, depth}) != 3:
        return (
            f"three integer parameters ({', '.join(names)}): the rows, cols and depth are not three of them"
        )
    shape_of: dict[str, tuple[str, ...]] = {}
    for pointer, use in analysis.uses.items():
        dims = sorted({bound[v] for v in use.mentions if v in bound}, key=names.index)
        strides = use.mentions & sizes & set(dims)
        if len(dims) == 1:
            shape_of[pointer] = (dims[0],)
        elif len(dims) == 2 and len(strides) == 1:  # `row * K + k`: the size that scales nothing is the outer
            inner = strides.pop()
            shape_of[pointer] = (next(d for d in dims if d != inner), inner)
        elif use.read or use.written:
            return f"could not tell the shape of {pointer} from its indices"
    sizes_at = {rows: CONTRACTION_SIZE, cols: CONTRACTION_SIZE, depth: CONTRACTION_SIZE}
    verify = CONTRACTION_VERIFY if tile == BLOCK_DIM else tuple(m * tile for m in TILE_MULTIPLES)
    block, grid = _tiled_launch(tile, (rows, cols))
    return Layout(
        pattern="2-D contraction",
        summary=(
            f"{rows} × {cols} outputs summed over {depth}, each {CONTRACTION_SIZE}, "
            f"block {block[0]} × {block[1]}"
        ),
        sizes=sizes_at,
        verify=dict(zip((rows, cols, depth), verify, strict=True)),
        block=block,
        grid=grid,
        shape_of=shape_of,
        full_shape=(rows, cols),
    )


def _fixed_sizes(
    body: Node, defined: Iterable[str], numbers: Mapping[str, int], analysis: BodyAnalysis
) -> tuple[dict[str, int], bool]:
    """The sizes of a kernel with no integer parameter, from the file's `#define NAME <integer>` constants
    the body reads: one compared with a global thread index (`if (i < N)`), with at most one other that
    bounds a loop (`j < COLS`: rows, cols, in that order, so True), or two compared with thread indices
    (`row < M && col < N`, ordered as parameters would be, so False). Empty where they are otherwise (a
    TILE or BLOCK_SIZE is no size), or where one of them is defined twice or is no positive integer."""
    read = {_text(node) for node in walk(body) if node.type == "identifier"}
    values: dict[str, int | None] = {}
    for name in defined:  # `numbers` holds those defined once, as an integer
        if name in read and is_size_name(name):
            number = numbers.get(name)
            values[name] = number if number is not None and number > 0 else None
    constants = {name: number for name, number in values.items() if number is not None}
    bounding = analysis.compared_with_global_index | analysis.loop_bound_names
    if any(number is None and name in bounding for name, number in values.items()):
        return {}, False  # a size whose value is not known here: the others alone would be the wrong shape
    compared = [name for name in constants if name in analysis.compared_with_global_index]
    bounds = [name for name in constants if name in analysis.loop_bound_names and name not in compared]
    if len(compared) == 2 and not bounds:
        return {name: constants[name] for name in compared}, False
    if len(compared) == 1 and len(bounds) <= 1:
        return {name: constants[name] for name in compared + bounds}, True
    return {}, False


def integer_defines(tree: Tree, headers: Sequence[bytes] = ()) -> dict[str, int]:
    """The `#define NAME <integer expression>` constants of the file and of its own headers (`headers`:
    their texts, as `local_headers` reads them); a name defined twice is left out."""
    return _read_defines(tree, tuple(headers))[1]


def file_defines(tree: Tree, headers: Sequence[bytes] = ()) -> tuple[tuple[str, str], ...]:
    """(name, value) of each `#define` at file scope (in `#if` branches, `extern "C"` and namespaces too),
    the headers' first (they are included above the code), the value without a trailing line comment."""
    return _read_defines(tree, tuple(headers))[0]


_Defines = tuple[tuple[tuple[str, str], ...], dict[str, int]]
_DEFINES: list[tuple[Tree, tuple[bytes, ...], _Defines]] = []
_HEADER_DEFINES: BoundedMemo[bytes, tuple[tuple[str, str], ...]] = BoundedMemo(256)
_DEFINES_LOCK = threading.Lock()
# Where a #define can stand between declarations: the file, its #if branches, extern "C" and namespaces.
_DECLARATION_SCOPES = frozenset(
    {
        "translation_unit", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef",
        "linkage_specification", "namespace_definition", "declaration_list",
    }
)  # fmt: skip


def _read_defines(tree: Tree, headers: tuple[bytes, ...]) -> _Defines:
    """Kept for the last few trees: a big file's hundreds of kernels read them once, not once each (the
    trees are compared by identity, never hashed; the headers, small, by their texts)."""
    with _DEFINES_LOCK:
        for kept, kept_headers, found in _DEFINES:
            if kept is tree and kept_headers == headers:
                return found
    included = tuple(define for data in headers for define in _header_defines(data))
    defines = included + tuple(_file_defines(tree))
    values: dict[str, int | None] = {}
    for name, value in defines:
        try:
            number = evaluate(value, {}) if value else None
        except (ExpressionError, ArithmeticError):
            number = None
        values[name] = number if name not in values and isinstance(number, int) else None
    found = (defines, {name: number for name, number in values.items() if number is not None})
    with _DEFINES_LOCK:
        _DEFINES.insert(0, (tree, headers, found))
        del _DEFINES[4:]
    return found


def _header_defines(data: bytes) -> tuple[tuple[str, str], ...]:
    return _HEADER_DEFINES.get_or_make(data, lambda: tuple(_file_defines(parse_cuda(data))))


def _file_defines(tree: Tree) -> Iterator[tuple[str, str]]:
    scopes = [iter(tree.root_node.children)]
    while scopes:
        node = next(scopes[-1], None)
        if node is None:
            scopes.pop()
            continue
        if node.type in _DECLARATION_SCOPES:
            scopes.append(iter(node.children))
        elif node.type == "preproc_def":
            # tree-sitter keeps a line comment in the macro's text (`#define M 1024 // rows`)
            value = _text(node.child_by_field_name("value")).split("//")[0].strip()
            yield _text(node.child_by_field_name("name")), value


def _fixed_summary(fixed: Mapping[str, int]) -> str:
    sizes = ", ".join(f"{name} = {value}" for name, value in fixed.items())
    return f"{sizes} as the file's #defines fix them, so verified at those sizes only"


def size_name_for(parameter: str, taken: set[str]) -> str:
    """The size an integer parameter stands for: its own name, unless a size cannot be called that (a
    Python keyword such as `in`, or a name expressions reserve such as `F` or `max`): then `in_size`."""
    if is_size_name(parameter):
        return parameter
    name = f"{parameter}_size"
    while name in taken:
        name += "_"
    return name


def _called_parameters(kernel: Kernel, body: Node, template_types: Mapping[str, str]) -> list[str]:
    """By-value parameters of a template type that the body calls (`out[i] = f(in[i])`): a functor or a
    lambda, which no default instantiation (float) can stand for."""
    candidates = {p.name for p in kernel.parameters if not p.is_pointer and p.type in template_types}
    called = {
        _text(function)
        for node in walk(body)
        if node.type == "call_expression"
        and (function := node.child_by_field_name("function")) is not None
        and _text(function) in candidates
    }
    return sorted(called)


def _flag(parameter: Parameter) -> ArgumentSpec:
    return ArgumentSpec(parameter.name, "scalar", "uint8", value=1)


def _argument(
    parameter: Parameter,
    dtype: str,
    analysis: BodyAnalysis,
    layout: Layout,
    size_of: Mapping[str, str],
    lanes: Mapping[str, int],
) -> ArgumentSpec:
    name = parameter.name
    if not parameter.is_pointer:
        if is_float(dtype):
            return ArgumentSpec(name, "scalar", dtype, init=FLOAT_SCALAR_INIT)
        return ArgumentSpec(name, "scalar", dtype, value=layout.values.get(name, size_of.get(name, name)))
    use = analysis.uses[name]
    role = role_of(parameter, use)
    touched = use.read or use.written
    shape = ("1",) if use.single_element and touched else layout.shape_of.get(name, layout.full_shape)
    if name in lanes:  # the indices count vectors; each is `lanes` components
        shape = (*shape, str(lanes[name]))
    init = BOOL_INIT if is_bool_pointer(parameter) else InitSpec.default(dtype)
    return ArgumentSpec(name, role, dtype, shape, init)  # type: ignore[arg-type]


# A bool holds 0 or 1; any other byte is undefined behaviour in the kernel that reads it.
BOOL_INIT = InitSpec("integers", low=0, high=2)


def is_bool_pointer(parameter: Parameter) -> bool:
    return " ".join(w for w in parameter.type.split() if w not in ("const", "volatile")) == "bool"


def role_of(parameter: Parameter, use: _Use) -> str:
    """Written and read is inout (y[i] += ...); written only, output; never written (or const), input."""
    if parameter.is_const or not use.written:
        return "input"
    return "inout" if use.read else "output"


def instantiation(kernel: Kernel) -> tuple[str | None, dict[str, str]]:
    """For a template: 'k<float>' with float for type parameters and defaults for the rest.
    An explicit specialisation is its own instantiation."""
    if kernel.template_arguments is not None and not kernel.template_parameters:
        return f"{kernel.qualified_name}<{kernel.template_arguments}>", {}
    if not kernel.template_parameters:
        return None, {}
    arguments, types = [], {}
    for parameter in kernel.template_parameters:
        value = parameter.default or ("float" if parameter.kind == "type" else None)
        if value is None:
            return None, {}
        arguments.append(value)
        if parameter.kind == "type":
            types[parameter.name] = value
    return f"{kernel.qualified_name}<{', '.join(arguments)}>", types


# --- the body -------------------------------------------------------------------------------------------


def _text(node: Node | None) -> str:
    return node.text.decode(errors="replace") if node is not None and node.text else ""


class _SubtreeIdentifiers:
    """The identifiers under a node, each subtree's found once: index expressions and comparisons nest in
    each other (`x[(int)x[...]]`, a comparison in every loop of a nest), and walking each anew was
    quadratic in the nesting. Post-order with an explicit stack, never recursion. `children`: each node's
    children by node id, where a walk already asked tree-sitter for them."""

    def __init__(self, children: dict[int, list[Node]] | None = None) -> None:
        self._known: dict[int, frozenset[str]] = {}
        self._children = children if children is not None else {}

    def __call__(self, node: Node | None) -> frozenset[str]:
        if node is None:
            return frozenset()
        known = self._known
        pending = [(node, False)]
        while pending:
            current, children_done = pending.pop()
            if current.id in known:
                continue
            children = self._children.get(current.id)
            if children is None:
                children = current.children
            if not children_done:
                pending.append((current, True))
                pending.extend((child, False) for child in children if child.id not in known)
                continue
            names = {_text(current)} if current.type == "identifier" else set()
            for child in children:
                names |= known[child.id]
            known[current.id] = frozenset(names)
        return known[node.id]


def _builtin_axis(node: Node) -> tuple[str, str] | None:
    """('blockIdx', 'x') for `blockIdx.x`."""
    if node.type != "field_expression":
        return None
    argument, name = node.child_by_field_name("argument"), node.child_by_field_name("field")
    if argument is None or name is None or argument.type != "identifier":
        return None
    return _text(argument), _text(name)


def _in_a_line_of_blocks(node: Node, parent_of: _ParentOf) -> bool:
    """Whether `node`, a `blockIdx.y`, numbers the grid's rows in `blockIdx.x + blockIdx.y * gridDim.x`
    (either way round, in parentheses or not)."""
    if _builtin_axis(node) != ("blockIdx", "y"):
        return False
    product = _enclosing(node, parent_of)
    if product is None or product.type != "binary_expression" or _operator(product) != "*":
        return False
    width = next((unwrapped(o) for n, o in _operands(product) if unwrapped(n) == node), None)
    total = _enclosing(product, parent_of)
    if width is None or _builtin_axis(width) != ("gridDim", "x") or total is None:
        return False
    if total.type != "binary_expression" or _operator(total) != "+":
        return False
    other = next((unwrapped(o) for n, o in _operands(total) if unwrapped(n) == product), None)
    return other is not None and _builtin_axis(other) == ("blockIdx", "x")


def _stride_terms(index: Node, bounded: set[str], names: set[str]) -> dict[str, str] | None:
    """{name: "stride" or "offset"} for an index that is a sum of `i * INC`, `OFF` and `i` terms alone (i
    a bounded global index, INC and OFF among `names`); None for any other index."""
    terms, found = _unit_terms(index), {}
    for term in terms if terms is not None else [()]:  # () is no term of either kind: None
        if len(term) == 1 and term[0] in names:
            found[term[0]] = "offset"
        elif len(term) == 2 and len(strides := set(term) & names) == 1 and set(term) - strides <= bounded:
            found[strides.pop()] = "stride"
        elif not (len(term) == 1 and term[0] in bounded):  # `i + OFF`: the index itself, a stride of one
            return None
    return found


def _pitch_term(index: Node, ys: set[str], xs: set[str], pitches: set[str]) -> str | None:
    """The pitch of an index that is `y * pitch + x` (in any order; the x term may be missing), y and x
    bounded indices: None for any other index."""
    terms, found = _unit_terms(index), []
    for term in terms if terms is not None else [()]:
        if len(term) == 2 and len(pitch := set(term) & pitches) == 1 and set(term) - pitch <= ys:
            found.append(pitch.pop())
        elif not (len(term) == 1 and term[0] in xs):
            return None
    return found[0] if len(found) == 1 else None


def _unit_terms(index: Node) -> list[Monomial] | None:
    """The products of names an index sums, each once (`y * pitch + x`: (pitch, y), (x,)); None for an
    index with a constant, a coefficient or anything but a sum of products."""
    form = linear_form(index)
    if form is None or any(coefficient != 1 for coefficient in form.values()):
        return None
    return list(form)


def _scaled_index(index: Node, bounded: set[str]) -> tuple[int, int] | None:
    """(a, b) for an index `a * g + b` (b possibly negative, a positive) of one global index g among
    `bounded` (those below the size), a and b integers."""
    form = linear_form(index.named_children[0] if index.type == "subscript_argument_list" else index)
    if form is None:
        return None
    scaled = [(term, a) for term, a in form.items() if term != ()]
    if len(scaled) != 1 or len(scaled[0][0]) != 1 or scaled[0][0][0] not in bounded or scaled[0][1] <= 0:
        return None
    return scaled[0][1], form.get((), 0)


def _enclosing(node: Node, parent_of: _ParentOf) -> Node | None:
    """The expression around `node`, through the parentheses around it."""
    return parent_of(_unparenthesize_up(node, parent_of))


def _operator(node: Node) -> str:
    operator = node.child_by_field_name("operator")
    return operator.type if operator is not None else ""


_LVALUE_WRAPPERS = frozenset(
    {"argument_list", "call_expression", "parenthesized_expression", "cast_expression",
     "subscript_expression", "field_expression", "pointer_expression", "template_function"}
)  # fmt: skip


_ParentOf = Callable[[Node], "Node | None"]


def _assigned_through(element: Node, parent_of: _ParentOf) -> Node | None:
    """The assignment whose left side wraps `element` in macro calls, casts and member accesses, if any."""
    node = element
    # A bounded climb: a store goes through a few wrappers, and climbing from every element of a deep
    # nest of casts and subscripts (`x[(int)x[...]]`) to its top was quadratic in the nesting.
    for _ in range(_MOST_LVALUE_WRAPPERS):
        above = parent_of(node)
        if above is None or above.type not in _LVALUE_WRAPPERS:
            break
        node = above
    else:
        return None
    parent = parent_of(node)
    if (
        parent is not None
        and parent.type == "assignment_expression"
        and parent.child_by_field_name("left") == node
    ):
        return parent
    return None


def unwrapped(node: Node) -> Node:
    """Without parentheses and casts around it."""
    while node.type in ("parenthesized_expression", "cast_expression"):
        cast = node.type == "cast_expression"
        inner = node.child_by_field_name("value") if cast else node.named_children[0]
        if inner is None:
            break
        node = inner
    return node


def _unparenthesize_up(node: Node, parent_of: _ParentOf) -> Node:
    while (above := parent_of(node)) is not None and above.type == "parenthesized_expression":
        node = above
    return node


class _Body:
    """A body's nodes in source order (`walk`'s), each one's children and parent, from one walk: each
    question of the analysis visits the list instead of walking the tree again (six walks, each asking
    tree-sitter for every node's children anew, were most of inferring a spec). Parents are looked up here
    because tree-sitter finds `Node.parent` by descending from the root, so each costs the node's depth,
    and climbing from deep in a generated expression (a sum of thousands of terms, a nest of conditionals)
    was quadratic in its depth."""

    def __init__(self, body: Node) -> None:
        self.nodes: list[Node] = []
        self.children: dict[int, list[Node]] = {}
        self._parent: dict[int, Node] = {}
        stack = [body]
        while stack:
            current = stack.pop()
            self.nodes.append(current)
            children = self.children[current.id] = current.children
            for child in children:
                self._parent[child.id] = current
            stack.extend(reversed(children))

    def parent(self, node: Node) -> Node | None:
        """The parent, None at the body (what surrounds the body is no concern of its analysis)."""
        return self._parent.get(node.id)


def _compared_pairs(nodes: list[Node]) -> Iterator[tuple[Node, Node]]:
    """(one side, the other) of every comparison among `nodes`, both ways round."""
    for node in nodes:
        operator = node.child_by_field_name("operator") if node.type == "binary_expression" else None
        if operator is None or _text(operator) not in _COMPARISONS:
            continue
        yield from _operands(node)


_MULTIPLIES = frozenset({"__mul24", "__umul24"})  # `__mul24(blockIdx.x, 16)`: 24-bit products


def _product_operands(node: Node) -> Iterator[tuple[Node, Node]]:
    """(one factor, the other) of `a * b` or `__mul24(a, b)`, both ways round; nothing for other nodes."""
    if node.type == "binary_expression" and _text(node.child_by_field_name("operator")) == "*":
        yield from _operands(node)
    elif node.type == "call_expression" and _text(node.child_by_field_name("function")) in _MULTIPLIES:
        arguments = node.child_by_field_name("arguments")
        factors = [c for c in arguments.named_children if c.type != "comment"] if arguments else []
        if len(factors) == 2:
            yield factors[0], factors[1]
            yield factors[1], factors[0]


def _operands(node: Node) -> Iterator[tuple[Node, Node]]:
    """(one operand, the other) of a binary expression, both ways round."""
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if left is not None and right is not None:
        yield left, right
        yield right, left


class BodyAnalysis:
    """Facts about a kernel body that the patterns need."""

    def __init__(
        self, body: Node, pointers: Sequence[str], defines: Callable[[], Mapping[str, int]] = dict
    ) -> None:
        self._defines = defines  # the file's integer #defines (a TILE), read only if a tile asks
        walked = _Body(body)
        nodes = walked.nodes
        self._identifiers = _SubtreeIdentifiers(walked.children)
        self._parent = walked.parent
        # A block number made one line of the grid (`blockIdx.x + blockIdx.y * gridDim.x`, darknet's and
        # Caffe's way past the x dimension's old limit) indexes in 1-D: a 1-D grid runs it the same.
        self.uses_y = any(
            (axis := _builtin_axis(node)) is not None
            and axis[0] in ("threadIdx", "blockIdx")
            and axis[1] in ("y", "z")
            and not _in_a_line_of_blocks(node, walked.parent)
            for node in nodes
        )
        self.uses_z = any(
            (axis := _builtin_axis(node)) is not None
            and axis[0] in ("threadIdx", "blockIdx")
            and axis[1] == "z"
            for node in nodes
        )
        self.definitions = self._definitions(nodes)
        # name -> the identifiers of every value assigned to it, for _expanded (once, not per question)
        self._defined_from: dict[str, set[str]] = {}
        for name, value in self.definitions:
            self._defined_from.setdefault(name, set()).update(self._identifiers(value))
        # a value read from memory through an index (`val = input[i + b * n]`, and what is computed from
        # it) is data the thread works on, not a place in the range it covers
        self._data = self._read_from_memory()
        self.global_indices = {name for name, value in self.definitions if self._is_global_index(value)}
        self.block_indices = {
            name
            for name, value in self.definitions
            if {"blockIdx"} <= self._roots(value) and "threadIdx" not in self._roots(value)
        }
        self.compared_with_global_index = self._compared(nodes)
        self._loop_bounds = self._bounds_of_loops(nodes)
        self.loop_variables = set(self._loop_bounds)
        # each variable -> the identifiers it is compared with (a loop's bound, a bounds check's size)
        self.variable_bounds = self._bounds_of_indices(nodes)
        for name, bounds in self._loop_bounds.items():
            self.variable_bounds.setdefault(name, set()).update(bounds)
        # axis -> the global indices along it (`row = blockIdx.y * blockDim.y + threadIdx.y` is along y)
        self.index_axes: dict[str, set[str]] = {}
        values: dict[str, list[Node]] = {}
        for name, value in self.definitions:
            values.setdefault(name, []).append(value)
        for name, value in self.definitions:
            if name in self.global_indices:
                # through the locals it reads too: `Row = by * TILE + ty` with `by = blockIdx.y`
                read = [
                    value,
                    *(v for local in self._expanded(self._identifiers(value)) for v in values.get(local, ())),
                ]
                for axis in {
                    a for v in read for n in walk(v) if (found := _builtin_axis(n)) for a in found[1:]
                }:
                    self.index_axes.setdefault(axis, set()).add(name)
        self.loop_bound_names = {name for bounds in self._loop_bounds.values() for name in bounds}
        self.sums_in_loops = self._sums_in_loops(nodes, set(pointers))
        self._nodes = nodes
        self.aliases = self._aliases(nodes, pointers)
        self.uses = {name: _Use() for name in pointers}
        for node in nodes:
            if node.type == "identifier" and (owner := self.aliases.get(_text(node))):
                self._record(node, self.uses[owner])

    def _read_from_memory(self) -> set[str]:
        """The locals some definition gives a value read from an array (`val = input[k]`), or computed
        from such a local (`x = val * 2`)."""
        data: set[str] = set()
        while True:
            more = {
                name
                for name, value in self.definitions
                if name not in data
                and (
                    any(node.type == "subscript_expression" for node in walk(value))
                    or self._identifiers(value) & data
                )
            }
            if not more:
                return data
            data |= more

    def _sums_in_loops(self, nodes: list[Node], pointers: set[str]) -> set[str] | None:
        """Where a floating-point local is summed in a loop (`acc += a[k] * b[k]`, `s = s + x[i]`), or one
        element of a buffer is (`mean[i] += x[j*n + i]`, darknet's spelling: an index the loops do not
        move): the identifiers the enclosing loops' conditions compare their variables with (each output
        the end of a sum over them, whose rounding any rewrite that reorders it changes); None without such
        a sum. An integer buffer's tolerance is exact whatever this says."""
        floats = set()
        for node in nodes:
            kind = node.child_by_field_name("type") if node.type == "declaration" else None
            if kind is not None and is_float(dtype_of_c_type(_text(kind)) or ""):
                for declarator in node.children_by_field_name("declarator"):
                    if declarator.type == "init_declarator":
                        declarator = declarator.child_by_field_name("declarator") or declarator
                    if declarator.type == "identifier":
                        floats.add(_text(declarator))
        found: set[str] | None = None
        for node in nodes:
            if node.type != "assignment_expression":
                continue
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if (
                left is None
                or right is None
                or not (_text(left) in floats or self._element_kept_through_loops(left, pointers))
            ):
                continue
            operator = _operator(node)
            summed = operator in ("+=", "-=") or (
                operator == "=" and right.type == "binary_expression" and _operator(right) in ("+", "-")
                and _text(left) in self._identifiers(right)
            )  # fmt: skip
            loops = self._enclosing_loops(node) if summed else []
            if loops:
                found = found or set()
                for loop in loops:
                    condition = loop.child_by_field_name("condition")
                    found.update(self._identifiers(condition) if condition is not None else ())
        return found

    def _element_kept_through_loops(self, left: Node, pointers: set[str]) -> bool:
        """`buffer[index]` with an index no enclosing loop's variable reaches (through the locals too)."""
        base = left.child_by_field_name("argument") if left.type == "subscript_expression" else None
        index = left.child_by_field_name("indices") if base is not None else None
        if base is None or index is None or _text(base) not in pointers:
            return False
        moved = {name for loop in self._enclosing_loops(left) for name in self._loop_variables(loop)}
        return bool(moved) and not (self._expanded(self._identifiers(index)) & moved)

    def _loop_variables(self, loop: Node) -> set[str]:
        """A loop's counter: what its condition compares (left side), else every name in the condition
        (a bound among them only makes the check stricter)."""
        condition = loop.child_by_field_name("condition")
        if condition is None:
            return set()
        left = condition.child_by_field_name("left") if condition.type == "binary_expression" else None
        if left is not None and unwrapped(left).type == "identifier":
            return {_text(unwrapped(left))}
        return self._identifiers(condition)

    def _enclosing_loops(self, node: Node) -> list[Node]:
        loops, parent = [], self._parent(node)
        while parent is not None:
            if parent.type in ("for_statement", "while_statement", "do_statement"):
                loops.append(parent)
            parent = self._parent(parent)
        return loops

    def _bounds_of_indices(self, nodes: list[Node]) -> dict[str, set[str]]:
        """Each global index -> the identifiers a comparison puts it against (`row < M`)."""
        bounds: dict[str, set[str]] = {}
        for side, other in _compared_pairs(nodes):
            if _text(unwrapped(side)) in self.global_indices:
                bounds.setdefault(_text(unwrapped(side)), set()).update(self._identifiers(other))
        return bounds

    def loops_from_zero_over(self, names: set[str]) -> bool:
        """Whether a `for` loop runs from a start no thread index sets up to one of `names` (`for (j = 0;
        j < n; j++)`, each thread all of n), unlike a grid-stride loop, which starts at the thread's index."""
        threads = {"threadIdx", "blockIdx"} | set(self.global_indices)
        for node in self._nodes:
            if node.type != "for_statement":
                continue
            condition = node.child_by_field_name("condition")
            start = node.child_by_field_name("initializer")
            if condition is None or not self._identifiers(condition) & names:
                continue
            counter = condition.child_by_field_name("left") if condition.type == "binary_expression" else None
            counted = self._expanded(self._identifiers(counter)) if counter is not None else set()
            started = self._expanded(self._identifiers(start)) if start is not None else set()
            if not (started | counted) & threads:  # `for (; i < n; i += stride)` goes on from the index
                return True
        return False

    def _bounds_of_loops(self, nodes: list[Node]) -> dict[str, set[str]]:
        """Each for loop's variable -> the identifiers its condition compares it with (`j < cols`)."""
        bounds: dict[str, set[str]] = {}
        for node in nodes:
            if node.type != "for_statement":
                continue
            condition = node.child_by_field_name("condition")
            if condition is None or condition.type != "binary_expression":
                continue
            left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
            if left is not None and right is not None and unwrapped(left).type == "identifier":
                bounds.setdefault(_text(unwrapped(left)), set()).update(self._identifiers(right))
        return bounds

    @staticmethod
    def _definitions(nodes: list[Node]) -> list[tuple[str, Node]]:
        """Every `name = value` in the body (declarations and assignments to plain names)."""
        found = []
        for node in nodes:
            if node.type == "init_declarator":
                declarator, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
                name = (
                    next((n for n in walk(declarator) if n.type == "identifier"), None)
                    if declarator
                    else None
                )
                if name is not None and value is not None:
                    found.append((_text(name), value))
            elif node.type == "assignment_expression":
                left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
                if left is not None and right is not None and left.type == "identifier":
                    found.append((_text(left), right))
        return found

    def _roots(self, node: Node) -> set[str]:
        """The identifiers `node` is computed from, through local definitions (tid = threadIdx.x)."""
        return self._expanded(self._identifiers(node))

    def _is_global_index(self, node: Node) -> bool:
        """blockIdx.x * blockDim.x + threadIdx.x, in any spelling: it depends on both indices, and on no
        value read from memory."""
        if any(n.type == "subscript_expression" for n in walk(node)) or self._identifiers(node) & self._data:
            return False
        return {"blockIdx", "threadIdx"} <= self._roots(node)

    def _expanded(self, names: Iterable[str], depth: int = 4) -> set[str]:
        """`names` plus, transitively, the identifiers of their definitions (offset = row * cols)."""
        result = set(names)
        for _ in range(depth):
            more = {i for name in result for i in self._defined_from.get(name, ())}
            if more <= result:
                break
            result |= more
        return result

    def _compared(self, nodes: list[Node]) -> set[str]:
        """Identifiers compared with a global thread index (`if (row < rows)`, `i < rows * cols`)."""
        compared: set[str] = set()
        for side, other in _compared_pairs(nodes):
            if self._is_global_index(side) or self._identifiers(side) & self.global_indices:
                compared |= self._expanded(self._identifiers(other)) - self.global_indices
        return compared

    @cached_property
    def a_block_a_row(self) -> bool:
        """Whether blockIdx.y alone numbers the rows (`const int row = blockIdx.y;`): read, never scaled
        (`blockIdx.y * TILE`), and no threadIdx.y anywhere. Then a block covers one row: taller blocks
        would have their threads repeat a row and the grid, counted in them, leave rows out."""
        read = False
        for node in self._nodes:
            axis = _builtin_axis(node)
            if axis == ("threadIdx", "y"):
                return False
            if axis == ("blockIdx", "y"):
                read = True
                outer = node
                while outer.parent is not None and outer.parent.type in (
                    "parenthesized_expression",
                    "cast_expression",
                ):
                    outer = outer.parent
                if outer.parent is not None and any(True for _ in _product_operands(outer.parent)):
                    return False
        return read

    def tile(self, indices: set[str]) -> int | None:
        """What every definition of these global indices steps blocks by: BLOCK_DIM for blockDim
        (`blockIdx.x * blockDim.x + threadIdx.x`), the number T for `blockIdx.x * TILE + threadIdx.x` with
        TILE one integer constant (a #define, a literal) for them all and T x T a block (at most 1024
        threads); None for anything else. Any block covers indices that step blocks by nothing at all."""
        steps = set()
        for name, value in self.definitions:
            if name not in indices & self.global_indices:
                continue
            if not any(self._block_number(node) for node in walk(value)):
                continue  # built from other indices (`p = y * width + x`) or sizes (`col += nx`): theirs
            numbers = self._block_steps(value)
            if len(numbers) != 1 or None in numbers:
                return None
            steps |= numbers
        if len(steps) > 1:
            return None
        (step,) = steps or {BLOCK_DIM}
        if step == BLOCK_DIM:
            return step
        return step if 1 <= step * step <= 1024 and not self.strides_a_tile(step) else None

    def axis_steps(self) -> dict[str, int | None]:
        """Per axis the global indices run along, what their definitions step blocks by: BLOCK_DIM, one
        integer constant (`blockIdx.x * SUBTRACT_W + threadIdx.x`, `blockIdx.y * 16 + threadIdx.y`), or
        None for anything else (several, or a step this cannot read)."""
        steps: dict[str, int | None] = {}
        for axis, indices in self.index_axes.items():
            found: set[int | None] = set()
            for name, value in self.definitions:
                if name in indices and any(self._block_number(node) for node in walk(value)):
                    found |= self._block_steps(value)
            if found:
                steps[axis] = found.pop() if len(found) == 1 else None
        return steps

    def _block_steps(self, value: Node) -> set[int | None]:
        """What an index's definition steps block numbers by: {BLOCK_DIM} when it reads blockDim, else the
        constants multiplying block numbers (None for a factor that is no constant, or for none at all)."""
        if "blockDim" in self._roots(value):
            return {BLOCK_DIM}
        return {
            self._constant(_text(unwrapped(other)))
            for node in walk(value)
            for side, other in _product_operands(node)
            if self._block_number(unwrapped(side))
        } or {None}

    def strides_a_tile(self, tile: int) -> bool:
        """Whether a loop steps through the tile by a smaller constant (`for (j = 0; j < TILE; j +=
        BLOCK_ROWS)`): then each thread covers several rows, the block is TILE x BLOCK_ROWS, not square."""
        for node in self._nodes:
            update = node.child_by_field_name("update") if node.type == "for_statement" else None
            if update is None or update.type != "assignment_expression":
                continue
            right, condition = update.child_by_field_name("right"), node.child_by_field_name("condition")
            step = self._constant(_text(unwrapped(right))) if right is not None else None
            bound = condition.child_by_field_name("right") if condition is not None else None
            to_tile = bound is not None and self._constant(_text(unwrapped(bound))) == tile
            stepped = _text(update.child_by_field_name("operator")) == "+="
            if stepped and to_tile and step is not None and 1 < step < tile and self._offsets_a_row(node):
                return True
        return False

    def _offsets_a_row(self, loop: Node) -> bool:
        """Whether the loop's variable is added to a thread's row (`threadIdx.y + j`, `y + j`)."""
        variable = next(
            (_text(n) for n in walk(loop.child_by_field_name("initializer")) if n.type == "identifier"), ""
        )
        rows = self.global_indices | {"threadIdx.y"}
        for node in walk(loop):
            if node.type == "binary_expression" and _text(node.child_by_field_name("operator")) == "+":
                sides = {_text(unwrapped(side)) for side, _ in _operands(node)}
                if variable in sides and sides & rows:
                    return True
        return False

    def _block_number(self, node: Node) -> bool:
        """`blockIdx.y`, or a local holding it alone (`int by = blockIdx.y;`)."""
        written = _text(node)
        if written.startswith("blockIdx."):
            return True
        return node.type == "identifier" and self._defined_from.get(written) == {"blockIdx"}

    def _constant(self, text: str) -> int | None:
        defined = self._defines()
        if text in defined:
            return defined[text]
        try:
            return int(text.rstrip("uUlL"), 0)
        except ValueError:
            return None

    def only_along(self, pointer: str, size: str, sizes: set[str]) -> bool:
        """Whether every index of the pointer reads only loop variables bounded by `size` (`for (int j = 0;
        j < cols; ...) ... x[j]`) and sizes, nothing the threads are told apart by."""
        read = self.uses[pointer].mentions - sizes
        bounded = {name for name, bounds in self._loop_bounds.items() if size in bounds}
        indices = self.global_indices | self.block_indices | {"threadIdx", "blockIdx"}
        return bool(read) and read <= bounded and not self._expanded(read) & indices

    def extent_1d(self, pointer: str, n: str) -> str | None:
        """The elements a 1-D kernel over `n` reaches in the pointer where its indices are the global index
        scaled and moved by constants (`2 * i + 1`: `2 * n`; `i + 1`: `n + 1`); None where `n` covers them
        or the indices are otherwise (left to the layout's shape)."""
        use = self.uses[pointer]
        if use.moved or any(name != pointer for name, _ in use.subscripts):
            return None
        bounded = {g for g in self.global_indices if n in self.variable_bounds.get(g, ())}
        scales, beyond = [1], [0]
        for _, index in use.subscripts:
            form = _scaled_index(index, bounded)
            if form is None:
                if self._roots(index) & (self.global_indices | {"threadIdx", "blockIdx"}):
                    return None  # moves with the thread some other way: not read here
                continue
            scale, offset = form
            scales.append(scale)
            beyond.append(offset - scale + 1)  # past a * n: the last thread's a * (n - 1) + b, plus one
        scale, extra = max(scales), max(beyond)
        if (scale, extra) == (1, 0):
            return None
        times = f"{scale} * {n}" if scale > 1 else n
        return f"{times} + {extra}" if extra > 0 else times

    def strides_and_offsets(self, names: Sequence[str]) -> _Strided | None:
        """For a 1-D kernel whose one size bounds the global index and whose other integer parameters are
        only strides and offsets of it in its buffers' indices (`X[OFFX + i * INCX]`); None for any other
        kernel, or where there are no such parameters."""
        bounds = [name for name in names if name in self.compared_with_global_index]
        others = {name for name in names if name not in bounds}
        if self.uses_y or not others or len(bounds) != 1:
            return None
        bounded = {g for g in self.global_indices if bounds[0] in self.variable_bounds.get(g, ())}
        roles: dict[str, set[str]] = {name: set() for name in others}
        strides: dict[str, set[str]] = {}  # each buffer's strides
        for node in self._nodes:
            if node.type == "identifier" and (name := _text(node)) in roles:
                index = self._index_holding(node)
                subscript = self._parent(self._parent(index)) if index is not None else None
                array = subscript.child_by_field_name("argument") if subscript is not None else None
                found = _stride_terms(index, bounded, others) if index is not None else None
                if found is None or name not in found or array is None or _text(array) not in self.uses:
                    return None  # not all in a parameter's own index (an alias may start elsewhere)
                roles[name].add(found[name])
                strides.setdefault(_text(array), set()).update(n for n, r in found.items() if r == "stride")
        if any(len(found) != 1 for found in roles.values()) or any(len(s) > 1 for s in strides.values()):
            return None  # unused, a stride here and an offset there, or a buffer read with two strides
        offsets = sorted(name for name, found in roles.items() if found == {"offset"})
        by_array = {array: found.pop() for array, found in strides.items() if found}
        return _Strided(bounds[0], sorted(set(by_array.values())), offsets, by_array)

    def pitched(self, names: Sequence[str]) -> _Pitched | None:
        """For a kernel on 2-D blocks whose y and x indices are compared with one size each and whose other
        integer parameters only scale the y index in its buffers' subscripts (`dst[y * pitch + x]`, also
        through a local `int p = y * pitch + x;` used only as an index): the rows, cols and pitches."""
        if not self.uses_y or len(names) < 3:
            return None
        along: dict[str, tuple[str, set[str]]] = {}
        for axis in ("y", "x"):
            variables = self.index_axes.get(axis, set())
            sizes = {b for v in variables for b in self.variable_bounds.get(v, ()) if b in names}
            if len(sizes) != 1:
                return None
            (size,) = sizes
            along[axis] = size, {v for v in variables if size in self.variable_bounds.get(v, ())}
        (rows, ys), (cols, xs) = along["y"], along["x"]
        pitches = set(names) - {rows, cols}
        if rows == cols or not pitches:
            return None
        pitch_of: dict[str, str] = {}
        for node in self._nodes:
            if node.type != "identifier" or _text(node) not in pitches:
                continue
            index = self._index_holding(node, sums_only=False)
            arrays = self._indexed_by(index) if index is not None else None
            pitch = _pitch_term(index, ys, xs, pitches) if index is not None else None
            if not arrays or pitch is None or any(pitch_of.setdefault(a, pitch) != pitch for a in arrays):
                return None
        if set(pitch_of.values()) != pitches or not set(pitch_of) <= set(self.uses):
            return None
        return _Pitched(rows, cols, pitch_of)

    def _indexed_by(self, index: Node) -> list[str] | None:
        """The buffers `index` is the whole subscript of: directly, or as the value of a local declared
        once (`int p = y * pitch + x;`) that every use of takes as a whole index; None otherwise."""
        parent = self._enclosing(index)
        if parent is not None and parent.type == "subscript_argument_list":
            subscript = self._parent(parent)
            array = subscript.child_by_field_name("argument") if subscript is not None else None
            return [_text(array)] if array is not None else None
        if parent is None or parent.type != "init_declarator":
            return None
        declarator = parent.child_by_field_name("declarator")
        local = _text(declarator) if declarator is not None and declarator.type == "identifier" else None
        if local is None or [name for name, _ in self.definitions].count(local) != 1:
            return None
        arrays = []
        for node in self._nodes:
            if node.type != "identifier" or _text(node) != local or node == declarator:
                continue
            holder = self._enclosing(node)
            subscript = self._parent(holder) if holder is not None else None
            if holder is None or holder.type != "subscript_argument_list" or subscript is None:
                return None
            argument = subscript.child_by_field_name("argument")
            if argument is None:
                return None
            arrays.append(_text(argument))
        return arrays

    def _index_holding(self, node: Node, sums_only: bool = True) -> Node | None:
        """The sum the identifier is a term of, or a factor of a term of: a subscript's index (or, not
        `sums_only`, any sum, as a local's value)."""
        parent = self._enclosing(node)
        while parent is not None and parent.type == "binary_expression" and _operator(parent) in ("+", "*"):
            node, parent = parent, self._enclosing(parent)
        if parent is not None and parent.type == "subscript_argument_list":
            return node
        return node if not sums_only and parent is not None and parent.type == "init_declarator" else None

    def _enclosing(self, node: Node) -> Node | None:
        return _enclosing(node, self._parent)

    def reach(self, pointer: str) -> set[str]:
        """What the pointer's indices read, with the bounds of the loops whose variables they read."""
        mentions = self.uses[pointer].mentions
        bounds = (self._loop_bounds.get(name, set()) for name in mentions)
        return mentions | self._expanded(set().union(*bounds))

    def row_strides(self, sizes: Iterable[str]) -> set[str]:
        """The sizes that scale an index (`row * K + col`, `x + t * emb_size`): a row's length, whatever its
        name. A product of sizes alone (`n * k` in a bound) says nothing about which is the row."""
        sizes = set(sizes)
        found = set()
        for node in self._nodes:
            if node.type != "binary_expression" or _text(node.child_by_field_name("operator")) != "*":
                continue
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if left is None or right is None:
                continue
            for factor, other in ((left, right), (right, left)):
                name = _text(unwrapped(factor))
                if name in sizes and not self._identifiers(other) & sizes:
                    found.add(name)
        return found

    def _aliases(self, nodes: list[Node], pointers: Sequence[str]) -> dict[str, str]:
        """Local pointers derived from parameters (`const float* row = x + r * cols`) -> the parameter."""
        aliases = {name: name for name in pointers}
        declarations = []
        for node in nodes:
            declarator = node.child_by_field_name("declarator") if node.type == "init_declarator" else None
            value = node.child_by_field_name("value") if declarator is not None else None
            if declarator is not None and declarator.type == "pointer_declarator" and value is not None:
                identifier = next((n for n in walk(declarator) if n.type == "identifier"), None)
                if identifier is not None:
                    declarations.append((_text(identifier), value))
        for _ in range(2):  # an alias of an alias
            for name, value in declarations:
                owners = {aliases[i] for i in self._identifiers(value) if i in aliases}
                if len(owners) == 1 and name not in aliases:
                    aliases[name] = owners.pop()
        return aliases

    def _record(self, identifier: Node, use: _Use) -> None:
        """Classify one occurrence of a pointer: which element it reaches and whether it reads or writes."""
        parent_of = self._parent
        node = _unparenthesize_up(identifier, parent_of)
        parent = parent_of(node)
        if parent is None:
            return
        if parent.type == "init_declarator" and parent.child_by_field_name("value") == node:
            return  # `float* acc = out;`: what the alias does is recorded where it is used
        if parent.type == "subscript_expression" and parent.child_by_field_name("argument") == node:
            indices = parent.child_by_field_name("indices")
            # Only a short index can be `[0]`: the text of a long one (nested indices) is not copied.
            short = indices is not None and indices.end_byte - indices.start_byte <= _SHORT_INDEX_BYTES
            index_text = _text(indices).strip("[] ") if short else "long"
            use.mentions |= self._expanded(self._identifiers(indices))
            if indices is not None:
                use.subscripts.append((_text(identifier), indices))
            if index_text != "0":
                use.single_element = False
            self._classify(_unparenthesize_up(parent, parent_of), use)
            return
        # Pointer arithmetic (`x + i`, `*(y + i)`) or the pointer itself (`*y`, `atomicAdd(y, v)`).
        top = node
        while (above := parent_of(top)) is not None and above.type in (
            "binary_expression",
            "parenthesized_expression",
        ):
            top = above
        if top is not node:
            use.single_element = False
            use.moved = True
            use.mentions |= self._expanded(self._identifiers(top))
        holder = parent_of(top)
        if holder is not None and holder.type == "pointer_expression" and _text(holder.child(0)) == "*":
            self._classify(_unparenthesize_up(holder, parent_of), use)
        elif holder is not None and holder.type == "argument_list":
            use.read = use.written = True  # atomicAdd(y, v), or a device function that may do anything
            call = parent_of(holder)
            function = call.child_by_field_name("function") if call is not None else None
            use.passed = use.passed or not _text(function).startswith("atomic")
        elif holder is not None and holder.type in ("binary_expression", "condition_clause"):
            pass  # `if (y != nullptr)`: compares the pointer, touches no element

    def _classify(self, element: Node, use: _Use) -> None:
        """An element access `p[i]` / `*p`: written by `=`, read and written by `+=`, `++`, `&` or atomics."""
        parent = self._parent(element)
        if parent is None:
            use.read = True
        elif parent.type == "assignment_expression" and parent.child_by_field_name("left") == element:
            use.written = True
            operator = parent.child_by_field_name("operator")
            use.read = use.read or _text(operator) != "="
        elif parent.type == "update_expression" or (
            parent.type == "pointer_expression" and _text(parent.child(0)) == "&"
        ):
            use.read = use.written = True
        elif (assignment := _assigned_through(element, self._parent)) is not None:
            # `FLOAT4(y[i]) = v`, `reinterpret_cast<float4*>(y + i)[0] = v`: a store through a macro or cast.
            use.written = True
            use.read = use.read or _text(assignment.child_by_field_name("operator")) != "="
        else:
            use.read = True
