"""From the model's tool call to a Candidate the engine can check, or the reasons it cannot be one.

The model sends the kernel's new definition (with any `__device__` helpers it needs) and a launch in the
spec's terms. What the engine cannot check is refused with a message the model reads and can act on:
host code, `#include` of headers NVRTC does not have, kernel launches from device code, `asm` or calls
that trap, a renamed kernel, or parameters the spec cannot launch. The code replaces the kernel's
definition in the user's file, and the launch is written into the file's spec, so that the file the user
would apply re-reads with the launch it was verified with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source, replace_span
from cuda_agent.agent.engine import Baseline
from cuda_agent.agent.kernels import Kernel, Parameter, find_kernels, find_launch_sites
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.rewrite import with_launch
from cuda_agent.agent.spec import LaunchSpec, SpecResolveError, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets
from tree_sitter import Node

MAX_CODE_BYTES = 100_000
# Headers NVRTC ships (device code only): half/bfloat/fp8 types, cooperative groups, WMMA, pipelines,
# libcu++ (cuda/std/...) and CUB.
DEVICE_HEADERS = re.compile(
    r"(cuda_(fp16|bf16|fp8|fp6|fp4|pipeline\w*|awbarrier\w*)\.h(pp)?|cooperative_groups(/.*)?(\.h)?"
    r"|mma\.h|cuda/.+|cub/.+|sm_\d+_intrinsics\.h)$"
)
TRAPPING_ASM = re.compile(r"\b(trap|brkpt|exit|pmevent)\b")
TRAPPING_CALLS = frozenset({"__trap", "__brkpt", "abort", "exit"})
# NVRTC options that change code generation and nothing else; anything else is refused.
ALLOWED_FLAGS = re.compile(
    r"--use_fast_math|--extra-device-vectorization|--(ftz|prec-div|prec-sqrt|fmad)=(true|false)"
    r"|--maxrregcount=\d{2,3}"
)


@dataclass(frozen=True)
class Submission:
    code: str
    launch: LaunchSpec
    flags: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class Built:
    candidate: Candidate
    first_line: int  # the file line (1-based) where the submitted code starts in candidate.source


def read_submission(arguments: Mapping[str, Any], launch: LaunchSpec) -> Submission | list[str]:
    """The tool input checked for types; `launch` fills in what the model left out."""
    problems = []
    code = arguments.get("kernel_source")
    if not isinstance(code, str) or not code.strip():
        problems.append("`kernel_source` must be a string holding the kernel's full definition")
    block = arguments.get("block", list(launch.block))
    if not (isinstance(block, list) and 1 <= len(block) <= 3 and all(_is_int(b) for b in block)):
        problems.append(f"`block` must be a list of 1 to 3 integers like [256] or [32, 8], got {block!r}")
    grid = arguments.get("grid", list(launch.grid))
    if not (isinstance(grid, list) and 1 <= len(grid) <= 3 and all(isinstance(g, str | int) for g in grid)):
        problems.append(
            f'`grid` must be a list of 1 to 3 expressions like ["ceil_div(n, block.x)"], got {grid!r}'
        )
    shared = arguments.get("shared_bytes", launch.shared_bytes)
    if not isinstance(shared, str | int) or isinstance(shared, bool):
        problems.append(f'`shared_bytes` must be an expression like "block.x * 4", got {shared!r}')
    flags = arguments.get("flags", [])
    if not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        problems.append(f"`flags` must be a list of strings, got {flags!r}")
    elif bad := [f for f in flags if not ALLOWED_FLAGS.fullmatch(f)]:
        problems.append(
            f"flags {', '.join(map(repr, bad))} are not allowed (allowed: --use_fast_math, "
            "--extra-device-vectorization, --ftz/--prec-div/--prec-sqrt/--fmad=true|false, --maxrregcount=N)"
        )
    description = arguments.get("description", "")
    if problems:
        return problems
    assert isinstance(code, str)
    return Submission(
        code=code,
        launch=LaunchSpec(tuple(int(b) for b in block), tuple(str(g) for g in grid), str(shared)),
        flags=tuple(dict.fromkeys(flags)),
        description=" ".join(str(description).split())[:120] if description else "",
    )


def refusals(code: str, target: KernelTarget) -> list[str]:
    """What in the code the engine will not compile or run: device code only, one kernel, its name."""
    if len(code.encode()) > MAX_CODE_BYTES:
        return [f"the code is {len(code.encode()):,} bytes; at most {MAX_CODE_BYTES:,}"]
    tree = parse_cuda(code)
    found: list[str] = []
    own_includes = {_include_path(n) for n in _nodes(parse_cuda(target.source).root_node, "preproc_include")}
    for include in _nodes(tree.root_node, "preproc_include"):
        path = _include_path(include)
        if path not in own_includes and not DEVICE_HEADERS.fullmatch(path.strip('<>"')):
            found.append(
                f"line {include.start_point[0] + 1}: #include {path} is refused: only CUDA device headers "
                "(cuda_fp16.h, cuda_bf16.h, cooperative_groups.h, mma.h, cuda/..., cub/...) compile "
                "under NVRTC"
            )
    host_line = _first_changed_line(code, device_source(code))
    if host_line is not None:
        found.append(
            f"line {host_line}: host code is refused: every function must be __global__ or __device__ "
            "(only device code is compiled; the engine launches the kernel itself)"
        )
    for site in find_launch_sites(code, tree):
        found.append(
            f"line {site.span.start_line + 1}: kernel launches (<<<...>>>) are refused: the engine launches "
            f"`{target.kernel.name}` with the block and grid you give"
        )
    for node in _nodes(tree.root_node, "gnu_asm_expression"):
        if TRAPPING_ASM.search(node.text.decode(errors="replace") if node.text else ""):
            found.append(f"line {node.start_point[0] + 1}: asm that traps or exits is refused")
    for node in _nodes(tree.root_node, "call_expression"):
        function = node.child_by_field_name("function")
        if function is not None and function.text and function.text.decode() in TRAPPING_CALLS:
            found.append(f"line {node.start_point[0] + 1}: {function.text.decode()}() is refused")
    kernels = [k for k in find_kernels(code, tree) if k.name == target.kernel.name]
    others = [k.name for k in find_kernels(code, tree) if k.name != target.kernel.name]
    if others:
        found.append(
            f"other __global__ functions ({', '.join(others)}) are refused: only `{target.kernel.name}` is "
            "launched; make helpers __device__"
        )
    if not kernels and not tree.root_node.has_error:
        found.append(f"the code must define the kernel `__global__ void {target.kernel.name}(...)`")
    elif kernels:
        found += _signature_problems(target.kernel, kernels[0])
    return found


def build_candidate(
    baseline: Baseline, submission: Submission, proposer: str, number: int
) -> Built | list[str]:
    """The user's file with the kernel replaced by the submission and its launch written into the spec;
    or why the engine cannot run it."""
    target = baseline.target
    found = refusals(submission.code, target)
    if found:
        return found
    launch = submission.launch
    spec = baseline.spec
    for problem in baseline.problems:
        try:
            resolve(replace(spec, launch=launch), problem.sizes)
        except SpecResolveError as exc:
            return [f"the launch cannot run at {problem.label}: {exc}"]
    own_launch = launch != spec.launch
    # The launch first, on the original file (its spec comment sits above the kernel), then the code in
    # place of the kernel as it stands in that file.
    text = with_launch(target, launch) if own_launch else target.source
    placed = load_targets(target.path, text, infer=False).find(target.kernel.name)
    if placed is None:
        return [f"the launch could not be written into the file's spec for `{target.kernel.name}`"]
    source = replace_span(text, placed.kernel.span, submission.code.strip("\n"))
    rewritten = load_targets(target.path, source, infer=False)
    kernel_errors = [e.message for e in rewritten.spec_errors if e.kernel in (None, target.kernel.name)]
    if kernel_errors:
        return [f"the spec cannot launch this kernel: {message}" for message in kernel_errors]
    description = submission.description or f"rewrite {number}"
    launch_note = "" if not own_launch else f"; block {list(launch.block)}"
    candidate = Candidate(
        source=source,
        block=launch.block,
        description=f"LLM: {description}{launch_note}",
        proposer=proposer,
        flags=submission.flags,
        launch=launch if own_launch else None,
    )
    return Built(candidate, placed.kernel.span.start_line + 1)


def _signature_problems(original: Kernel, rewritten: Kernel) -> list[str]:
    """The spec launches the kernel by its parameters: names, base types and pointer levels must stay;
    const and __restrict__ may be added or removed."""

    def shape(p: Parameter) -> tuple[str, str, int]:
        return (p.name, p.type, p.pointer_depth)

    if [shape(p) for p in original.parameters] != [shape(p) for p in rewritten.parameters]:
        wanted = ", ".join(p.text for p in original.parameters)
        return [
            f"the parameters of `{original.name}` must stay ({wanted}) as the spec launches them; you may "
            "add const or __restrict__"
        ]
    if [t.name for t in original.template_parameters] != [t.name for t in rewritten.template_parameters]:
        return [f"the template parameters of `{original.name}` must stay as the spec instantiates them"]
    return []


def _nodes(root: Node, kind: str) -> list[Node]:
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        if node.type == kind:
            found.append(node)
        stack.extend(node.children)
    return sorted(found, key=lambda n: n.start_byte)


def _include_path(include: Node) -> str:
    path = include.child_by_field_name("path")
    return path.text.decode(errors="replace") if path is not None and path.text else ""


def _first_changed_line(before: str, after: str) -> int | None:
    for number, (old, new) in enumerate(zip(before.splitlines(), after.splitlines(), strict=False), 1):
        if old != new:
            return number
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
