"""Compiler flags. NVRTC already optimises at -O3 by default (nvcc's device default too), so there is no
-O3 candidate; `-Xptxas -dlcm=ca` and other ptxas cache options are not NVRTC options. That leaves
`--use_fast_math` (approximate exp/log/sin, division and square root; denormals flushed to zero), which
is proposed only where the kernel calls such math and the spec's tolerance leaves room for its error.
"""

from __future__ import annotations

from dataclasses import replace

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import candidate_from, kernel_tree, walk_with_comments
from cuda_agent.agent.rewrite import with_spec_flags
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.sandbox.plan import DEFAULT_TOLERANCE

PROPOSER = "flags"
FAST_MATH = "--use_fast_math"
# Fast-math intrinsics are accurate to about 2 ulp (2.4e-7 relative in float32), more for large
# arguments of sin/cos; below this relative tolerance the verifier would reject them anyway.
MIN_RTOL = 1e-5
# Calls whose fast-math versions are approximations; `/` and sqrt are affected too.
_MATH = frozenset(
    {
        "expf",
        "exp2f",
        "exp10f",
        "expm1f",
        "logf",
        "log2f",
        "log10f",
        "log1pf",
        "powf",
        "sinf",
        "cosf",
        "tanf",
        "sincosf",
        "tanhf",
        "coshf",
        "sinhf",
        "atanf",
        "atan2f",
        "sqrtf",
        "rsqrtf",
        "erff",
        "exp",
        "log",
        "pow",
        "sin",
        "cos",
        "tanh",
        "sqrt",
    }
)


def propose_flags(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    spec = target.spec
    if tree is None or spec is None or not spec.outputs:
        return []
    # doubles are unaffected; halves are worth it where the kernel widens them to float for its math
    if any(a.dtype not in ("float32", "float16", "bfloat16") for a in spec.outputs):
        return []
    for output in spec.outputs:
        written = spec.output_tolerances.get(output.name) or spec.tolerance
        rtol = written.rtol if written and written.rtol is not None else DEFAULT_TOLERANCE[output.dtype][1]
        if rtol < MIN_RTOL:
            return []
    if not any(_approximated(tree.text(n), n.type) for n in walk_with_comments(tree.body)):
        return []
    candidate = candidate_from(
        target,
        with_spec_flags(target, (FAST_MATH,)),  # applied, the file's spec says how it was compiled
        description=f"{FAST_MATH}: approximate math intrinsics, flush denormals",
        proposer=PROPOSER,
        flags=(FAST_MATH,),
        assumptions=("fast-math: results may differ in the last bits (denormals flushed to zero)",),
    )
    # A spec comment does not reach the user's own build: they must pass the flag there.
    return [
        replace(candidate, notes=(f"the spec now compiles it with {FAST_MATH}; add it to your own build",))
    ]


def _approximated(text: str, kind: str) -> bool:
    return (kind == "identifier" and text in _MATH) or kind in ("/", "/=")
