"""The implicit-GEMM rewrite on CPU: a thread per output summing over a nest of loops (a convolution's
channels and window) becomes the tiled SGEMM with the nest as one reduction index, whatever the layout
(NCHW, NHWC, 1-D), the thread mapping (2-D blocks with blockIdx.z split into batch and channel, a block
per output channel, the channel along x), the guards (`if (...)` around the term, `if (...) continue;`),
strides and the place the sum starts from. Each candidate compiles and resolves its launch; kernels whose
factors or guards mix the two sides are left alone. The GPU-marked test verifies the rewrites against
the PyTorch oracles (several input sets, odd sizes) and times them on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.proposers.rewrites import contraction
from cuda_agent.agent.proposers.rewrites.implicit_gemm import propose
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.test_rewrite_warp_per_output import check, needs_compiler, shown

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "kernels" / "convolutions"
CONV2D = ROOT / "bench" / "kernels" / "outside" / "conv2d.cu"


def _load(path: Path, text: str | None = None) -> KernelTarget:
    (target,) = load_targets(path, text).targets
    assert target.spec is not None
    return target


TRUST = ROOT / "tests" / "kernels" / "trust" / "conv2d_fp32.cu"


def _all() -> list[KernelTarget]:
    return [_load(CONV2D), _load(TRUST)] + [_load(p) for p in sorted(KERNELS.glob("*.cu"))]


def test_each_convolution_is_offered_a_gemm_whose_sides_follow_the_factors() -> None:
    """Rows are the side the filter reads (the output channel), columns the pixels the input reads; in
    NHWC, where the output channel runs along x and is contiguous in the output, the sides swap."""
    found = {t.kernel.name: propose(t) for t in _all()}
    assert all(found.values()), [name for name, c in found.items() if not c]
    sides = {name: c[0].description.split("; ")[0] for name, c in found.items()}
    assert "(k) the rows, (col, row) the columns" in sides["conv2d_naive"]
    assert "(k) the rows, (ow, oh) the columns" in sides["conv_forward"]
    assert "(co) the rows, (t) the columns" in sides["conv1d_forward"]
    assert "(pix) the rows, (oc) the columns" in sides["conv_nhwc"]
    # flat indices taken apart: by a size of the kernel's (`N`, through `Wo = W - 2`), or by `total`
    assert "(k) the rows, (ow, oh) the columns" in sides["conv2d_3x3"]
    assert "(c_out) the rows, (w_out, h_out) the columns" in sides["conv2d_forward_kernel"]
    assert "one reduction of C * 3 * 3" in sides["conv2d_naive"]


def test_the_launch_covers_the_batch_and_both_sides() -> None:
    (first, *_) = propose(_load(CONV2D))
    assert first.launch is not None
    assert first.launch.grid == ("ceil_div(W * H, 64)", "ceil_div(K, 64)", "(N * K) // K")
    assert first.launch.block == (256, 1, 1)


def test_the_guards_become_zero_terms_of_the_input_tile() -> None:
    """`if (inside) acc += ...` and `if (outside) continue;` both leave the term out: the tile holds 0."""
    body = propose(_load(CONV2D))[0].source.split("void conv2d_naive(")[1]
    assert ">= 0 &&" in body and ": 0.0f) : 0.0f" in body
    strided = propose(_load(KERNELS / "conv_strided.cu"))[0].source.split("void conv_forward(")[1]
    assert "(!(" in strided and "* stride - pad" in strided


def test_the_sum_keeps_where_it_starts_and_the_users_store() -> None:
    body = propose(_load(CONV2D))[0].source.split("void conv2d_naive(")[1]
    assert "float acc = bias[k];" in body and "acc +=" in body
    assert "y[((size_t)n * K + k) * H * W + row * W + col] = acc;" in body


@needs_compiler
def test_every_candidate_compiles_and_resolves_its_launch() -> None:
    for target in _all():
        candidates = check(target, propose)
        # rows of one 64-row tile (a convolution's output channels) get the split sums too
        narrow = any(c.launch is not None and c.launch.grid[1].endswith(", 64)") for c in candidates[:1])
        assert len(candidates) == (5 if narrow else 3), target.kernel.name
        blocks = [c.launch.block[0] for c in candidates if c.launch is not None]
        assert blocks == ([256, 256, 256, 512, 1024] if narrow else [256] * 3), target.kernel.name


def test_a_plain_single_loop_is_left_to_the_contraction_rewrite() -> None:
    naive = _load(ROOT / "bench" / "kernels" / "matmul_naive.cu")
    assert contraction.propose(naive) and not propose(naive)


def test_a_flat_index_is_put_back_together_in_its_own_type() -> None:
    """The user's statements read the flat index (`y[idx] = acc`): declared from the pieces, as a long."""
    body = propose(_load(TRUST))[0].source.split("void conv2d_3x3(")[1]
    assert "const long idx = (long)ow + (long)oh * (W - 2)" in body
    flat = propose(_load(KERNELS / "conv_flat.cu"))[0]
    assert flat.launch is not None and flat.launch.grid[2] == (
        "((batch * out_channels * height * width)) // (height * out_channels * width)"
    )


def test_a_factor_reading_the_flat_index_itself_is_left_alone() -> None:
    path = KERNELS / "conv_flat.cu"
    text = path.read_text().replace("* weight[((c_out", "* weight[((index % out_channels")
    assert not propose(_load(path, text))


MIXED_GUARD = ("if (in_row >= 0", "if (in_row + k >= 0")
MIXED_FACTOR = ("* w_kc[i * KS + j]", "* w_kc[i * KS + j] * (float)(col + k)")
AFTER_LOOP = ("        }\n    }\n    y[", "        }\n        acc *= 0.5f;\n    }\n    y[")


@pytest.mark.parametrize("edit", [MIXED_GUARD, MIXED_FACTOR, AFTER_LOOP], ids=["guard", "factor", "after"])
def test_nests_that_are_no_product_of_two_sides_are_left_alone(edit: tuple[str, str]) -> None:
    """A guard or a factor reading both the output channel and the pixel, or work between the loops."""
    text = CONV2D.read_text()
    assert edit[0] in text
    assert not propose(_load(CONV2D, text.replace(edit[0], edit[1])))


@pytest.mark.gpu
def test_implicit_gemms_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=3)) as engine:
        for target in _all():
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target))
            original = baseline.timing.median_ms if baseline.timing else float("nan")
            for r in results:
                timed = r.comparison.candidate.median_ms if r.comparison else float("nan")
                name, change = target.kernel.name, r.candidate.description
                print(f"{name}: {change}: {timed:.4f} ms against {original:.4f} ms")
            seen = shown(baseline.target, results)
            assert all(r.verified for r in results), seen
            assert any(r.status == "faster" for r in results), seen
