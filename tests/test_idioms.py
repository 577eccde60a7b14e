"""Idiom rewrites on CPU: recognised (or not) from the tree, compiled with NVRTC, launch resolvable.

Correctness of the rewritten kernels is proven on the GPU by the engine's verifier; here every candidate
must compile, keep the kernel's signature and the file outside the body, and give a launch that resolves
at the benchmark and verify sizes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.idioms import IDIOM_PROPOSERS
from cuda_agent.agent.spec import complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.nvrtc import nvrtc_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
needs_compiler = pytest.mark.skipif(nvrtc_unavailable_reason() is not None, reason="NVRTC is not installed")


def _target(source: str, name: str) -> KernelTarget:
    target = load_targets(Path(f"{name}.cu"), source).find(name)
    assert target is not None and target.spec is not None, target and target.note
    return target


def _check(target: KernelTarget, proposer: str) -> None:
    """Every candidate compiles, keeps the file outside the body and resolves its launch everywhere."""
    candidates = IDIOM_PROPOSERS[proposer](target)
    assert candidates, f"{proposer} did not recognise {target.kernel.name}"
    kernel, spec = target.kernel, target.spec
    assert spec is not None
    for candidate in candidates:
        assert candidate.launch is not None and candidate.block == candidate.launch.block
        source = candidate.source
        # The signature and everything after the kernel are unchanged; before it only helpers are added.
        signature = target.source[kernel.span.start_byte : kernel.body_span.start_byte]
        assert signature in source
        assert source.endswith(target.source[kernel.span.end_byte :])
        assert source.startswith(target.source[: kernel.span.start_byte])
        again = load_targets(target.path, source).find(kernel.name)
        assert again is not None and again.kernel.parameters == kernel.parameters
        result = compile_kernel(device_source(source), kernel.name, flags=candidate.flags)
        assert result.ok, (candidate.description, [d.message for d in result.diagnostics], source)
        launched = replace(spec, launch=candidate.launch)
        for sizes in [spec.sizes, *(complete_sizes(spec, s) for s in spec.verify_sizes)]:
            resolve(launched, sizes)


# -- atomic reductions ---------------------------------------------------------------------------------

SUM_SPEC = """/* cuda-agent
[sizes]
n = 16_777_216
[args]
{x} = {{ role = "input", dtype = "{dtype}", shape = ["n"] }}
{out} = {{ role = "inout", dtype = "{dtype}", shape = [1], init = "zeros" }}
{n} = {{ role = "scalar", dtype = "int32", value = "n" }}
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
[verify]
sizes = [{{ n = 999_999 }}]
reduction = "n"
*/
"""

ATOMIC_SUMS = [
    ("x", "sum", "n", "float32", """__global__ void k(const float* x, float* sum, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(sum, x[i]);
}"""),
    ("data", "total", "count", "float32", """__global__ void k(const float* __restrict__ data, float* total,
                  int count) {
  const int idx = threadIdx.x + blockDim.x * blockIdx.x;
  if (idx >= count) return;
  float v = data[idx];
  if (v > 0.0f) {
    atomicAdd(&total[0], v * v);   // sum of squares of the positives
  }
}"""),
    ("x", "best", "n", "int32", """__global__ void k(const int* x, int* best, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { atomicMax(best, x[i]); }
}"""),
]  # fmt: skip


@needs_compiler
@pytest.mark.parametrize(("x", "out", "n", "dtype", "kernel"), ATOMIC_SUMS)
def test_atomic_reductions_become_one_atomic_per_block(
    x: str, out: str, n: str, dtype: str, kernel: str
) -> None:
    target = _target(SUM_SPEC.format(x=x, out=out, n=n, dtype=dtype) + kernel, "k")
    _check(target, "idiom:atomic-reduction")
    (candidate,) = IDIOM_PROPOSERS["idiom:atomic-reduction"](target)
    assert "__shfl_down_sync" in candidate.source and candidate.source.count("atomic") == 1 + 0
    assert candidate.launch is not None and candidate.launch.grid[0].startswith("min(")


@needs_compiler
@pytest.mark.parametrize(
    ("value", "folded", "added"),
    [
        ("diff * diff / n", "acc += diff * diff;", "atomicAdd(sum, acc / n);"),
        ("scale * diff", None, "atomicAdd(sum, acc);"),  # the factor on the left: left alone
        ("diff * 0.5f", "acc += diff;", "atomicAdd(sum, acc * 0.5f);"),
        ("diff / x[0]", "acc += diff / x[0];", "atomicAdd(sum, acc);"),  # a load: not a common factor
    ],
)
def test_a_common_factor_of_the_sum_is_applied_once_a_block(
    value: str, folded: str | None, added: str
) -> None:
    """An MSE's `diff * diff / n` divides every element: summed first, the block divides once."""
    kernel = f"""__global__ void k(const float* x, float* sum, int n, float scale)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        float diff = x[i] - 1.0f;
        atomicAdd(sum, {value});
    }}
}}"""
    spec = SUM_SPEC.format(x="x", out="sum", n="n", dtype="float32").replace(
        "[launch]", 'scale = { role = "scalar", dtype = "float32", value = 0.5 }\n[launch]'
    )
    (candidate,) = IDIOM_PROPOSERS["idiom:atomic-reduction"](_target(spec + kernel, "k"))
    assert added in candidate.source
    if folded is not None:
        assert candidate.source.count(folded) == 2  # the unrolled steps and the rest
    assert compile_kernel(device_source(candidate.source), "k").ok


def test_per_element_atomics_are_not_a_single_address_reduction() -> None:
    per_element = (
        SUM_SPEC.format(x="x", out="sum", n="n", dtype="float32")
        + """\
__global__ void k(const float* x, float* sum, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&sum[i % 1], x[i]);
    if (i < n) sum[0] = 1.0f;
}"""
    )
    assert IDIOM_PROPOSERS["idiom:atomic-reduction"](_target(per_element, "k")) == []


# -- histograms ----------------------------------------------------------------------------------------

HISTOGRAM = """/* cuda-agent
[sizes]
n = 16_777_216
bins = {bins}
[args]
{data} = {{ role = "input", dtype = "int32", shape = ["n"], init = {{ low = 0, high = "bins" }} }}
{hist} = {{ role = "inout", dtype = "{dtype}", shape = ["bins"], init = "zeros" }}
n = {{ role = "scalar", dtype = "int32", value = "n" }}
nbins = {{ role = "scalar", dtype = "int32", value = "bins" }}
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
[verify]
sizes = [{{ n = 100_003 }}]
*/
"""


@needs_compiler
@pytest.mark.parametrize(
    ("data", "hist", "dtype", "kernel"),
    [
        ("data", "hist", "int32", """__global__ void k(const int* data, int* hist, int n, int nbins)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = data[i];
        if (v >= 0 && v < nbins) atomicAdd(&hist[v], 1);
    }
}"""),
        ("keys", "counts", "uint32", """__global__ void k(const int* keys, unsigned int* counts,
                  int n, int nbins) {
    unsigned int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= n) return;
    atomicAdd(&counts[keys[tid] % nbins], 1u);
}"""),
    ],
)  # fmt: skip
def test_histograms_are_privatised_in_shared_memory(data: str, hist: str, dtype: str, kernel: str) -> None:
    target = _target(HISTOGRAM.format(bins=256, data=data, hist=hist, dtype=dtype) + kernel, "k")
    _check(target, "idiom:histogram")
    (candidate,) = IDIOM_PROPOSERS["idiom:histogram"](target)
    assert "extern __shared__" in candidate.source
    assert candidate.launch is not None and candidate.launch.shared_bytes == "(bins) * 4"


TRUSTING_HISTOGRAM = """/* cuda-agent
[sizes]
n = 1_000_000
bins = 64
[args]
keys = { role = "input", dtype = "int32", shape = ["n"], init = { low = 0, high = "bins" } }
hist = { role = "inout", dtype = "int32", shape = ["bins"], init = "zeros" }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [128]
grid = ["ceil_div(n, block.x)"]
[verify]
sizes = [%s]
*/
__global__ void k(const int* keys, int* hist, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&hist[keys[i]], 1);
}"""


@needs_compiler
def test_a_histogram_that_never_sees_its_bin_count_gets_the_specs_constant_and_says_so() -> None:
    target = _target(TRUSTING_HISTOGRAM % "{ n = 1001 }", "k")
    _check(target, "idiom:histogram")
    (candidate,) = IDIOM_PROPOSERS["idiom:histogram"](target)
    assert "b < 64;" in candidate.source
    assert "64 bins (bins = 64 at every size of the spec)" in candidate.assumptions
    # Verified at another bin count too, the count is not a constant: no rewrite guesses one.
    varying = _target(TRUSTING_HISTOGRAM % "{ n = 1001, bins = 16 }", "k")
    assert IDIOM_PROPOSERS["idiom:histogram"](varying) == []


def test_histogram_bins_must_fit_in_shared_memory() -> None:
    kernel = """__global__ void k(const int* data, int* hist, int n, int nbins)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&hist[data[i]], 1);
}"""
    target = _target(HISTOGRAM.format(bins=1 << 20, data="data", hist="hist", dtype="int32") + kernel, "k")
    assert IDIOM_PROPOSERS["idiom:histogram"](target) == []


# -- transpose -----------------------------------------------------------------------------------------


@needs_compiler
def test_transpose_example_uses_a_padded_tile() -> None:
    target = load_targets(ROOT / "examples" / "transpose.cu").find("transpose")
    assert target is not None
    _check(target, "idiom:transpose")
    (candidate,) = IDIOM_PROPOSERS["idiom:transpose"](target)
    assert "[32][32 + 1]" in candidate.source and candidate.block == (32, 8)


@needs_compiler
def test_transpose_with_a_scale_and_other_names() -> None:
    source = (ROOT / "examples" / "transpose.cu").read_text()
    spec = source[source.index("/* cuda-agent") : source.index("*/") + 2]
    alpha = 'alpha = { role = "scalar", dtype = "float32", value = 2 }\n'
    spec = spec.replace("dst  =", alpha + "dst  =").replace("src", "a").replace("dst", "b")
    kernel = """
__global__ void transpose(float alpha, const float* a, float* b, int rows, int cols) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || j >= cols) return;
    b[j * rows + i] = alpha * a[i * cols + j];
}"""
    target = _target(spec + kernel, "transpose")
    _check(target, "idiom:transpose")


def test_coalesced_copy_is_not_a_transpose() -> None:
    source = (ROOT / "examples" / "transpose.cu").read_text()
    # Without the oracle only the code can say what the kernel does (with it, the spec says transpose).
    copy = source.replace("dst[col * rows + row]", "dst[row * cols + col]").replace(
        'oracle = { dst = "src.T" }', ""
    )
    target = load_targets(Path("t.cu"), copy).find("transpose")
    assert target is not None and IDIOM_PROPOSERS["idiom:transpose"](target) == []


@needs_compiler
def test_a_kernel_whose_oracle_transposes_gets_the_tiled_transpose_whatever_its_code() -> None:
    # A shared tile without padding and one element a thread: not the naive pattern, but the spec's oracle
    # and shapes say transpose.
    target = load_targets(ROOT / "bench" / "kernels" / "transpose_shared.cu").find("transpose_shared")
    assert target is not None
    _check(target, "idiom:transpose")
    (candidate,) = IDIOM_PROPOSERS["idiom:transpose"](target)
    assert "[32][32 + 1]" in candidate.source and candidate.block == (32, 8)


SQUARE = """/* cuda-agent
[sizes]
n = 4096
[args]
a = {{ role = "input", dtype = "float32", shape = ["n", "n"] }}
{extra}b = {{ role = "output", dtype = "float32", shape = ["n", "n"] }}
n = {{ role = "scalar", dtype = "int32", value = "n" }}
[launch]
block = [32, 32]
grid = ["ceil_div(n, 32)", "ceil_div(n, 32)"]
[verify]
oracle = {{ b = "{oracle}" }}
*/
__global__ void square({parameters}) {{
    __shared__ float tile[32][32];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = a[y * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x; y = blockIdx.x * 32 + threadIdx.y;
    if (x < n && y < n) b[y * n + x] = {scale}tile[threadIdx.x][threadIdx.y];
}}"""


@pytest.mark.parametrize(
    "oracle",
    ["a.T", "a.t()", "torch.t(a)", "a.transpose(0, 1)", "torch.transpose(a, -1, -2)", "a.mT.contiguous()"],
)
@needs_compiler
def test_every_spelling_of_a_transpose_oracle_is_read(oracle: str) -> None:
    parameters = "const float* a, float* b, int n"
    source = SQUARE.format(extra="", oracle=oracle, parameters=parameters, scale="")
    _check(_target(source, "square"), "idiom:transpose")


@pytest.mark.parametrize(
    ("oracle", "extra", "scale"),
    [
        ("a.T * 2", "", "2.0f * "),  # more than a transpose
        ("a", "", ""),  # a copy
        (
            "a.T",
            'alpha = { role = "scalar", dtype = "float32", value = 2 }\n',
            "alpha * ",
        ),  # a parameter it may use
    ],
)
def test_an_oracle_that_is_not_a_plain_transpose_gets_no_tiled_transpose(
    oracle: str, extra: str, scale: str
) -> None:
    parameters = "const float* a, " + ("float alpha, " if extra else "") + "float* b, int n"
    source = SQUARE.format(
        extra=extra, out_shape='["n", "n"]', oracle=oracle, parameters=parameters, scale=scale
    )
    assert IDIOM_PROPOSERS["idiom:transpose"](_target(source, "square")) == []


def test_no_idiom_matches_an_elementwise_kernel() -> None:
    for target in load_targets(ROOT / "examples" / "elementwise.cu").targets:
        for propose in IDIOM_PROPOSERS.values():
            assert propose(target) == []
