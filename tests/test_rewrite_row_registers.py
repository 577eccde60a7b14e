"""The row-registers rewrite: a row that several passes read, held in each thread's registers where it
fits (16-byte vectors, loaded once), the passes running on them; any other row length runs the loops as
written. On CPU: where it applies, the candidate compiles with nothing in local memory, reads the row
from memory in the loading loop and the fallback loops only, and keeps every loop as written for the
fallback; where a row is too long or a pass's stores would meet another pass's loads, it is not offered.
On the GPU (gpu-marked): verified at the benchmark's sizes (the registers) and the verify sizes (the
loops), and faster than the split kernel."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cuda_agent.agent.analysis import analysed
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.proposers.rewrites import max_then_sum, row_registers, row_stage
from cuda_agent.agent.targets import KernelTarget, reloaded_target
from cuda_agent.sandbox.nvcc import find_nvcc

from tests.test_idioms import _target
from tests.test_rewrite_row_stage import OUTSIDE, body, row_kernels, split, target_of
from tests.test_rewrite_warp_per_output import check

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")


def held(target: KernelTarget) -> Candidate:
    (candidate,) = check(target, PROPOSERS[row_registers.PROPOSER])
    return candidate


def ptx(candidate: Candidate, tmp_path: Path) -> str:
    """The candidate's PTX from nvcc: what the registers became."""
    nvcc = find_nvcc()
    assert nvcc is not None
    source = tmp_path / "candidate.cu"
    source.write_text(device_source(candidate.source))
    out = tmp_path / "candidate.ptx"
    subprocess.run([nvcc, "-arch=sm_90", "-ptx", str(source), "-o", str(out)], check=True)
    return out.read_text()


@needs_nvcc
def test_a_warp_per_row_softmax_holds_its_row_in_registers(tmp_path: Path) -> None:
    warp, block = split(OUTSIDE / "softmax_online.cu")
    candidate = held(warp)
    text = body(candidate, "softmax_online")
    # 2048 floats a row, a warp a row: 16 vectors a lane, all loaded before the first pass
    assert "constexpr int PER = 16;" in text and "held = C <= PER * 4 * 32 && C % 4 == 0" in text
    assert "rows up to 2048 elements" in candidate.description
    assert len(re.findall(r"\binp_row_r\[u \* 4 \+ e\]", text)) == 2  # both passes read the registers
    assert text.count("for (int j = lane; j < C; j += 32)") == 2  # and keep their loops for other sizes
    assert "reinterpret_cast<uint4*>(&out_row[j0])" in text  # the output stored 16 bytes at a time
    code = ptx(candidate, tmp_path)
    assert code.count("ld.global.v4") == 16 and "ld.local" not in code and "st.local" not in code
    # a block a row: 2 vectors a thread, sized with the block's threads
    assert "held = C <= PER * 4 * blockDim.x" in body(held(block), "softmax_online")


@needs_nvcc
def test_the_split_max_then_sum_softmax_and_an_rms_norm_of_halves(tmp_path: Path) -> None:
    original = target_of(OUTSIDE / "softmax_online.cu")
    (two_passes,) = PROPOSERS[max_then_sum.PROPOSER](original)
    reloaded = reloaded_target(original, two_passes.source)
    assert reloaded is not None
    split_two = PROPOSERS["rewrite:warp-per-output"](reloaded)[0]
    target = reloaded_target(reloaded, split_two.source)
    assert target is not None
    assert "the 3 passes over the row" in held(target).description
    # the RMS norm: halves, 8 a vector; its weight and output 16 bytes a step beside the held row
    for target in split(OUTSIDE / "rmsnorm_fp16.cu"):
        text = body(held(target), "rmsnorm_fp16")
        assert "alignas(16) half x_row_r[PER * 8];" in text
        assert "((unsigned long long)(&weight[0]) & 15) == 0" in text
        assert "*reinterpret_cast<uint4*>(weight_v) = *reinterpret_cast<const uint4*>(&weight[i0]);" in text


@pytest.mark.parametrize("cols", ["C = 8192", "C = 8191"])
def test_not_offered_for_rows_longer_than_the_registers_hold(cols: str) -> None:
    # 8192 floats a warp would be 64 vectors a lane; an odd length of about as many as well
    source = (OUTSIDE / "softmax_online.cu").read_text().replace("C = 2048", cols)
    path = OUTSIDE / "softmax_online.cu"
    from cuda_agent.agent.targets import load_targets

    (original,) = load_targets(path, source).targets
    split_kernel = next(
        c for c in PROPOSERS["rewrite:warp-per-output"](original) if c.description.startswith("one warp per")
    )
    target = reloaded_target(original, split_kernel.source)
    assert target is not None
    assert row_registers.propose(target) == []


STORED_THEN_READ = """\
/* cuda-agent
[sizes]
rows = 4096
cols = 1024
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
z = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [256]
grid = ["rows"]
*/
__global__ void k(const float* x, float* y, float* z, int rows, int cols)
{
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = row[c] * 2.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) z[(size_t)blockIdx.x * cols + c] = row[c] + out[c];
}
"""


def test_not_offered_where_a_pass_reads_what_another_stored() -> None:
    # the second pass reads `out`, which the first stored: with the registers one pass and the loops
    # the other (an unaligned `z`), a thread would read another thread's store
    target = _target(STORED_THEN_READ, "k")
    found = analysed(target)
    assert found is not None and len(row_stage._passes(*found)) == 2  # the passes are found ...
    assert row_registers.propose(target) == []  # ... but not rewritten
    # without the read of `out`, the same passes are
    reads_input_only = STORED_THEN_READ.replace("row[c] + out[c]", "row[c] + 1.0f")
    assert row_registers.propose(_target(reads_input_only, "k"))


@pytest.mark.gpu
def test_held_rows_verify_and_beat_the_split_kernels_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=3)) as engine:
        for target in row_kernels():
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            # the shared-memory stage beside it, for the log: which of the two the search should keep
            results = engine.evaluate(baseline, row_registers.propose(target) + row_stage.propose(target))
            for r in results:
                print(f"{target.kernel.name} {target.spec.launch if target.spec else ''}: "
                      f"{r.candidate.description}: {r.status} {r.speedup or 0:.2f}x")  # fmt: skip
            held_results = [r for r in results if r.candidate.proposer == row_registers.PROPOSER]
            assert held_results and all(r.verified for r in held_results), [
                (r.status, r.reason) for r in held_results
            ]
