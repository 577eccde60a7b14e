"""Launch-configuration tuning: the same kernel with other block shapes, each verified and timed.

The spec's grid and shared-memory expressions are written in terms of the block, so every shape
here gets a consistent launch; a kernel that silently assumes its block size fails verification.
"""

from __future__ import annotations

import re

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.rewrite import with_launch_block
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "launch-config"
BLOCKS_1D = ((64,), (128,), (256,), (512,), (1024,))
BLOCKS_2D = ((32, 4), (32, 8), (32, 16), (32, 32), (16, 16), (64, 4), (64, 8), (128, 2), (128, 4), (256, 1))


def _max_threads(target: KernelTarget) -> int:
    """`__launch_bounds__(N, ...)` caps the block; N may be a macro, then only the hardware limit applies."""
    bounds = target.kernel.launch_bounds
    first = bounds.split(",")[0].strip() if bounds else ""
    return int(first) if re.fullmatch(r"\d+", first) else 1024


def propose_launch_configs(target: KernelTarget) -> list[Candidate]:
    assert target.spec is not None
    current = target.spec.launch.block
    rank = len(current)
    # In 2-D and 3-D, keep z as written and tune the x-y plane.
    shapes = list(BLOCKS_1D) if rank == 1 else [s + current[2:] for s in BLOCKS_2D]
    limit = _max_threads(target)
    candidates = []
    for shape in shapes:
        threads = 1
        for extent in shape:
            threads *= extent
        if shape == current or threads > limit:
            continue
        was = "×".join(map(str, current))
        candidates.append(
            Candidate(
                source=with_launch_block(target, shape),
                block=shape,
                description=f"block {'×'.join(map(str, shape))} ({threads} threads; was {was})",
                proposer=PROPOSER,
            )
        )
    return candidates
