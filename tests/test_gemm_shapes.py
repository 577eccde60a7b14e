"""`python -m bench.gemm_shapes`: the GEMM rewrite of a contraction at the tile shapes asked for, one file
each that `cuda-agent compare` reads with its launch and compiler flags; shapes it cannot build are named
in the error."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.compile import compile_kernel

from bench.gemm_shapes import ShapeError, main, parse_shape
from tests.test_rewrite_warp_per_output import needs_compiler

OUTSIDE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside"


@pytest.mark.parametrize(
    ("spelled", "complaint"),
    [
        ("64x64", "write MxNxK"),
        ("64x48x8", "multiples of 64"),
        ("64x64x12", "the depth is 8 or 16"),
        ("128x256x16", "static 48 KiB"),  # two buffers of both tiles, 16 deep
        ("128x128x8/2", "a split sum needs"),
    ],
)
def test_a_shape_it_cannot_build_is_named_with_the_reason(spelled: str, complaint: str) -> None:
    with pytest.raises(ShapeError, match=complaint) as caught:
        parse_shape(spelled)
    assert repr(spelled) in str(caught.value)


def test_a_shape_reads_its_tile_depth_split_and_register_cap() -> None:
    shape = parse_shape("64x64x16/2@64")
    assert (shape.tile, shape.depth, shape.splits, shape.flags) == ((64, 64), 16, 2, ("-maxrregcount=64",))


@needs_compiler
def test_each_shape_is_a_file_with_its_launch_and_flags_that_compiles(tmp_path: Path) -> None:
    code = main([str(OUTSIDE / "covariance.cu"), "64x64x16", "64x64x8/2@64", "--out", str(tmp_path)])
    assert code == 0
    deep, split = tmp_path / "covariance_64x64x16.cu", tmp_path / "covariance_64x64x8s2r64.cu"
    (target,) = load_targets(deep).targets
    assert target.spec is not None and target.spec.launch.block == (256, 1)
    assert "BK = 16" in deep.read_text()
    (split_target,) = load_targets(split).targets
    assert split_target.spec is not None
    assert split_target.spec.launch.block == (512, 1) and split_target.spec.flags == ("-maxrregcount=64",)
    for t in (target, split_target):
        assert t.spec is not None
        result = compile_kernel(device_source(t.source), t.kernel.name, flags=t.spec.flags)
        assert result.ok, [d.message for d in result.diagnostics]


def test_a_kernel_that_is_no_contraction_gets_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(OUTSIDE / "gemv.cu"), "64x64x16", "--out", str(tmp_path)]) == 1
    assert "64x64x16: not offered" in capsys.readouterr().out and not list(tmp_path.iterdir())


def test_a_bad_shape_or_file_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(OUTSIDE / "covariance.cu"), "64x64x9", "--out", str(tmp_path)]) == 2
    assert "shape '64x64x9'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.cu"), "64x64x8", "--out", str(tmp_path)]) == 2
    assert "missing.cu: no such file" in capsys.readouterr().err
