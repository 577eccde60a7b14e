"""The word-spans rewrite: a thread per pixel reading interleaved channels a byte at a time (RGB to grey)
or a complex value's two floats takes F pixels a thread, F the fewest that make every array's span whole
4-byte words, and moves the spans as words through registers, the statements run for each pixel there;
an odd row width or the row's last pixels take the statements as written. On CPU: the spans, the grid,
the fallback, and where it is not offered; the gpu-marked test verifies and times it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import word_spans
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import _target, body_of, needs_compiler, shown

RGB = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "holdout" / "rgb_to_gray.cu"

# A complex scale as a signal-processing course writes it: interleaved (re, im) floats, one thread a value.
COMPLEX = """/* cuda-agent
[sizes]
n = 8388608
[args]
out = { role = "output", dtype = "float32", shape = ["2 * n"] }
z = { role = "input", dtype = "float32", shape = ["2 * n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
[verify]
sizes = [{ n = 1001 }]
oracle = { out = "torch.stack([z[0::2] * 0.5 - z[1::2] * 2.0, z[0::2] * 2.0 + z[1::2] * 0.5], 1).flatten()" }
*/
__global__ void rotate(float* out, const float* z, int n)
{
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    float re = z[2 * k];
    float im = z[2 * k + 1];
    out[2 * k] = re * 0.5f - im * 2.0f;
    out[2 * k + 1] = re * 2.0f + im * 0.5f;
}
"""


def rgb(source: str | None = None) -> KernelTarget:
    (target,) = load_targets(RGB, source).targets
    return target


@needs_compiler
def test_four_pixels_a_thread_move_12_bytes_of_rgb_and_4_of_grey_as_words() -> None:
    four, sixteen = word_spans.propose(rgb())
    assert four.launch is not None and four.launch.grid == (
        "ceil_div(ceil_div(width, 16), 4)",
        "ceil_div(height, 16)",
    )
    body = body_of(four, "colorToGreyscale")
    assert "int col = (blockIdx.x * blockDim.x + threadIdx.x) * 4;" in body
    assert "alignas(4) unsigned char rgb_span[12];" in body and "for (int w_ = 0; w_ < 3; ++w_)" in body
    assert "unsigned char g = rgb_span[3 * f + 1];" in body
    assert (
        "reinterpret_cast<const unsigned int*>(rgb + (3*width*row) + 3 * col)[w_]" in body
    )  # the row's start
    assert "gray_span[1 * f + 0] = 0.21f * r + 0.71f * g + 0.07f * b;" in body
    # the row's last pixels, or a row start not on a word: the statements as written, pixel by pixel
    assert "for (int f = 0; f < 4 && (col + f) < width; ++f) {" in body
    assert "unsigned char g = rgb[rgbOffset + 1];" in body
    assert "alignas(16) unsigned char gray_span[16];" in body_of(sixteen, "colorToGreyscale")
    for candidate in (four, sixteen):
        assert compile_kernel(device_source(candidate.source), "colorToGreyscale").ok


@needs_compiler
def test_a_complex_values_two_floats_are_one_8_byte_access_or_four_values_two_16_byte_ones() -> None:
    target = _target(COMPLEX, "rotate")
    candidate, four = word_spans.propose(target)
    assert target.spec is not None and candidate.launch == target.spec.launch  # the launch as written
    assert four.launch is not None and four.launch.grid == ("ceil_div(n, 4 * block.x)",)
    assert "for (int w_ = 0; w_ < 2; ++w_)" in body_of(four, "rotate")  # 32 bytes: two 16-byte words
    body = body_of(candidate, "rotate")
    assert "alignas(8) float z_span[2];" in body and "reinterpret_cast<const uint2*>(z + 2 * k)[0]" in body
    assert "out_span[2 * f + 1] = re * 2.0f + im * 0.5f;" in body
    for each in (candidate, four):
        assert compile_kernel(device_source(each.source), "rotate").ok


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (
            "unsigned char b = rgb[rgbOffset + 2];",
            "unsigned char b = rgb[rgbOffset + 3];",
            "a gap in the pixel",
        ),
        ("gray[grayOffset] =", "gray[grayOffset * 2] =", "a store with a gap"),
        ("gray[grayOffset] = 0.21f", "if (r > 9) gray[grayOffset] = 0.21f", "a store under a condition"),
        ("gray[grayOffset] = 0.21f", "if (r > 9) { gray[grayOffset] = 0.21f", "a store in a block under one"),
        (
            "unsigned char r = rgb[rgbOffset];",
            "if (col == 7) return;\n unsigned char r = rgb[rgbOffset];",
            "a return",
        ),
        (
            "int row = blockIdx.y",
            "int half = col / 2;\n    int row = blockIdx.y",
            "a local from the index, unused",
        ),
        (
            "int rgbOffset = grayOffset * CHANNELS;",
            "int rgbOffset = (col * height + row) * CHANNELS;",
            "down a column",
        ),
    ],
)
def test_no_word_spans_where_a_pixels_elements_are_not_one_span(old: str, new: str, why: str) -> None:
    source = RGB.read_text()
    assert old in source
    changed = source.replace(old, new)
    if "{ gray" in changed:
        changed = changed.replace("0.07f * b;", "0.07f * b; }")
    if "half" in changed:  # read in the work, it would hold the first pixel's value for all four
        assert len(word_spans.propose(rgb(changed))) == 2, why
        changed = changed.replace(
            "int grayOffset = row * width + col;", "int grayOffset = row * width + col + 0 * half;"
        )
    assert word_spans.propose(rgb(changed)) == [], why


def test_whole_floats_a_thread_are_left_to_the_vector_transforms() -> None:
    plain = COMPLEX.replace("z[2 * k + 1]", "in[k + 0 * n]").replace("z[2 * k]", "in[k]")
    plain = plain.replace("out[2 * k + 1] =", "float unused =").replace("out[2 * k]", "out[k]")
    assert word_spans.propose(_target(plain, "rotate")) == []


@pytest.mark.gpu
def test_the_word_spans_verify_and_are_faster_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in (rgb(), _target(COMPLEX, "rotate")):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, word_spans.propose(target))
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert target.kernel.name == "rotate" or any(r.status == "faster" for r in results), seen
