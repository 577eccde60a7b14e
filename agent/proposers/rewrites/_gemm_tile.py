"""The kernels `contraction` writes for a contraction it recognised: the row factor and the col factor
tiled through shared memory, each thread keeping a block of outputs in registers, and the user's
statements after the loop run once per output.

`scalar_tiles`, the first: tiles of depth 16 loaded one element per load, the epilogue run straight from
the registers, a thread's outputs four neighbouring columns at a time.

`vector_tiles`, the layout of the well-known "SGEMM 128x128x8, 256 threads" kernels: tiles of depth 8 (16
for the 64x64 tiles of small outputs: half the barriers where a thread has only 16 outputs to sum),
each thread loading four neighbouring elements as one float4 where the factor's loads are contiguous
(with a per-group check of the bounds and the alignment, so that any sizes and offsets work), both tiles
stored k-major so that a thread's 4 rows and 4 columns are one float4 each, the next tile loaded into
registers while the current one is multiplied. A tile where no output reads the sum (below a
covariance's diagonal, above causal attention's) skips the loop. Where the sum is symmetric (A Aᵀ), a
square tile below the diagonal returns at once and the one above it runs the user's statements at both
places. The finished outputs leave through
shared memory, a 64-row slab at a time (32 rows of a 256-wide tile), so that a warp runs the user's
statements on 32 neighbouring outputs of one row: its loads and stores of the output are coalesced,
whatever the statements are.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import SHARED_LIMIT, KernelTree, build_candidate, local_names
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget

THREADS = 256
VECTOR_DEPTH = 8  # the k extent of `vector_tiles`' tiles: 4 KiB a side at 128 rows, one float4 a thread
# `vector_tiles` passes its outputs through shared memory a 64-row slab at a time where that fits the
# static 48 KiB (half of a thread's sums are then no longer live while the epilogue runs), else 32 rows.
STAGED_BYTES = 36 * 1024


@dataclass(frozen=True)
class Shape:
    """One candidate: the template, the tile in quads of 64 rows and 64 columns, the compiler's flags."""

    vector: bool  # `vector_tiles`, else `scalar_tiles`
    quads_m: int
    quads_n: int
    flags: tuple[str, ...] = ()
    # `vector_tiles` only, 64-row tiles only: groups of THREADS threads a block, each summing every
    # `splits`-th tile of k into its own registers, added up through shared memory before the epilogue.
    # An output of few tiles (SYRK's 1024 x 1024, a convolution's 64 channels) then has as many warps an
    # SM as a large one, without a second kernel or a buffer for partial sums.
    splits: int = 1
    # `vector_tiles` only: the tiles' extent along k. 16 halves the barriers and the loop's overhead a
    # multiply-add; both double-buffered tiles must then still fit the static 48 KiB.
    depth: int = VECTOR_DEPTH

    def __post_init__(self) -> None:
        # the groups' partial sums pass through `staged`: it must hold the whole tile
        if self.splits > 1 and not (self.vector and staged_rows(self.tile[1]) == self.tile[0]):
            raise ValueError("a split sum needs a tile that vector_tiles' staging buffer holds whole")
        tile_m, tile_n = self.tile
        if self.splits * 2 * self.depth * (tile_m + tile_n + 8) * 4 > SHARED_LIMIT:
            raise ValueError("the double-buffered tiles of this depth exceed the static 48 KiB")

    @property
    def tile(self) -> tuple[int, int]:
        return 64 * self.quads_m, 64 * self.quads_n

    @property
    def threads(self) -> int:
        return THREADS * self.splits


def staged_rows(tile_n: int) -> int:
    """The rows of a tile `vector_tiles` passes through shared memory at once: 64 where they fit the
    static 48 KiB (half of a thread's sums are then no longer live while the epilogue runs), else 32."""
    return 64 if 64 * (tile_n + 4) * 4 <= STAGED_BYTES else 32


# 64x64 tiles with the sum split between 2 and 4 groups of threads (512 and 1024 threads a block, 64
# registers a thread so that a 512-thread block fits twice an SM): for outputs of few tiles. On an H100
# SYRK's 256 blocks of 64x64 kept a quarter of the warps an SM holds busy (ncu: 24% achieved occupancy),
# conv2d's 392 filled 0.74 of a wave.
SPLIT_TILES: tuple[Shape, ...] = (
    Shape(vector=True, quads_m=1, quads_n=1, splits=2, flags=("-maxrregcount=64",)),
    Shape(vector=True, quads_m=1, quads_n=1, splits=4, flags=("-maxrregcount=64",)),
)


def allows(target: KernelTarget, threads: int) -> bool:
    """Whether the kernel's own `__launch_bounds__` allows blocks of `threads` (its body is replaced, its
    signature kept): not where the bound is no number."""
    bounds = target.kernel.launch_bounds
    first = bounds.split(",")[0].strip() if bounds else ""
    return not first or (first.isdigit() and int(first) >= threads)


def fitting(target: KernelTarget, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    """The shapes whose blocks the kernel's own `__launch_bounds__` allows."""
    return tuple(s for s in shapes if allows(target, s.threads))


@dataclass(frozen=True)
class Factor:
    """One side of the product as a tile loads it: the row factor A(row, k) or the col factor B(k, col)."""

    at: str  # with its two indices as `{r}` and `{c}`: (row, k) for the row factor, (k, col) for the col
    k_fast: bool  # it walks memory contiguously along k (else along its output index)
    # Its loads that are contiguous along that index, as `{v0}`, `{v1}`, ... in `vector_at`, and their
    # addresses at (`{r}`, `{c}`): four neighbouring elements are then one float4 of each. None where a
    # load moves otherwise: the tile is loaded one element at a time.
    vector_at: str | None = None
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Contraction:
    """What the templates need of a recognised contraction, in the kernel's own spelling."""

    k: str
    rows: str  # bounds in kernel terms
    cols: str
    depth: str
    rows_spec: str  # the same in the spec's terms, for the grid
    cols_spec: str
    a: Factor  # the row factor, as `vector_tiles` loads it
    b: Factor  # the col factor
    # The factors as `scalar_tiles` evaluates them: the same, but for a flat index's pieces of the batch,
    # which `a` and `b` compute once for the block instead of dividing them out at each element.
    scalar_at: tuple[str, str]
    accumulator: str  # the local that holds the sum in the epilogue
    before: str  # declarations before the bounds check (other than the indices), re-run per output
    inside: str  # the statements under the bounds check, with the sum in `accumulator`
    # `inside` with the pieces of a flat index declared from the output's place (`int t2 = out_col;`)
    # instead of divided out of it again: the same values under the bounds check, without the divisions
    # (without a flat index, `inside` itself).
    inside_placed: str
    condition: str  # the bounds check, true for an output that is written
    place: tuple[str, str]  # the names the epilogue gives an output's row and col
    batch: bool  # blockIdx.z is a batch index, kept
    batch_spec: str | None = None  # the batch's extent, for a flat index taken apart (else the launch's z)
    flat: str | None = None  # `const int idx = ...;` from the output's place, for a flat index
    # True for a tile none of whose outputs reads the sum, in the tile's corners `{first_row}`,
    # `{last_row}`, `{first_col}`, `{last_col}`; None where that is not known.
    unread: str | None = None
    # The sum at (row, col) is the sum at (col, row): the col factor is the row factor transposed (`A
    # A^T`, SYRK's and a Gram matrix's), rows and cols one bound. `vector_tiles` then computes the tiles on
    # and above the diagonal only and runs the user's statements at both places.
    mirror: bool = False
    # What a (row, k) and a (col, k) element add to the sum: PRODUCT, or their SQUARED_DIFFERENCE or
    # ABSOLUTE_DIFFERENCE (pairwise distances: the same tiles, another step in the registers).
    combine: str = "product"
    # The factors' and the sum's type: float, or double (the first template only: its tiles in shared
    # memory, its registers and its fused multiply-adds in double, so the sum is as exact as written).
    element: str = "float"


PRODUCT, SQUARED_DIFFERENCE, ABSOLUTE_DIFFERENCE = "product", "squared difference", "absolute difference"
# Each element type's zero, fused multiply-add and magnitude, as the templates write them.
_SPELLING = {"float": ("0.0f", "fmaf", "fabsf"), "double": ("0.0", "fma", "fabs")}


def accumulated(combine: str, a: str, b: str, accum: str, element: str = "float") -> str:
    """The statement adding a row element `a` and a col element `b` into `accum`, for the combine."""
    _, fma, fabs = _SPELLING[element]
    if combine == SQUARED_DIFFERENCE:
        return f"{accum} = {fma}({a} - {b}, {a} - {b}, {accum});"
    if combine == ABSOLUTE_DIFFERENCE:
        return f"{accum} += {fabs}({a} - {b});"
    return f"{accum} = {fma}({a}, {b}, {accum});"


def description(contraction: Contraction, shape: Shape) -> str:
    tile_m, tile_n = shape.tile
    per_thread = f"{4 * shape.quads_m}x{4 * shape.quads_n} outputs per thread in registers"
    # a distance's sum of differences is a contraction with another step: say which
    kind = "contraction " if contraction.combine == PRODUCT else f"sum of {contraction.combine}s "
    if not shape.vector:
        return f"tiled {kind}over {contraction.k}: {tile_m}x{tile_n} shared-memory tiles, {per_thread}"
    vectors = (contraction.a.vector_at is not None, contraction.b.vector_at is not None)
    loads = {
        (True, True): ", float4 loads of both factors where aligned",
        (True, False): ", float4 loads of the row factor where aligned",
        (False, True): ", float4 loads of the col factor where aligned",
    }.get(vectors, "")
    skipped = ", tiles no output reads skipped" if contraction.unread else ""
    if mirrored(contraction, shape):
        skipped = ", the tiles above the diagonal only, each stored at both places (the sum is symmetric)"
    split = (
        f", the sum over {contraction.k} split between {shape.splits} groups of {THREADS} threads a block"
        if shape.splits > 1
        else ""
    )
    return (
        f"tiled {kind}over {contraction.k}: {tile_m}x{tile_n}x{shape.depth} tiles{loads}, "
        f"{per_thread}{split}, stored through shared memory{skipped}"
    )


def mirrored(contraction: Contraction, shape: Shape) -> bool:
    """Whether the shape computes a symmetric sum's upper tiles only: a square tile of `vector_tiles`
    whose outputs leave 64 rows at a time (a slab a mirrored pass reads down its columns)."""
    tile_m, tile_n = shape.tile
    return contraction.mirror and shape.vector and tile_m == tile_n and staged_rows(tile_n) == 64


def register_cap(shape: Shape) -> str:
    """How the shape's flags cap the registers, for its description ("" where they do not)."""
    caps = [f.split("=", 1)[1] for f in shape.flags if f.startswith("-maxrregcount=")]
    return f", {caps[0]} registers" if caps else ""


def gemm_candidates(
    tree: KernelTree,
    contraction: Contraction,
    shapes: Sequence[Shape],
    *,
    proposer: str,
    batch_grid: str | None,
    summary: str = "",
) -> list[Candidate]:
    """A candidate for each shape: the kernel's body the shape's template, launched over the output's
    tiles (and the batch on z, `batch_grid` in the spec's terms, where there is one)."""
    names = template_names(tree, contraction)
    found = []
    for shape in shapes:
        tile_m, tile_n = shape.tile
        grid = [
            f"ceil_div({contraction.cols_spec}, {tile_n})",
            f"ceil_div({contraction.rows_spec}, {tile_m})",
        ]
        if batch_grid is not None:
            grid.append(batch_grid)
        template = vector_tiles if shape.vector else scalar_tiles
        candidate = build_candidate(
            tree,
            body=template(names, contraction, shape),
            launch=LaunchSpec(block=(shape.threads,) + (1,) * (len(grid) - 1), grid=tuple(grid)),
            description=summary + description(contraction, shape),
            proposer=proposer,
            assumptions=(
                f"the {contraction.element} sum over {contraction.k} is regrouped into fused multiply-adds "
                "(within tolerance)",
            ),
        )
        if shape.flags:
            candidate = replace(
                candidate, flags=shape.flags, description=candidate.description + register_cap(shape)
            )
        found.append(candidate)
    return found


def template_names(tree: KernelTree, contraction: Contraction) -> dict[str, str]:
    """The locals both templates declare, in names the kernel does not use: found once for all the shapes
    (a name's choice depends only on the kernel's own names, not on the others wanted with it)."""
    vectors = max(len(contraction.a.addresses), len(contraction.b.addresses))
    wanted = dict.fromkeys((*_SCALAR_LOCALS, *_VECTOR_LOCALS, *(f"v{m}" for m in range(vectors))))
    return local_names(tree, *wanted)


def output_statements(contraction: Contraction, pad: str, value: str, placed: bool = False) -> str:
    """The user's statements after the loop for the output at `contraction.place`, the sum in `value`."""
    before = "\n".join(pad + line.strip() for line in contraction.before.splitlines())
    inside = contraction.inside_placed if placed else contraction.inside
    body = "\n".join(pad + "    " + line.strip() for line in inside.splitlines())
    row, col = contraction.place
    condition = contraction.condition
    if contraction.flat:  # the user's statements take the index apart again: the output's place goes by index
        before = pad + contraction.flat + ("\n" + before if before else "")
        # past the tile's edge the flat index would name another batch's element: bound it first
        condition = f"{row} < {contraction.rows} && {col} < {contraction.cols} && ({condition})"
    return f"""{before}
{pad}if ({condition}) {{
{pad}    {contraction.element} {contraction.accumulator} = {value};
{body}
{pad}}}"""


# -- the first template: element loads, the epilogue from registers ------------------------------------


# The locals `scalar_tiles` declares (see `template_names`).
_SCALAR_LOCALS = (
    "BM", "BN", "BK", "As", "Bs", "tid", "tx", "ty", "row0", "col0", "accum", "a_next", "b_next", "tiles",
    "t", "buf", "kk", "a_frag", "b_frag", "i", "j", "q", "v", "v_hi", "r", "c", "k0", "e",
)  # fmt: skip


def scalar_tiles(names: dict[str, str], contraction: Contraction, shape: Shape) -> str:
    """The first template's kernel body, its locals named as `template_names` says."""
    n, match, quads_m, quads_n = names, contraction, shape.quads_m, shape.quads_n
    r, c, e, i = n["r"], n["c"], n["e"], n["i"]
    kind = match.element
    zero = _SPELLING[kind][0]
    a_at = match.scalar_at[0].replace("{r}", r).replace("{c}", c)
    b_at = match.scalar_at[1].replace("{r}", r).replace("{c}", c)
    bm, bn, bk = n["BM"], n["BN"], n["BK"]
    # Neighbouring threads take neighbouring elements along whichever index the factor walks in memory.
    a_index = (f"{e} / {bk}", f"{e} % {bk}") if match.a.k_fast else (f"{e} % {bm}", f"{e} / {bm}")
    b_index = (f"{e} % {bk}", f"{e} / {bk}") if match.b.k_fast else (f"{e} / {bn}", f"{e} % {bn}")

    def load(k0: str) -> str:
        return f"""\
        #pragma unroll
        for (int {i} = 0; {i} < {bm} * {bk} / {THREADS}; ++{i}) {{
            const int {e} = {n["tid"]} + {i} * {THREADS};
            const int {r} = {n["row0"]} + {a_index[0]}, {c} = {k0} + {a_index[1]};
            {n["a_next"]}[{i}] = ({r} < {match.rows} && {c} < {match.depth}) ? {a_at} : {zero};
        }}
        #pragma unroll
        for (int {i} = 0; {i} < {bn} * {bk} / {THREADS}; ++{i}) {{
            const int {e} = {n["tid"]} + {i} * {THREADS};
            const int {r} = {k0} + {b_index[0]}, {c} = {n["col0"]} + {b_index[1]};
            {n["b_next"]}[{i}] = ({r} < {match.depth} && {c} < {match.cols}) ? {b_at} : {zero};
        }}"""

    def store(buf: str) -> str:
        return f"""\
        #pragma unroll
        for (int {i} = 0; {i} < {bm} * {bk} / {THREADS}; ++{i}) {{
            const int {e} = {n["tid"]} + {i} * {THREADS};
            {n["As"]}[{buf}][{a_index[1]}][{a_index[0]}] = {n["a_next"]}[{i}];
        }}
        #pragma unroll
        for (int {i} = 0; {i} < {bn} * {bk} / {THREADS}; ++{i}) {{
            const int {e} = {n["tid"]} + {i} * {THREADS};
            {n["Bs"]}[{buf}][{b_index[0]}][{b_index[1]}] = {n["b_next"]}[{i}];
        }}"""

    pad = "                "
    row, col = match.place
    per_output = output_statements(match, pad, f"{n['accum']}[{i}][{n['j']}]")
    return f"""{{
    // A tiled contraction over {match.k}: each block of {THREADS} threads computes a {bm} x {bn} tile of the
    // outputs, each thread {4 * quads_m} x {4 * quads_n} of them in registers. The row and col factors pass
    // through shared memory in tiles of depth 16, double-buffered (the next tile's loads are in flight
    // while the current one is multiplied); out-of-range elements load as 0, so any sizes work.
    constexpr int {bm} = {64 * quads_m}, {bn} = {64 * quads_n}, {bk} = 16;
    __shared__ __align__(16) {kind} {n["As"]}[2][{bk}][{bm} + 4];  // +4: 16-byte-aligned rows, fewer bank conflicts
    __shared__ __align__(16) {kind} {n["Bs"]}[2][{bk}][{bn}];

    const int {n["tid"]} = threadIdx.x;
    const int {n["tx"]} = {n["tid"]} % 16, {n["ty"]} = {n["tid"]} / 16;
    const int {n["row0"]} = blockIdx.y * {bm}, {n["col0"]} = blockIdx.x * {bn};
    {kind} {n["accum"]}[4 * {quads_m}][4 * {quads_n}] = {{}};
    {kind} {n["a_next"]}[{bm} * {bk} / {THREADS}], {n["b_next"]}[{bn} * {bk} / {THREADS}];
    const int {n["tiles"]} = ({match.depth} + {bk} - 1) / {bk};

    {{
        const int {n["k0"]} = 0;
{load(n["k0"])}
{store("0")}
    }}
    __syncthreads();

    for (int {n["t"]} = 0; {n["t"]} < {n["tiles"]}; ++{n["t"]}) {{
        const int {n["buf"]} = {n["t"]} & 1;
        if ({n["t"]} + 1 < {n["tiles"]}) {{
            const int {n["k0"]} = ({n["t"]} + 1) * {bk};
    {load(n["k0"]).replace(chr(10), chr(10) + "    ")}
        }}
        #pragma unroll
        for (int {n["kk"]} = 0; {n["kk"]} < {bk}; ++{n["kk"]}) {{
            {kind} {n["a_frag"]}[4 * {quads_m}], {n["b_frag"]}[4 * {quads_n}];
            #pragma unroll
            for (int {n["q"]} = 0; {n["q"]} < {quads_m}; ++{n["q"]}) {{
{_fragment(n, kind, "As", "a_frag", "ty")}
            }}
            #pragma unroll
            for (int {n["q"]} = 0; {n["q"]} < {quads_n}; ++{n["q"]}) {{
{_fragment(n, kind, "Bs", "b_frag", "tx")}
            }}
            #pragma unroll
            for (int {i} = 0; {i} < 4 * {quads_m}; ++{i})
                #pragma unroll
                for (int {n["j"]} = 0; {n["j"]} < 4 * {quads_n}; ++{n["j"]})
                    {accumulated(match.combine, f"{n['a_frag']}[{i}]", f"{n['b_frag']}[{n['j']}]", f"{n['accum']}[{i}][{n['j']}]", kind)}
        }}
        // The other buffer was last read before the previous barrier, so it is free to fill now.
        if ({n["t"]} + 1 < {n["tiles"]}) {{
    {store(f"{n['buf']} ^ 1").replace(chr(10), chr(10) + "    ")}
        }}
        __syncthreads();
    }}

    // Each thread's rows are ty*4 .. ty*4+3 in each 64-row slab of the tile (columns likewise), so
    // the 16-byte reads above are conflict-free; the user's statements after the loop run once per output.
    #pragma unroll
    for (int {i} = 0; {i} < 4 * {quads_m}; ++{i}) {{
        const int {row} = {n["row0"]} + ({i} / 4) * 64 + {n["ty"]} * 4 + {i} % 4;
        #pragma unroll
        for (int {n["j"]} = 0; {n["j"]} < 4 * {quads_n}; ++{n["j"]}) {{
            const int {col} = {n["col0"]} + ({n["j"]} / 4) * 64 + {n["tx"]} * 4 + {n["j"]} % 4;
{per_output}
        }}
    }}
}}"""  # noqa: E501


def _fragment(n: dict[str, str], kind: str, tile: str, fragment: str, thread: str) -> str:
    """A thread's 4 neighbouring elements of the tile's k-row `kk` in each 64 into its fragment: one
    float4 read, or two double2 reads (16 bytes is the widest shared-memory read)."""
    pad = " " * 16
    at = f"&{n[tile]}[{n['buf']}][{n['kk']}][{n['q']} * 64 + {n[thread]} * 4]"
    into = f"{n[fragment]}[4 * {n['q']}"
    v, hi = n["v"], n["v_hi"]
    if kind == "float":
        return (
            f"{pad}const float4 {v} = *reinterpret_cast<const float4*>({at});\n"
            f"{pad}{into}] = {v}.x; {into} + 1] = {v}.y;\n"
            f"{pad}{into} + 2] = {v}.z; {into} + 3] = {v}.w;"
        )
    return (
        f"{pad}const double2 {v} = *reinterpret_cast<const double2*>({at});\n"
        f"{pad}const double2 {hi} = *reinterpret_cast<const double2*>({at} + 2);\n"
        f"{pad}{into}] = {v}.x; {into} + 1] = {v}.y;\n"
        f"{pad}{into} + 2] = {hi}.x; {into} + 3] = {hi}.y;"
    )


# -- the second template: float4 loads, skipped tiles, the epilogue through shared memory --------------


@dataclass(frozen=True)
class _Side:
    """Where one factor's tile comes from and goes: `a` (rows x k) or `b` (k x cols)."""

    factor: Factor
    tile: str  # the shared array, indexed [buffer][k][outer]
    next: str  # the registers the next tile is loaded into
    extent: int  # the tile's outer extent (BM or BN)
    first: str  # the tile's first outer index (row0 or col0)
    bound: str  # the outer index's bound (rows or cols)
    outer_is_r: bool  # the outer index is the factor's `{r}` (the row factor), else its `{c}`
    depth: int  # the tile's extent along k

    @property
    def groups(self) -> int:
        """Groups of four neighbouring elements in a tile."""
        return self.extent * self.depth // 4


# The locals `vector_tiles` declares, besides `v0`, `v1`, ... (the float4s of a group's contiguous loads).
_VECTOR_LOCALS = (
    "BM", "BN", "BK", "smem", "tiles", "As", "Bs", "staged", "tid", "warp", "lane", "tx", "ty", "row0",
    "col0", "accum", "unread", "a_next", "b_next", "steps", "t", "buf", "kk", "a_frag", "b_frag", "i", "j",
    "q", "v", "g", "part", "s", "f", "lr", "lc", "e", "w", "u", "r", "c", "k0", "group", "other",
    "mr",
)  # fmt: skip


def vector_tiles(names: dict[str, str], contraction: Contraction, shape: Shape) -> str:
    """The second template's kernel body, its locals named as `template_names` says."""
    n, x, quads_m, quads_n = names, contraction, shape.quads_m, shape.quads_n
    bm, bn, bk, t, buf, kk = n["BM"], n["BN"], n["BK"], n["t"], n["buf"], n["kk"]
    i, j, q, s, accum, steps = n["i"], n["j"], n["q"], n["s"], n["accum"], n["steps"]
    tile_m, tile_n = shape.tile
    tiles, staged = f"{n['smem']}.{n['tiles']}", f"{n['smem']}.{n['staged']}"
    splits, group = shape.splits, n["group"]
    # each group of a split sum has its own tiles
    own = f"[{group}]" if splits > 1 else ""
    sides = (
        _Side(x.a, f"{tiles}.{n['As']}{own}", n["a_next"], tile_m, n["row0"], x.rows, True, shape.depth),
        _Side(x.b, f"{tiles}.{n['Bs']}{own}", n["b_next"], tile_n, n["col0"], x.cols, False, shape.depth),
    )
    # A split sum's group takes every `splits`-th tile of k; all groups run the same number of steps (the
    # barriers are the block's), a group past the end loading zeros.
    if splits > 1:
        steps_value = f"(({x.depth} + {bk} - 1) / {bk} + {splits} - 1) / {splits}"
        first_k0, next_k0 = f"{group} * {bk}", f"(({t} + 1) * {splits} + {group}) * {bk}"
    else:
        steps_value, first_k0, next_k0 = f"({x.depth} + {bk} - 1) / {bk}", "0", f"({t} + 1) * {bk}"

    def loads(k0: str, pad: str) -> str:
        return "\n".join(_load(side, x.depth, k0, n, pad) for side in sides)

    step = accumulated(x.combine, f"{n['a_frag']}[{i}]", f"{n['b_frag']}[{j}]", f"{accum}[{i}][{j}]")

    def stores(into: str, pad: str) -> str:
        return "\n".join(_store(side, into, n, pad) for side in sides)

    def fragment(name: str, side: _Side, quads: int, lane: str) -> str:
        """The thread's `quads` float4s of the tile's k-row `kk`: its 4 rows (columns) in each 64."""
        return f"""\
                #pragma unroll
                for (int {q} = 0; {q} < {quads}; ++{q}) {{
                    const float4 {n["v"]} = *reinterpret_cast<const float4*>(
                        &{side.tile}[{buf}][{kk}][{q} * 64 + {lane} * 4]);
                    {name}[4 * {q}] = {n["v"]}.x, {name}[4 * {q} + 1] = {n["v"]}.y;
                    {name}[4 * {q} + 2] = {n["v"]}.z, {name}[4 * {q} + 3] = {n["v"]}.w;
                }}"""

    registers = [f"4 * {-(-side.groups // THREADS)}" for side in sides]
    loop = f"""\
    {{
        float {n["a_next"]}[{registers[0]}], {n["b_next"]}[{registers[1]}];
        const int {steps} = {steps_value};
        {{
            const int {n["k0"]} = {first_k0};
{loads(n["k0"], " " * 12)}
{stores("0", " " * 12)}
        }}
        __syncthreads();
        for (int {t} = 0; {t} < {steps}; ++{t}) {{
            const int {buf} = {t} & 1;
            if ({t} + 1 < {steps}) {{  // the next tile's loads are in flight during the FMAs
                const int {n["k0"]} = {next_k0};
{loads(n["k0"], " " * 16)}
            }}
            #pragma unroll
            for (int {kk} = 0; {kk} < {bk}; ++{kk}) {{
                float {n["a_frag"]}[{4 * quads_m}], {n["b_frag"]}[{4 * quads_n}];
{fragment(n["a_frag"], sides[0], quads_m, n["ty"])}
{fragment(n["b_frag"], sides[1], quads_n, n["tx"])}
                #pragma unroll
                for (int {i} = 0; {i} < {4 * quads_m}; ++{i})
                    #pragma unroll
                    for (int {j} = 0; {j} < {4 * quads_n}; ++{j})
                        {step}
            }}
            // The other buffer was last read before the previous barrier, so it is free to fill now.
            if ({t} + 1 < {steps}) {{
{stores(f"{buf} ^ 1", " " * 16)}
            }}
            __syncthreads();
        }}
    }}"""
    loop = skipping_unread(x, n, loop)
    row, col = x.place
    per_output = output_statements(x, " " * 16, f"{staged}[{n['lr']}][{n['lc']}]", placed=True)
    per_output = per_output.lstrip("\n")  # no declarations before the check
    quad = [f"{accum}[{n['e']}][4 * {q} + {step}]" for step in range(4)]
    slab = staged_rows(tile_n)
    rows_of_quads = slab // 16  # of a thread's 4 rows in a 64-row slab, those staged at once
    groups = f"[{splits}]" if splits > 1 else ""
    staged_at = f"{staged}[{j} * 16 + {n['ty']}][{q} * 64 + {n['tx']} * 4]"
    staging = (
        f"                    *reinterpret_cast<float4*>(&{staged_at}) =\n"
        f"                        make_float4({', '.join(quad)});"
    )
    # A split sum's outputs are group 0's (the others' added into them); all its threads run the epilogue.
    block, first, reduction = THREADS, n["tid"], ""
    if splits > 1:
        staging = f"                    if ({group} == 0)\n    " + staging.replace("\n", "\n    ")
        block, first = splits * THREADS, "threadIdx.x"
        mine = [f"{accum}[{j}][4 * {q} + {step}]" for step in range(4)]
        added = "\n".join(
            f"                    {mine[step]} += {n['v']}.{'xyzw'[step]};" for step in range(4)
        )
        reduction = f"""
    // The groups' sums added into group 0's registers, one group at a time through shared memory (the
    // last barrier of the loop, or none for a skipped tile, leaves the tiles free to overwrite).
    for (int {n["other"]} = 1; {n["other"]} < {splits}; ++{n["other"]}) {{
        if ({group} == {n["other"]}) {{
            #pragma unroll
            for (int {j} = 0; {j} < 4; ++{j})
                #pragma unroll
                for (int {q} = 0; {q} < {quads_n}; ++{q})
                    *reinterpret_cast<float4*>(&{staged_at}) =
                        make_float4({", ".join(mine)});
        }}
        __syncthreads();
        if ({group} == 0) {{
            #pragma unroll
            for (int {j} = 0; {j} < 4; ++{j})
                #pragma unroll
                for (int {q} = 0; {q} < {quads_n}; ++{q}) {{
                    const float4 {n["v"]} =
                        *reinterpret_cast<const float4*>(&{staged_at});
{added}
                }}
        }}
        __syncthreads();
    }}
"""
    below, mirror = "", ""
    if mirrored(x, shape):
        below = (
            "    // the sum is symmetric: a tile below the diagonal is the mirror of one above it, which\n"
            "    // stores both\n"
            "    if (blockIdx.y > blockIdx.x) return;\n"
        )
        mr = n["mr"]
        mirror = f"""\
            // ... and off the diagonal the same sums at (col, row): neighbouring threads on neighbouring
            // rows of the tile, the mirrored outputs' neighbouring columns
            if (blockIdx.y != blockIdx.x) {{
                for (int {s} = 0; {s} < 64 * {bn} / {block}; ++{s}) {{
                    const int {n["f"]} = {first} + {s} * {block};
                    const int {mr} = {n["f"]} % 64, {n["lc"]} = {n["f"]} / 64;  // a row of the tile's slab
                    const int {n["lr"]} = {mr} / 4 + 16 * ({mr} % 4);  // where it is staged
                    const int {row} = {n["col0"]} + {n["lc"]};
                    const int {col} = {n["row0"]} + {i} * 64 + {mr};
{textwrap.indent(per_output, "    ")}
                }}
            }}
"""
    if splits > 1:
        opening = f"""\
    // A tiled contraction over {x.k}: each block of {splits} x {THREADS} threads computes a {bm} x {bn} tile
    // of the outputs; each group of {THREADS} sums one tile of {x.k} in {splits}, each of its threads
    // {4 * quads_m} x {4 * quads_n} outputs in registers, as 4-wide quads 64 columns apart, and the groups'
    // sums are added up before the epilogue: a small output keeps as many warps busy as a large one.
    //"""
        thread = f"""\
    const int {n["tid"]} = threadIdx.x % {THREADS}, {group} = threadIdx.x / {THREADS};
    const int {n["warp"]} = {n["tid"]} / 32, {n["lane"]} = {n["tid"]} % 32;"""
    else:
        opening = f"""\
    // A tiled contraction over {x.k}: each block of {THREADS} threads computes a {bm} x {bn} tile of the
    // outputs, each thread {4 * quads_m} x {4 * quads_n} of them in registers, as 4-wide quads 64 rows
    // and 64 columns apart."""
        thread = (
            f"""    const int {n["tid"]} = threadIdx.x, {n["warp"]} = {n["tid"]} / 32, """
            f"""{n["lane"]} = {n["tid"]} % 32;"""
        )
    return f"""{{
{opening} The factors pass through shared memory in tiles of depth {bk}, both
    // stored k-major (a thread's 4 rows, and its 4 columns, are one float4), double-buffered.
    constexpr int {bm} = {tile_m}, {bn} = {tile_n}, {bk} = {shape.depth};
    __shared__ __align__(16) union {{
        struct {{
            float {n["As"]}{groups}[2][{bk}][{bm} + 4];  // +4: a k-fast factor's transposed stores miss each other
            float {n["Bs"]}{groups}[2][{bk}][{bn} + 4];
        }} {n["tiles"]};
        float {n["staged"]}[{slab}][{bn} + 4];  // the finished outputs, on their way out
    }} {n["smem"]};

{thread}
    // A warp's threads are 4 rows x 8 columns: each step it reads 4 float4s of one tile and 8 of the
    // other, one shared-memory wavefront each.
    const int {n["ty"]} = {n["warp"]} / 2 * 4 + {n["lane"]} / 8, {n["tx"]} = {n["warp"]} % 2 * 8 + {n["lane"]} % 8;
    const int {n["row0"]} = blockIdx.y * {bm}, {n["col0"]} = blockIdx.x * {bn};
{below}    float {accum}[{4 * quads_m}][{4 * quads_n}] = {{}};

{loop}
{reduction}
    // The outputs leave through shared memory, {slab} rows of the tile at a time, so that a warp runs
    // the user's statements on 32 neighbouring outputs of one row: coalesced, whatever they load or
    // store. The last barrier above (or none, for a skipped tile) leaves the tiles free to overwrite.
    #pragma unroll
    for (int {i} = 0; {i} < {quads_m}; ++{i}) {{
        #pragma unroll
        for (int {n["part"]} = 0; {n["part"]} < {4 // rows_of_quads}; ++{n["part"]}) {{  // rows ty*4 + part*{rows_of_quads} + j of slab i
            #pragma unroll
            for (int {j} = 0; {j} < {rows_of_quads}; ++{j}) {{
                const int {n["e"]} = {i} * 4 + {n["part"]} * {rows_of_quads} + {j};
                #pragma unroll
                for (int {q} = 0; {q} < {quads_n}; ++{q})
{staging}
            }}
            __syncthreads();
            for (int {s} = 0; {s} < {slab} * {bn} / {block}; ++{s}) {{
                const int {n["f"]} = {first} + {s} * {block};
                const int {n["lr"]} = {n["f"]} / {bn}, {n["lc"]} = {n["f"]} % {bn};  // in the staged rows
                const int {row} = {n["row0"]} + {i} * 64 + ({n["lr"]} % 16) * 4 + {n["part"]} * {rows_of_quads} + {n["lr"]} / 16;
                const int {col} = {n["col0"]} + {n["lc"]};
{per_output}
            }}
{mirror}            __syncthreads();
        }}
    }}
}}"""  # noqa: E501


def skipping_unread(x: Contraction, n: dict[str, str], loop: str) -> str:
    """The tile's loop, skipped where no output of the tile reads its sum (where that is known)."""
    if not x.unread:
        return loop
    bm, bn = n["BM"], n["BN"]
    corners = {
        "{first_row}": n["row0"],
        "{last_row}": f"{n['row0']} + {bm} - 1",
        "{first_col}": n["col0"],
        "{last_col}": f"{n['col0']} + {bn} - 1",
    }
    unread = x.unread
    for placeholder, value in corners.items():
        unread = unread.replace(placeholder, value)
    return f"""\
    // No output of a tile reads its sum where the user's conditions, which move with the output's row
    // and col alone, hold (or fail) at all four corners of the tile, and so at all of it: skip its loop.
    const bool {n["unread"]} = {unread};
    if (!{n["unread"]})
{loop}"""


def placed(template: str, r: str, c: str, moving: str, step: int | str = 0) -> str:
    """A factor's text (`{r}` and `{c}` for its two indices) at the locals `r` and `c`, the one named
    `moving` `step` further along (the next element of a thread's group)."""
    shifted = f"({moving} + {step})" if step else moving
    written = template.replace("{r}", shifted if moving == r else r)
    return written.replace("{c}", shifted if moving == c else c)


def within(outer: str, k: str, moving: str, step: int | str, bound: str, depth: str) -> str:
    """The condition that a group's element `step` past (`outer`, `k`) along `moving` is in the tile's
    range: its outer index below `bound`, its k below `depth`."""
    outer_at = f"{outer} + {step}" if step and moving == outer else outer
    k_at = f"{k} + {step}" if step and moving == k else k
    return f"{outer_at} < {bound} && {k_at} < {depth}"


def _load(side: _Side, depth: str, k0: str, n: dict[str, str], pad: str) -> str:
    """The side's next tile into its registers, four neighbouring elements a group: one float4 of each
    contiguous load where all four are in range and it is 16-byte aligned, else one element at a time (0
    out of range)."""
    w, u, r, c, g = n["w"], n["u"], n["r"], n["c"], n["g"]
    factor = side.factor
    outer, inner = (r, c) if side.outer_is_r else (c, r)  # the locals holding the outer index and k
    moving = inner if factor.k_fast else outer  # the index the four elements of a group differ in

    def at(template: str, step: int, vectors: tuple[str, ...] = ()) -> str:
        written = placed(template, r, c, moving, step)
        for m, vector in enumerate(vectors):
            written = written.replace(f"{{v{m}}}", f"{vector}.{'xyzw'[step]}")
        return written

    def in_range(step: int) -> str:
        return within(outer, inner, moving, step, side.bound, depth)

    def one_by_one(indent: str) -> str:
        return "\n".join(
            f"{indent}{side.next}[4 * {g} + {step}] = ({in_range(step)}) ? {at(factor.at, step)} : 0.0f;"
            for step in range(4)
        )

    inner_pad = pad + "    "
    if factor.vector_at is None:
        elements = one_by_one(inner_pad)
    else:
        vectors = tuple(n[f"v{m}"] for m in range(len(factor.addresses)))
        addresses = [at(address, 0) for address in factor.addresses]
        aligned = " && ".join(f"reinterpret_cast<unsigned long long>({a}) % 16 == 0" for a in addresses)
        declared = "\n".join(
            f"{inner_pad}    const float4 {v} = *reinterpret_cast<const float4*>({a});"
            for v, a in zip(vectors, addresses, strict=True)
        )
        assigned = "\n".join(
            f"{inner_pad}    {side.next}[4 * {g} + {step}] = {at(factor.vector_at, step, vectors)};"
            for step in range(4)
        )
        elements = f"""\
{inner_pad}if ({in_range(3)} && {aligned}) {{
{declared}
{assigned}
{inner_pad}}} else {{  // at the edges, or misaligned (an odd stride)
{one_by_one(inner_pad + "    ")}
{inner_pad}}}"""
    return f"""\
{_groups(side, n, pad)}
{inner_pad}const int {outer} = {side.first} + {w}, {inner} = {k0} + {u};
{elements}
{pad}}}"""


def _store(side: _Side, buf: str, n: dict[str, str], pad: str) -> str:
    """The side's registers into its shared tile [k][outer]: a k-fast group's four elements go to four
    k-rows (the +4 padding puts a warp's 32 stores in 32 banks), an outer-fast group's are one float4."""
    g, w, u = n["g"], n["w"], n["u"]
    registers = [f"{side.next}[4 * {g} + {step}]" for step in range(4)]
    if side.factor.k_fast:
        written = "\n".join(
            f"{pad}    {side.tile}[{buf}][{u} + {step}][{w}] = {registers[step]};" for step in range(4)
        )
    else:
        written = (
            f"{pad}    *reinterpret_cast<float4*>(&{side.tile}[{buf}][{u}][{w}]) =\n"
            f"{pad}        make_float4({', '.join(registers)});"
        )
    return f"""\
{_groups(side, n, pad)}
{written}
{pad}}}"""


def _groups(side: _Side, n: dict[str, str], pad: str) -> str:
    """The opening of the loop over a thread's groups of the side's tile, with the group's place in it:
    `w` along the outer index, `u` along k. Neighbouring threads take neighbouring groups along whichever
    index the factor walks in memory, so that a warp's loads are contiguous."""
    e, w, u, g = n["e"], n["w"], n["u"], n["g"]
    if side.factor.k_fast:
        split = f"{w} = {e} / ({n['BK']} / 4), {u} = {e} % ({n['BK']} / 4) * 4"
    else:
        split = f"{u} = {e} / ({side.extent} / 4), {w} = {e} % ({side.extent} / 4) * 4"
    guard = (
        f"\n{pad}    if ({e} >= {side.groups}) break;  // a tile of fewer groups than threads"
        if side.groups % THREADS
        else ""
    )
    return f"""\
{pad}#pragma unroll
{pad}for (int {g} = 0; {g} < {-(-side.groups // THREADS)}; ++{g}) {{
{pad}    const int {e} = {n["tid"]} + {g} * {THREADS};{guard}
{pad}    const int {split};"""
