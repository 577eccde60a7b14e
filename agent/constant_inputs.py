"""The `__constant__` arrays of a file that host code fills: inputs no spec argument describes.

Course and sample code keeps a convolution's mask or a filter's weights in constant memory
(`__constant__ float M[MASK_DIM * MASK_DIM];`, set with cudaMemcpyToSymbol before the launch). Nothing
launches the host code here, so the array would hold zeros: the original would compute as if every
weight were 0, and a rewrite that reads the weights wrongly would still match it. The sandbox fills each
one found here with values drawn from its name (sandbox/plan.py `ConstantInput`).

Of the file's top-level `__constant__` arrays (agent/analysis/constant_arrays.py), those without an
initialiser (one that has its values in the source keeps them) whose element type is a floating dtype:
integer ones are often index tables (neighbour offsets), which random values would send out of bounds.
"""

from __future__ import annotations

from cuda_agent.agent.analysis.constant_arrays import constant_arrays
from cuda_agent.agent.spec.dtypes import dtype_of_c_type, is_float
from cuda_agent.sandbox.plan import ConstantInput


def constant_inputs(source: str) -> tuple[ConstantInput, ...]:
    """The file's floating-point `__constant__` arrays host code fills, in the order declared."""
    found = []
    for array in constant_arrays(source):
        dtype = dtype_of_c_type(array.c_type)
        if not array.initialised and dtype is not None and is_float(dtype):
            found.append(ConstantInput(array.name, dtype))  # type: ignore[arg-type]
    return tuple(found)
