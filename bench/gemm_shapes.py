"""`python -m bench.gemm_shapes KERNEL.cu SHAPE... [--kernel NAME] [--out DIR]`: the tiled GEMM rewrite of a
contraction (or a convolution's implicit GEMM) at tile shapes of your choice, one file each, for
`cuda-agent compare` on a GPU: the way the shapes the search offers were chosen (see the measurements in
`bench/results/*_gemm_shapes.log`).

A shape is `MxNxK` (the float4 kernel's tile: rows, columns, depth 8 or 16), optionally `/S` (the sum split
between S groups of 256 threads a block, 64x64 tiles only) and `@R` (at most R registers a thread). Each
file carries its launch and compiler flags in its spec. Prints the compare commands, each shape against
the first."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites import contraction, implicit_gemm
from cuda_agent.agent.proposers.rewrites._gemm_tile import Shape
from cuda_agent.agent.rewrite import with_spec_flags, write_launch
from cuda_agent.agent.targets import KernelTarget, load_targets

_SHAPE = re.compile(r"(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)(?:/(?P<splits>\d+))?(?:@(?P<registers>\d+))?")


class ShapeError(ValueError):
    pass


def parse_shape(spelled: str) -> Shape:
    """`128x64x16`, `64x64x8/2@64`: the float4 kernel's shape, or ShapeError naming what is wrong."""
    match = _SHAPE.fullmatch(spelled.strip())
    if match is None:
        raise ShapeError(f"shape {spelled!r}: write MxNxK, then /S for a split sum, @R for a register cap")
    m, n, k = (int(match[g]) for g in "mnk")
    if m % 64 or n % 64 or not m or not n:
        raise ShapeError(f"shape {spelled!r}: the tile's rows and columns are multiples of 64")
    if k not in (8, 16):
        raise ShapeError(f"shape {spelled!r}: the depth is 8 or 16")
    flags = (f"-maxrregcount={match['registers']}",) if match["registers"] else ()
    try:
        splits = int(match["splits"] or 1)
        return Shape(vector=True, quads_m=m // 64, quads_n=n // 64, flags=flags, splits=splits, depth=k)
    except ValueError as error:  # the Shape's own limits (shared memory, split tiles)
        raise ShapeError(f"shape {spelled!r}: {error}") from None


def candidates(target: KernelTarget, shapes: Sequence[Shape]) -> list[Candidate]:
    """The rewrite at each shape: the contraction's where it recognises one, else the implicit GEMM's."""
    proposers: tuple[Callable[..., list[Candidate]], ...] = (contraction.propose, implicit_gemm.propose)
    for propose in proposers:
        found = propose(target, shapes=shapes)
        if found:
            return found
    return []


def as_compared(target: KernelTarget, candidate: Candidate) -> str:
    """The candidate's file as `compare` reads it: its launch (as the search writes it,
    `agent/optimize.py`) and its compiler flags (a register cap) written into the kernel's spec."""
    text = candidate.source
    if candidate.launch is not None:
        text = write_launch(target, candidate.launch, text).text
    if candidate.flags:
        reread = load_targets(target.path, text).find(target.kernel.name)
        assert reread is not None and reread.spec is not None, "a candidate keeps its kernel and spec"
        text = with_spec_flags(reread, candidate.flags)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gemm_shapes", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="a .cu file with a contraction kernel and its spec")
    parser.add_argument("shapes", nargs="+", metavar="SHAPE", help="MxNxK[/S][@R]: 64x64x16, 128x128x8@128")
    parser.add_argument("--kernel", help="the kernel (default: the file's only one)")
    parser.add_argument("--out", type=Path, default=Path("gemm_shapes"), help="folder for the files")
    args = parser.parse_args(argv)
    try:
        shapes = [parse_shape(s) for s in args.shapes]
    except ShapeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not args.file.is_file():
        print(f"error: {args.file}: no such file", file=sys.stderr)
        return 2
    targets = load_targets(args.file).targets
    chosen = [t for t in targets if args.kernel in (None, t.kernel.name)]
    if len(chosen) != 1:
        names = ", ".join(t.kernel.name for t in targets) or "none"
        print(f"error: {args.file}: name one kernel with --kernel (kernels: {names})", file=sys.stderr)
        return 2
    (target,) = chosen
    if target.spec is None:
        print(f"error: {args.file}: {target.kernel.name} has no spec ({target.note})", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    for spelled, shape in zip(args.shapes, shapes, strict=True):
        found = candidates(target, [shape])
        if not found:
            print(f"{spelled}: not offered ({target.kernel.name} is no contraction the GEMM rewrites tile, "
                  "or its launch bounds refuse the shape's block)")  # fmt: skip
            continue
        path = args.out / f"{args.file.stem}_{spelled.replace('/', 's').replace('@', 'r')}.cu"
        path.write_text(as_compared(target, found[0]), encoding="utf-8")
        written.append(path)
        print(f"{path}: {found[0].description}")
    if not written:
        return 1
    for path in written[1:]:
        print(f"cuda-agent compare {written[0]} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
