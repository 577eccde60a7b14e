"""`__launch_bounds__` matching the spec's block, so the compiler allocates registers for that many
threads instead of the 1024 it must otherwise assume, and optionally asks for full occupancy.

Applied on top of a launch-configuration candidate (by the search), the bound follows the chosen block.
"""

from __future__ import annotations

import math
import re

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import Edit, candidate_from, kernel_tree
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "launch-bounds"
MAX_THREADS_PER_SM = 2048  # Hopper and Ampere datacenter parts


def propose_launch_bounds(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    if tree is None or target.spec is None:
        return []
    threads = math.prod(target.spec.launch.block)
    current = target.kernel.launch_bounds
    existing = next((c for c in tree.definition.children if c.type == "launch_bounds"), None)
    wanted = [(f"{threads}", f"__launch_bounds__({threads}): registers sized for {threads} threads a block")]
    blocks_per_sm = MAX_THREADS_PER_SM // threads
    if blocks_per_sm > 1:
        wanted.append(
            (
                f"{threads}, {blocks_per_sm}",
                f"__launch_bounds__({threads}, {blocks_per_sm}): registers capped for full occupancy",
            )
        )
    candidates = []
    for arguments, description in wanted:
        if current is not None and _same(current, arguments):
            continue
        if existing is not None:
            edit: Edit = (existing.start_byte, existing.end_byte, f"__launch_bounds__({arguments})")
        else:
            declarator = tree.definition.child_by_field_name("declarator")
            if declarator is None:
                return []
            edit = (declarator.start_byte, declarator.start_byte, f"__launch_bounds__({arguments}) ")
        candidates.append(
            candidate_from(target, tree.apply_to_file([edit]), description=description, proposer=PROPOSER)
        )
    return candidates


def _same(current: str, arguments: str) -> bool:
    return re.sub(r"\s", "", current) == re.sub(r"\s", "", arguments)
