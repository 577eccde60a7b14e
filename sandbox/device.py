"""What the GPU is, and the ceilings its roofline is drawn against, measured (worker side).

Ceilings (about a second): device-to-device copy bandwidth (bytes read + written over the time, median of
several copies of a 1 GiB buffer) and dense matrix-product rates on random data: float32 through SGEMM
with TF32 off, float16 through CuPy's matmul, bfloat16 through cuBLAS GemmEx (CuPy has no bfloat16 dtype).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import cupy
import numpy as np
from cuda_agent.sandbox.buffers import fill_random
from cuda_agent.sandbox.plan import ArgumentPlan
from cuda_agent.sandbox.reports import Ceilings, DeviceInfo

COPY_BYTES = 1 << 30
COPY_RUNS = 7
GEMM_RUNS = 5


def _version(number: int) -> str:
    """CUDA encodes 13.0 as 13000."""
    return f"{number // 1000}.{number % 1000 // 10}"


def describe_device(index: int) -> DeviceInfo:
    props = cupy.cuda.runtime.getDeviceProperties(index)
    name = props["name"]
    return DeviceInfo(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        compute_capability=(int(props["major"]), int(props["minor"])),
        multiprocessors=int(props["multiProcessorCount"]),
        l2_bytes=int(props["l2CacheSize"]),
        shared_bytes_per_block=int(props["sharedMemPerBlock"]),
        shared_bytes_per_block_optin=int(props.get("sharedMemPerBlockOptin", props["sharedMemPerBlock"])),
        memory_bytes=int(props["totalGlobalMem"]),
        driver_version=_version(cupy.cuda.runtime.driverGetVersion()),
        runtime_version=_version(cupy.cuda.runtime.runtimeGetVersion()),
    )


def _median_ms(run: Callable[[], Any], stream: cupy.cuda.Stream, runs: int) -> float:
    """Median time of `run` in milliseconds, by CUDA events on `stream`, after one untimed run."""
    run()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(runs):
        start.record(stream)
        run()
        end.record(stream)
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def _random(shape: tuple[int, ...], dtype: str) -> cupy.ndarray:
    """Random data: zeros make some units run faster than real data does."""
    out = cupy.empty(shape, dtype=np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype))
    fill_random(out, ArgumentPlan("ceiling", "input", dtype, shape), seed=12345)  # type: ignore[arg-type]
    return out


def copy_bandwidth_gbs(stream: cupy.cuda.Stream) -> float:
    source = _random((COPY_BYTES // 4,), "float32")
    target = cupy.empty_like(source)
    kind = cupy.cuda.runtime.memcpyDeviceToDevice

    def copy() -> None:
        cupy.cuda.runtime.memcpyAsync(target.data.ptr, source.data.ptr, COPY_BYTES, kind, stream.ptr)

    return 2 * COPY_BYTES / (_median_ms(copy, stream, COPY_RUNS) * 1e-3) / 1e9


def gemm_tflops(dtype: str, n: int, stream: cupy.cuda.Stream) -> float:
    a, b = _random((n, n), dtype), _random((n, n), dtype)
    c = cupy.empty((n, n), dtype=a.dtype)
    if dtype == "bfloat16":
        run = _bf16_gemm(a, b, c, n)
    else:

        def run() -> None:
            cupy.matmul(a, b, out=c)

    return 2 * n**3 / (_median_ms(run, stream, GEMM_RUNS) * 1e-3) / 1e12


def _bf16_gemm(a: cupy.ndarray, b: cupy.ndarray, c: cupy.ndarray, n: int) -> Callable[[], None]:
    from cupy_backends.cuda.libs import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setPointerMode(handle, 0)  # CUBLAS_POINTER_MODE_HOST: alpha and beta below live on the host
    alpha, beta = np.ones(1, np.float32), np.zeros(1, np.float32)
    cuda_r_16bf, compute_32f = 14, 68  # CUDA_R_16BF, CUBLAS_COMPUTE_32F

    def run() -> None:
        cublas.gemmEx(
            handle, 0, 0, n, n, n, alpha.ctypes.data, a.data.ptr, cuda_r_16bf, n, b.data.ptr, cuda_r_16bf, n,
            beta.ctypes.data, c.data.ptr, cuda_r_16bf, n, compute_32f, -1,
        )  # fmt: skip

    return run


def measure_ceilings(stream: cupy.cuda.Stream, beat: Callable[..., None]) -> Ceilings:
    bandwidth = copy_bandwidth_gbs(stream)
    beat("copy bandwidth measured")
    rates: dict[str, float] = {}
    beat("loading cuBLAS", expect_silence_s=30.0)  # its first use loads a large library: seconds, no GPU work
    for dtype, n in (("float32", 4096), ("float16", 8192), ("bfloat16", 8192)):
        try:
            rates[dtype] = gemm_tflops(dtype, n, stream)
        except Exception:  # a missing cuBLAS path costs one ceiling, not the device report
            continue
        finally:
            beat(f"{dtype} matmul measured")
    cupy.get_default_memory_pool().free_all_blocks()
    return Ceilings(copy_bandwidth_gbs=bandwidth, flops_tflops=rates)
