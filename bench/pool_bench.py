"""The GPU pool's figures, on a local Ray cluster of logical GPUs whose workers are recorded ones (runs on
this CPU machine; the GPU answers from tests/recordings/repository_h200.json):

    python bench/pool_bench.py [--candidates 96] [--run-s 0.25] [--workers 1 2 4 8]

1. What Ray adds per candidate: one candidate is a verify and a time request (what the engine sends for
   it), answered at once by the recording; the local executor and a one-actor Ray pool answer the same
   requests one after another. Target: ≤ 50 ms a candidate.
2. Scaling: each request takes `--run-s` of a worker's time, as a GPU's verify or timing run does; the
   candidates are fanned out over 1, 2, 4 and 8 actors as a search's are (as many in flight as there are
   workers). Candidates per minute, and the efficiency against perfect scaling of the one-actor figure.
   Target: ≥ 90% at 8 workers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuda_agent.agent.cache import ResultCache
from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.executors import Executor, PoolSettings
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.plan import KernelUnderTest
from cuda_agent.sandbox.protocol import TimeRequest, VerifyRequest
from cuda_agent.sandbox.recorded import RECORDED_WORKER_ENV

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "tests" / "recordings" / "repository_h200.json"
KERNEL = ROOT / "tests" / "repository_kernels" / "axpy.cu"


def requests(engine: Engine) -> tuple[VerifyRequest, TimeRequest]:
    """A real candidate's requests: daxpy compiled by NVRTC, its problems resolved from its spec."""
    target = load_targets(KERNEL).find("daxpy")
    assert target is not None
    baseline = engine.baseline(target)
    assert baseline.usable and baseline.kernel is not None, baseline
    candidate = KernelUnderTest(baseline.kernel.compiled, baseline.kernel.launches, label="candidate")
    verify = VerifyRequest(candidate, baseline.problems, baseline.kernel, 5)
    first = KernelUnderTest(candidate.compiled, candidate.launches[:1], label="candidate")
    original = KernelUnderTest(baseline.kernel.compiled, baseline.kernel.launches[:1], label="original")
    return verify, TimeRequest((original, first), baseline.problems[0])


def one_candidate(executor: Executor, verify: VerifyRequest, time_request: TimeRequest) -> None:
    executor.verify(verify)
    executor.time(time_request)


def per_candidate_ms(executor: Executor, work: tuple[VerifyRequest, TimeRequest], count: int) -> float:
    one_candidate(executor, *work)  # warm: the actor's first call imports and loads
    times = []
    for _ in range(count):
        started = time.perf_counter()
        one_candidate(executor, *work)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def throughput(executor: Executor, work: tuple[VerifyRequest, TimeRequest], candidates: int) -> float:
    """Candidates a minute, with as many in flight as the executor has workers (a search's fan-out)."""
    with ThreadPoolExecutor(max_workers=executor.workers) as threads:
        list(threads.map(lambda _: one_candidate(executor, *work), range(executor.workers)))  # warm
        started = time.perf_counter()
        list(threads.map(lambda _: one_candidate(executor, *work), range(candidates)))
        return candidates / (time.perf_counter() - started) * 60


def engine_on(pool: PoolSettings, cache: Path) -> Engine:
    return Engine(EngineSettings(), ResultCache(cache, enabled=False), pool=pool)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=96, help="candidates a scaling point")
    parser.add_argument("--run-s", type=float, default=0.25, help="a worker's time a request (a GPU run's)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--overhead-candidates", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster of this process only
    import ray

    cache = Path(tempfile.mkdtemp(prefix="cuda-agent-pool-bench-"))
    os.environ[RECORDED_WORKER_ENV] = str(RECORDING)
    ray.init(address="local", num_cpus=max(args.workers), num_gpus=max(args.workers), include_dashboard=False,
             log_to_driver=False, configure_logging=False)  # fmt: skip
    address = ray.get_runtime_context().gcs_address

    print("1. per candidate (verify + time), answered at once by the recording")
    with engine_on(PoolSettings(), cache) as local:
        work = requests(local)
        local_ms = per_candidate_ms(local.executor, work, args.overhead_candidates)
    with engine_on(PoolSettings(ray_address=address, ray_workers=1), cache) as pooled:
        ray_ms = per_candidate_ms(pooled.executor, work, args.overhead_candidates)
    added = ray_ms - local_ms
    verdict = "meets" if added <= 50 else "misses"
    print(f"   local executor {local_ms:7.2f} ms   Ray, one actor {ray_ms:7.2f} ms   "
          f"Ray adds {added:.2f} ms a candidate ({verdict} the 50 ms target)")  # fmt: skip

    print(f"2. scaling: {args.candidates} candidates, {args.run_s:g} s of a worker a request")
    slow = json.loads(RECORDING.read_text())
    for kernel in slow["kernels"].values():
        kernel["run_s"] = args.run_s
    slow_path = cache / "slow.json"
    slow_path.write_text(json.dumps(slow))
    os.environ[RECORDED_WORKER_ENV] = str(slow_path)
    base: float | None = None
    for count in args.workers:
        with engine_on(PoolSettings(ray_address=address, ray_workers=count), cache) as pooled:
            pooled.device()
            rate = throughput(pooled.executor, work, args.candidates)
        base = base or rate / count
        efficiency = rate / (count * base)
        workers = f"{count} worker{'s' if count > 1 else ' '}"
        line = f"   {workers}  {rate:8.1f} candidates/min  efficiency {efficiency:6.1%}"
        if count == max(args.workers):
            line += f"  ({'meets' if efficiency >= 0.9 else 'misses'} the 90% target)"
        print(line)
    # A candidate holds a worker for three runs: its verify, and its timing of two kernels (it and the
    # original, interleaved).
    ideal = 60 / (3 * args.run_s)
    print(f"   (one worker's ideal: {ideal:.1f} candidates/min)")
    ray.shutdown()


if __name__ == "__main__":
    main()
