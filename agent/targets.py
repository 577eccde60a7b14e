"""From a .cu file to the kernels that can be run: discovery, the spec (written or inferred), problems."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cuda_agent.agent.kernels import EarlierRead, Kernel, find_kernels
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.spec import KernelSpec, SpecError, complete_sizes, infer_spec, parse_specs, resolve
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


def _auto_verify_sizes(spec: KernelSpec) -> dict[str, int]:
    """A smaller, odd size, so a kernel that only works at the benchmark size (or a multiple of its
    block) fails. Used when the spec names no extra sizes. Sizes written as expressions of others
    are re-derived, not shrunk."""
    independent = {
        name: value
        for name, value in spec.sizes.items()
        if str(spec.size_expressions.get(name, value)).replace("_", "").strip().isdigit()
    }
    return complete_sizes(spec, {n: (max(1, v // 3) | 1) if v > 2 else v for n, v in independent.items()})


def problems_for(
    spec: KernelSpec, block: tuple[int, ...] | None = None
) -> tuple[tuple[Problem, ...], tuple[LaunchPlan, ...], bool]:
    """The benchmark problem first, then the verification sizes. The flag says the extra size was derived
    automatically (the caller drops it, with a note, if the original kernel itself fails there)."""
    size_sets: list[dict[str, int]] = [dict(spec.sizes)]
    automatic = not spec.verify_sizes
    extra = [_auto_verify_sizes(spec)] if automatic else [complete_sizes(spec, s) for s in spec.verify_sizes]
    size_sets += [s for s in extra if s != spec.sizes]
    problems, launches = [], []
    for sizes in size_sets:
        problem, launch = resolve(spec, sizes, block)
        problems.append(problem)
        launches.append(launch)
    return tuple(problems), tuple(launches), automatic and len(size_sets) > 1


def with_block(spec: KernelSpec, block: Sequence[int]) -> KernelSpec:
    return replace(spec, launch=replace(spec.launch, block=tuple(block)))
