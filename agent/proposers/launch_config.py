"""Launch-configuration tuning: the same kernel with other block shapes, each verified and timed.

The spec's grid and shared-memory expressions are written in terms of the block, so every shape
here gets a consistent launch; a kernel that silently assumes its block size fails verification.

A template kernel whose block size is a template argument is tuned with it. Written as the block
(`instantiate = "rms_norm<block.x>"`) the engine instantiates each candidate at its own block. Written
as a number equal to the block (`instantiate = "k<256>"`, block [256]) where the kernel uses the
parameter as its block size (in `__launch_bounds__`, as a `__shared__` array's size, as a loop's stride),
each candidate rewrites that number with its block: tuning the block alone would launch `k<256>` with
512 threads, and every such candidate would fail. Such a kernel is not tuned when the file's host code
launches it with template arguments of its own (`k<256><<<grid, 256>>>`): they would not follow. A block
size written as a `#define` is tuned the same way (block_macro.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from cuda_agent.agent.analysis.analyse import analysed
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import replace_span
from cuda_agent.agent.launch_sites import SitesWritten
from cuda_agent.agent.proposers.block_macro import block_macro, grid_with_block, with_macro
from cuda_agent.agent.proposers.tree import KernelTree, identifiers, kernel_tree, walk
from cuda_agent.agent.rewrite import write_launch
from cuda_agent.agent.spec.resolve import instantiation_follows_block
from cuda_agent.agent.spec.validate import split_template_arguments
from cuda_agent.agent.targets import KernelTarget, load_targets
from tree_sitter import Node

PROPOSER = "launch-config"
BLOCKS_1D = ((64,), (128,), (256,), (512,), (1024,))
BLOCKS_2D = ((32, 4), (32, 8), (32, 16), (32, 32), (16, 16), (64, 4), (64, 8), (128, 2), (128, 4), (256, 1))
MAX_THREADS = 1024


@dataclass(frozen=True)
class BlockArgument:
    """A template value argument written as a number that is the kernel's block size: the `256` of
    `k<256>` with block [256] and `__launch_bounds__(BLOCK)`. `threads`: it is the block's thread count
    (`__launch_bounds__` counts threads), else its x extent (a tile width with block [32, 8])."""

    parameter: str
    position: int  # among the instantiate's template arguments
    threads: bool
    how: str  # how the kernel uses it, for the description: "in __launch_bounds__"

    def value(self, block: tuple[int, ...]) -> int:
        return math.prod(block) if self.threads else block[0]


def propose_launch_configs(target: KernelTarget) -> list[Candidate]:
    assert target.spec is not None
    current = target.spec.launch.block
    rank = len(current)
    # In 2-D and 3-D, keep z as written and tune the x-y plane.
    shapes = list(BLOCKS_1D) if rank == 1 else [s + current[2:] for s in BLOCKS_2D]
    tied = block_template_argument(target)
    macro = block_macro(target, _block_size_uses(target)) if tied is None else None
    follows = tied is not None or instantiation_follows_block(target.spec)
    limit = MAX_THREADS if tied is not None else _max_threads(target)
    # a side the kernel's indices take as a constant and never read: another leaves outputs unwritten
    assumed = _assumed_sides(target) if macro is None and tied is None else set()
    candidates = []
    for shape in shapes:
        threads = math.prod(shape)
        if shape == current or threads > limit or (macro is not None and not macro.fits(shape)):
            continue
        if any(shape[axis] != current[axis] for axis in assumed if axis < len(shape)):
            continue
        was = "×".join(map(str, current))
        description = f"block {'×'.join(map(str, shape))} ({threads} threads; was {was})"
        if macro is not None:
            grid = grid_with_block(target.spec.launch, current, macro)
            launch = replace(target.spec.launch, block=shape, grid=grid)
            launched = write_launch(target, launch)
            text = with_macro(target, macro, launched.text, shape)
            if text is None:
                continue
            written = SitesWritten(text, launched.notes)
            description += f" with {macro.name} = {macro.value(shape)} (the block size, {macro.how})"
        elif tied is None:
            written = write_launch(target, replace(target.spec.launch, block=shape))
        else:
            written = _with_block_and_argument(target, tied, shape)
            description += f" with {tied.parameter} = {tied.value(shape)} (the block size, {tied.how})"
        if follows and written.notes:
            # A host launch left with its template argument (`k<256><<<grid, 256>>>`) while the block
            # changes: the file the user applies would launch what was not verified.
            continue
        candidates.append(
            Candidate(
                source=written.text,
                block=shape,
                description=description,
                proposer=PROPOSER,
                notes=written.notes,
            )
        )
    return candidates


def _max_threads(target: KernelTarget) -> int:
    """`__launch_bounds__(N, ...)` caps the block. N may be a template parameter (its number in the
    instantiate, unless that follows the block) or a macro (then only the hardware limit applies)."""
    bounds = target.kernel.launch_bounds
    first = bounds.split(",")[0].strip() if bounds else ""
    if first.isdigit():
        return int(first)
    argument = _template_arguments(target).get(first)
    return int(argument) if argument is not None and argument.isdigit() else MAX_THREADS


def _template_arguments(target: KernelTarget) -> dict[str, str]:
    """Template parameter name -> its argument in the spec's instantiate, as written."""
    instantiate = target.spec.instantiate if target.spec else None
    if not instantiate or "<" not in instantiate or not instantiate.rstrip().endswith(">"):
        return {}
    written = split_template_arguments(instantiate.partition("<")[2].rstrip()[:-1])
    parameters = target.kernel.template_parameters
    return {parameter.name: argument for parameter, argument in zip(parameters, written, strict=False)}


def block_template_argument(target: KernelTarget) -> BlockArgument | None:
    """The template argument that fixes the kernel's block, when it is written as a number: a value
    parameter the kernel uses as its block size, whose number in the instantiate is the block's thread
    count or its x extent. None when there is none (or it is written with block.x, which follows anyway)."""
    spec = target.spec
    if spec is None or not spec.instantiate or not target.kernel.template_parameters:
        return None
    arguments = _template_arguments(target)
    uses = _block_size_uses(target)
    block = spec.launch.block
    for position, parameter in enumerate(target.kernel.template_parameters):
        argument = arguments.get(parameter.name, "")
        how = uses.get(parameter.name)
        if parameter.kind != "value" or not argument.isdigit() or how is None:
            continue
        if int(argument) == math.prod(block):
            return BlockArgument(parameter.name, position, threads=True, how=how)
        if int(argument) == block[0]:
            return BlockArgument(parameter.name, position, threads=False, how=how)
    return None


def _assumed_sides(target: KernelTarget) -> set[int]:
    """The block axes whose side the kernel assumes: an index steps blocks along it by something other
    than blockDim (`blockIdx.x * SUBTRACT_W + threadIdx.x`, the constant in a header the file does not
    hold) and the body never reads blockDim there."""
    found = analysed(target)
    if found is None:
        return set()
    tree, facts = found
    body = tree.text(tree.body).replace(" ", "")
    assumed = set()
    for axis, name in enumerate("xyz"):
        stepped = any(
            f"blockIdx.{name}" in term and f"blockDim.{name}" not in term
            for index in facts.indices
            for term in index.form.terms
        )
        if stepped and f"blockDim.{name}" not in body:
            assumed.add(axis)
    return assumed


def _block_size_uses(target: KernelTarget) -> dict[str, str]:
    """Names the kernel uses as a block size, each with the first such use: in `__launch_bounds__`, as
    the size of a `__shared__` array, or as the step of a loop (`i += BLOCK`)."""
    uses: dict[str, str] = {}
    tree = kernel_tree(target)
    if tree is None:
        return uses
    bounds = next((c for c in tree.definition.children if c.type == "launch_bounds"), None)
    if bounds is not None and bounds.named_children:  # the first argument is the threads per block
        for name in identifiers(bounds.named_children[0]):
            uses.setdefault(name, "in __launch_bounds__")
    for node in walk(tree.body):
        if node.type == "declaration" and _is_shared(node, tree):
            for size in _array_sizes(node):
                for name in identifiers(size):
                    uses.setdefault(name, "as a __shared__ array's size")
        elif node.type == "for_statement":
            update = node.child_by_field_name("update")
            for step in _steps(update) if update is not None else []:
                for name in identifiers(step):
                    uses.setdefault(name, "as a loop's stride")
    return uses


def _is_shared(declaration: Node, tree: KernelTree) -> bool:
    return any(
        child.type == "type_qualifier" and tree.text(child).strip() == "__shared__"
        for child in declaration.children
    )


def _array_sizes(declaration: Node) -> list[Node]:
    """The size expressions of the arrays a declaration declares: `tile[BLOCK][BLOCK + 1]`."""
    sizes = []
    for node in walk(declaration):
        if node.type == "array_declarator":
            size = node.child_by_field_name("size")
            if size is not None:
                sizes.append(size)
    return sizes


def _steps(update: Node) -> list[Node]:
    """What a loop's update adds: the right side of `i += step` (one per comma-separated update)."""
    return [
        right
        for node in walk(update)
        if node.type == "assignment_expression"
        and (operator := node.child_by_field_name("operator")) is not None
        and operator.type in ("+=", "-=")
        and (right := node.child_by_field_name("right")) is not None
    ]


def _with_block_and_argument(
    target: KernelTarget, tied: BlockArgument, block: tuple[int, ...]
) -> SitesWritten:
    """The file with the block changed and the template argument that is the block changed with it, in
    the spec's instantiate (so the file the user applies instantiates what was verified)."""
    spec = target.spec
    assert spec is not None and spec.instantiate is not None
    name, _, rest = spec.instantiate.partition("<")
    arguments = split_template_arguments(rest.rstrip()[:-1])
    arguments[tied.position] = str(tied.value(block))
    instantiate = f"{name}<{', '.join(arguments)}>"
    span = spec.value_spans.get(("instantiate",))
    if spec.inferred or span is None:  # written out with the spec, as for any inferred spec
        changed = replace(target, spec=replace(spec, instantiate=instantiate))
        return write_launch(changed, replace(spec.launch, block=block))
    source = replace_span(target.source, span, json.dumps(instantiate, ensure_ascii=False))
    edited = load_targets(target.path, source, infer=False).find(target.kernel.name)
    assert edited is not None and edited.spec is not None, "an edit of instantiate lost the kernel's spec"
    return write_launch(edited, replace(edited.spec.launch, block=block))
