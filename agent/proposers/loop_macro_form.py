"""Proposers on a kernel whose loops are macros (`CUDA_KERNEL_LOOP(i, n) { ... }`), through the loops
written out (agent/spec/loop_macros.py).

The analysis reads `for` statements; a macro use reads as something else, so every rewrite would pass the
kernel by. The spec was inferred from the written-out text already; here the proposers run on it too, and
their candidates carry the loop as its `for` (the same code the compiler saw), with their own change.
"""

from __future__ import annotations

from collections.abc import Callable

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.spec.loop_macros import loop_macros_written_out
from cuda_agent.agent.targets import KernelTarget, load_targets

# A search asks once a proposer; the written-out target is read once a kernel and text.
_FORMS: BoundedMemo[tuple[str, str, int], tuple[KernelTarget | None]] = BoundedMemo(64)


def loops_written_out(target: KernelTarget) -> KernelTarget | None:
    """The kernel read with its loop macros written out, with a spec; None where it uses none."""
    key = (str(target.path), target.source, target.kernel.start_byte)
    return _FORMS.get_or_make(key, lambda: (_written_out(target),))[0]


def _written_out(target: KernelTarget) -> KernelTarget | None:
    source = loop_macros_written_out(target.kernel, target.source)
    if source is None:
        return None
    found = load_targets(target.path, source).find(target.kernel.name)
    return found if found is not None and found.spec is not None else None


def through_loops(
    proposer: Callable[[KernelTarget], list[Candidate]], target: KernelTarget
) -> list[Candidate]:
    """The proposer's candidates for the kernel, made on its loops written out where it has loop macros."""
    written = loops_written_out(target)
    return proposer(written if written is not None else target)
