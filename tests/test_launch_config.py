"""Launch-configuration candidates: which shapes are tried and how the user's file changes."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.targets import load_targets

ROOT = Path(__file__).resolve().parents[1]

HOST_LAUNCH = """\
__global__ void relu(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

void run(const float* x, float* y, int n)
{
    relu<<<(n + 255) / 256, 256>>>(x, y, n);
}
"""


def test_written_spec_changes_only_the_block_value() -> None:
    files = load_targets(ROOT / "examples" / "transpose.cu")
    target = files.find("transpose")
    assert target is not None and target.spec is not None and not target.spec.inferred
    candidates = propose_launch_configs(target)
    shapes = {c.block for c in candidates}
    assert (16, 16) not in shapes  # the current shape is not a candidate
    assert (32, 8) in shapes
    chosen = next(c for c in candidates if c.block == (32, 8))
    changed = [
        (old, new)
        for old, new in zip(files.source.splitlines(), chosen.source.splitlines(), strict=True)
        if old != new
    ]
    assert changed == [("block = [16, 16]", "block = [32, 8]")]
    # The rewritten file parses back with the new block.
    again = load_targets(target.path, chosen.source).find("transpose")
    assert again is not None and again.spec is not None and again.spec.launch.block == (32, 8)


def test_inferred_spec_is_written_out_and_literal_launch_sites_follow(tmp_path: Path) -> None:
    path = tmp_path / "relu.cu"
    path.write_text(HOST_LAUNCH)
    target = load_targets(path).find("relu")
    assert target is not None and target.spec is not None and target.spec.inferred
    chosen = next(c for c in propose_launch_configs(target) if c.block == (128,))
    assert "relu<<<(n + 255) / 256, 128>>>" in chosen.source
    again = load_targets(path, chosen.source).find("relu")
    assert again is not None and again.spec is not None
    assert not again.spec.inferred and again.spec.launch.block == (128,)


def test_launch_bounds_cap_the_block(tmp_path: Path) -> None:
    path = tmp_path / "bounded.cu"
    path.write_text(HOST_LAUNCH.replace("__global__ void", "__global__ void __launch_bounds__(256)"))
    target = load_targets(path).find("relu")
    assert target is not None
    blocks = {c.block[0] for c in propose_launch_configs(target)}
    assert blocks == {64, 128}
