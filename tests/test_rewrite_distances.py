"""Pairwise distances are contractions with another step: a thread per (row, col) summing over k the
squared or absolute difference of a row element and a col element (kNN, k-means, an RBF kernel matrix,
L1 distances) gets the tiled kernels of the contraction rewrite, each element of both point sets loaded
once a tile instead of once an output, whatever the spelling: a local difference squared, `powf(.., 2)`,
`fabsf`, a 2-D or a flat thread index. The GPU-marked test verifies them against the originals and the
oracles (`torch.cdist`) at sizes that are not multiples of the tiles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites.contraction import propose
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import _target, needs_compiler, shown

# the step in the registers: a row element and a col element, their difference squared or its magnitude
SQUARED = r"([\w\[\]]+) = fmaf\((\w+\[\w+\]) - (\w+\[\w+\]), \2 - \3, \1\);"
ABSOLUTE = r"[\w\[\]]+ \+= fabsf\(\w+\[\w+\] - \w+\[\w+\]\);"
DISTANCES = Path(__file__).resolve().parent / "kernels" / "distances"


def distance(name: str) -> KernelTarget:
    (target,) = load_targets(DISTANCES / name).targets
    return target


@needs_compiler
@pytest.mark.parametrize(
    ("name", "combine", "step"),
    [
        ("squared_distances.cu", "squared differences", SQUARED),
        ("gaussian_kernel_matrix.cu", "squared differences", SQUARED),
        ("manhattan_distances.cu", "absolute differences", ABSOLUTE),
    ],
)  # fmt: skip
def test_a_sum_of_differences_gets_the_tiled_kernels_and_each_compiles(
    name: str, combine: str, step: str
) -> None:
    target = distance(name)
    candidates = propose(target)
    assert len(candidates) >= 6
    for candidate in candidates:
        assert f"tiled sum of {combine} over" in candidate.description
        assert re.search(step, candidate.source), candidate.description
        assert compile_kernel(device_source(candidate.source), target.kernel.name).ok, candidate.description
    vectors = [c for c in candidates if "float4 loads of both factors" in c.description]
    assert vectors, "both point sets are read along k: four neighbouring elements a load"


SELF = """/* cuda-agent
[sizes]
N = 4096
D = 64
[args]
dist = { role = "output", dtype = "float32", shape = ["N", "N"] }
points = { role = "input", dtype = "float32", shape = ["N", "D"] }
N = { role = "scalar", dtype = "int32", value = "N" }
D = { role = "scalar", dtype = "int32", value = "D" }
[launch]
block = [16, 16]
grid = ["ceil_div(N, 16)", "ceil_div(N, 16)"]
[verify]
sizes = [{ N = 37, D = 19 }]
oracle = { dist = "torch.cdist(points, points) ** 2" }
reduction = "D"
*/
__global__ void self_distances(float* dist, const float* points, int N, int D)
{
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N && j < N) {
        float s = 0.0f;
        for (int k = 0; k < D; ++k) {
            float d = points[i * D + k] - points[j * D + k];
            s += d * d;
        }
        dist[i * N + j] = s;
    }
}
"""


@needs_compiler
def test_the_distances_of_a_set_to_itself_are_computed_above_the_diagonal_and_stored_twice() -> None:
    """(a - b)² is (b - a)² exactly: the sum at (i, j) is the one at (j, i), as for a Gram matrix."""
    candidates = propose(_target(SELF, "self_distances"))
    mirrored = [c for c in candidates if "above the diagonal only" in c.description]
    assert mirrored, [c.description for c in candidates]
    assert compile_kernel(device_source(mirrored[0].source), "self_distances").ok


@pytest.mark.parametrize(
    ("written", "instead"),
    [
        ("diff * diff", "diff * (query[q * D + d] + ref[r * D + d])"),  # not the same difference twice
        # both terms move with the query alone
        ("diff = query[q * D + d] - ref[r * D + d];", "diff = query[q * D + d] - query[q * D + 0];"),
        ("acc += diff * diff;", "acc += powf(diff, 3.0f);"),  # a cube is not a square
        ("acc += diff * diff;", "acc = fmaxf(acc, fabsf(diff));"),  # Chebyshev: a max, not a sum
    ],
)  # fmt: skip
def test_what_is_not_a_sum_of_row_and_col_differences_is_left_alone(written: str, instead: str) -> None:
    source = (DISTANCES / "squared_distances.cu").read_text()
    assert written in source
    assert propose(_target(source.replace(written, instead), "squared_distances")) == []


@pytest.mark.gpu
def test_distances_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for name in ("squared_distances.cu", "gaussian_kernel_matrix.cu", "manhattan_distances.cu", "self"):
            target = _target(SELF, "self_distances") if name == "self" else distance(name)
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target)[:4])
            seen = shown(baseline.target, results)
            print(name, seen)
            assert results and all(r.verified for r in results), seen
            assert max(r.speedup or 0 for r in results) > 1.5, seen
