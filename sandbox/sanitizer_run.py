"""One launch of a kernel per problem, for compute-sanitizer to watch (run as a process of its own).

    compute-sanitizer --tool racecheck ... python -m cuda_agent.sandbox.sanitizer_run REQUEST_FILE

The sanitizer has to wrap a process from its start, so this cannot run in the GPU worker. It reads a
pickled `SanitizerLaunch`, and for each (launch, problem) in it: allocates every buffer on its own at
exactly its size (CuPy's memory pool off: inside a pooled block an overflow stays in memory the pool owns,
and memcheck did not report an out-of-bounds write there), draws the inputs the verifier draws
(`fill_random`, `draw_scalar`), uploads them with a plain memcpy, poisons the outputs with a memset (not for
initcheck, which must see outputs as never written), launches the kernel once and synchronises.

Inputs are drawn on the GPU by CuPy's kernels, which the caller's `--kernel-name` filter leaves unchecked;
they are drawn into scratch arrays and copied through the host into the kernel's buffers, so that initcheck
(which counts memcpy and kernel writes as initialising) sees every input as written whatever it makes of
writes by kernels it does not instrument.

Exit status: 0 after a clean launch of every problem; 3 when a launch failed (the sanitizer's report says
why); 2 for a request that cannot be read. Only the standard library and the plain data types are
imported at the top, so the caller can build a request without CuPy.
"""

from __future__ import annotations

import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda_agent.sandbox.plan import CompiledKernel, LaunchPlan, Problem

LAUNCH_FAILED = 3
BAD_REQUEST = 2


@dataclass(frozen=True)
class SanitizerLaunch:
    """What the runner process does: launch `kernel` once on each problem, in order."""

    kernel: CompiledKernel
    launches: tuple[tuple[LaunchPlan, Problem], ...]
    gpu_index: int = 0
    seed: int = 0  # inputs are drawn from the spec's distributions with this seed, like one input set
    poison_outputs: bool = True  # False for initcheck: a poisoned output would count as initialised
    poison_byte: int = 0xFF


def write_request(path: str | Path, launch: SanitizerLaunch) -> None:
    Path(path).write_bytes(pickle.dumps(launch, protocol=pickle.HIGHEST_PROTOCOL))


def read_request(path: str | Path) -> SanitizerLaunch:
    launch = pickle.loads(Path(path).read_bytes())
    if not isinstance(launch, SanitizerLaunch):
        raise TypeError(f"expected a SanitizerLaunch, got {type(launch).__name__}")
    return launch


def run(request: SanitizerLaunch) -> int:
    """Launch the kernel on every problem; the exit status (see the module docstring)."""
    import cupy

    cupy.cuda.set_allocator(None)  # every array its own cudaMalloc of its exact size (see the docstring)
    cupy.cuda.Device(request.gpu_index).use()
    from cuda_agent.sandbox.buffers import (
        CUDA_ERRORS,
        KernelModules,
        draw_scalar,
        fill_random,
        launch,
        passed,
        storage_dtype,
    )

    modules = KernelModules()
    try:
        function = modules.function(request.kernel, "candidate")
    except Exception as exc:  # LaunchError / FatalCudaError: the symbol is not there, or no context
        print(f"cuda-agent sanitizer run: cannot load {request.kernel.lowered_name}: {exc}", flush=True)
        return LAUNCH_FAILED
    stream = cupy.cuda.Stream(non_blocking=True)
    for plan, problem in request.launches:
        arrays: list[Any] = []  # kept alive until the launch has finished
        args: list[Any] = []
        for argument in problem.arguments:
            if argument.role == "scalar":
                args.append(draw_scalar(argument, request.seed))
                continue
            buffer = cupy.empty(argument.shape, dtype=storage_dtype(argument.dtype))
            if argument.role in ("input", "inout") and argument.nbytes:
                scratch = cupy.empty_like(buffer)
                fill_random(scratch, argument, request.seed)
                buffer.set(scratch.get())  # a host-to-device memcpy: initialised in initcheck's eyes
                del scratch
            elif request.poison_outputs and argument.nbytes:
                cupy.cuda.runtime.memset(buffer.data.ptr, request.poison_byte, argument.nbytes)
            arrays.append(buffer)
            args.append(passed(argument, buffer))
        cupy.cuda.runtime.deviceSynchronize()
        start = time.perf_counter()
        try:
            launch(function, plan, tuple(args), stream)
            stream.synchronize()
        except CUDA_ERRORS as exc:
            print(f"cuda-agent sanitizer run: {problem.label}: the launch failed: {exc}", flush=True)
            return LAUNCH_FAILED
        print(
            f"cuda-agent sanitizer run: {problem.label}: launched grid {plan.grid} block {plan.block} in "
            f"{time.perf_counter() - start:.2f} s",
            flush=True,
        )
        del arrays, args
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m cuda_agent.sandbox.sanitizer_run REQUEST_FILE", file=sys.stderr)
        return BAD_REQUEST
    try:
        request = read_request(argv[0])
    except (OSError, pickle.UnpicklingError, TypeError, EOFError) as exc:
        print(f"cuda-agent sanitizer run: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return BAD_REQUEST
    return run(request)


if __name__ == "__main__":
    # Run as `python -m`, this file is `__main__`, whose SanitizerLaunch is not the class the request was
    # pickled as (cuda_agent.sandbox.sanitizer_run.SanitizerLaunch): run the imported module's main.
    from cuda_agent.sandbox import sanitizer_run

    sys.exit(sanitizer_run.main())
