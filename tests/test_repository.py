"""Repository mode: `cuda-agent optimize PATH...` over folders, on the local executor (one worker per GPU
index given, each the recorded worker: the GPU is the one thing CI cannot reach)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.executors import PoolSettings
from cuda_agent.agent.repository import RunSettings, SourceError, find_sources, optimize_repository
from cuda_agent.agent.search import SearchBudget

from tests.repository_support import EXPECTED, RECORDING, TAKEN, cli, make_repository


class Quiet:
    def __init__(self) -> None:
        self.done: list[str] = []

    def started(self, run: object) -> None: ...

    def progressed(self, run: object, progress: object) -> None: ...

    def finished(self, run: object) -> None:
        self.done.append(run.kernel)  # type: ignore[attr-defined]


def test_folders_are_searched_for_sources_as_git_would_see_them(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    found = {p.relative_to(repo).as_posix() for p in find_sources([repo])}
    assert found == TAKEN  # build/, src/old/ and *_tmp.cu left out, keep_tmp.cu kept by its negation
    sub = {p.relative_to(repo).as_posix() for p in find_sources([repo / "src"])}
    assert sub == {"src/activations.cu", "src/blas/axpy.cu", "src/bias_program.cu"}  # the root's rules too
    named = find_sources([repo / "build" / "generated.cu"])  # a file named is taken, ignored or not
    assert [p.name for p in named] == ["generated.cu"]
    with pytest.raises(SourceError, match=r"nowhere\.cu: no such file or folder"):
        find_sources([repo / "nowhere.cu"])


def test_every_kernel_is_optimized_over_the_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_RECORDED_WORKER", str(RECORDING))
    repo = make_repository(tmp_path)
    files = find_sources([repo])
    settings = RunSettings(("launch-config",), SearchBudget(seconds=30))
    listener = Quiet()
    with Engine(EngineSettings(use_cache=False), pool=PoolSettings(gpus=(0, 1, 2))) as engine:
        runs = optimize_repository(engine, files, settings, listener)
        assert engine.executor.workers == 3
    kernels = {k.kernel: k for r in runs for k in r.kernels}
    assert sorted(listener.done) == sorted([*EXPECTED, "daxpy"])  # keep_tmp.cu holds daxpy too
    for name, (status, speedup) in EXPECTED.items():
        run = kernels[name]
        assert run.outcome is not None and run.outcome.baseline.usable
        if status == "faster":
            assert run.speedup == pytest.approx(speedup, rel=1e-6)
            assert run.written
        else:
            assert run.outcome.best is None and not run.written
    by_path = {r.path.name: r for r in runs}
    assert (
        "blockDim" in by_path["axpy.cu"].rewritten
        and by_path["axpy.cu"].rewritten != by_path["axpy.cu"].loaded
    )
    assert by_path["clamp.cuh"].rewritten == by_path["clamp.cuh"].loaded


def test_the_cli_run_writes_every_rewrite_and_a_rerun_comes_from_the_cache(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    before = {p: p.read_text() for p in repo.rglob("*.cu*")}
    first = cli("optimize", ".", "--gpus", "0,1", "--proposer", "launch-config", "--write", "--no-sanitize",
                cwd=repo, cache=tmp_path / "cache")  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    assert "5 kernels in 5 files: 4 faster, 1 no gain, 0 failed" in first.stdout
    assert "GPUs of this machine: 2 workers" in first.stdout
    assert re.search(r"daxpy\s.*faster\s.*0\.080 ms\s.*0\.060 ms\s.*1\.33×", first.stdout)
    assert "src/blas/axpy.cu:21" in first.stdout
    for changed in ["src/activations.cu", "src/blas/axpy.cu", "src/bias_program.cu", "keep_tmp.cu"]:
        assert f"wrote {changed}" in first.stdout
        assert (repo / changed).read_text() != before[repo / changed]
    assert "block = [256]" in (repo / "src/blas/axpy.cu").read_text()  # the spec carries the verified launch
    for same in ["include/clamp.cuh", "build/generated.cu", "src/old/legacy.cu"]:
        assert (repo / same).read_text() == before[repo / same]

    again = cli(
        "optimize", ".", "--gpus", "0,1", "--proposer", "launch-config", cwd=repo, cache=tmp_path / "cache"
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "from the cache" in again.stdout
    # The written files are new text (optimized again, finding nothing more); the header is unchanged.
    assert re.search(r"clamp_inplace\s.*no gain \(cached\)", again.stdout)


def test_bad_paths_and_options_are_told_by_name(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    missing = cli("optimize", "src", "nowhere", cwd=repo, cache=tmp_path / "cache")
    assert missing.returncode == 2 and "nowhere: no such file or folder" in missing.stderr
    assert "Traceback" not in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    none = cli("optimize", str(empty), cwd=repo, cache=tmp_path / "cache")
    assert none.returncode == 2 and "no .cu or .cuh file under" in none.stderr
    kernel = cli("optimize", "src", "--kernel", "daxpy", cwd=repo, cache=tmp_path / "cache")
    assert kernel.returncode == 2 and "give one file with it" in kernel.stderr
    gpus = cli("optimize", "src", "--gpus", "0,x", cwd=repo, cache=tmp_path / "cache")
    assert gpus.returncode == 2 and "GPU indices separated by commas" in gpus.stderr


def test_a_file_that_cannot_be_read_is_named_and_the_rest_still_run(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    (repo / "src" / "gone.cu").symlink_to(tmp_path / "deleted.cu")  # a link left behind by a rename
    run = cli(
        "optimize", "src", "--proposer", "launch-config", "--no-sanitize", cwd=repo, cache=tmp_path / "c"
    )
    assert "Traceback" not in run.stderr, run.stderr
    assert "src/gone.cu: cannot read it (No such file or directory)" in run.stderr
    assert run.returncode == 1
    assert re.search(r"daxpy\s.*faster", run.stdout), run.stdout  # the readable files ran all the same
