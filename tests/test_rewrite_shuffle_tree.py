"""The shuffle-tree rewrite: a log-step tree over a shared array (the reduction slides' interleaved first
kernel, a softmax's two sequential-addressing trees, fmaxf among them) becomes warp shuffles, one slot
a warp, then the first warp; what surrounds the tree stays. On CPU: the rewritten kernels compile and
keep their code around the trees, and where the other slots' values are still read, or not every thread
reaches the tree, nothing is offered; the gpu-marked test verifies and times them."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import shuffle_tree
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import needs_compiler, shown

ROOT = Path(__file__).resolve().parent.parent
SLIDES = ROOT / "bench" / "kernels" / "holdout" / "reduce_slides.cu"
SOFTMAX = ROOT / "tests" / "kernels" / "trees" / "row_softmax_trees.cu"


def target(path: Path, source: str | None = None) -> KernelTarget:
    (found,) = load_targets(path, source).targets
    return found


@needs_compiler
def test_the_slides_interleaved_tree_becomes_warp_shuffles() -> None:
    (candidate,) = shuffle_tree.propose(target(SLIDES))
    body = candidate.source.split("reduce0(")[1]
    assert "tid % (2 * s)" not in body and "v += __shfl_down_sync(0xffffffffu, v, offset);" in body
    assert "v = tid < blockDim.x / 32 ? sdata[tid] : 0;" in body  # warp 0 adds the warps' slots
    assert "if (tid == 0) g_odata[blockIdx.x] = sdata[0];" in body  # the draft's own ending, kept
    assert body.count("__syncthreads();") == 4  # the load's barrier, then three
    assert candidate.assumptions  # the sum is reassociated
    assert compile_kernel(device_source(candidate.source), "reduce0").ok


@needs_compiler
def test_both_trees_of_a_softmax_go_the_maximum_by_the_users_function() -> None:
    (candidate,) = shuffle_tree.propose(target(SOFTMAX))
    body = candidate.source.split("softmax_rows(")[1]
    assert "v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));" in body
    assert "v = cache[t < blockDim.x / 32 ? t : 0];" in body  # maxima may take slot 0 twice
    assert "v += __shfl_down_sync(0xffffffffu, v, offset);" in body
    assert "stride" not in body
    assert "float row_max = cache[0];" in body and "float row_sum = cache[0];" in body
    assert compile_kernel(device_source(candidate.source), "softmax_rows").ok


@pytest.mark.parametrize(
    ("path", "change", "why"),
    [
        (
            SOFTMAX,
            ("float row_sum = cache[0];", "float row_sum = cache[0] + 0.0f * cache[t];"),
            "a thread's own slot read after the tree, where the tree left a partial value",
        ),
        (
            SOFTMAX,
            ("float row_max = cache[0];", "float row_max = cache[1];"),
            "another slot read after the tree",
        ),
        (
            SLIDES,
            ("sdata[tid] = g_idata[i];", "if (i >= 100) return;\n    sdata[tid] = g_idata[i];"),
            "threads returned before the tree, not whole blocks",
        ),
        (
            SLIDES,
            ("if (tid % (2 * s) == 0)", "if (tid % (2 * s) == 0 && tid > 0)"),
            "not the tree's guard",
        ),
    ],
)
def test_no_shuffles_where_the_tree_cannot_be_dropped(path: Path, change: tuple[str, str], why: str) -> None:
    source = path.read_text()
    assert change[0] in source
    assert shuffle_tree.propose(target(path, source.replace(*change))) == [], why


def test_a_whole_block_returning_first_still_gets_shuffles() -> None:
    source = SOFTMAX.read_text()
    guarded = source.replace("int t = threadIdx.x;", "int t = threadIdx.x;\n    if (row >= rows) return;")
    assert len(shuffle_tree.propose(target(SOFTMAX, guarded))) == 1


@pytest.mark.gpu
def test_the_shuffled_trees_verify_and_are_faster_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for path in (SLIDES, SOFTMAX):
            kernel = target(path)
            baseline = engine.baseline(kernel)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, shuffle_tree.propose(kernel))
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert path == SOFTMAX or all(r.status == "faster" for r in results), seen
