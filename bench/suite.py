"""The bench suite: every kernel with a spec in bench/kernels/*.cu, in file order."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cuda_agent.agent.targets import KernelTarget, load_targets

KERNELS_DIR = Path(__file__).resolve().parent / "kernels"


class UnknownKernel(Exception):
    """A name given on the command line matches no bench kernel."""


def load_suite(names: Sequence[str] | None = None, folder: Path = KERNELS_DIR) -> list[KernelTarget]:
    """The targets of the suite, or only those whose kernel name or file stem is in `names`."""
    targets = [t for path in sorted(folder.glob("*.cu")) for t in load_targets(path).targets]
    if not names:
        return targets
    wanted = set(names)
    chosen = [t for t in targets if t.kernel.name in wanted or t.path.stem in wanted]
    unknown = wanted - {t.kernel.name for t in chosen} - {t.path.stem for t in chosen}
    if unknown:
        known = ", ".join(t.kernel.name for t in targets)
        raise UnknownKernel(f"no bench kernel named {', '.join(sorted(unknown))} (kernels: {known})")
    return chosen
