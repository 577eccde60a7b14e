"""Generic source transforms of one kernel. Each `propose_*(target)` returns candidates, or [] when the
transform does not apply; each edits only the bytes that change, keeping the user's names and comments.
"""

from __future__ import annotations

from collections.abc import Callable

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.transforms.flags import propose_flags
from cuda_agent.agent.proposers.transforms.grid_stride import propose_grid_stride
from cuda_agent.agent.proposers.transforms.launch_bounds import propose_launch_bounds
from cuda_agent.agent.proposers.transforms.restrict import propose_restrict
from cuda_agent.agent.proposers.transforms.shared_padding import propose_shared_padding
from cuda_agent.agent.proposers.transforms.single_precision import propose_single_precision
from cuda_agent.agent.proposers.transforms.unroll import propose_unroll
from cuda_agent.agent.proposers.transforms.vectorize import propose_vectorize
from cuda_agent.agent.proposers.transforms.vectorize_rows import propose_vectorize_rows
from cuda_agent.agent.targets import KernelTarget

# In the order the search tries them first: the likeliest large gains early.
TRANSFORMS: dict[str, Callable[[KernelTarget], list[Candidate]]] = {
    "vectorize": propose_vectorize,
    "vectorize-rows": propose_vectorize_rows,
    "shared-padding": propose_shared_padding,
    "grid-stride": propose_grid_stride,
    "single-precision": propose_single_precision,
    "restrict": propose_restrict,
    "unroll": propose_unroll,
    "launch-bounds": propose_launch_bounds,
    "flags": propose_flags,
}

__all__ = ["TRANSFORMS"]
