"""Launch-configuration candidates: which shapes are tried and how the user's file changes."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import needs_compiler

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


def _changed(before: str, after: str) -> list[tuple[str, str]]:
    return [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]


@needs_compiler
def test_a_block_size_macro_is_tuned_with_the_block() -> None:
    # sumsq_blocks sizes its shared array and its index with `#define THREADS 256`: launched with any
    # other block and the define left alone, it would sum the wrong elements.
    path = ROOT / "bench" / "kernels" / "outside" / "sumsq_blocks.cu"
    (target,) = load_targets(path).targets
    candidates = propose_launch_configs(target)
    assert {c.block for c in candidates} == {(64,), (128,), (512,), (1024,)}
    for candidate in candidates:
        threads = candidate.block[0]
        assert _changed(target.source, candidate.source) == [
            ("#define THREADS 256", f"#define THREADS {threads}"),
            ("block = [256]      # the kernel's shared array holds one value a thread",
             f"block = [{threads}]      # the kernel's shared array holds one value a thread"),
            ('grid = ["ceil_div(n, 256)"]', 'grid = ["ceil_div(n, block.x)"]'),
        ]  # fmt: skip
        assert (
            f"with THREADS = {threads} (the block size, as a __shared__ array's size)"
            in candidate.description
        )
        again = load_targets(path, candidate.source).find("sumsq_blocks")
        assert again is not None and again.spec is not None and again.spec.launch.block == candidate.block
        assert compile_kernel(device_source(candidate.source), "sumsq_blocks").ok


def test_a_tile_macro_takes_only_square_blocks() -> None:
    (target,) = load_targets(ROOT / "bench" / "kernels" / "transpose_shared.cu").targets
    (candidate,) = propose_launch_configs(target)
    assert candidate.block == (16, 16) and "#define TILE 16" in candidate.source
    assert 'grid = ["ceil_div(cols, block.x)", "ceil_div(rows, block.y)"]' in candidate.source


def test_a_macro_another_function_reads_is_left_alone(tmp_path: Path) -> None:
    source = (ROOT / "bench" / "kernels" / "outside" / "sumsq_blocks.cu").read_text()
    source += "\nvoid launch(const float* x, float* sums, int n)\n{\n"
    source += "    sumsq_blocks<<<(n + THREADS - 1) / THREADS, THREADS>>>(x, sums, n);\n}\n"
    path = tmp_path / "sumsq.cu"
    path.write_text(source)
    (target,) = load_targets(path).targets
    assert all("#define THREADS 256" in c.source for c in propose_launch_configs(target))


def test_a_side_the_indices_take_from_a_header_is_not_changed(tmp_path: Path) -> None:
    """`blockIdx.x * ROW_W + threadIdx.x` with ROW_W in a header: the kernel assumes the block's side and
    never reads blockDim, so another side would leave outputs unwritten (every such candidate failed its
    verification on the GPU); a side read as blockDim is still tuned."""
    (tmp_path / "widths.h").write_text("#define ROW_W 32\n#define ROW_H 16\n")
    path = tmp_path / "blend.cu"
    path.write_text(
        '#include "widths.h"\n'
        "__global__ void blend(const float* top, const float* bottom, float alpha, float* mixed,\n"
        "                      int height, int width, int pitch)\n{\n"
        "    const int x = blockIdx.x * ROW_W + threadIdx.x;\n"
        "    const int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "    const int at = y * pitch + x;\n"
        "    if (y < height && x < width) mixed[at] = alpha * top[at] + (1.0f - alpha) * bottom[at];\n}\n"
    )
    (target,) = load_targets(path).targets
    assert target.spec is not None and target.spec.launch.block[0] == 32
    shapes = [candidate.block for candidate in propose_launch_configs(target)]
    assert shapes and all(shape[0] == 32 for shape in shapes)
    assert (32, 4) in shapes and (32, 16) in shapes
