"""Repository mode through Ray on the real GPU: a cluster of one node and its one GPU, against the local
executor on the same GPU. The verdicts must agree, the speedups within the noise, and Ray's cost a
candidate is printed (the issue's overhead figure on a GPU)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.repository_support import Quiet, make_repository

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cuda-agent[cluster]')")

from cuda_agent.agent.engine import Engine, EngineSettings  # noqa: E402
from cuda_agent.agent.executors import PoolSettings  # noqa: E402
from cuda_agent.agent.repository import FileRun, RunSettings, find_sources, optimize_repository  # noqa: E402
from cuda_agent.agent.search import SearchBudget  # noqa: E402

# The launch tuner only: every candidate is timed (none is refused by a rewrite's preconditions), so the two
# runs evaluate the same candidates and their times can be compared one by one.
SETTINGS = RunSettings(("launch-config",), SearchBudget(seconds=120))


def timed_run(pool: PoolSettings, repo: Path) -> tuple[list[FileRun], float, int]:
    with Engine(EngineSettings(use_cache=False), pool=pool) as engine:
        engine.device()
        started = time.monotonic()
        runs = optimize_repository(engine, find_sources([repo]), SETTINGS, Quiet())
        seconds = time.monotonic() - started
    candidates = sum(len(k.outcome.results) for r in runs for k in r.kernels if k.outcome)
    return runs, seconds, candidates


@pytest.mark.gpu
def test_repository_mode_through_ray_matches_the_local_executor(tmp_path: Path) -> None:
    os.environ["RAY_AUTH_MODE"] = "disabled"
    repo = make_repository(tmp_path)
    local, local_s, local_n = timed_run(PoolSettings(), repo)
    ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        address = ray.get_runtime_context().gcs_address
        pooled, ray_s, ray_n = timed_run(PoolSettings(ray_address=address), repo)
    finally:
        ray.shutdown()
    found = {(r.path.name, k.kernel): k for r in local for k in r.kernels}
    for file_run in pooled:
        for kernel in file_run.kernels:
            mine = found[(file_run.path.name, kernel.kernel)]
            assert kernel.outcome is not None and mine.outcome is not None
            assert kernel.outcome.baseline.usable and mine.outcome.baseline.usable
            a, b = kernel.speedup or 1.0, mine.speedup or 1.0
            print(f"{kernel.kernel:20s} local {b:5.2f}×  Ray {a:5.2f}×")
            # Beyond noise a real gain in one run is a gain in the other; small ones may fall either side.
            if max(a, b) > 1.15:
                assert abs(a - b) / max(a, b) < 0.15, (kernel.kernel, a, b)
    print(
        f"local: {local_n} candidates in {local_s:.1f} s ({local_s / local_n * 1e3:.0f} ms each); "
        f"Ray: {ray_n} in {ray_s:.1f} s ({ray_s / ray_n * 1e3:.0f} ms each); "
        f"Ray adds {(ray_s / ray_n - local_s / local_n) * 1e3:.0f} ms a candidate"
    )
