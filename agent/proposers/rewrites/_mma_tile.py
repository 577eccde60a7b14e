"""The kernel `contraction` writes for a contraction of half or bfloat16 factors: the tiles multiplied on
the tensor cores (WMMA, 16x16x16 fragments, the sums in float), the user's statements after the loop run
once per output as in `_gemm_tile`'s float4 kernel.

Offered only where each factor is one element of a 16-bit float array as it is stored, whatever the
conversions around it (`__half2float(A[i * K + k])`, `(float)x[...]`): the tile then holds the very
values the user's products read, and the tensor cores' products of two 16-bit values are exact in
float. What changes is the order the float sums are taken in (stated as an assumption, checked against
the spec's tolerance like any other regrouping).

A block of 256 threads (8 warps, 2 x 4) computes a 128 x 128 tile of the outputs, each warp 64 x 32 of
them as 4 x 2 accumulator fragments. The factor tiles pass through shared memory 32 deep and
double-buffered: each thread copies eight neighbouring elements along the index the factor walks memory
along, asynchronously (`__pipeline_memcpy_async`) where all eight are in range and 16-byte aligned, one
at a time otherwise (zero outside the output or past k), while the tile before is multiplied. A tile
keeps its factor's memory order (row- or column-major fragments) with 8 elements of padding a row (a
leading dimension WMMA takes; a warp's fragment loads spread over the banks). The finished outputs leave
through shared memory, 64 rows at a time, so that a warp runs the user's statements on 32 neighbouring
outputs of a row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cuda_agent.agent.analysis.values import expression_of, text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._gemm_tile import (
    THREADS,
    Contraction,
    Factor,
    output_statements,
    placed,
    skipping_unread,
    within,
)
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    element_type,
    identifiers,
    local_names,
)
from cuda_agent.agent.spec import LaunchSpec
from tree_sitter import Node

BM, BN, BK = 128, 128, 32
# The 16-bit float types WMMA multiplies, by the spec's dtype: the fragment type, the spellings of the
# element type that are that type itself (stored as read), and the conversion from float for the others
# (`at::Half`, `c10::BFloat16`: exact, the value came from the same format).
TYPES = {
    "float16": ("__half", frozenset({"__half", "half"}), "__float2half"),
    "bfloat16": ("__nv_bfloat16", frozenset({"__nv_bfloat16", "nv_bfloat16"}), "__float2bfloat16"),
}
# WMMA's fragments, and the asynchronous copies into shared memory (`__pipeline_memcpy_async`).
HEADERS = "#include <mma.h>\n#include <cuda_pipeline.h>"
# What a first draft wraps around a 16-bit element to compute with it in float.
_CONVERSIONS = frozenset({"__half2float", "__bfloat162float", "__low2float", "float", "static_cast<float>"})


@dataclass(frozen=True)
class Element:
    """A factor that is one element of a 16-bit float array: `{r}`/`{c}` in `at` as in `Factor.at`."""

    at: str  # the element as read, without the conversions around it
    dtype: str  # "float16" or "bfloat16"
    direct: bool  # the array's element type is the fragment's own type: stored without a conversion


def element(tree: KernelTree, at: str) -> Element | None:
    """The 16-bit element a factor reads, where it reads nothing else; None otherwise."""
    parsed = expression_of(at.replace("{r}", "__r").replace("{c}", "__c"))
    if parsed is None:
        return None
    node = _without_conversions(parsed)
    if node.type != "subscript_expression":
        return None
    base = node.child_by_field_name("argument")
    names = identifiers(base) if base is not None else set()
    arrays = [name for name in names if (p := tree.parameter(name)) is not None and p.pointer_depth == 1]
    spec = tree.target.spec
    if len(arrays) != 1 or spec is None or (argument := spec.argument(arrays[0])) is None:
        return None
    if argument.dtype not in TYPES:
        return None
    own = TYPES[argument.dtype][1]
    written = text(node).replace("__r", "{r}").replace("__c", "{c}")
    return Element(written, argument.dtype, element_type(tree.parameter(arrays[0])) in own)


def _without_conversions(node: Node) -> Node:
    while True:
        node = unwrap(node)
        if node.type != "call_expression":
            return node
        function, arguments = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        if function is None or arguments is None or arguments.named_child_count != 1:
            return node
        if text(function).replace(" ", "") not in _CONVERSIONS:
            return node
        node = arguments.named_children[0]


# The locals `mma_tiles` declares (see `_gemm_tile.template_names`).
MMA_LOCALS = (
    "BM", "BN", "BK", "smem", "tiles", "As", "Bs", "staged", "tid", "warp", "wr", "wc", "row0", "col0",
    "unread", "acc", "a_frag", "b_frag", "t", "kk", "i", "j", "e", "r", "c", "v", "to", "slab", "s", "f",
    "lr", "lc", "buf", "steps",
)  # fmt: skip


def mma_candidate(
    tree: KernelTree,
    contraction: Contraction,
    a: Element,
    b: Element,
    *,
    proposer: str,
    batch_grid: str | None,
) -> Candidate:
    """The kernel's body `mma_tiles`, launched over the output's 128 x 128 tiles (and the batch on z)."""
    grid = [f"ceil_div({contraction.cols_spec}, {BN})", f"ceil_div({contraction.rows_spec}, {BM})"]
    if batch_grid is not None:
        grid.append(batch_grid)
    candidate = build_candidate(
        tree,
        body=mma_tiles(local_names(tree, *MMA_LOCALS), contraction, a, b),
        launch=LaunchSpec(block=(THREADS,) + (1,) * (len(grid) - 1), grid=tuple(grid)),
        description=description(contraction, a.dtype),
        proposer=proposer,
        helpers=HEADERS,
        assumptions=(
            f"the float sum over {contraction.k} of products of {TYPES[a.dtype][0]} values is taken on the "
            "tensor cores, in another order (within tolerance)",
        ),
    )
    # WMMA on half from sm_70 (Volta's tensor cores), on bfloat16 from sm_80
    return replace(candidate, min_arch=80 if a.dtype == "bfloat16" else 70)


def description(contraction: Contraction, dtype: str) -> str:
    skipped = ", tiles no output reads skipped" if contraction.unread else ""
    return (
        f"tiled contraction over {contraction.k} on the tensor cores: {BM}x{BN}x{BK} tiles of "
        f"{TYPES[dtype][0]} double-buffered with asynchronous copies, 16x16x16 WMMA fragments summed in "
        f"float, 64x32 outputs a warp, stored through shared memory{skipped}"
    )


def mma_tiles(names: dict[str, str], contraction: Contraction, a: Element, b: Element) -> str:
    """The kernel's body, its locals named as `mma_candidate` chose (`MMA_LOCALS`)."""
    n, x = names, contraction
    fragment_type, _, convert = TYPES[a.dtype]
    bm, bn, bk, t, kk, i, j, e = n["BM"], n["BN"], n["BK"], n["t"], n["kk"], n["i"], n["j"], n["e"]
    tid, acc, tiles, staged = n["tid"], n["acc"], f"{n['smem']}.{n['tiles']}", f"{n['smem']}.{n['staged']}"
    r, c, v = n["r"], n["c"], n["v"]

    def stored(value: str, side: Element) -> str:
        return value if side.direct else f"{convert}(static_cast<float>({value}))"

    def load(side: Element, factor: Factor, tile: str, rows: bool, k0: str, pad: str) -> str:
        """Eight neighbouring elements a thread along the index the factor walks memory along, of the tile
        at `k0`: one asynchronous 16-byte copy where all eight are in range and aligned (the bits are the
        same whatever the element's type is called), else one at a time (0 outside)."""
        extent = bm if rows else bn
        if factor.k_fast:
            outer, inner = f"{e} / ({bk} / 8)", f"{e} % ({bk} / 8) * 8"
        else:
            outer, inner = f"{e} % ({extent} / 8) * 8", f"{e} / ({extent} / 8)"
        first, bound = (n["row0"], x.rows) if rows else (n["col0"], x.cols)
        k, outer_index = (c, r) if rows else (r, c)  # the factor's locals holding k and the outer index
        place = f"{outer_index} = {first} + {outer}, {k} = {inner if k0 == '0' else f'{k0} + {inner}'}"
        moving = k if factor.k_fast else outer_index
        # the tile keeps the factor's memory order: [outer][k] where it walks k, else [k][outer]
        slot = f"&{tile}[{outer}][{inner}]" if factor.k_fast else f"&{tile}[{inner}][{outer}]"

        def in_range(step: str) -> str:
            return within(outer_index, k, moving, step, bound, x.depth)

        one = f"({in_range(v)}) ? {stored(placed(side.at, r, c, moving, v), side)} : {convert}(0.0f)"
        copy = ""
        if factor.vector_at is not None:  # the factor's loads are contiguous along `moving`
            address = f"&({placed(side.at, r, c, moving)})"
            copy = f"""\
{pad}    if ({in_range("7")} && reinterpret_cast<unsigned long long>({address}) % 16 == 0) {{
{pad}        __pipeline_memcpy_async({n["to"]}, {address}, 16);
{pad}        continue;
{pad}    }}
"""
        return f"""\
{pad}#pragma unroll
{pad}for (int {i} = 0; {i} < {extent} * {bk} / 8 / {THREADS}; ++{i}) {{
{pad}    const int {e} = {tid} + {i} * {THREADS};
{pad}    const int {place};
{pad}    {fragment_type}* {n["to"]} = {slot};
{copy}{pad}    for (int {v} = 0; {v} < 8; ++{v})  // at the edges, or misaligned
{pad}        {n["to"]}[{v}] = {one};
{pad}}}"""

    # Each tile in its factor's memory order, so that a thread's eight neighbouring elements are one
    # 16-byte store: A (rows x k) row-major where it walks k, else column-major; B (k x cols) the other
    # way round. WMMA reads either layout.
    def tile(name: str, k_fast: bool, extent: str, first: str, row_factor: bool) -> tuple[str, ...]:
        """(its fragments' layout, its declared shape, a fragment's first element, its leading dimension)"""
        if k_fast:
            layout = "row_major" if row_factor else "col_major"
            return layout, f"[{extent}][{bk} + 8]", f"&{name}[{first}][{kk}]", f"{bk} + 8"
        layout = "col_major" if row_factor else "row_major"
        return layout, f"[{bk}][{extent} + 8]", f"&{name}[{kk}][{first}]", f"{extent} + 8"

    a_row, b_col = f"{n['wr']} * 64 + {i} * 16", f"{n['wc']} * 32 + {j} * 16"
    buf, a_tiles, b_tiles = n["buf"], f"{tiles}.{n['As']}", f"{tiles}.{n['Bs']}"
    a_layout, a_shape, a_at, a_lead = tile(f"{a_tiles}[{buf}]", x.a.k_fast, bm, a_row, True)
    b_layout, b_shape, b_at, b_lead = tile(f"{b_tiles}[{buf}]", x.b.k_fast, bn, b_col, False)

    def loads(k0: str, into: str, pad: str) -> str:
        return "\n".join(
            load(side, factor, f"{name}[{into}]", rows, k0, pad)
            for side, factor, name, rows in ((a, x.a, a_tiles, True), (b, x.b, b_tiles, False))
        )

    loop = f"""\
    const int {n["steps"]} = ({x.depth} + {bk} - 1) / {bk};
{loads("0", "0", " " * 4)}
    __pipeline_commit();
    for (int {t} = 0; {t} < {n["steps"]}; ++{t}) {{
        const int {buf} = {t} & 1;
        if ({t} + 1 < {n["steps"]}) {{  // the next tile is copied in while this one is multiplied
{loads(f"({t} + 1) * {bk}", f"{buf} ^ 1", " " * 12)}
        }}
        __pipeline_commit();
        __pipeline_wait_prior(1);  // this tile's copies have landed; the next one's may be in flight
        __syncthreads();
        #pragma unroll
        for (int {kk} = 0; {kk} < {bk}; {kk} += 16) {{
            wmma::fragment<wmma::matrix_a, 16, 16, 16, {fragment_type}, wmma::{a_layout}> {n["a_frag"]}[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, {fragment_type}, wmma::{b_layout}> {n["b_frag"]}[2];
            #pragma unroll
            for (int {i} = 0; {i} < 4; ++{i})
                wmma::load_matrix_sync({n["a_frag"]}[{i}], {a_at}, {a_lead});
            #pragma unroll
            for (int {j} = 0; {j} < 2; ++{j})
                wmma::load_matrix_sync({n["b_frag"]}[{j}], {b_at}, {b_lead});
            #pragma unroll
            for (int {i} = 0; {i} < 4; ++{i})
                #pragma unroll
                for (int {j} = 0; {j} < 2; ++{j})
                    wmma::mma_sync({acc}[{i}][{j}], {n["a_frag"]}[{i}], {n["b_frag"]}[{j}], {acc}[{i}][{j}]);
        }}
        __syncthreads();  // this buffer is filled again the step after next
    }}"""
    loop = skipping_unread(x, n, loop)
    row, col = x.place
    per_output = output_statements(x, " " * 12, f"{staged}[{n['lr']}][{n['lc']}]", placed=True)
    per_output = per_output.lstrip("\n")
    return f"""{{
    // A tiled contraction over {x.k} on the tensor cores: each block of {THREADS} threads computes a
    // {bm} x {bn} tile of the outputs, each warp 64 x 32 of them as 4 x 2 fragments of 16 x 16 summed in
    // float. The factors pass through shared memory {bk} deep as {fragment_type}, double-buffered (the next
    // tile's asynchronous copies in flight while this one is multiplied), each in its own memory order
    // with 8 elements of padding a row (a leading dimension WMMA takes; fragment loads spread over banks).
    using namespace nvcuda;
    constexpr int {bm} = {BM}, {bn} = {BN}, {bk} = {BK};
    __shared__ __align__(32) union {{
        struct {{
            {fragment_type} {n["As"]}[2]{a_shape};  // double-buffered
            {fragment_type} {n["Bs"]}[2]{b_shape};
        }} {n["tiles"]};
        float {n["staged"]}[64][{bn} + 4];  // the finished outputs, 64 rows at a time, on their way out
    }} {n["smem"]};

    const int {tid} = threadIdx.x, {n["warp"]} = {tid} / 32;
    const int {n["wr"]} = {n["warp"]} / 4, {n["wc"]} = {n["warp"]} % 4;  // the warp's 64 rows, 32 columns
    const int {n["row0"]} = blockIdx.y * {bm}, {n["col0"]} = blockIdx.x * {bn};
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> {acc}[4][2];
    #pragma unroll
    for (int {i} = 0; {i} < 4; ++{i})
        #pragma unroll
        for (int {j} = 0; {j} < 2; ++{j})
            wmma::fill_fragment({acc}[{i}][{j}], 0.0f);

{loop}

    // The outputs leave through shared memory, the warps of one half of the rows at a time, so that a
    // warp runs the user's statements on 32 neighbouring outputs of one row: coalesced, whatever they
    // load or store. The last barrier above (or none, for a skipped tile) leaves the tiles free.
    #pragma unroll
    for (int {n["slab"]} = 0; {n["slab"]} < 2; ++{n["slab"]}) {{
        if ({n["wr"]} == {n["slab"]}) {{
            #pragma unroll
            for (int {i} = 0; {i} < 4; ++{i})
                #pragma unroll
                for (int {j} = 0; {j} < 2; ++{j})
                    wmma::store_matrix_sync(&{staged}[{i} * 16][{n["wc"]} * 32 + {j} * 16], {acc}[{i}][{j}], {bn} + 4,
                                            wmma::mem_row_major);
        }}
        __syncthreads();
        for (int {n["s"]} = 0; {n["s"]} < 64 * {bn} / {THREADS}; ++{n["s"]}) {{
            const int {n["f"]} = {tid} + {n["s"]} * {THREADS};
            const int {n["lr"]} = {n["f"]} / {bn}, {n["lc"]} = {n["f"]} % {bn};
            const int {row} = {n["row0"]} + {n["slab"]} * 64 + {n["lr"]};
            const int {col} = {n["col0"]} + {n["lc"]};
{per_output}
        }}
        __syncthreads();
    }}
}}"""  # noqa: E501
