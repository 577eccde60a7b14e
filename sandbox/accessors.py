"""PyTorch's packed tensor accessors as the sandbox passes them (numpy only: no GPU needed to build one).

A kernel of a PyTorch extension often takes `torch::PackedTensorAccessor32<scalar_t, 2,
torch::RestrictPtrTraits> x` instead of a pointer: a struct passed by value, which torch fills on the host
from a tensor (`x.packed_accessor32<...>()`). The sandbox builds the same bytes from a buffer's pointer and
shape; tests/test_accessors.py compares them with the struct torch's own header builds.
"""

from __future__ import annotations

import math

import numpy as np


def accessor_struct(pointer: int, shape: tuple[int, ...], index_bits: int) -> np.ndarray:
    """torch's GenericPackedTensorAccessor as the kernel receives it: the data pointer, then the sizes,
    then the strides in elements (contiguous), each an integer of the accessor's index width, laid out as
    the C++ struct is (8-byte aligned). One element: CuPy passes a one-element numpy array by value."""
    index = np.int32 if index_bits == 32 else np.int64
    rank = len(shape)
    layout = np.dtype(
        [("data", np.uint64), ("sizes", index, (rank,)), ("strides", index, (rank,))], align=True
    )
    strides = [math.prod(shape[d + 1 :]) for d in range(rank)]
    record = np.zeros(1, dtype=layout)
    record["data"], record["sizes"], record["strides"] = pointer, shape, strides
    return record
