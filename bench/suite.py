"""The bench suites, every kernel with a spec in file order: "classic", the first drafts written for the bench
(bench/kernels/*.cu); "outside", first drafts in the styles of public code: llm.c-style training
kernels, PolyBench, course exercises, PyTorch extensions (bench/kernels/outside/*.cu); and "holdout", more
of those written after the optimizer was built, kinds it was not tuned on, measured first as they came
(bench/kernels/holdout/*.cu; a second batch: reduce_slides, sobel_edges, column_softmax, gelu_backward_bf16,
conv2d_constant_mask; a third, written by a helper that had not seen the rewrites: kmeans_assign,
pairwise_dist_fp64, upsample_bilinear, cumsum_rows, prelu_caffe_loop, leaky_relu_half2,
cosine_similarity_rows, channel_sum_fp64, of which cumsum_rows and channel_sum_fp64 then led to
rewrite:warp-scan and rewrite:atomic-sum before their first measurement; then spmv_csr, the scalar CSR
kernel, written with the spec's `offsets` distribution for its row pointers; a fourth batch, written by a
helper that had not seen the rewrites: heat3d_jacobi, l2_normalize_rows, kde_gaussian, softmax_xent_rows,
avgpool2d_3x3, of which softmax_xent_rows, its rows read through a `LOGIT(b, v)` macro, showed the
analysis losing loads read through a macro before any of them was measured)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cuda_agent.agent.targets import KernelTarget, load_targets

KERNELS_DIR = Path(__file__).resolve().parent / "kernels"
SUITES: dict[str, Path] = {
    "classic": KERNELS_DIR,
    "outside": KERNELS_DIR / "outside",
    "holdout": KERNELS_DIR / "holdout",
}
ALL = "all"
SUITE_CHOICES = (*SUITES, ALL)


class UnknownKernel(Exception):
    """A name given on the command line matches no bench kernel."""


def suite_names(suite: str) -> tuple[str, ...]:
    """The suites a `--suite` choice stands for, in their order."""
    if suite == ALL:
        return tuple(SUITES)
    if suite not in SUITES:
        raise ValueError(f"no bench suite named {suite} (suites: {', '.join(SUITE_CHOICES)})")
    return (suite,)


def suite_of(path: Path) -> str:
    """The suite a bench kernel's file belongs to: the one whose folder holds it."""
    folder = path.resolve().parent
    for name, suite_folder in SUITES.items():
        if folder == suite_folder:
            return name
    raise ValueError(f"{path} is in no bench suite's folder")


def load_suite(names: Sequence[str] | None = None, suite: str = "classic") -> list[KernelTarget]:
    """The targets of a suite (or of all of them, suite by suite), or only those whose kernel name or file
    stem is in `names`. Names are unique across the suites, so a name picks one kernel wherever it is."""
    targets = [
        t
        for name in suite_names(suite)
        for path in sorted(SUITES[name].glob("*.cu"))
        for t in load_targets(path).targets
    ]
    if not names:
        return targets
    wanted = set(names)
    chosen = [t for t in targets if t.kernel.name in wanted or t.path.stem in wanted]
    unknown = wanted - {t.kernel.name for t in chosen} - {t.path.stem for t in chosen}
    if unknown:
        known = ", ".join(t.kernel.name for t in targets)
        where = "" if suite == ALL else f" in the {suite} suite"
        raise UnknownKernel(f"no bench kernel named {', '.join(sorted(unknown))}{where} (kernels: {known})")
    return chosen
