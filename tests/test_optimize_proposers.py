"""Every registered proposer's candidate is a file a user can apply: it re-reads with the launch the
candidate was verified with, and its kernel compiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.compile import compile_kernel

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "bench" / "kernels"
FILES = [
    *sorted(KERNELS.glob("*.cu")),
    *sorted((KERNELS / "outside").glob("*.cu")),
    *sorted((ROOT / "examples").glob("*.cu")),
]


def test_a_comment_after_the_block_value_is_kept_out_of_the_rewrite(tmp_path: Path) -> None:
    source = (ROOT / "examples" / "transpose.cu").read_text()
    source = source.replace("block = [16, 16]", "block = [16, 16]   # tuned later")
    path = tmp_path / "transpose.cu"
    path.write_text(source)
    target = load_targets(path).find("transpose")
    assert target is not None
    chosen = next(c for c in propose_launch_configs(target) if c.block == (32, 8))
    assert "block = [32, 8]   # tuned later" in chosen.source


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_candidates_reread_with_their_launch_and_compile(path: Path) -> None:
    files = load_targets(path)
    assert not files.spec_errors
    checked = 0
    for target in files.targets:
        if target.spec is None:
            continue
        for name, propose in PROPOSERS.items():
            for candidate in propose(target):
                again = load_targets(path, candidate.source)
                assert not again.spec_errors, (name, again.spec_errors)
                rewritten = again.find(target.kernel.name)
                assert rewritten is not None and rewritten.spec is not None
                if candidate.launch is not None:
                    assert rewritten.spec.launch.block == candidate.launch.block, name
                    assert rewritten.spec.launch.grid == candidate.launch.grid, name
                    assert rewritten.spec.launch.shared_bytes == candidate.launch.shared_bytes, name
                else:
                    assert rewritten.spec.launch.block == candidate.block, name
                if name.startswith(("idiom:", "rewrite:")):  # the transforms are compiled in their own tests
                    result = compile_kernel(device_source(candidate.source), rewritten.name_expression)
                    assert result.ok, (name, [d.message for d in result.errors])
                checked += 1
    assert checked > 0


def test_a_rewrite_that_the_inference_no_longer_reads_keeps_the_inferred_spec(tmp_path: Path) -> None:
    """A kernel without a spec comment, its spec inferred (a strided element-wise loop over three sizes):
    its 16-byte-vector rewrite is beyond the inference, so the candidate's file carries the spec it was
    verified with, written out above the kernel; applied, the file still says what the kernel computes."""
    path = tmp_path / "affine.cu"
    path.write_text(
        "__global__ void affine_strided(int n, int first, float* y, int step, const float* x)\n{\n"
        "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n"
        "        if (i >= first && i % step == 0)\n            y[i] = 2.0f * x[i] + 1.0f;\n}\n"
    )
    (target,) = load_targets(path).targets
    assert target.spec is not None and target.spec.inferred
    (candidate,) = PROPOSERS["rewrite:vector-loop"](target)
    assert candidate.source.index("/* cuda-agent") < candidate.source.index("__global__ void affine_strided")
    again = load_targets(path, candidate.source).find("affine_strided")
    assert again is not None and again.spec is not None and not again.spec.inferred
    assert again.spec.launch == target.spec.launch and again.spec.arguments == target.spec.arguments
