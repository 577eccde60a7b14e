"""Few long outputs (batch norm's 64 channels of 100,000 values, the argmax of 16 rows of a million): a
block an output leaves most of the GPU's SMs idle, so the warp-per-output rewrite leads with a cluster of
8 blocks an output (sm_90), the blocks' results merged through distributed shared memory in rank order,
so that every block goes on with the same result and a second pass over the output (the variance about
the mean) needs no second kernel. Each candidate compiles for sm_90 with its cluster's size in the
kernel; many outputs, or short ones, keep the plain shapes."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.optimize import PROPOSERS, for_arch
from cuda_agent.agent.proposers.rewrites.warp_per_output import propose
from cuda_agent.agent.spec import complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_idioms import _target, needs_compiler
from tests.test_rewrite_warp_per_output import ARGMAX, shown

ROOT = Path(__file__).resolve().parents[1]
BATCHNORM = ROOT / "bench" / "kernels" / "holdout" / "batchnorm_stats.cu"
CLUSTER = "__global__ __attribute__((cluster_dims(8, 1, 1))) void"

# 16 rows of a million logits: the argmax of each, the first position on a tie.
FEW_LONG_ROWS = ARGMAX.replace("rows = 512\ncols = 1000", "rows = 16\ncols = 1048576").replace("{cmp}", ">")


def batchnorm() -> KernelTarget:
    (target,) = load_targets(BATCHNORM).targets
    return target


def ptx_of(source: str, tmp: Path) -> str:
    (tmp / "k.cu").write_text(source)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run([nvcc, "-arch=sm_90", "-ptx", "k.cu", "-o", "k.ptx"], cwd=tmp, check=True, timeout=120)
    return (tmp / "k.ptx").read_text()


def clustered(target: KernelTarget, tmp: Path | None = None) -> list[Candidate]:
    """The cluster candidates, each checked: the kernel declared with its cluster, the file otherwise
    kept outside the body, compiled for sm_90 into a kernel that asks for 8 blocks a cluster, the launch
    resolving at every size to a grid of whole clusters."""
    candidates = [c for c in propose(target) if CLUSTER in c.source]
    kernel, spec = target.kernel, target.spec
    assert spec is not None and candidates
    for candidate in candidates:
        assert candidate.source.endswith(target.source[kernel.span.end_byte :])
        source = device_source(candidate.source)
        result = compile_kernel(source, kernel.name)
        assert result.ok, [d.message for d in result.diagnostics]
        if tmp is not None:
            assert ".reqnctapercluster 8, 1, 1" in ptx_of(source, tmp)
        assert candidate.launch is not None
        for sizes in [spec.sizes, *(complete_sizes(spec, s) for s in spec.verify_sizes)]:
            grid = resolve(replace(spec, launch=candidate.launch), sizes)[1].grid
            assert grid[0] % 8 == 0, grid
    return candidates


@needs_compiler
def test_batch_norm_channels_each_get_a_cluster_and_both_passes_see_the_whole_channel(tmp_path: Path) -> None:
    candidates = propose(batchnorm())
    # the clusters lead: the search takes the first two further at once
    assert [c.description.split(",")[0] for c in candidates[:2]] == ["one cluster of 8 blocks per c"] * 2
    assert [c.launch.block for c in candidates[:2] if c.launch] == [(512,), (256,)]
    (first, _) = clustered(batchnorm(), tmp_path)
    body = first.source.split("void batchnorm_stats(")[1]
    assert "const int lane = blockIdx.x % 8 * blockDim.x + threadIdx.x;" in body
    assert "int c = blockIdx.x / 8;" in body
    assert body.count("for (int i = lane; i < HW; i += blockDim.x * 8)") == 2
    # the mean is taken from the whole cluster's sum, before the second pass reads it
    merged = body.index("__cluster_map_shared_rank(&sum_block_part, rank)")
    assert merged < body.index("float m = sum / (N * HW);") < body.index("float d = x[")
    assert body.count("__cluster_barrier_wait();") == 4  # two a merge: written before read, read before exit
    assert "if (lane == 0) mean[c] = m;" in body and "if (lane == 0) var[c] = sq / (N * HW);" in body
    reassociated = "is reassociated across the lanes (within the spec's tolerance)"
    assert first.assumptions == (f"the sum into sq {reassociated}", f"the sum into sum {reassociated}")


@needs_compiler
def test_an_argmax_over_few_long_rows_merges_the_blocks_positions_as_the_loop_would() -> None:
    target = _target(FEW_LONG_ROWS, "row_argmax")
    (first, _) = clustered(target)
    body = first.source.split("void row_argmax(")[1]
    assert (
        "int other_at = *static_cast<const int*>(__cluster_map_shared_rank(&arg_block_part, rank));" in body
    )
    # a rank's position wins a tie only where it comes first, as the lanes' merge has it
    assert body.count("if (other > best || (other == best && other_at < arg)) {") == 3
    assert "if (lane == 0) out[r] = arg;" in body


@pytest.mark.parametrize(
    "source",
    [
        ARGMAX.replace("{cmp}", ">"),  # 512 rows: a block each fills the GPU
        FEW_LONG_ROWS.replace("cols = 1048576", "cols = 4096"),  # 16 short rows: 8 blocks would idle
    ],
)
def test_many_outputs_or_short_ones_keep_the_plain_shapes(source: str) -> None:
    assert not any(CLUSTER in c.source for c in propose(_target(source, "row_argmax")))


@pytest.mark.gpu
def test_clusters_verify_and_beat_a_block_per_output_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in (batchnorm(), _target(FEW_LONG_ROWS, "row_argmax")):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            candidates = propose(target)
            blocks = [c for c in candidates if c.description.startswith("one block per")]
            results = engine.evaluate(baseline, clustered(target) + blocks)
            seen = shown(baseline.target, results)
            assert all(r.verified for r in results), seen
            best_cluster = max(r.speedup or 0 for r in results if CLUSTER in r.candidate.source)
            best_block = max(r.speedup or 0 for r in results if CLUSTER not in r.candidate.source)
            assert best_cluster > 1.3 * best_block, seen


@pytest.mark.parametrize(
    ("arch", "clusters"), [("sm_80", False), ("sm_89", False), ("sm_90", True), ("sm_90a", True)]
)
def test_a_gpu_older_than_sm_90_is_not_offered_clusters(arch: str, clusters: bool) -> None:
    """Thread block clusters compile for sm_90 on: a search on an A100 or an L4 does not propose them
    (each would only fail to compile there); the other shapes stay."""
    proposed = for_arch(PROPOSERS["rewrite:warp-per-output"], arch)(batchnorm())
    assert any(CLUSTER in c.source for c in proposed) == clusters
    assert any(c.description.startswith("one block per c") for c in proposed)


# The maximum of each (batch, head) over 2^18 values: 32 outputs along two axes.
HEAD_MAX = """/* cuda-agent
[sizes]
B = 4
H = 8
L = 262144
[args]
x = { role = "input", dtype = "float32", shape = ["B", "H", "L"] }
m = { role = "output", dtype = "float32", shape = ["B", "H"] }
B = { role = "scalar", dtype = "int32", value = "B" }
H = { role = "scalar", dtype = "int32", value = "H" }
L = { role = "scalar", dtype = "int32", value = "L" }
[launch]
block = [8, 4]
grid = ["ceil_div(H, 8)", "ceil_div(B, 4)"]
*/
__global__ void head_max(const float* x, float* m, int B, int H, int L)
{
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y * blockDim.y + threadIdx.y;
    if (b < B && h < H) {
        float best = -1e30f;
        for (int l = 0; l < L; ++l) best = fmaxf(best, x[(b * H + h) * L + l]);
        m[b * H + h] = best;
    }
}
"""


@needs_compiler
def test_outputs_along_two_axes_take_their_cluster_from_one_flat_number() -> None:
    (first, _) = clustered(_target(HEAD_MAX, "head_max"))
    assert first.launch is not None and first.launch.grid == ("H * B * 8",)
    body = first.source.split("void head_max(")[1]
    assert "// one cluster of 8 blocks per (b, h); its lanes share the loops below" in body
    assert "const int group = blockIdx.x / 8;" in body and "int h = group % H;" in body
    assert "best = fmaxf(best, other);" in body and not first.assumptions  # a maximum is exact
