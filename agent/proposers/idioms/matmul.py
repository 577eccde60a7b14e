"""A naive matrix multiply -> a shared-memory tiled, register-blocked SGEMM.

Recognised: a 2-D kernel with a thread per C element (`row`, `col` from blockIdx/threadIdx), a bounds
check `row < M && col < N`, and in it exactly `float acc = 0; for (k = 0; k < K; ++k) acc += A[row * lda
+ k] * B[k * ldb + col];` followed by the statements that store `acc` (any epilogue: `C[row * ldc + col]
= alpha * acc + beta * C[...]` works, it is kept verbatim). Both operands row-major, fp32.

Rewritten: a block of 256 threads computes a BM x BN tile of C; A and B tiles of depth BK=16 are staged
through shared memory (A transposed, so the inner loop reads both with float4), double-buffered with the
next tile's global loads in flight during the current tile's math; each thread keeps (BM/16) x (BN/16)
accumulators in registers. Every load and store is bounds-checked, so M, N, K need not be multiples of
anything; loads past an edge read as zero, which adds nothing to the sums.
"""

from __future__ import annotations

from dataclasses import replace

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import (
    ZERO_LITERALS,
    KernelTree,
    accumulation,
    build_candidate,
    counted_loop,
    declared_names,
    element_type,
    guarded_region,
    identifiers,
    identifiers_in,
    index_variables,
    linear_form,
    local_names,
    single_declaration,
    size_expression,
    statements,
    strip_parens,
    subscript_parts,
    untemplated_kernel_tree,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "idiom:matmul"
THREADS = 256
# (quads of 4 rows, quads of 4 columns) per thread, compiler flags: 128x128 tiles for big matrices (also
# capped at 128 registers, two blocks per SM instead of one at ~167), smaller tiles so mid-sized ones
# still fill 132 SMs.
SHAPES: tuple[tuple[int, int, tuple[str, ...]], ...] = (
    (2, 2, ()),
    (2, 2, ("-maxrregcount=128",)),
    (2, 1, ()),
    (1, 1, ()),
)


class _Match:
    def __init__(self, **fields: str) -> None:
        self.__dict__.update(fields)

    row: str
    col: str
    k: str
    acc: str
    a: str
    b: str
    lda: str
    ldb: str
    m: str
    n: str
    kdim: str
    epilogue: str


def _recognise(tree: KernelTree) -> _Match | None:
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(indices) != 2 or {axis for axis, _ in indices.values()} != {"x", "y"}:
        return None
    if any(s.type != "declaration" or s not in [d for _, d in indices.values()] for s in guarded.prefix):
        return None
    body = guarded.statements
    if len(body) < 3:
        return None
    declaration = single_declaration(body[0], tree)
    loop = counted_loop(body[1], tree)
    if declaration is None or loop is None or declaration[0] != "float":
        return None
    _, acc, init = declaration
    if init is None or tree.text(init) not in ZERO_LITERALS or tree.text(loop.start).strip() != "0":
        return None
    inner = statements(loop.body)
    folded = accumulation(inner[0], tree) if len(inner) == 1 else None
    if folded is None or folded.name != acc or folded.combiner != "+":
        return None
    product = strip_parens(folded.value)
    op = product.child_by_field_name("operator")
    left, right = product.child_by_field_name("left"), product.child_by_field_name("right")
    if product.type != "binary_expression" or op is None or op.type != "*" or left is None or right is None:
        return None
    k = loop.variable
    for first, second in ((left, right), (right, left)):
        found = _operands(tree, first, second, k, set(indices))
        if found is None:
            continue
        a, lda, row, b, ldb, col = found
        if row not in guarded.bounds or col not in guarded.bounds:
            return None
        epilogue = body[2:]
        locals_ = declared_names(tree.body, tree)
        allowed = {acc, row, col}
        for statement in epilogue:
            if statement.type != "expression_statement" or (identifiers(statement) & locals_) - allowed:
                return None
        parameters = {p.name for p in tree.target.kernel.parameters}
        sizes = (guarded.bounds[row], guarded.bounds[col], tree.text(loop.bound), lda, ldb)
        if any(identifiers_in(tree, text) - parameters for text in sizes):
            return None
        return _Match(
            row=row, col=col, k=k, acc=acc, a=a, b=b, lda=lda, ldb=ldb,
            m=guarded.bounds[row], n=guarded.bounds[col], kdim=tree.text(loop.bound),
            epilogue="\n".join(tree.text(s) for s in epilogue),
        )  # fmt: skip
    return None


def _operands(
    tree: KernelTree, first: object, second: object, k: str, indices: set[str]
) -> tuple[str, str, str, str, str, str] | None:
    """(A, lda, row, B, ldb, col) when `first` is A[row * lda + k] and `second` is B[k * ldb + col]."""
    a_part, b_part = subscript_parts(first), subscript_parts(second)  # type: ignore[arg-type]
    if a_part is None or b_part is None:
        return None
    a_form, b_form = linear_form(a_part[1]), linear_form(b_part[1])
    if a_form is None or b_form is None or len(a_form) != 2 or len(b_form) != 2:
        return None
    if a_form.pop((k,), None) != 1:
        return None
    ((a_term, a_coef),) = a_form.items()
    b_singles = [m for m, c in b_form.items() if len(m) == 1 and c == 1 and m[0] in indices]
    if a_coef != 1 or len(a_term) != 2 or len(b_singles) != 1:
        return None
    col = b_singles[0][0]
    b_form.pop((col,))
    ((b_term, b_coef),) = b_form.items()
    if b_coef != 1 or len(b_term) != 2 or k not in b_term:
        return None
    rows = [name for name in a_term if name in indices]
    if len(rows) != 1 or rows[0] == col:
        return None
    row = rows[0]
    lda = a_term[1] if a_term[0] == row else a_term[0]
    ldb = b_term[1] if b_term[0] == k else b_term[0]
    if lda in indices or ldb in indices or lda == k or ldb == k:
        return None
    for name in (a_part[0], b_part[0]):
        if element_type(tree.parameter(name)) != "float":
            return None
    return a_part[0], lda, row, b_part[0], ldb, col


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    match = _recognise(tree) if tree is not None else None
    if tree is None or match is None:
        return []
    m_size, n_size = size_expression(tree, match.m), size_expression(tree, match.n)
    if m_size is None or n_size is None or not _block_fits(target):
        return []
    candidates = []
    for quads_m, quads_n, flags in SHAPES:
        tile_m, tile_n = 64 * quads_m, 64 * quads_n
        launch = LaunchSpec(
            block=(THREADS,),
            grid=(f"ceil_div({n_size}, {tile_n})", f"ceil_div({m_size}, {tile_m})"),
        )
        candidate = build_candidate(
            tree,
            body=_body(tree, match, quads_m, quads_n),
            launch=launch,
            description=(
                f"tiled SGEMM: {tile_m}x{tile_n} shared-memory tiles, "
                f"{4 * quads_m}x{4 * quads_n} outputs per thread in registers"
            ),
            proposer=PROPOSER,
            assumptions=("float sums over K are reassociated into fused multiply-adds (within tolerance)",),
        )
        if flags:
            candidate = replace(candidate, flags=flags, description=candidate.description + ", 128 registers")
        candidates.append(candidate)
    return candidates


def _block_fits(target: KernelTarget) -> bool:
    bounds = target.kernel.launch_bounds
    first = bounds.split(",")[0].strip() if bounds else ""
    return not first or (first.isdigit() and int(first) >= THREADS)


def _body(tree: KernelTree, match: _Match, quads_m: int, quads_n: int) -> str:
    names = local_names(
        tree, "BM", "BN", "BK", "As", "Bs", "tid", "tx", "ty", "row0", "col0", "accum", "a_next", "b_next",
        "tiles", "t", "buf", "kk", "a_frag", "b_frag", "i", "j", "q", "v", "r", "c", "k0",
    )  # fmt: skip
    n = {**names, **match.__dict__, "QM": str(quads_m), "QN": str(quads_n)}

    def load(k0: str) -> str:
        return f"""\
        #pragma unroll
        for (int {n["i"]} = 0; {n["i"]} < {n["BM"]} / 16; ++{n["i"]}) {{
            const int {n["r"]} = {n["row0"]} + {n["tid"]} / {n["BK"]} + 16 * {n["i"]}, {n["c"]} = {k0} + {n["tid"]} % {n["BK"]};
            {n["a_next"]}[{n["i"]}] = ({n["r"]} < {n["m"]} && {n["c"]} < {n["kdim"]}) ? {n["a"]}[(size_t){n["r"]} * {n["lda"]} + {n["c"]}] : 0.0f;
        }}
        #pragma unroll
        for (int {n["i"]} = 0; {n["i"]} < {n["BN"]} / 16; ++{n["i"]}) {{
            const int {n["r"]} = {k0} + {n["tid"]} / {n["BN"]} + ({THREADS} / {n["BN"]}) * {n["i"]}, {n["c"]} = {n["col0"]} + {n["tid"]} % {n["BN"]};
            {n["b_next"]}[{n["i"]}] = ({n["r"]} < {n["kdim"]} && {n["c"]} < {n["n"]}) ? {n["b"]}[(size_t){n["r"]} * {n["ldb"]} + {n["c"]}] : 0.0f;
        }}"""  # noqa: E501

    def store(buf: str) -> str:
        return f"""\
        #pragma unroll
        for (int {n["i"]} = 0; {n["i"]} < {n["BM"]} / 16; ++{n["i"]})
            {n["As"]}[{buf}][{n["tid"]} % {n["BK"]}][{n["tid"]} / {n["BK"]} + 16 * {n["i"]}] = {n["a_next"]}[{n["i"]}];
        #pragma unroll
        for (int {n["i"]} = 0; {n["i"]} < {n["BN"]} / 16; ++{n["i"]})
            {n["Bs"]}[{buf}][{n["tid"]} / {n["BN"]} + ({THREADS} / {n["BN"]}) * {n["i"]}][{n["tid"]} % {n["BN"]}] = {n["b_next"]}[{n["i"]}];"""  # noqa: E501

    epilogue = "\n".join("                " + line.strip() for line in n["epilogue"].splitlines())
    return f"""{{
    // Tiled SGEMM: each block of {THREADS} threads computes a {n["BM"]} x {n["BN"]} tile of the result; each
    // thread holds {4 * quads_m} x {4 * quads_n} accumulators in registers. Tiles of A (stored transposed) and
    // {n["b"]} pass through shared memory, double-buffered: the next tile's loads are in flight while
    // the current one is multiplied. Out-of-range elements load as 0, so any sizes work.
    constexpr int {n["BM"]} = {64 * quads_m}, {n["BN"]} = {64 * quads_n}, {n["BK"]} = 16;
    __shared__ __align__(16) float {n["As"]}[2][{n["BK"]}][{n["BM"]} + 4];  // +4: float4-aligned rows, fewer bank conflicts
    __shared__ __align__(16) float {n["Bs"]}[2][{n["BK"]}][{n["BN"]}];

    const int {n["tid"]} = threadIdx.x;
    const int {n["tx"]} = {n["tid"]} % 16, {n["ty"]} = {n["tid"]} / 16;
    const int {n["row0"]} = blockIdx.y * {n["BM"]}, {n["col0"]} = blockIdx.x * {n["BN"]};
    float {n["accum"]}[4 * {quads_m}][4 * {quads_n}] = {{}};
    float {n["a_next"]}[{n["BM"]} / 16], {n["b_next"]}[{n["BN"]} / 16];
    const int {n["tiles"]} = ({n["kdim"]} + {n["BK"]} - 1) / {n["BK"]};

    {{
        const int {n["k0"]} = 0;
{load(n["k0"])}
{store("0")}
    }}
    __syncthreads();

    for (int {n["t"]} = 0; {n["t"]} < {n["tiles"]}; ++{n["t"]}) {{
        const int {n["buf"]} = {n["t"]} & 1;
        if ({n["t"]} + 1 < {n["tiles"]}) {{
            const int {n["k0"]} = ({n["t"]} + 1) * {n["BK"]};
    {load(n["k0"]).replace(chr(10), chr(10) + "    ")}
        }}
        #pragma unroll
        for (int {n["kk"]} = 0; {n["kk"]} < {n["BK"]}; ++{n["kk"]}) {{
            float {n["a_frag"]}[4 * {quads_m}], {n["b_frag"]}[4 * {quads_n}];
            #pragma unroll
            for (int {n["q"]} = 0; {n["q"]} < {quads_m}; ++{n["q"]}) {{
                const float4 {n["v"]} = *reinterpret_cast<const float4*>(&{n["As"]}[{n["buf"]}][{n["kk"]}][{n["q"]} * 64 + {n["ty"]} * 4]);
                {n["a_frag"]}[4 * {n["q"]}] = {n["v"]}.x; {n["a_frag"]}[4 * {n["q"]} + 1] = {n["v"]}.y;
                {n["a_frag"]}[4 * {n["q"]} + 2] = {n["v"]}.z; {n["a_frag"]}[4 * {n["q"]} + 3] = {n["v"]}.w;
            }}
            #pragma unroll
            for (int {n["q"]} = 0; {n["q"]} < {quads_n}; ++{n["q"]}) {{
                const float4 {n["v"]} = *reinterpret_cast<const float4*>(&{n["Bs"]}[{n["buf"]}][{n["kk"]}][{n["q"]} * 64 + {n["tx"]} * 4]);
                {n["b_frag"]}[4 * {n["q"]}] = {n["v"]}.x; {n["b_frag"]}[4 * {n["q"]} + 1] = {n["v"]}.y;
                {n["b_frag"]}[4 * {n["q"]} + 2] = {n["v"]}.z; {n["b_frag"]}[4 * {n["q"]} + 3] = {n["v"]}.w;
            }}
            #pragma unroll
            for (int {n["i"]} = 0; {n["i"]} < 4 * {quads_m}; ++{n["i"]})
                #pragma unroll
                for (int {n["j"]} = 0; {n["j"]} < 4 * {quads_n}; ++{n["j"]})
                    {n["accum"]}[{n["i"]}][{n["j"]}] = fmaf({n["a_frag"]}[{n["i"]}], {n["b_frag"]}[{n["j"]}], {n["accum"]}[{n["i"]}][{n["j"]}]);
        }}
        // The other buffer was last read before the previous barrier, so it is free to fill now.
        if ({n["t"]} + 1 < {n["tiles"]}) {{
    {store(f"{n['buf']} ^ 1").replace(chr(10), chr(10) + "    ")}
        }}
        __syncthreads();
    }}

    // Each thread's rows are ty*4 .. ty*4+3 in each 64-row slab of the tile (columns likewise), so
    // the float4 reads above are conflict-free; the user's epilogue runs once per in-range element.
    #pragma unroll
    for (int {n["i"]} = 0; {n["i"]} < 4 * {quads_m}; ++{n["i"]}) {{
        const int {n["row"]} = {n["row0"]} + ({n["i"]} / 4) * 64 + {n["ty"]} * 4 + {n["i"]} % 4;
        #pragma unroll
        for (int {n["j"]} = 0; {n["j"]} < 4 * {quads_n}; ++{n["j"]}) {{
            const int {n["col"]} = {n["col0"]} + ({n["j"]} / 4) * 64 + {n["tx"]} * 4 + {n["j"]} % 4;
            if ({n["row"]} < {n["m"]} && {n["col"]} < {n["n"]}) {{
                const float {n["acc"]} = {n["accum"]}[{n["i"]}][{n["j"]}];
{epilogue}
            }}
        }}
    }}
}}"""  # noqa: E501
