"""From a .cu file to the kernels that can be run: discovery, the spec (written or inferred), problems."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cuda_agent.agent.kernels import EarlierRead, Kernel, find_kernels
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.spec import (
    KernelSpec,
    SpecError,
    SpecResolveError,
    complete_sizes,
    infer_spec,
    parse_specs,
    resolve,
)
from cuda_agent.agent.spec.expressions import referenced_names
from cuda_agent.sandbox.plan import LaunchPlan, Problem
from tree_sitter import Tree


@dataclass(frozen=True)
class KernelTarget:
    path: Path
    source: str
    kernel: Kernel
    spec: KernelSpec | None  # None: no spec written and none could be inferred
    note: str = ""  # "spec inferred from the 1-D element-wise pattern", or why there is no spec

    @property
    def name_expression(self) -> str:
        """What to compile and look up: the instantiation for templates, else the name."""
        return (self.spec.instantiate if self.spec and self.spec.instantiate else None) or self.kernel.name

    @property
    def compilable(self) -> bool:
        """Whether it can be compiled by name: a template only through its spec's `instantiate`."""
        if not self.kernel.name:
            return False
        if self.kernel.template_parameters:
            return bool(self.spec and self.spec.instantiate)
        return True


@dataclass(frozen=True)
class FileTargets:
    path: Path
    source: str
    targets: tuple[KernelTarget, ...]
    spec_errors: tuple[SpecError, ...]

    def find(self, name: str | None) -> KernelTarget | None:
        if name is None:
            return self.targets[0] if len(self.targets) == 1 else None
        return next((t for t in self.targets if t.kernel.name == name), None)


# Inference reads only the kernel's own text, so its answer is kept per definition text: the language
# server re-analyses a file on every edit, and a 5,000-line file re-inferred every kernel (~0.3 s).
_INFERRED: BoundedMemo[bytes, tuple[KernelSpec | None, str]] = BoundedMemo()


def _inferred(kernel: Kernel, text: str, data: bytes, tree: Tree) -> tuple[KernelSpec | None, str]:
    key = data[kernel.start_byte : kernel.end_byte]
    return _INFERRED.get_or_make(key, lambda: infer_spec(kernel, text, tree))


def load_targets(
    path: Path, source: str | None = None, tree: Tree | None = None, earlier: EarlierRead | None = None
) -> FileTargets:
    """The file's kernels with their specs. `tree`: the source's parse when the caller has one (the
    language server reparses incrementally after an edit); `earlier`: the kernels before that edit."""
    text = path.read_text(encoding="utf-8", errors="replace") if source is None else source
    tree = tree or parse_cuda(text)  # once: inference reads every kernel from it (a parse each was quadratic)
    data = text.encode("utf-8")
    kernels = find_kernels(text, tree, earlier)
    specs, errors = parse_specs(text, kernels, tree)
    failed = {e.kernel for e in errors if e.kernel}
    targets = []
    for kernel in kernels:
        spec = specs.get(kernel.name)
        note = ""
        if spec is None and kernel.name in failed:
            note = "its spec has errors (see above)"
        elif spec is None:
            spec, reason = _inferred(kernel, text, data, tree)
            note = (
                spec.inference_note if spec else f"no spec: {reason}; add a /* cuda-agent ... */ spec comment"
            )
        targets.append(KernelTarget(path, text, kernel, spec, note))
    return FileTargets(path, text, tuple(targets), tuple(errors))


# The second automatic point keeps at most this power of two of each size: multiples of 4 (vector loads),
# of 32 (a warp, a tile) and up to 256 stay; a kernel that needs more (or no tail handling past a block
# of 256) is not checked at a made-up size.
KEPT_POWER_OF_TWO = 256


def automatic_verify_points(spec: KernelSpec) -> list[dict[str, int]]:
    """The sizes to verify at besides the benchmark when the spec names none, in the order to try them.

    Each size whose expression uses no other size (`4096`, `"1 << 26"`, `"4096 * 4"`) is made about a
    third, and sizes written over others are re-derived from those. First an odd size, so that a kernel
    that only works at the benchmark size, or only at a multiple of its block, fails; then (for an
    original kernel that itself fails at the odd one) a size that keeps each size's power-of-two factor up
    to KEPT_POWER_OF_TWO (a multiple of 4 for vector loads stays one), still smaller than the benchmark.
    Points that equal the benchmark (tiny sizes) or that the spec cannot be evaluated at are left out."""
    independent = [
        name
        for name, value in spec.sizes.items()
        if not referenced_names(spec.size_expressions.get(name, value), spec.sizes.keys())
    ]
    points: list[dict[str, int]] = []
    for shrink in (_odd_third, _third_keeping_power_of_two):
        try:
            point = complete_sizes(spec, {name: shrink(spec.sizes[name]) for name in independent})
            resolve(spec, point)
        except SpecResolveError:
            continue  # the spec cannot run there (a shape that reaches 0, a division by zero)
        if point != spec.sizes and point not in points:
            points.append(point)
    return points


def _odd_third(value: int) -> int:
    """About a third, odd: 4096 -> 1365, 1 << 26 -> 22369621; 0, 1 and 2 stay."""
    return (value // 3) | 1 if value > 2 else value


def _third_keeping_power_of_two(value: int) -> int:
    """About a third with the same power-of-two factor (capped at KEPT_POWER_OF_TWO and at the third
    itself): 1 << 26 -> 22369536 (256 × odd), 4096 -> 1280, 1000 -> 328 (8 × 41); 0, 1 and 2 stay."""
    third = value // 3
    if third < 1:
        return value
    kept = min(value & -value, KEPT_POWER_OF_TWO, 1 << (third.bit_length() - 1))
    return kept * ((third // kept) | 1)


def problems_for(
    spec: KernelSpec,
    block: tuple[int, ...] | None = None,
    verify_points: Sequence[Mapping[str, int]] | None = None,
) -> tuple[tuple[Problem, ...], tuple[LaunchPlan, ...], bool]:
    """The benchmark problem first, then the verification sizes: `verify_points` when given (complete
    size points, e.g. one of `automatic_verify_points`), else the spec's `[verify] sizes`, else the first
    automatic point. The flag says the extra size was derived automatically (the caller tries the next
    automatic point, or none, with a note, if the original kernel itself fails there)."""
    size_sets: list[dict[str, int]] = [dict(spec.sizes)]
    automatic = verify_points is None and not spec.verify_sizes
    if verify_points is not None:
        extra = [dict(point) for point in verify_points]
    elif automatic:
        extra = automatic_verify_points(spec)[:1]
    else:
        extra = [complete_sizes(spec, s) for s in spec.verify_sizes]
    size_sets += [s for s in extra if s != spec.sizes]
    problems, launches = [], []
    for sizes in size_sets:
        problem, launch = resolve(spec, sizes, block)
        problems.append(problem)
        launches.append(launch)
    return tuple(problems), tuple(launches), automatic and len(size_sets) > 1


def with_block(spec: KernelSpec, block: Sequence[int]) -> KernelSpec:
    return replace(spec, launch=replace(spec.launch, block=tuple(block)))
