"""The compiler and sanitizer processes running now, so that a process leaving at once (the editor's
`exit`) can kill them rather than leave a huge file's nvcc running for minutes behind it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_running: dict[int, tuple[subprocess.Popen[Any], bool]] = {}  # pid -> (process, leads its own group)


@contextlib.contextmanager
def tracked(process: subprocess.Popen[Any], own_group: bool = False) -> Iterator[subprocess.Popen[Any]]:
    """Known as running while the block runs. `own_group`: started with `start_new_session`, so killing
    it kills its children too (the sanitizer's target process)."""
    with _lock:
        _running[process.pid] = (process, own_group)
    try:
        yield process
    finally:
        with _lock:
            _running.pop(process.pid, None)


def kill_running() -> int:
    """Kill every tracked process (and its group where it leads one); how many there were."""
    with _lock:
        running = list(_running.values())
    for process, own_group in running:
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if own_group:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
    return len(running)
