"""The kernel analysis reads what a kernel computes, not how it is spelled: one index written in two steps,
through a pointer local, a macro or a helper gives one form; bounds are normalised; reductions are found
by their combine; the stride between neighbouring threads is the coalescing model."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.analysis import KernelFacts, analyse
from cuda_agent.agent.analysis.facts import ARGMAX, ARGMIN, FIND_FIRST, LOGSUMEXP, MAX, MIN, PRODUCT, SUM
from cuda_agent.agent.analysis.forms import LANE, Form
from cuda_agent.agent.proposers.tree import kernel_tree
from cuda_agent.agent.targets import load_targets

SPEC = """/* cuda-agent
[sizes]
rows = 64
cols = 96
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
out = { role = "output", dtype = "int32", shape = ["rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]
*/
"""
SIGNATURE = "__global__ void k(const float* x, float* y, int* out, int rows, int cols)"


def facts_of(body: str, before: str = "", grid: str = '"ceil_div(rows, block.x)"') -> KernelFacts:
    spec = SPEC.replace('grid = ["ceil_div(rows, block.x)"]', f"grid = [{grid}]")
    source = spec + before + SIGNATURE + " {\n" + body + "\n}\n"
    target = load_targets(Path("k.cu"), source).find("k")
    assert target is not None and target.spec is not None
    tree = kernel_tree(target)
    assert tree is not None
    facts = analyse(tree)
    assert facts is not None
    return facts


def loads(facts: KernelFacts, array: str = "x") -> list[str]:
    return [a.offset.text() for a in facts.accesses if a.array == array and not a.write]


ROW_READ = "blockDim.x*blockIdx.x*cols + cols*threadIdx.x + c"


@pytest.mark.parametrize(
    ("before", "body"),
    [
        ("", "int r = blockIdx.x * blockDim.x + threadIdx.x; float s = 0;\n"
             "for (int c = 0; c < cols; ++c) s += x[r * cols + c]; out[r] = s;"),
        # the pointer of the row, the index in two steps, operands swapped
        ("", "int r = threadIdx.x + blockDim.x * blockIdx.x; const float* row = x + cols * r; float s = 0;\n"
             "for (int c = 0; c < cols; c++) { float v = row[c]; s += v; } out[r] = s;"),
        # a function-like macro and a one-line helper
        ("#define AT(i, j) ((i) * cols + (j))\n",
         "int r = blockIdx.x * blockDim.x + threadIdx.x; float s = 0;\n"
         "for (int c = 0; c < cols; c += 1) s += x[AT(r, c)]; out[r] = s;"),
        ("__device__ __forceinline__ int at(int i, int j, int n) { return i * n + j; }\n",
         "int r = blockIdx.x * blockDim.x + threadIdx.x; float s = 0;\n"
         "for (int c = 0; c < cols; c = c + 1) s += *(x + at(r, c, cols)); out[r] = s;"),
        # a flat index taken apart into (row, column) and put back together
        ("", "int i = blockIdx.x * blockDim.x + threadIdx.x; int r = i / cols; int c0 = i % cols;\n"
             "float s = 0;\n"
             "for (int c = 0; c < cols; ++c) s += x[r * cols + c0 - c0 + c]; out[r] = s;"),
    ],
)  # fmt: skip
def test_one_row_read_however_it_is_spelled(before: str, body: str) -> None:
    facts = facts_of(body, before)
    if "i / cols" in body:
        assert len(set(loads(facts))) == 1 and "c" in loads(facts)[0]
        return
    assert loads(facts) == [ROW_READ]
    (access,) = [a for a in facts.accesses if a.array == "x"]
    assert access.stride("c") == Form.constant(1) and access.stride(LANE) == Form.atom("cols")
    (loop,) = facts.loops
    assert loop.trip == Form.atom("cols") and loop.independent
    assert [(r.combine, r.accumulators) for r in loop.reductions] == [(SUM, ("s",))]


def test_a_split_index_recombines_to_the_flat_one() -> None:
    facts = facts_of("int idx = blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "int b = idx / cols; int t = idx % cols; y[b * cols + t] = x[idx];")  # fmt: skip
    (read,) = [a for a in facts.accesses if a.array == "x"]
    (write,) = [a for a in facts.accesses if a.array == "y"]
    assert write.offset == read.offset and write.lane_stride == 1


@pytest.mark.parametrize(
    ("condition", "early", "bound"),
    [
        ("r < rows", False, "rows"),
        ("r <= rows - 1", False, "rows"),
        ("rows > r", False, "rows"),
        ("r >= rows", True, "rows"),
        ("r > rows - 1", True, "rows"),
        ("rows - 1 < r", True, "rows"),
        ("r <= cols - 3", False, "cols - 2"),
    ],
)
def test_bounds_are_normalised_to_an_exclusive_limit(condition: str, early: bool, bound: str) -> None:
    rest = "y[r] = x[r];"
    body = "int r = blockIdx.x * blockDim.x + threadIdx.x;\n" + (
        f"if ({condition}) return;\n{rest}" if early else f"if ({condition}) {{ {rest} }}"
    )
    facts = facts_of(body)
    assert facts.guard is not None and facts.guard.early_return == early
    (limit,) = facts.guard.bounds
    assert limit.index == "r" and limit.bound.text() == bound


@pytest.mark.parametrize(
    ("after", "a_check"),
    [
        ("__syncthreads();", True),
        ("return;", True),
        ("__syncthreads(); return;", True),
        ("out[r] = 0;", False),
    ],
)
def test_only_statements_without_effect_may_follow_the_bounds_check(after: str, a_check: bool) -> None:
    index = "int r = blockIdx.x * blockDim.x + threadIdx.x;"
    facts = facts_of(f"{index}\nif (r < rows) {{ y[r] = x[r]; }}\n{after}")
    assert (facts.guard is not None) == a_check


def test_a_pointer_local_cast_to_other_elements_is_not_the_parameter() -> None:
    # x's floats read as doubles: element i of g is not element i of x
    facts = facts_of("int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "const double* g = (const double*)x;\nif (r < rows) y[r] = (float)g[r];")  # fmt: skip
    assert not [a for a in facts.accesses if a.array == "x"] and facts.unmodelled
    same = facts_of("int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "const float* g = (const float*)x;\nif (r < rows) y[r] = g[r];")  # fmt: skip
    assert loads(same) == ["blockDim.x*blockIdx.x + threadIdx.x"] and not same.unmodelled


def test_an_atomic_inside_a_condition_is_a_store() -> None:
    facts = facts_of("int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "if (r < rows) { if (atomicAdd(&out[r], 1) == 0) y[r] = x[r]; }")  # fmt: skip
    assert facts.atomics
    assert [a.array for a in facts.accesses if a.write] == ["out", "y"]


def test_a_bound_through_a_local_and_other_conjuncts() -> None:
    facts = facts_of("int i = blockIdx.y * blockDim.y + threadIdx.y;\n"
                     "int j = blockIdx.x * blockDim.x + threadIdx.x; int n = rows * 2;\n"
                     "if (i < n && j < cols && j <= i) y[i * cols + j] = 0;",
                     grid='"ceil_div(cols, block.x)", "ceil_div(rows, block.y)"')  # fmt: skip
    assert facts.guard is not None
    assert {b.index: b.bound.text() for b in facts.guard.bounds} == {"i": "2*rows", "j": "cols"}
    assert len(facts.guard.others) == 1  # j <= i bounds an index by another index
    assert {i.name: i.axis for i in facts.indices} == {"i": "y", "j": "x"}


@pytest.mark.parametrize("index", [
    "(blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x",
    "blockDim.x * (gridDim.x * blockIdx.y + blockIdx.x) + threadIdx.x",
])  # fmt: skip
def test_a_line_of_blocks_is_the_x_index_on_a_1d_grid_and_two_axes_on_a_2d_one(index: str) -> None:
    body = f"int r = {index};\nif (r < rows) out[r] = 1;"
    (one_d,) = facts_of(body).indices
    assert (one_d.axis, one_d.form) == (
        "x",
        Form.atom("blockIdx.x") * Form.atom("blockDim.x") + Form.atom("threadIdx.x"),
    )
    (two_d,) = facts_of(body, grid='"16", "4"').indices
    assert two_d.axis is None and "blockIdx.y" in two_d.form.atoms()


@pytest.mark.parametrize(
    ("kind", "index"),
    [("uint32_t", True), ("unsigned long", True), ("int64_t", True), ("ptrdiff_t", True), ("short", False)],
)
def test_an_index_of_any_32_or_64_bit_integer_spelling(kind: str, index: bool) -> None:
    """`uint32_t x = threadIdx.x + ...` is the x index as `int x = ...` is; a 16-bit one would wrap."""
    facts = facts_of(f"{kind} r = threadIdx.x + blockDim.x * blockIdx.x;\nif (r < rows) out[r] = 1;")
    assert [(i.name, i.axis) for i in facts.indices] == ([("r", "x")] if index else [])


REDUCE = "int r = blockIdx.x * blockDim.x + threadIdx.x; if (r >= rows) return;\n"


@pytest.mark.parametrize(
    "body",
    [
        "float m = -INFINITY, s = 0.0f; for (int c = 0; c < cols; ++c) { float v = row[c];"
        " if (v > m) { s *= expf(m - v); m = v; } s += expf(v - m); } y[r] = s;",
        "float m = -1e30f; float s = 0.0f; for (int c = 0; c < cols; ++c) { float mn = fmaxf(m, row[c]);"
        " s = s * __expf(m - mn) + __expf(row[c] - mn); m = mn; } y[r] = m + logf(s);",
        # the rescale in one branch, the plain add in the other, the old maximum copied first
        "float m = -INFINITY; double s = 0.0; for (int c = 0; c < cols; ++c) { float before = m;"
        " float v = row[c]; if (v > m) { m = v; s = s * expf(before - m) + expf(v - m); }"
        " else { s += expf(v - m); } } y[r] = s;",
    ],
)
def test_the_online_softmax_normaliser_is_a_logsumexp_pair(body: str) -> None:
    (loop,) = facts_of(REDUCE + "const float* row = x + r * cols;\n" + body).loops
    (reduction,) = loop.reductions
    assert reduction.combine == LOGSUMEXP and reduction.accumulators == ("m", "s")
    assert loop.independent and not loop.carried


def test_a_sum_rescaled_by_something_else_is_not_a_logsumexp() -> None:
    body = (
        "float m = -INFINITY, s = 0.0f; for (int c = 0; c < cols; ++c) { float v = row[c];"
        " if (v > m) { s *= 0.5f; m = v; } s += expf(v - m); } y[r] = s;"
    )
    (loop,) = facts_of(REDUCE + "const float* row = x + r * cols;\n" + body).loops
    assert not loop.independent and loop.carried == {"m", "s"}


@pytest.mark.parametrize(
    ("body", "combine", "accumulators", "first"),
    [
        ("float s = 0; for (int c = 0; c < cols; ++c) s = s + row[c]; y[r] = s;", SUM, ("s",), True),
        ("float s = 0; for (int c = 0; c < cols; ++c) s = row[c] + s; y[r] = s;", SUM, ("s",), True),
        ("float s = 0; for (int c = 0; c < cols; ++c) s -= row[c]; y[r] = s;", SUM, ("s",), True),
        ("int n = 0; for (int c = 0; c < cols; ++c) if (row[c] > 0) n++; out[r] = n;", SUM, ("n",), True),
        ("float p = 1; for (int c = 0; c < cols; ++c) p *= row[c]; y[r] = p;", PRODUCT, ("p",), True),
        # arithmetic spelled as calls
        ("float s = 0; for (int c = 0; c < cols; ++c) s = fmaf(row[c], row[c], s); y[r] = s;",
         SUM, ("s",), True),
        ("float s = 0; for (int c = 0; c < cols; ++c) s = __fmaf_rn(2.0f, row[c], s); y[r] = s;",
         SUM, ("s",), True),
        ("float s = 0; for (int c = 0; c < cols; ++c) s = __fadd_rn(row[c], s); y[r] = s;",
         SUM, ("s",), True),
        ("float m = row[0]; for (int c = 1; c < cols; ++c) m = fmaxf(m, row[c]); y[r] = m;",
         MAX, ("m",), True),
        ("float m = row[0]; for (int c = 1; c < cols; ++c) m = max(row[c], m); y[r] = m;",
         MAX, ("m",), True),
        ("float m = 1e30f; for (int c = 0; c < cols; ++c) { float v = row[c]; m = v < m ? v : m; } y[r] = m;",
         MIN, ("m",), True),
        ("float m = -1e30f; for (int c = 0; c < cols; ++c) { float v = row[c]; if (v > m) m = v; } y[r] = m;",
         MAX, ("m",), True),
        ("float b = row[0]; int a = 0; for (int c = 1; c < cols; c++) { float v = row[c];"
         " if (v > b) { b = v; a = c; } } out[r] = a;", ARGMAX, ("b", "a"), True),
        ("float b = 1e30f; int a = -1; for (int c = 0; c < cols; c++) { if (row[c] <= b)"
         " { a = c; b = row[c]; } } out[r] = a;", ARGMIN, ("b", "a"), False),
    ],
)  # fmt: skip
def test_reductions_are_found_by_their_combine(
    body: str, combine: str, accumulators: tuple[str, ...], first: bool
) -> None:
    (loop,) = facts_of(REDUCE + "const float* row = x + r * cols;\n" + body).loops
    (reduction,) = loop.reductions
    assert (reduction.combine, reduction.accumulators, reduction.first) == (combine, accumulators, first)
    assert loop.independent and not loop.carried


@pytest.mark.parametrize(
    "body",
    [
        # a running value carried between iterations
        "float prev = 0; for (int c = 0; c < cols; ++c) { y[r * cols + c] = x[r * cols + c] - prev;"
        " prev = x[r * cols + c]; }",
        # the accumulator read inside the loop
        "float s = 0; for (int c = 0; c < cols; ++c) { s += x[r * cols + c]; y[r * cols + c] = s; }",
        # a fused multiply-add that scales the accumulator: not a sum of the loop's values
        "float s = 1; for (int c = 0; c < cols; ++c) s = fmaf(s, x[r * cols + c], 1.0f); y[r] = s;",
        # a scan through memory: every iteration writes one element, but each reads the previous one's
        "for (int c = 1; c < cols; ++c) y[r * cols + c] = y[r * cols + c - 1] + x[r * cols + c];",
        # the same element written by every iteration
        "for (int c = 0; c < cols; ++c) y[r] = x[r * cols + c];",
        # an early exit
        "for (int c = 0; c < cols; ++c) { if (x[r * cols + c] < 0) break; y[r * cols + c] = 1; }",
    ],
)
def test_loops_whose_iterations_depend_on_each_other(body: str) -> None:
    (loop,) = facts_of(REDUCE + body).loops
    if "c - 1]" in body:
        # independent by its stores; what it reads back is another iteration's store, which the rewrites
        # check against the stores (a read of a stored array must be at the same offset)
        reads = [a.offset for a in facts_of(REDUCE + body).accesses if a.array == "y" and not a.write]
        writes = [a.offset for a in facts_of(REDUCE + body).accesses if a.array == "y" and a.write]
        assert reads != writes
        return
    assert not loop.independent


def test_coalescing_model_and_gathers() -> None:
    facts = facts_of(
        "int r = blockIdx.x * blockDim.x + threadIdx.x; if (r >= rows) return;\n"
        "int src = out[r]; float s = 0;\n"
        "for (int c = 0; c < cols; ++c) s += x[src * cols + c] + x[c * rows + r];\n"
        "y[r] = s;"
    )
    gather, column, _ = [a for a in facts.accesses if a.array == "x"] + [None]  # type: ignore[list-item]
    assert gather.stride(LANE) is None  # which row depends on a load: not affine across threads
    assert gather.stride("c") == Form.constant(1)
    assert column.lane_stride == 1 and column.stride("c") == Form.atom("rows")
    assert "at unrelated places" in facts.describe() and "a thread per r" in facts.describe()


def test_a_search_that_stops_at_its_first_find_is_a_reduction() -> None:
    (loop,) = facts_of(
        REDUCE + "const float* row = x + r * cols; int at = -1;\n"
        "for (int c = 0; c < cols; ++c) { float v = row[c]; if (v < 0) { at = c; break; } } out[r] = at;"
    ).loops
    (reduction,) = loop.reductions
    assert reduction.combine == FIND_FIRST and reduction.accumulators == ("at",) and loop.independent
    # any other way out of the loop, or a second use of the position, is not a search
    (loop,) = facts_of(
        REDUCE + "int at = -1; for (int c = 0; c < cols; ++c) { if (x[c] < 0 && c > at) { at = c; break; } }"
    ).loops
    assert not loop.independent


def test_the_description_is_in_the_kernels_own_spelling() -> None:
    facts = facts_of(
        "int r = blockIdx.x * blockDim.x + threadIdx.x; if (r >= rows) return;\n"
        "const float* row = x + (size_t)r * cols; float m = row[0];\n"
        "for (int c = 1; c < cols; ++c) m = fmaxf(m, row[c]); y[r] = m;"
    )
    assert facts.describe() == (
        "a thread per r; loop c to cols: max into m; row[0]: neighbouring threads cols elements apart"
    )


def test_a_grid_stride_loop_names_its_variable_not_the_stride_local_as_the_threads_position() -> None:
    facts = facts_of(
        "int stride = blockDim.x * gridDim.x;\n"
        "for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {\n"
        "    float s = 0; for (int c = 0; c < cols; ++c) s += x[r * cols + c]; y[r] = s; }",
        grid="64",
    )
    described = facts.describe()
    assert described.startswith("a thread per r (a grid-stride loop); loop r to rows by stride")
    assert "per stride" not in described


def test_accesses_it_cannot_place_are_kept_so_rewrites_can_refuse() -> None:
    facts = facts_of(
        "int r = blockIdx.x * blockDim.x + threadIdx.x; float buf[4]; buf[0] = x[r];\n"
        "float* p = (r % 2) ? y : y + 1; p[r] = buf[0];"
    )
    assert sorted((n.text or b"").decode() for n in facts.unmodelled) == ["buf[0]", "buf[0]", "p[r]"]


def test_a_deep_expression_does_not_take_the_analysis_down() -> None:
    body = "int r = blockIdx.x * blockDim.x + threadIdx.x; y[r] = " + " + ".join(["1"] * 3000) + ";"
    source = SPEC + SIGNATURE + " {\n" + body + "\n}\n"
    target = load_targets(Path("k.cu"), source).find("k")
    assert target is not None
    tree = kernel_tree(target)
    if tree is not None:
        analyse(tree)  # returns facts or None, never raises


def test_an_index_taken_apart_in_place_has_its_value_at_each_statement() -> None:
    facts = facts_of("""
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    int c = i % cols;
    i /= cols;
    y[i * cols + c] = x[i * cols + c];""")
    assert loads(facts) == ["blockDim.x*blockIdx.x + threadIdx.x"]
    assert facts.guard is not None and facts.guard.bounds[0].bound.text() == "cols*rows"
    # assigned in a loop, its value depends on the iteration: not followed
    looped = facts_of("""
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < 2; k++) { i /= cols; }
    y[i] = x[i];""")
    assert loads(looped) != ["blockDim.x*blockIdx.x + threadIdx.x"]


def test_loads_read_through_a_macro_are_placed_at_each_call_in_its_loop() -> None:
    """`#define AT(r, c) x[(r) * cols + (c)]` used in two loops and after them: three loads, each at its
    own call with its own loop (the macro's text is parsed apart, the same nodes for every call, so they
    once collapsed into the last one, outside any loop); the maximum taken through it is a reduction."""
    facts = facts_of(
        "int r = blockIdx.x * blockDim.x + threadIdx.x; if (r >= rows) return; float m = -1e30f;\n"
        "for (int c = 0; c < cols; c++) { if (AT(r, c) > m) m = AT(r, c); }\n"
        "float s = 0.0f; for (int c = 0; c < cols; c++) s += expf(AT(r, c) - m);\n"
        "y[r * cols] = s + AT(r, 0);",
        before="#define AT(r, c) x[(size_t)(r) * cols + (c)]\n",
    )
    placed = sorted((len(a.loops), a.offset.text()) for a in facts.accesses if a.array == "x")
    row_start = "blockDim.x*blockIdx.x*cols + cols*threadIdx.x"
    assert placed == [(0, row_start), (1, ROW_READ), (1, ROW_READ), (1, ROW_READ)]
    assert [[r.combine for r in loop.reductions] for loop in facts.loops] == [[MAX], [SUM]]
