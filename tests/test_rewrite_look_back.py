"""The look-back rewrite on CPU: a block's carry summed by thread 0 from the array's start (O(n) a block)
becomes a single-pass look-back over the blocks before it, whatever the names, the macros and the spelling
of the sum; what thread 0 does with the carry stays as written. It is not offered where the sum could
change (the array is written, another type accumulates, the bound is not a whole number of blocks, the
loop adds something else) or where the blocks are not one row of 1-D blocks. The gpu-marked test verifies
the rewrites, launch after launch (the status words must be cleared between them), on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent import optimize, search
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import look_back
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_idioms import _target, needs_compiler

OUTSIDE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside"

# Stream compaction's offsets, in another style: int flags, the share spelled through `first`, the sum
# as `acc = acc + flags[k]`, an exclusive scan of the block done naively by each thread.
COMPACT = """
/* cuda-agent
[sizes]
count = "1 << 18"
[args]
flags = { role = "input", dtype = "int32", shape = ["count"], init = { dist = "integers", low = 0, high = 2 }}
offsets = { role = "output", dtype = "int32", shape = ["count"] }
count   = { role = "scalar", dtype = "int32", value = "count" }
[launch]
block = [256]
grid = ["ceil_div(count, block.x)"]
[verify]
sizes = [{ count = 70_001 }]
oracle = { offsets = "(torch.cumsum(flags, 0) - flags).to(torch.int32)" }
*/
__global__ void compact_offsets(const int* flags, int* offsets, int count)
{
    __shared__ int local[1024];
    __shared__ int base_offset;
    const unsigned int t = threadIdx.x;
    const int first = blockIdx.x * blockDim.x;
    if (t == 0) {
        int acc = 0;
        for (int k = 0; k < first; ++k) {
            acc = acc + flags[k];
        }
        base_offset = acc;
    }
    const int g = first + t;
    local[t] = g < count ? flags[g] : 0;
    __syncthreads();
    int run = 0;
    for (int i = 0; i < (int)t; ++i) run += local[i];
    if (g < count) offsets[g] = base_offset + run;
}
"""


def scan_blocks() -> KernelTarget:
    (target,) = load_targets(OUTSIDE / "scan_blocks.cu").targets
    return target


def body(target: KernelTarget) -> str:
    """The candidate's source after checking it compiles without a warning and keeps the launch."""
    (candidate,) = look_back.propose(target)
    assert candidate.launch == target.spec.launch  # type: ignore[union-attr]
    result = compile_kernel(device_source(candidate.source), target.kernel.name, flags=candidate.flags)
    assert result.ok and not result.diagnostics, [d.message for d in result.diagnostics]
    assert any("blocks start in the order of blockIdx.x" in a for a in candidate.assumptions)
    return candidate.source


@needs_compiler
def test_a_carry_summed_from_the_arrays_start_becomes_a_look_back() -> None:
    source = body(scan_blocks())
    kernel = source.split("__global__ void scan_blocks(")[1]
    assert "for (int j = 0; j < start; j++)" not in kernel  # the O(n) loop is gone
    assert "if (tid < 32) {" in kernel  # warp 0 looks back; thread 0 goes on with the carry
    assert "const float before_block = sum_before_block(in, BLOCK_SIZE);" in kernel  # the macro, kept
    assert "before += before_block;\n            carry = before;" in kernel
    assert "__device__ unsigned long long look_back_status[LOOK_BACK_CAPACITY];" in source
    assert "__float_as_uint(own)" in source


@needs_compiler
def test_an_int_sum_through_a_local_bound_and_a_spelled_out_add() -> None:
    source = body(_target(COMPACT, "compact_offsets"))
    kernel = source.split("__global__ void compact_offsets(")[1]
    assert "const int before_block = sum_before_block(flags, blockDim.x);" in kernel
    assert "acc += before_block;\n            base_offset = acc;" in kernel
    assert "(int)(unsigned int)(word)" in source  # an int's bits, not a float's


@needs_compiler
def test_names_the_file_already_uses_are_not_taken() -> None:
    source = COMPACT.replace("__global__ void", "__device__ int look_back_status;\n\n__global__ void")
    kernel_source = body(_target(source, "compact_offsets"))
    assert "__device__ unsigned long long look_back_status_[LOOK_BACK_CAPACITY];" in kernel_source


@pytest.mark.parametrize(
    "change",
    [
        ("if (g < count) offsets[g]", "flags[g] = 0;\n    if (g < count) offsets[g]"),  # read after stores
        ("int acc = 0;", "long long acc = 0;"),  # summed in another type
        ("k < first;", "k < first + 1;"),  # not a whole number of blocks
        ("acc = acc + flags[k];", "acc = acc + 2 * flags[k];"),  # adds something else
        ("block = [256]", "block = [16, 16]"),  # not a row of 1-D blocks
        # blocks past the end leave: the block before them would read its own elements unproven
        ("    if (t == 0) {\n", "    if (first >= count) return;\n    if (t == 0) {\n"),
    ],
)
def test_not_offered_where_the_sum_could_change(change: tuple[str, str]) -> None:
    old, new = change
    assert old in COMPACT
    assert look_back.propose(_target(COMPACT.replace(old, new), "compact_offsets")) == []


def test_the_search_measures_it_with_the_block_scan_in_the_first_round() -> None:
    target = scan_blocks()
    first = search.interleave(search._first_round(target, optimize.PROPOSERS, []))
    proposers = [c.proposer for c in first]
    assert "rewrite:look-back" in proposers and "rewrite:look-back+idiom:block-scan" in proposers


@pytest.mark.gpu
def test_look_backs_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    from tests.test_rewrite_warp_per_output import shown

    # five input sets at two sizes: launches of different grids in a row, each needing clean status words
    with Engine(EngineSettings(use_cache=False, input_sets=5)) as engine:
        for target in (scan_blocks(), _target(COMPACT, "compact_offsets")):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, look_back.propose(target))
            assert [status for _, status, _ in shown(target, results)] == ["faster"], shown(target, results)
