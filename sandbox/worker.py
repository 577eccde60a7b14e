"""The GPU worker process: owns the CUDA context, answers one request at a time over a Connection.

Started by `client.Sandbox` through multiprocessing's spawn context. At the top only the standard
library and the plain data types are imported, so the caller can name `worker_main` without CuPy;
CuPy comes in `worker_main`, torch when an oracle needs it (or, in a standby worker, in the background once
the caller has seen an oracle need it: PrepareTorch). Protocol: the worker sends
Heartbeat("ready") once it can take requests (or WorkerError(kind="no_gpu") and exits), then for each
request any number of Heartbeats followed by one response. A sticky CUDA error (the context is gone)
is answered with WorkerError(kind="cuda_error") and the process exits; the client starts another.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from cuda_agent.sandbox.protocol import (
    DeviceInfoRequest,
    Heartbeat,
    PrepareTorch,
    TimeRequest,
    TimeTorchRequest,
    VerifyRequest,
)
from cuda_agent.sandbox.reports import WorkerError

BEAT_INTERVAL_S = 0.2  # heartbeats are throttled to this; the caller's silence limit is seconds
HOST_BEAT_S = 1.0  # the host-work heartbeat's period


class _Beat:
    """Tells the caller the worker is alive: call after each synchronised step. While a request is served,
    a thread also says so during host work (CuPy compiling a check's kernel on first use on a fresh
    machine took over 5 s), but only while no kernel under test is queued: a hung kernel falls silent."""

    def __init__(self, conn: Connection, kernel_queued: Callable[[], bool]) -> None:
        self.conn = conn
        self.last = 0.0
        self._note = ""
        self._silence_until = 0.0  # a beat's expected silence: the thread's beats must not shorten it
        self._host_work_until: float | None = None  # inside host_work(): the thread beats until then
        self._serving = False
        self._kernel_queued = kernel_queued
        self._lock = threading.Lock()  # the thread and the request loop share the connection
        threading.Thread(target=self._host_work, name="host-work-heartbeat", daemon=True).start()

    def __call__(self, note: str = "", expect_silence_s: float = 0.0) -> None:
        now = time.monotonic()
        self._note = note
        if expect_silence_s or now - self.last >= BEAT_INTERVAL_S:
            self._silence_until = max(self._silence_until, now + expect_silence_s)
            with self._lock:
                self.conn.send(Heartbeat(note, expect_silence_s))
            self.last = now

    @contextmanager
    def host_work(self, note: str, limit_s: float) -> Iterator[None]:
        """Host work that cannot hang on the GPU (importing torch, evaluating an oracle). The caller is told
        to expect up to `limit_s` of silence, the thread's beats stop after `limit_s` (a runaway oracle is
        then a timeout, not a worker that beats forever), and leaving takes the allowance back with a beat:
        a kernel that hangs next is given the plain timeout, not this work's minute (a hung candidate
        after an oracle once took 35 s to be called a timeout)."""
        self(note, expect_silence_s=limit_s)
        self._host_work_until = time.monotonic() + limit_s
        try:
            yield
        finally:
            self._host_work_until = None
            self._silence_until = time.monotonic()
            with self._lock:
                self.conn.send(Heartbeat(f"{note}: done"))
            self.last = time.monotonic()

    def request_started(self) -> None:
        with self._lock:
            self._serving = True
            self._note, self._silence_until = "the request arrived", 0.0

    def respond(self, response: object) -> None:
        """The request's answer; no host-work beat comes after it."""
        with self._lock:
            self._serving = False
            self.conn.send(response)

    def _host_work(self) -> None:
        while True:
            time.sleep(HOST_BEAT_S)
            now = time.monotonic()
            if now - self.last < HOST_BEAT_S or self._kernel_queued():
                continue
            limit = self._host_work_until
            if limit is not None and now > limit:
                continue  # past its limit: silence, so the caller calls it a hang
            with self._lock:
                if self._serving:
                    silence = max(0.0, self._silence_until - now)
                    try:
                        self.conn.send(Heartbeat(f"{self._note} (then host work)", silence))
                    except (OSError, ValueError):
                        return  # the caller is gone; the request loop finds out on its next send
                    self.last = now


# What still works without one is said by whoever shows this (the CLI, the editor), in their terms.
NO_DRIVER = "no NVIDIA GPU with a working driver was found on this machine"


def _start_cuda(gpu_index: int) -> tuple[Any, WorkerError | None]:
    """Import CuPy and make `gpu_index` current with a context, or say plainly why there is no GPU."""
    os.environ.setdefault("CUPY_TF32", "0")  # the float32 ceiling is plain SGEMM, never TF32
    try:
        import cupy
    except ImportError as exc:
        return None, WorkerError(
            "no_gpu",
            f"CuPy is not installed in this Python ({exc}); install cuda-agent[gpu] on a machine with an "
            "NVIDIA GPU",
        )
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, or no device: CUDARuntimeError
        # CUDA's own words for a missing driver ("driver version is insufficient") mislead: say what it is.
        return None, WorkerError("no_gpu", f"{NO_DRIVER} (CUDA said: {exc})")
    if not 0 <= gpu_index < count:
        return None, WorkerError("no_gpu", f"GPU index {gpu_index} does not exist: {count} GPU(s) visible")
    try:
        cupy.cuda.Device(gpu_index).use()
        cupy.cuda.runtime.free(0)  # creates the context now, not in the first request
    except Exception as exc:
        return None, WorkerError("no_gpu", f"cannot open GPU {gpu_index}: {exc}")
    return cupy, None


def _warm_up(stream: Any) -> None:
    """Compile (or load from CuPy's disk cache) the kernels requests use, the failure paths included, so
    that no silent stretch of a request is spent in the compiler (it would look like a hung kernel). The
    first start on a machine compiles them all (tens of seconds, once); later starts load them."""
    import cupy
    from cuda_agent.sandbox.buffers import ArgumentSet, count_poisoned, draw_inputs
    from cuda_agent.sandbox.checks import (
        check_deterministic,
        check_unchanged,
        compare_output,
        unwritten_elements,
    )
    from cuda_agent.sandbox.plan import ArgumentPlan, Distribution, Problem, Tolerance

    integers = Distribution("integers", low=-3, high=3)
    with stream:
        for dtype, dist in (
            ("float32", Distribution()), ("bfloat16", Distribution()), ("float16", Distribution()),
            ("float64", Distribution()), ("int32", integers), ("float32", Distribution("uniform")),
        ):  # fmt: skip
            # CuPy specialises kernels by rank (2-D problems too) and picks other reduction kernels for
            # large arrays: a bfloat16 oracle check at 2^20 elements once spent over 5 s compiling one.
            for shape in ((64,), (8, 8), (1 << 20,), (1024, 1024)):
                x_plan = ArgumentPlan("x", "input", dtype, shape, dist)  # type: ignore[arg-type]
                y_plan = ArgumentPlan("y", "output", dtype, shape)  # type: ignore[arg-type]
                problem = Problem("warm-up", {}, (x_plan, y_plan), {})
                args = ArgumentSet(problem)
                args.load(draw_inputs(problem, 1))
                args.poison_outputs(0xFF)
                x, y = args.buffers["x"].data, args.buffers["y"].data
                changed = x.copy()
                changed[:1] += 1  # one element off: the failure paths compile too
                tolerance = Tolerance.default(dtype)
                for first, second in ((x, x), (x, changed)):
                    compare_output(first, second, tolerance, dtype)
                    check_deterministic(first, second, tolerance, dtype)
                    check_unchanged(first, second, dtype=dtype)
                unwritten_elements(y, y, 0xFF, 0xA5)
                unwritten_elements(y, changed, 0xFF, 0xA5)
                count_poisoned(y, 0xFF).get()
                args.check_guards()
                args.buffers["y"].raw[:1] = 0
                args.check_guards()
        stream.synchronize()
    cupy.get_default_memory_pool().free_all_blocks()


def worker_main(conn: Connection, gpu_index: int) -> None:
    """Entry point of the worker process."""
    cupy, error = _start_cuda(gpu_index)
    if error is not None:
        with contextlib.suppress(BrokenPipeError, EOFError, OSError):  # the caller may be gone already
            conn.send(error)
        conn.close()
        return
    from cuda_agent.sandbox.buffers import (
        CUDA_ERRORS,
        FatalCudaError,
        KernelModules,
        LaunchError,
        context_is_broken,
        kernel_queued,
    )
    from cuda_agent.sandbox.device import describe_device, measure_ceilings
    from cuda_agent.sandbox.l2_cache import disable_persisting_l2
    from cuda_agent.sandbox.oracle import load_torch
    from cuda_agent.sandbox.timing import time_kernels
    from cuda_agent.sandbox.verify import BadRequest, verify

    stream = cupy.cuda.Stream(non_blocking=True)  # our own: nothing else is ordered before our launches
    try:
        disable_persisting_l2()
        _warm_up(stream)
    except Exception as exc:
        conn.send(WorkerError("no_gpu", f"GPU {gpu_index} failed its warm-up: {exc!r}"))
        return
    device = describe_device(gpu_index)
    try:
        conn.send(Heartbeat("ready"))
    except (BrokenPipeError, EOFError, OSError):
        return  # a standby worker whose caller closed while it started (a session's end): nothing to say
    beat = _Beat(conn, kernel_queued)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the caller is gone
        if request is None:
            return
        if isinstance(request, PrepareTorch):  # a notice: load it beside the request loop, answer nothing
            threading.Thread(target=load_torch, args=(gpu_index,), name="torch-preload", daemon=True).start()
            continue
        beat.request_started()
        modules = KernelModules()
        try:
            with stream:
                if isinstance(request, DeviceInfoRequest):
                    if request.measure_ceilings and device.ceilings is None:
                        device = replace(device, ceilings=measure_ceilings(stream, beat))
                    response: Any = device
                elif isinstance(request, VerifyRequest):
                    response = verify(request, modules, stream, beat)
                elif isinstance(request, TimeRequest):
                    if request.ceilings_bandwidth_gbs is None and device.ceilings is not None:
                        request = _with_ceilings(request, device.ceilings)
                    disable_persisting_l2()  # nothing in flight now: lines a kernel marked turn normal
                    response = time_kernels(request, modules, stream, device.l2_bytes, beat)
                elif isinstance(request, TimeTorchRequest):
                    from cuda_agent.sandbox.torch_timing import time_torch  # torch only when asked

                    if request.ceilings_bandwidth_gbs is None and device.ceilings is not None:
                        # Same field names as TimeRequest's, so the same filling applies.
                        request = _with_ceilings(request, device.ceilings)  # type: ignore[arg-type]
                    response = time_torch(request, stream, device.l2_bytes, beat)
                else:
                    response = WorkerError("bad_request", f"unknown request {type(request).__name__}")
        except FatalCudaError as exc:
            _die(beat, str(exc))
            return
        except CUDA_ERRORS as exc:  # raised outside a classified launch: ask the context
            if context_is_broken():
                _die(beat, f"{exc} (during {type(request).__name__})")
                return
            response = WorkerError("crash", f"CUDA error: {exc}")
        except (BadRequest, LaunchError) as exc:
            response = WorkerError("bad_request", str(exc))
        except Exception as exc:  # a bug of ours: say where, keep serving
            response = WorkerError("crash", f"worker error: {exc!r}\n{traceback.format_exc(limit=6)}")
        finally:
            modules.clear()
            cupy.get_default_memory_pool().free_all_blocks()
        beat.respond(response)


def _with_ceilings(request: TimeRequest, ceilings: Any) -> TimeRequest:
    flop_dtype = request.problem.flop_dtype
    return replace(
        request,
        ceilings_bandwidth_gbs=ceilings.copy_bandwidth_gbs,
        ceilings_tflops=request.ceilings_tflops or ceilings.flops_tflops.get(flop_dtype),
    )


def _die(beat: _Beat, message: str) -> None:
    """The context is poisoned: every later call would fail. Report, then leave without CuPy's cleanup."""
    try:
        beat.respond(WorkerError("cuda_error", message))
        beat.conn.close()
    finally:
        os._exit(3)
