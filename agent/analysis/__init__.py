"""The analysis of a kernel a compiler engineer would do, on the tree-sitter tree, kept as plain data:
accesses as polynomial forms of the thread indices and loop variables, normalised bounds, loops with
their trip counts and independence, reductions by their combine, and the stride between neighbouring
threads of a warp. Rewrites (agent/proposers/rewrites/) are driven by these facts, not by spelling."""

from cuda_agent.agent.analysis.analyse import analyse, analysed, assigned_names, declared_values
from cuda_agent.agent.analysis.facts import KernelFacts
from cuda_agent.agent.analysis.flat_index import FlatPiece, flat_pieces

__all__ = [
    "FlatPiece",
    "KernelFacts",
    "analyse",
    "analysed",
    "assigned_names",
    "declared_values",
    "flat_pieces",
]
