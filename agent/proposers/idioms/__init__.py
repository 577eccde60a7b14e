"""Idioms recognised from the syntax tree and replaced by known-good implementations.

Each module's `propose(target)` returns candidates (empty when the kernel is not that idiom). The
rewrite keeps the kernel's name and signature, writes the template in the user's names, and brings its
own launch (`Candidate.launch`); everything outside the kernel body stays byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.idioms import (
    atomic_reduction,
    block_reduction,
    block_scan,
    histogram,
    stencil,
    transpose,
)
from cuda_agent.agent.targets import KernelTarget

IDIOM_PROPOSERS: dict[str, Callable[[KernelTarget], list[Candidate]]] = {
    atomic_reduction.PROPOSER: atomic_reduction.propose,
    block_reduction.PROPOSER: block_reduction.propose,
    block_scan.PROPOSER: block_scan.propose,
    histogram.PROPOSER: histogram.propose,
    transpose.PROPOSER: transpose.propose,
    stencil.PROPOSER: stencil.propose,
}

__all__ = ["IDIOM_PROPOSERS"]
