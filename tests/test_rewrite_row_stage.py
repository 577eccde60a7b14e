"""The row-stage rewrite: a row that several passes read (a layer norm's mean, variance and output) is
read from memory once, into shared memory, and the passes read it there. On CPU: where it applies, every
candidate compiles with nvcc, resolves its launch at every size within the shared memory a block gets,
and reads the row's parameter in one loop only; where threads could read a row another thread changed,
or a barrier could be missed, it is not offered. On the GPU (gpu-marked): verified and faster."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.proposers.rewrites import row_stage, vector_loop, warp_per_output
from cuda_agent.agent.proposers.tree import SHARED_LIMIT
from cuda_agent.agent.spec import complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets, reloaded_target

from tests.test_idioms import _target
from tests.test_rewrite_warp_per_output import check

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ROOT / "bench" / "kernels" / "outside"
BLOCK_SOFTMAX = ROOT / "tests" / "kernels" / "row_stage" / "block_softmax.cu"


def target_of(path: Path) -> KernelTarget:
    (target,) = load_targets(path).targets
    assert target.spec is not None, target.note
    return target


def split(path: Path) -> list[KernelTarget]:
    """The kernel after warp-per-output's first two shapes, as the search chains them (launch written)."""
    original = target_of(path)
    candidates = PROPOSERS[warp_per_output.PROPOSER](original)[:2]
    reloaded = [reloaded_target(original, c.source) for c in candidates]
    assert all(t is not None for t in reloaded)
    return [t for t in reloaded if t is not None]


def staged(target: KernelTarget) -> Candidate:
    """The one candidate, checked: it compiles, resolves everywhere within a block's shared memory, and
    reads the row from memory in the staging loop only."""
    (candidate,) = check(target, PROPOSERS[row_stage.PROPOSER])
    assert target.spec is not None and candidate.launch is not None
    launched = replace(target.spec, launch=candidate.launch)
    for sizes in [target.spec.sizes, *(complete_sizes(target.spec, s) for s in target.spec.verify_sizes)]:
        assert 0 < resolve(launched, sizes)[1].shared_bytes <= SHARED_LIMIT
    return candidate


def body(candidate: Candidate, name: str) -> str:
    return candidate.source.split(f"void {name}(")[1]


def test_a_warp_per_row_layer_norm_reads_its_row_once() -> None:
    for target in split(OUTSIDE / "layernorm_forward.cu"):
        candidate = staged(target)
        text = body(candidate, "layernorm_forward")
        # the three passes read the staged row 16 bytes at a time (element by element at its end); `x`, the
        # row's pointer, is read by the staging loop only
        assert text.count("= *reinterpret_cast<const uint4*>(&inp_row[i0]);") == 3
        assert text.count("inp_row[i]") == 3
        assert "&x[s1]" in text and not re.search(r"\bx\[i\]", text)
        assert "__syncwarp();" in text and "__syncthreads" not in text
        assert "the 3 passes over the row" in candidate.description


def test_a_row_too_long_for_the_block_gets_fewer_warps_a_block() -> None:
    """2048 floats a row: eight warps' rows would need 64 KiB; four fit in 32."""
    warp, block = split(OUTSIDE / "softmax_online.cu")
    candidate = staged(warp)
    assert warp.spec is not None and warp.spec.launch.block == (256,)
    assert candidate.block == (128,) and "block 128" in candidate.description
    candidate = staged(block)  # a block per row: 8 KiB, as it was
    assert candidate.block == block.spec.launch.block if block.spec else False
    assert "__syncthreads();  // the staged row" in body(candidate, "softmax_online")


def test_half_rows_are_staged_eight_elements_a_load() -> None:
    for target in split(OUTSIDE / "rmsnorm_fp16.cu"):
        candidate = staged(target)
        assert "* 8; s0 < cols; s0 += " in body(candidate, "rmsnorm_fp16")


def test_a_block_per_row_softmax_with_its_own_barriers_and_shared_array_is_staged() -> None:
    candidate = staged(target_of(BLOCK_SOFTMAX))
    text = body(candidate, "softmax_rows")
    assert "__shared__ float partial[256];" in text  # the user's reduction untouched
    assert text.count("input_row[c]") == 3 and not re.search(r"\bx\[c\]", text)
    assert text.index("__syncthreads();  // the staged row") < text.index("local_max = fmaxf")


def test_rows_longer_than_a_block_s_shared_memory_are_left_alone() -> None:
    """A vocabulary of 32000 floats: 125 KiB a row, more than a block gets without opting in."""
    for target in split(OUTSIDE / "cross_entropy.cu"):
        assert row_stage.propose(target) == []


ROW_SPEC = """/* cuda-agent
[sizes]
rows = 4096
cols = 1024

[args]
y    = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
x    = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [128]
grid = ["ceil_div(rows, block.x // 32)"]

[verify]
oracle = { y = "x / x.abs().sum(dim=-1, keepdim=True)" }
*/
"""

WARP_ROWS = (
    ROW_SPEC
    + """__global__ void k(float* y, const float* x, int rows, int cols)
{
    int lane = threadIdx.x % 32;
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r < rows) {
        float s = 0.0f;
        for (int c = lane; c < cols; c += 32) s += fabsf(x[r * cols + c]);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        for (int c = lane; c < cols; c += 32) y[r * cols + c] = x[r * cols + c] / s;
    }
}
"""
)


def test_a_user_written_warp_per_row_kernel_is_staged() -> None:
    candidate = staged(_target(WARP_ROWS, "k"))
    assert body(candidate, "k").count("x_row[c]") == 2


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("y[r * cols + c] = x[r * cols + c] / s;", "y[r * cols + c] = s;"), "one pass reads the row"),
        (("const float* x", "float* x"), None),  # a parameter stored to below (in place)
        (("y[r * cols + c] = x[r * cols + c] / s;", "x[r * cols + c] = x[r * cols + c] / s;"), "in place"),
        ((" for (int c = lane; c < cols; c += 32) y",
          " if (lane < 16) for (int c = lane; c < cols; c += 32) y"), "a pass some lanes skip"),
        (("c < cols; c += 32) y", "c < cols - 1; c += 32) y"), "passes over different ranges"),
        (("(blockDim.x / 32) + threadIdx.x / 32;", "blockDim.x + threadIdx.x;"),
         "rows that differ between a warp's lanes"),
        (("if (r < rows) {", "if (r < rows && lane < cols) {"), "a bounds check on the lane too"),
    ],
)  # fmt: skip
def test_not_offered_where_it_could_change_results_or_miss_a_barrier(
    change: tuple[str, str], why: str | None
) -> None:
    source = WARP_ROWS.replace(*change)
    assert source != WARP_ROWS
    target = _target(source, "k")
    if why is None:  # a parameter merely not declared const is still a row nothing stores to
        assert row_stage.propose(target)
        return
    assert row_stage.propose(target) == [], why


SHARED_WRITTEN = (
    ROW_SPEC
    + """__global__ void k(float* y, const float* x, int rows, int cols)
{
    extern __shared__ float tile[];
    int r = blockIdx.x;
    if (r < rows) {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) tile[c] = x[r * cols + c];
        __syncthreads();
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            tile[c] = tile[c] * 2.0f;
            y[r * cols + c] = tile[c];
        }
    }
}
"""
).replace('grid = ["ceil_div(rows, block.x // 32)"]', 'grid = ["rows"]\nshared_bytes = "cols * 4"')


def test_a_shared_array_stored_to_in_the_loop_is_not_read_as_vectors() -> None:
    """Reads of shared memory are vectorised only where nothing stores to it in the loop: here the
    second loop doubles the tile in place, so that loop stays as it was (the first, a plain copy from
    global memory into the tile, is no read of shared memory and is left to the rules for parameters)."""
    target = _target(SHARED_WRITTEN, "k")
    for candidate in vector_loop.propose(target):
        assert "tile[c] = tile[c] * 2.0f;" in body(candidate, "k").split("__syncthreads();")[1]
        assert "tile_v" not in candidate.source


def row_kernels() -> list[KernelTarget]:
    """The row kernels the GPU tests run: the bench's split three ways, a block softmax, a course's rows."""
    return [
        *split(OUTSIDE / "layernorm_forward.cu"),
        *split(OUTSIDE / "softmax_online.cu"),
        *split(OUTSIDE / "rmsnorm_fp16.cu"),
        target_of(BLOCK_SOFTMAX),
        _target(WARP_ROWS, "k"),
    ]


@pytest.mark.gpu
def test_staged_rows_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    targets = row_kernels()
    with Engine(EngineSettings(use_cache=False, input_sets=3)) as engine:
        for target in targets:
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, row_stage.propose(target))
            for r in results:
                print(f"{target.kernel.name} {target.spec.launch if target.spec else ''}: "
                      f"{r.candidate.description}: {r.status} {r.speedup or 0:.2f}x")  # fmt: skip
            assert results and all(r.verified for r in results), [(r.status, r.reason) for r in results]
            if target.kernel.name != "k":  # the bench's rows, the course softmax
                assert all(r.status == "faster" for r in results), [(r.status, r.reason) for r in results]
