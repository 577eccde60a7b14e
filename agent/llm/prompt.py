"""What the model is told: the fixed part of the prompt (cached by the API across turns) and its tools.

The fixed part carries what a CUDA engineer would want before touching the kernel: the rules of the
engine, the kernel and its whole file, the spec (sizes, dtypes, launch), the GPU with its measured
ceilings, the original's timing and roofline position, and what the offline search found.
"""

from __future__ import annotations

from collections.abc import Sequence

from cuda_agent.agent.candidates import CandidateResult
from cuda_agent.agent.engine import Baseline
from cuda_agent.agent.llm.providers import ToolSpec
from cuda_agent.agent.llm.reports import baseline_text, gpu_text
from cuda_agent.agent.search import best_of
from cuda_agent.agent.spec import LaunchSpec, render_spec
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.reports import DeviceInfo

COMPILE_AND_TEST = "compile_and_test"
COMPILE = "compile"
GPU_PROPERTIES = "gpu_properties"
ORIGINAL_PROFILE = "original_profile"
MAX_FILE_LINES = 400  # a longer file is shown as its kernel only
MAX_TRIED_ROWS = 40

_LAUNCH_PROPERTIES = {
    "block": {
        "type": "array",
        "items": {"type": "integer"},
        "description": "Threads per block, 1 to 3 dims, at most 1024 in all. Default: the original's.",
    },
    "grid": {
        "type": "array",
        "items": {"type": "string"},
        "description": "Blocks per grid, one expression per dim over the spec's sizes and block.x/y/z, "
        'e.g. ["ceil_div(n, block.x * 4)"]. Default: the original\'s grid.',
    },
    "shared_bytes": {
        "type": "string",
        "description": 'Dynamic shared memory per block, an expression like "block.x * 4". Default: "0" '
        "or the original's.",
    },
}
_CODE = {
    "type": "string",
    "description": "The kernel's complete new definition (same name and parameters), preceded by any "
    "__device__ functions, __constant__ data, #defines or device #includes it needs. It replaces the "
    "kernel's definition in the file.",
}
_FLAGS = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Optional NVRTC flags: --use_fast_math, --extra-device-vectorization, "
    "--ftz/--prec-div/--prec-sqrt/--fmad=true|false, --maxrregcount=N.",
}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        COMPILE_AND_TEST,
        "Compile the rewrite with NVRTC, verify it against the spec's oracle on fresh random inputs at "
        "every verification size, and time it interleaved with the original on the GPU. Returns compile "
        "errors with lines in your code, registers and spills, what mismatched, and the timing with the "
        "speedup and % of the roofline.",
        {
            "type": "object",
            "properties": {
                "kernel_source": _CODE,
                **_LAUNCH_PROPERTIES,
                "flags": _FLAGS,
                "description": {
                    "type": "string",
                    "description": "One line saying what this rewrite changes, shown to the user.",
                },
            },
            "required": ["kernel_source"],
        },
    ),
    ToolSpec(
        COMPILE,
        "Only compile the code (no GPU time): compile errors, registers per thread, spills, static shared "
        "memory. Use it to check resource usage of variants before testing them.",
        {
            "type": "object",
            "properties": {"kernel_source": _CODE, "flags": _FLAGS},
            "required": ["kernel_source"],
        },
    ),
    ToolSpec(
        GPU_PROPERTIES,
        "The GPU's properties and measured ceilings (also in the prompt).",
        {"type": "object", "properties": {}},
    ),
    ToolSpec(
        ORIGINAL_PROFILE,
        "The original kernel's resources, timing and roofline position, and every candidate tried so far "
        "with its result.",
        {"type": "object", "properties": {}},
    ),
)

RULES = """\
You are an expert CUDA performance engineer. Rewrite the kernel `{kernel}` below so that it runs faster \
on the {gpu} while computing the same results. You work through tools that call a real engine.

How a rewrite is checked (by the engine, not by you):
- Device code only: the file is compiled with NVRTC (fallback nvcc) for {arch}; no host code runs. Send the \
kernel's complete new definition (plus any __device__ helpers, __constant__ data or #defines it needs): \
it replaces the kernel's definition in the file shown below.
- Keep the kernel's name and parameters (names, types, order): the engine launches it as the spec says. \
You may add const or __restrict__. You choose the launch in the spec's terms: block (1 to 3 integers, at \
most 1024 threads), grid (one expression per dim over the sizes {sizes} and block.x/y/z, using + - * // \
% ceil_div min max) and shared_bytes (dynamic shared memory, same kind of expression).
- Refused with a message: host functions, #include of anything but CUDA device headers, kernel launches \
(<<<...>>>) in your code, asm or calls that trap, other __global__ functions, changed parameters.
- Verification: {input_sets} fresh random input sets at every size ({sizes_verified}), outputs poisoned \
before each launch (every output element must be written), guard bytes around each buffer (no \
out-of-bounds writes), inputs must stay unchanged, two runs on the same inputs must agree, results \
compared with the {oracle} within the dtype's tolerance. Sizes differ from the benchmark's: never hard-code \
them, handle tails and sizes that are not multiples of your tile.
- Timing: CUDA events, warm-up, L2 flushed and fresh inputs before every run, interleaved with the \
original; a speedup counts only when its interval lies beyond the measured noise. Caching results, skipping \
work or lower precision than the tolerance allows fails.

How to work: think about what bounds the kernel (memory bandwidth, latency, compute), then call \
{compile_and_test} with a rewrite. Read what the engine returns (compile errors with lines in your code, \
what mismatched, the timing and roofline fraction) and revise. Each reply is one turn; you have at most \
{turns} turns. Try one idea per call so the measurements tell you what helped. When you cannot make it \
faster, reply without a tool call, in two or three sentences saying what the best rewrite does."""


def system_prompt(
    baseline: Baseline, device: DeviceInfo, prior: Sequence[CandidateResult], turns: int
) -> str:
    """The fixed part: the same text on every turn of the session, so the API caches it."""
    target, spec = baseline.target, baseline.spec
    sections = [
        RULES.format(
            kernel=target.kernel.name,
            gpu=device.name,
            arch=device.arch,
            sizes=", ".join(spec.sizes) or "(none)",
            input_sets=baseline.verification.input_sets if baseline.verification else 5,
            sizes_verified="; ".join(p.label for p in baseline.problems),
            oracle=baseline.oracle,
            compile_and_test=COMPILE_AND_TEST,
            turns=turns,
        ),
        f"## The GPU\n{gpu_text(device)}",
        f"## The spec (how the engine runs the kernel)\n```toml\n{render_spec(spec)}\n```",
        f"## The kernel (lines {target.kernel.span.start_line + 1}-{target.kernel.span.end_line + 1} of "
        f"{target.path.name}): your code replaces exactly this\n```cuda\n{kernel_text(target)}\n```",
    ]
    lines = target.source.splitlines()
    if len(lines) <= MAX_FILE_LINES:
        sections.append(f"## The whole file, for context\n```cuda\n{target.source.rstrip()}\n```")
    sections.append(f"## The original, as measured\n{baseline_text(baseline)}")
    sections.append(f"## What the offline search found\n{offline_text(baseline, prior)}")
    return "\n\n".join(sections)


def first_message(target: KernelTarget) -> str:
    return f"Make `{target.kernel.name}` faster. Start by calling {COMPILE_AND_TEST} with your first rewrite."


def kernel_text(target: KernelTarget) -> str:
    span = target.kernel.span
    return target.source.encode()[span.start_byte : span.end_byte].decode(errors="replace")


def launch_text(launch: LaunchSpec) -> str:
    text = f"block {list(launch.block)}, grid {list(launch.grid)}"
    return text + (f", shared_bytes {launch.shared_bytes!r}" if launch.shared_bytes.strip() != "0" else "")


def offline_text(baseline: Baseline, prior: Sequence[CandidateResult]) -> str:
    if not prior:
        return "Nothing yet: no offline proposer ran."
    lines = [f"{len(prior)} candidates tried ({sum(r.verified for r in prior)} verified):"]
    lines += [tried_row(r) for r in prior[:MAX_TRIED_ROWS]]
    if len(prior) > MAX_TRIED_ROWS:
        lines.append(f"... and {len(prior) - MAX_TRIED_ROWS} more")
    best = best_of(prior)
    if best is None:
        lines.append("None was faster beyond the noise: the original is the one to beat.")
        return "\n".join(lines)
    launch = best.candidate.launch or _with_block(baseline.spec.launch, best.candidate.block)
    lines.append(
        f"\nThe best so far ({best.speedup:.2f}x, {best.candidate.description}) launches with "
        f"{launch_text(launch)}"
        + (f" and flags {list(best.candidate.flags)}" if best.candidate.flags else "")
    )
    rewritten = load_targets(baseline.target.path, best.candidate.source, infer=False).find(
        baseline.target.kernel.name
    )
    if rewritten is not None:
        code = kernel_text(rewritten)
        if code != kernel_text(baseline.target):
            lines.append(f"Its kernel:\n```cuda\n{code}\n```")
        else:
            lines.append("Its kernel is the original's; only the launch or flags changed.")
    lines.append("Beat it: build on it or try something else.")
    return "\n".join(lines)


def tried_row(result: CandidateResult) -> str:
    speedup = f" {result.speedup:.2f}x" if result.speedup is not None and result.verified else ""
    reason = f": {result.reason[:160]}" if result.reason else ""
    return f"- {result.candidate.description}: {result.status}{speedup}{reason}"


def _with_block(launch: LaunchSpec, block: tuple[int, ...]) -> LaunchSpec:
    return LaunchSpec(block, launch.grid, launch.shared_bytes)
