"""Integer inputs read as positions into another buffer are drawn within it (agent/index_ranges.py), for
specs inferred from a program: a loss's labels, an embedding's token ids. Written specs and integers
used as values are left as they are."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.agent.index_ranges import with_index_ranges
from cuda_agent.agent.spec import InitSpec
from cuda_agent.agent.spec.expressions import evaluate
from cuda_agent.agent.targets import KernelTarget, load_targets

LABELS = """#include <cuda_runtime.h>
__global__ void nll(float* loss, const float* logp, const int* label, int rows, int classes) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        const float* row = logp + r * classes;
        int want = label[r];
        loss[r] = -row[want];
    }
}
int main() {
    const int rows = 4096, classes = 1000;
    float *loss, *logp; int* label;
    cudaMalloc(&loss, rows * sizeof(float));
    cudaMalloc(&logp, rows * classes * sizeof(float));
    cudaMalloc(&label, rows * sizeof(int));
    nll<<<(rows + 127) / 128, 128>>>(loss, logp, label, rows, classes);
    return 0;
}
"""

LOOKUP = """#include <cuda_runtime.h>
__global__ void lookup(float* out, const float* table, const int* token, int count, int width) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < count) {
        int id = token[p];
        for (int c = 0; c < width; ++c) out[p * width + c] = table[id * width + c];
    }
}
int main() {
    const int count = 8192, width = 256, vocab = 500;
    float *out, *table; int* token;
    cudaMalloc(&out, count * width * sizeof(float));
    cudaMalloc(&table, vocab * width * sizeof(float));
    cudaMalloc(&token, count * sizeof(int));
    lookup<<<(count + 255) / 256, 256>>>(out, table, token, count, width);
    return 0;
}
"""


def target_of(tmp_path: Path, source: str) -> KernelTarget:
    path = tmp_path / "kernel.cu"
    path.write_text(source)
    (target,) = load_targets(path).targets
    assert target.spec is not None and target.spec.inferred, target.note
    return target


def init_of(target: KernelTarget, name: str) -> InitSpec | None:
    spec = with_index_ranges(target)
    assert spec is not None
    return next(a.init for a in spec.arguments if a.name == name)


def test_a_label_per_row_is_drawn_within_the_rows_length(tmp_path: Path) -> None:
    target = target_of(tmp_path, LABELS)
    assert init_of(target, "label") == InitSpec("integers", low=0, high="classes")


def test_a_token_id_is_drawn_within_the_tables_rows(tmp_path: Path) -> None:
    target = target_of(tmp_path, LOOKUP)
    init = init_of(target, "token")
    assert init is not None and init.dist == "integers" and init.low == 0
    assert target.spec is not None and evaluate(str(init.high), target.spec.sizes) == 500


def test_a_written_spec_and_an_integer_used_as_a_value_are_left_alone(tmp_path: Path) -> None:
    as_value = LABELS.replace("loss[r] = -row[want];", "loss[r] = -row[0] * want;")
    target = target_of(tmp_path, as_value)
    assert init_of(target, "label") == InitSpec.default("int32")
    written = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside" / "cross_entropy.cu"
    (bench,) = load_targets(written).targets
    assert with_index_ranges(bench) == bench.spec
