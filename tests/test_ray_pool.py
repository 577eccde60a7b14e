"""The GPU pool on a real local Ray cluster: four logical GPUs on this machine, each actor's worker the
recorded one (the GPU is the one thing CI cannot reach; Ray, its scheduling, actor restarts and retries
are real)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cuda-agent[cluster]')")

from cuda_agent.agent.engine import Engine, EngineSettings  # noqa: E402
from cuda_agent.agent.executors import PoolSettings  # noqa: E402
from cuda_agent.agent.executors.ray_pool import RayPool  # noqa: E402
from cuda_agent.agent.repository import FileRun, RunSettings, find_sources, optimize_repository  # noqa: E402
from cuda_agent.agent.search import SearchBudget  # noqa: E402

from tests.repository_support import (  # noqa: E402
    EXPECTED,
    RECORDING,
    Quiet,
    cli,
    make_repository,
    slow_recording,
)

SETTINGS = RunSettings(("launch-config",), SearchBudget(seconds=60))


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local cluster with four logical GPUs; yields its address for other processes to join."""
    os.environ["RAY_AUTH_MODE"] = "disabled"  # token auth is on by default since Ray 2.5x: local tests
    context = ray.init(
        address="local",  # a new cluster, whatever an earlier `ray start` left in /tmp/ray
        num_cpus=4,
        num_gpus=4,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


def busy(pool: RayPool) -> None:
    """Until every worker has a request in flight (a slow machine may still be compiling baselines)."""
    deadline = time.monotonic() + 120
    while pool.idle:
        assert time.monotonic() < deadline, "the workers never all had work"
        time.sleep(0.05)


def kill_session(leader: int) -> None:
    """SIGKILL every process of the session `leader` started: a node's raylet and its actors, at once.
    (killpg is not enough: Ray puts each actor's worker in a process group of its own, and an actor whose
    raylet died keeps answering for a while.)"""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getsid(int(entry.name)) == leader:
                    os.kill(int(entry.name), signal.SIGKILL)


def live_gpus() -> float:
    return sum(n["Resources"].get("GPU", 0) for n in ray.nodes() if n["Alive"])


def run(pool: PoolSettings, repo: Path) -> tuple[list[FileRun], Engine]:
    engine = Engine(EngineSettings(use_cache=False), pool=pool)
    return optimize_repository(engine, find_sources([repo]), SETTINGS, Quiet()), engine


def verdicts(runs: list[FileRun]) -> dict[str, tuple[str, float | None, str]]:
    """Per kernel (and file): its status, speedup and chosen change."""
    found = {}
    for file_run in runs:
        for k in file_run.kernels:
            assert k.outcome is not None and k.outcome.baseline.usable, (k.kernel, k.outcome)
            best = k.outcome.best
            status = "faster" if best is not None else "no gain"
            found[f"{file_run.path.name}:{k.kernel}"] = (
                status, k.speedup, best.candidate.description if best else ""
            )  # fmt: skip
    return found


def test_the_ray_pool_finds_what_the_local_executor_finds(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_AGENT_RECORDED_WORKER", str(RECORDING))
    repo = make_repository(tmp_path)
    local, local_engine = run(PoolSettings(gpus=(0, 1)), repo)
    local_engine.close()
    pooled, engine = run(PoolSettings(ray_address=cluster), repo)
    try:
        assert isinstance(engine.executor, RayPool)
        assert engine.executor.workers == 4  # one actor per GPU of the cluster
        assert engine.executor.where.startswith(f"Ray cluster at {cluster}: 4 workers")
    finally:
        engine.close()
    assert verdicts(pooled) == verdicts(local)
    for name, (status, speedup) in EXPECTED.items():
        found = next(v for k, v in verdicts(pooled).items() if k.endswith(f":{name}"))
        assert found[0] == status
        assert found[1] == (pytest.approx(speedup, rel=1e-6) if speedup else None)


def test_a_worker_killed_mid_run_is_replaced_and_nothing_is_lost(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_AGENT_RECORDED_WORKER", str(slow_recording(tmp_path, 0.15)))
    repo = make_repository(tmp_path)
    engine = Engine(EngineSettings(use_cache=False), pool=PoolSettings(ray_address=cluster))
    pool = engine.executor
    assert isinstance(pool, RayPool)
    victim = pool.ray_workers[1]
    pid = victim.pid()
    outcome: list[list[FileRun]] = []
    runner = threading.Thread(
        target=lambda: outcome.append(optimize_repository(engine, find_sources([repo]), SETTINGS, Quiet()))
    )
    started = time.monotonic()
    runner.start()
    busy(pool)
    assert runner.is_alive(), "the run ended before the kill: it proves nothing"
    os.kill(pid, signal.SIGKILL)
    runner.join(timeout=240)
    try:
        assert not runner.is_alive(), "the run did not complete after a worker was killed"
        assert victim.pid() != pid  # Ray started the actor again
    finally:
        engine.close()
    (runs,) = outcome
    for name, (status, speedup) in EXPECTED.items():
        found = next(v for k, v in verdicts(runs).items() if k.endswith(f":{name}"))
        assert found[0] == status, name
        assert found[1] == (pytest.approx(speedup, rel=1e-6) if speedup else None), name
    every = [r for f in runs for k in f.kernels for r in k.outcome.results]  # type: ignore[union-attr]
    assert every and not [r for r in every if r.error is not None]  # the killed request was retried
    assert pool.losses >= 1  # ... on another worker
    print(f"run with one worker killed: {time.monotonic() - started:.1f} s")


def test_a_node_that_leaves_costs_only_its_requests_in_flight(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second node joins with two GPUs; six actors fill both nodes; the second node is killed mid-run.
    Its actors cannot be placed again (the head's GPUs are taken): the run completes on the head's four."""
    monkeypatch.setenv("CUDA_AGENT_RECORDED_WORKER", str(slow_recording(tmp_path, 0.15)))
    node = subprocess.Popen(
        ["ray", "start", f"--address={cluster}", "--num-gpus=2", "--num-cpus=2", "--block",
         "--disable-usage-stats"],
        env={**os.environ, "RAY_AUTH_MODE": "disabled"}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while ray.cluster_resources().get("GPU", 0) < 6:
            assert time.monotonic() < deadline, "the second node did not join"
            time.sleep(0.5)
        repo = make_repository(tmp_path)
        engine = Engine(
            EngineSettings(use_cache=False), pool=PoolSettings(ray_address=cluster, ray_workers=6)
        )
        assert engine.executor.workers == 6
        outcome: list[list[FileRun]] = []
        runner = threading.Thread(
            target=lambda: outcome.append(
                optimize_repository(engine, find_sources([repo]), SETTINGS, Quiet())
            )
        )
        runner.start()
        busy(engine.executor)  # type: ignore[arg-type]
        assert runner.is_alive(), "the run ended before the node left: it proves nothing"
        kill_session(node.pid)  # the node leaves: its raylet and its actors, at once
        runner.join(timeout=300)
        try:
            assert not runner.is_alive(), "the run did not complete after a node left"
            assert engine.executor.losses >= 1  # requests in flight there went to the head's workers
        finally:
            engine.close()
    finally:
        kill_session(node.pid)
        node.wait()
        # Until the cluster notices the node is gone it still counts its GPUs: the next test would start
        # actors there that are never placed.
        deadline = time.monotonic() + 120
        while live_gpus() > 4 and time.monotonic() < deadline:
            time.sleep(0.5)
    (runs,) = outcome
    for name, (status, speedup) in EXPECTED.items():
        found = next(v for k, v in verdicts(runs).items() if k.endswith(f":{name}"))
        assert found[0] == status, name
        assert found[1] == (pytest.approx(speedup, rel=1e-6) if speedup else None), name


def test_the_cli_joins_the_cluster_by_its_address(cluster: str, tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    done = cli("optimize", ".", "--ray", cluster, "--proposer", "launch-config", cwd=repo,
               cache=tmp_path / "cache", env={"RAY_AUTH_MODE": "disabled"})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on Ray cluster at {cluster}: 4 workers" in done.stdout
    assert "5 kernels in 5 files: 4 faster, 1 no gain, 0 failed" in done.stdout


def test_without_ray_the_option_says_what_to_install(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    # Ray made unimportable in that process, as on a machine without the extra.
    done = cli("optimize", ".", "--ray", "auto", cwd=repo, cache=tmp_path / "cache",
               env={"PYTHONPATH": str(write_no_ray(tmp_path))})  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'cuda-agent[cluster]'" in done.stderr and "Traceback" not in done.stderr


def write_no_ray(tmp_path: Path) -> Path:
    """A folder whose `ray` package fails to import, put first on the path."""
    folder = tmp_path / "no-ray"
    (folder / "ray").mkdir(parents=True)
    (folder / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    return folder
