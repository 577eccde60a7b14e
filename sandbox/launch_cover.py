"""A GPU wait queued before a timed region's start event, so that host launch costs fall outside it
(worker side; cupy is imported by `on_stream`, which touches the GPU).

A timed region is two events around a launch on one stream. When the GPU has caught up with the host
(short kernels; fresh inputs and an L2 flush queued before each run), it reaches the start event before
the host has queued the launch, and the time includes the host's launch cost: tens of microseconds of
Python, argument packing and driver work. On a 0.1 ms kernel that is several percent, and it is not the
kernel's: torch.compile's launches, timed with a wait queued first, showed none of it. A short spin on
the GPU, queued before the start event and longer than the host takes to queue the timed call, keeps
the GPU behind the host, so the region holds the kernels alone.

The wait follows the host times of the last few calls, not the longest ever seen: a warm-up call that
recompiles (Dynamo does, after a graph break) takes seconds on the host, and a wait sized on it made
every timed run sleep that long. It is capped, and a call whose host part outlasts its wait is counted:
its time includes launch costs.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

COVER_MARGIN = 2.0  # the GPU waits this many times the host's longest recent call...
COVER_EXTRA_MS = 0.02  # ...and this much more, so every kernel of the call is queued before the first runs
COVER_RECENT_CALLS = 4  # ...of this many calls
COVER_MAX_MS = 20.0  # a longer host call is no launch cost to hide (a recompile): the wait stops here
CALIBRATION_CYCLES = 1_000_000

_SPIN_SOURCE = r"""
extern "C" __global__ void launch_cover_spin(long long cycles) {
    // One thread counts its SM's clock: the stream is held, no memory is touched.
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
"""


class LaunchCover:
    """Queue `wait()` before the start event and wrap the host's part of the timed call in `host()`."""

    def __init__(self, spin: Callable[[int], None], cycles_per_ms: float) -> None:
        self.spin, self.cycles_per_ms = spin, cycles_per_ms  # spin(cycles) queues the wait on the stream
        self.recent_ms: deque[float] = deque(maxlen=COVER_RECENT_CALLS)
        self.host_ms = 0.0  # the longest host time of a call that was timed
        self.waited_ms = 0.0  # the wait queued before the call being timed
        self.calls = self.uncovered = 0

    def wait(self) -> None:
        longest = max(self.recent_ms, default=0.0)
        self.waited_ms = min(COVER_MARGIN * longest + COVER_EXTRA_MS, COVER_MAX_MS)
        self.spin(int(self.waited_ms * self.cycles_per_ms))

    @contextmanager
    def host(self, timed: bool) -> Iterator[None]:
        """Around the host's part of the call (start event to end event): its time sizes the next waits;
        a timed call is counted."""
        started = time.perf_counter()
        yield
        host_ms = (time.perf_counter() - started) * 1e3
        self.recent_ms.append(host_ms)
        if timed:
            self.calls += 1
            self.host_ms = max(self.host_ms, host_ms)
            self.uncovered += host_ms > self.waited_ms

    def note(self) -> str:
        note = (
            f"host launch costs hidden behind a GPU wait (the longest timed call took "
            f"{self.host_ms * 1e3:.0f} µs on the host)"
        )
        if self.uncovered:
            note += f"; {self.uncovered} of {self.calls} calls took longer on the host than their wait"
        return note


@functools.cache
def _spin_kernel() -> Any:
    import cupy

    # a Function, launched like the kernels (sandbox/buffers.py `launch`): on the stream it is given
    return cupy.RawModule(code=_SPIN_SOURCE).get_function("launch_cover_spin")  # compiled once a worker


def on_stream(stream: Any) -> LaunchCover:
    """A cover spinning on `stream` (a cupy stream; torch's own, wrapped as an ExternalStream, for the
    oracle), at the clock rate measured once a worker."""
    import cupy

    kernel = _spin_kernel()

    def spin(cycles: int) -> None:
        kernel((1,), (1,), (cupy.int64(cycles),), stream=stream)

    return LaunchCover(spin, _cycles_per_ms(stream))


_measured_cycles_per_ms: float | None = None


def _cycles_per_ms(stream: Any) -> float:
    """The SM clock as the spin counts it, timed with events on `stream` the first time (every timed
    request makes a cover: a synchronising calibration each time would cost each its own wait)."""
    global _measured_cycles_per_ms
    if _measured_cycles_per_ms is None:
        import cupy

        kernel = _spin_kernel()
        kernel((1,), (1,), (cupy.int64(CALIBRATION_CYCLES),), stream=stream)  # its first launch loads it
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        kernel((1,), (1,), (cupy.int64(CALIBRATION_CYCLES),), stream=stream)
        end.record(stream)
        end.synchronize()
        elapsed = max(float(cupy.cuda.get_elapsed_time(start, end)), 1e-6)
        _measured_cycles_per_ms = CALIBRATION_CYCLES / elapsed
    return _measured_cycles_per_ms
