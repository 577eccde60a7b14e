"""The stride-loop rewrite on CPU: a thread per element along x becomes a loop over the grid's x extent
(the grid along x a vector's width smaller), the bounds check's other conjuncts tested once before it,
and its follow-up makes each step one 16-byte vector an array, for offsets the syntactic vectorisers do
not take (an LSTM cell's three gates of a row, a PyTorch extension's accessors). Not offered where the
work reads the thread's place, syncs, returns or changes what the loop carries. The gpu-marked test
verifies the chain against the originals and measures it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.compile_environment import compile_in, environment_for
from cuda_agent.agent.proposers.rewrites import stride_loop, vector_loop
from cuda_agent.agent.search import _chained, _propose
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.test_rewrite_warp_per_output import needs_compiler, shown

OUTSIDE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside"

SPEC = """/* cuda-agent
[sizes]
M = 4096
N = 4000

[args]
a = {{ role = "input", dtype = "float32", shape = {a_shape} }}
b = {{ role = "input", dtype = "float32", shape = ["N"] }}
out = {{ role = "output", dtype = "float32", shape = ["M", "N"] }}
M = {{ role = "scalar", dtype = "int32", value = "M" }}
N = {{ role = "scalar", dtype = "int32", value = "N" }}

[launch]
block = {block}
grid = {grid}

[verify]
sizes = [{{ M = 7, N = 37 }}]
oracle = {{ out = "{oracle}" }}
*/
"""

# A bias added to every row, the row along y of the grid, the column along x; the row's offset computed
# in a local first, as first drafts often do.
ROW_BIAS = (
    SPEC.format(a_shape='["M", "N"]', block="[128]", grid='["ceil_div(N, block.x)", "M"]', oracle="a + b")
    + """__global__ void add_bias(const float* a, const float* b, float* out, int M, int N)
{
    int row = blockIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int base = row * N;
    if (col < N) {
        out[base + col] = a[base + col] + b[col];
    }
}
"""
)

# The classic 2-D block, the bounds check an early return over both axes.
EARLY_RETURN = (
    SPEC.format(
        a_shape='["M", "N"]',
        block="[32, 8]",
        grid='["ceil_div(N, block.x)", "ceil_div(M, block.y)"]',
        oracle="a * 2 + b",
    )
    + """__global__ void scale_add(const float* a, const float* b, float* out, int M, int N)
{
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int c = threadIdx.x + blockIdx.x * blockDim.x;
    if (r >= M || c >= N) return;
    const float twice = 2.0f * a[(size_t)r * N + c];
    out[(size_t)r * N + c] = twice + b[c];
}
"""
)


def _target(source: str) -> KernelTarget:
    (target,) = load_targets(Path("kernel.cu"), source).targets
    return target


def _chain(target: KernelTarget) -> tuple[Candidate, Candidate]:
    """The stride loop and, on it, the vector loop, as the search chains them."""
    (loop,) = _propose(stride_loop.PROPOSER, stride_loop.propose, target, [])
    (chained,) = _chained(target, {vector_loop.PROPOSER: vector_loop.propose}, loop, [])
    (vectors,) = chained
    return loop, vectors


def _compiles(target: KernelTarget, candidate: Candidate) -> str:
    """The candidate's kernel, after checking it compiles without a warning (with the headers its file
    includes: torch's for an extension)."""
    environment = environment_for(target.path)
    result = compile_in(
        environment,
        candidate.source,
        target.spec.instantiate or target.kernel.name,  # type: ignore[union-attr]
        filename=str(target.path),
        arch="sm_90",
    )
    assert result.ok and not result.diagnostics, [d.message for d in result.diagnostics]
    return candidate.source.split(f"void {target.kernel.name}(")[1]


@needs_compiler
def test_the_lstm_cells_gates_become_vectors_of_four_along_the_row() -> None:
    (target,) = load_targets(OUTSIDE / "lstm_cell_accessors.cu").targets
    loop, vectors = _chain(target)
    assert loop.launch is not None and loop.launch.grid == ("ceil_div(state, 4 * block.x)", "batch")
    assert vectors.launch == loop.launch
    source = vectors.source
    _compiles(target, vectors)
    # the three gates of the row and the old cell come in as 16-byte vectors; the outputs only go out
    # (the new cell's read after its store is of the value just stored)
    loads = source.count("= *reinterpret_cast<const uint4*>(&")
    stores = source.count("*reinterpret_cast<uint4*>(&")
    assert (loads, stores) == (4, 2), source
    assert "for (int c = blockIdx.x * blockDim.x + threadIdx.x;" not in source  # widened by vector-loop
    # the accessor kernel keeps its signature and calls the pointer form
    assert "lstm_cell_forward_kernel_on_pointers<scalar_t>(gates.data()" in source


@needs_compiler
def test_a_row_offset_through_a_local_and_a_per_column_vector() -> None:
    target = _target(ROW_BIAS)
    loop, vectors = _chain(target)
    body = _compiles(target, loop)
    assert (
        "for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < N; col += blockDim.x * gridDim.x) {"
        in body
    )
    assert "int base = row * N;" in body.split("for (int col")[0]  # it reads no column: it stays before
    assert "if (col < N)" not in body  # the loop's condition is the check
    assert loop.launch is not None and loop.launch.grid == ("ceil_div(N, 4 * block.x)", "M")
    vector_body = _compiles(target, vectors)
    assert "*reinterpret_cast<const uint4*>(&b[" in vector_body  # the bias, a per-column vector too


@needs_compiler
def test_an_early_return_over_both_axes_keeps_the_rows_check_before_the_loop() -> None:
    target = _target(EARLY_RETURN)
    loop, vectors = _chain(target)
    body = _compiles(target, loop)
    check, rest = body.split("if (r >= M) return;")
    assert "const int r = blockIdx.y * blockDim.y + threadIdx.y;" in check
    assert rest.lstrip().startswith("for (int c = threadIdx.x + blockIdx.x * blockDim.x; c < N;")
    assert "return" not in rest
    assert loop.launch is not None and loop.launch.grid == (
        "ceil_div(N, 4 * block.x)",
        "ceil_div(M, block.y)",
    )
    _compiles(target, vectors)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("out[base + col] = a[base + col] + b[col];", "out[base + col] = a[base + col] + threadIdx.x;", "x"),
        ("out[base + col] = a[base + col] + b[col];", "out[base + col] = a[base + col]; return;", "return"),
        (
            "out[base + col] = a[base + col] + b[col];",
            "out[base + col] = a[base + col]; __syncthreads();",
            "sync",
        ),
        ("int base = row * N;", "int base = row * N; float last = 0;", ""),  # a harmless local: offered
        (
            "out[base + col] = a[base + col] + b[col];",
            "out[base + col] = a[base + col] + b[col]; M += 1;",
            "M",
        ),
        ("if (col < N) {", "if (col < N && a[col] > 0) {", "a data-dependent conjunct"),
        ("int base = row * N;", "int base = row * N; float seen = atomicAdd(&out[0], 1.0f);", "atomic"),
        ("if (col < N) {", "if (atomicAdd(&out[0], 1.0f) >= 0.0f && col < N) {", "an atomic in the check"),
        ("if (col < N) {", "if (row > 0 && col < N) {", ""),  # a conjunct on the row alone: offered
        ("b[col];\n    }\n", "b[col];\n    } else {\n        out[0] = 1.0f;\n    }\n", "else"),
    ],
)
def test_work_that_depends_on_being_one_thread_an_element_is_left_alone(old: str, new: str, why: str) -> None:
    assert old in ROW_BIAS
    found = stride_loop.propose(_target(ROW_BIAS.replace(old, new)))
    assert bool(found) == (why == ""), why


def test_a_one_dimensional_p_of_i_kernel_is_vectorizes_not_this() -> None:
    source = (
        SPEC.format(a_shape='["M", "N"]', block="[256]", grid='["ceil_div(M * N, block.x)"]', oracle="a + a")
        + """__global__ void twice(const float* a, const float* b, float* out, int M, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M * N) out[i] = a[i] + a[i];
}
"""
    )
    assert stride_loop.propose(_target(source)) == []
    shifted = source.replace("out[i] = a[i] + a[i];", "out[i] = a[i] + a[i] + b[i % N];")
    assert stride_loop.propose(_target(shifted)) == []  # `i % N` is no offset the vector steps move


@needs_compiler
def test_an_index_shifted_by_an_offset_is_the_loops() -> None:
    """`k = i + offset; if (k < n)`: the loop walks k (vectorize takes `p[i]` of the global index only)."""
    source = (
        SPEC.format(a_shape='["M", "N"]', block="[256]", grid='["ceil_div(M * N - 3, block.x)"]', oracle="a")
        + """__global__ void copy_from(const float* a, const float* b, float* out, int M, int N)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int k = i + 3;
    if (k < M * N) out[k] = a[k];
}
"""
    )
    target = _target(source)
    loop, vectors = _chain(target)
    body = _compiles(target, loop)
    assert "unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;" in body
    assert "for (unsigned int k = i + 3; k < (M * N); k += blockDim.x * gridDim.x) {" in body
    _compiles(target, vectors)
    # the index it is shifted from, read in the work, does not move with the loop
    assert stride_loop.propose(_target(source.replace("out[k] = a[k];", "out[k] = a[k] + i;"))) == []


@pytest.mark.gpu
def test_stride_loops_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        (lstm,) = load_targets(OUTSIDE / "lstm_cell_accessors.cu").targets
        for target in (lstm, _target(ROW_BIAS), _target(EARLY_RETURN)):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, list(_chain(target)))
            seen = shown(baseline.target, results)
            print(seen)
            assert all(r.verified for r in results), seen
            assert results[1].status == "faster", seen
