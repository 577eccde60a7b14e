"""Repository mode: every kernel with a spec (written or inferred) under some files and folders, optimized
over the executor's GPUs.

Files run side by side, as many at once as the executor has workers; within a file, kernels run one after
another, each on the file's latest text with the rewrites chosen for earlier kernels applied (so every
rewrite written back is one that was verified on the text it is written into). A kernel whose file text,
spec, proposers, budget and GPU are those of an earlier run takes that run's outcome from the cache at once.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pathspec
from cuda_agent.agent.cache import result_key
from cuda_agent.agent.engine import Engine, Progress
from cuda_agent.agent.llm import LLM_PROPOSER
from cuda_agent.agent.optimize import OptimizeOutcome, optimize
from cuda_agent.agent.search import SearchBudget
from cuda_agent.agent.targets import FileTargets, KernelTarget, load_targets

SOURCE_SUFFIXES = (".cu", ".cuh")


class SourceError(Exception):
    """A path given that names nothing to optimize: the message names it."""


# -- finding the files ---------------------------------------------------------------------------------


def find_sources(paths: Sequence[Path]) -> list[Path]:
    """The files named, and the `.cu`/`.cuh` files under the folders named, in a stable order, leaving out
    what the repository's `.gitignore` files ignore (each applies under its own folder, as in git)."""
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(_walk(path))
        else:
            raise SourceError(f"{path}: no such file or folder")
    return list(dict.fromkeys(found))


def _walk(folder: Path) -> Iterator[Path]:
    root = _repository_root(folder)
    inherited = [_ignore_file(d) for d in _between(root, folder)] if root else []
    rules: dict[Path, list[tuple[Path, pathspec.GitIgnoreSpec]]] = {
        folder: [r for r in inherited if r is not None]
    }
    for here, dirs, files in os.walk(folder):
        base = Path(here)
        own = _ignore_file(base)
        active = rules.pop(base, []) + ([own] if own is not None else [])
        dirs[:] = sorted(d for d in dirs if d != ".git" and not _ignored(base / d, active, directory=True))
        for d in dirs:
            rules[base / d] = active
        for name in sorted(files):
            path = base / name
            if path.suffix in SOURCE_SUFFIXES and not _ignored(path, active, directory=False):
                yield path


def _repository_root(folder: Path) -> Path | None:
    for candidate in [folder.resolve(), *folder.resolve().parents]:
        if (candidate / ".git").exists():
            return candidate
    return None


def _between(root: Path, folder: Path) -> list[Path]:
    """The folders from the repository's root down to `folder`'s parent (their ignore rules apply)."""
    resolved = folder.resolve()
    chain = [resolved, *resolved.parents]
    return [p for p in reversed(chain[1:]) if p == root or root in p.parents]


def _ignore_file(folder: Path) -> tuple[Path, pathspec.GitIgnoreSpec] | None:
    ignore = folder / ".gitignore"
    if not ignore.is_file():
        return None
    try:
        lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return folder.resolve(), pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(path: Path, rules: list[tuple[Path, pathspec.GitIgnoreSpec]], directory: bool) -> bool:
    # Where the entry sits, as git sees it: a link is matched by its own path, not by where it points.
    resolved = path.parent.resolve() / path.name
    for base, spec in rules:
        relative = resolved.relative_to(base).as_posix()
        if spec.match_file(relative + "/" if directory else relative):
            return True
    return False


# -- one run -------------------------------------------------------------------------------------------


@dataclass
class KernelRun:
    """One kernel's part of the run."""

    path: Path
    kernel: str
    line: int  # 0-based line of its name
    outcome: OptimizeOutcome | None = None
    skipped: str = ""  # why it was not optimized (no spec, and the note saying so)
    cached: bool = False  # the outcome of an earlier run, taken from the cache
    seconds: float = 0.0
    written: bool = False  # its rewrite is in the file's rewritten text

    @property
    def speedup(self) -> float | None:
        best = self.outcome.best if self.outcome else None
        return best.speedup if best is not None else None


@dataclass
class FileRun:
    path: Path
    loaded: str  # the text optimized
    rewritten: str  # with every kernel's verified rewrite applied, in turn
    kernels: list[KernelRun] = field(default_factory=list)
    spec_errors: tuple[str, ...] = ()
    error: str = ""  # the file could not be read


class RunListener(Protocol):
    """What a progress display hears, from the run's threads (calls may come from several at once)."""

    def started(self, run: KernelRun) -> None: ...

    def progressed(self, run: KernelRun, progress: Progress) -> None: ...

    def finished(self, run: KernelRun) -> None: ...


@dataclass(frozen=True)
class RunSettings:
    proposers: tuple[str, ...]
    budget: SearchBudget
    sanitize: bool = False


def optimize_repository(
    engine: Engine, files: Sequence[Path], settings: RunSettings, listener: RunListener
) -> list[FileRun]:
    """Every file's kernels, as many files at once as the executor has GPUs; the runs in `files`' order."""
    at_once = max(1, min(engine.executor.workers, len(files)))
    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="cuda-agent-file") as threads:
        return list(threads.map(lambda p: optimize_file(engine, p, settings, listener), files))


def optimize_file(engine: Engine, path: Path, settings: RunSettings, listener: RunListener) -> FileRun:
    try:
        loaded = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        return FileRun(path, "", "", error=f"cannot read it ({exc.strerror})")
    files = load_targets(path, loaded)
    errors = tuple(f"{path}:{e.line + 1}:{e.column + 1}: spec error: {e.message}" for e in files.spec_errors)
    run = FileRun(path, loaded, loaded, spec_errors=errors)
    source = loaded
    for name in [t.kernel.name for t in files.targets]:
        # the file as the kernels before this one left it (read again only once one was rewritten)
        current: FileTargets = files if source is loaded else load_targets(path, source)
        target = current.find(name)
        if target is None:  # an earlier kernel's rewrite renamed or removed it: nothing left to do
            continue
        kernel = KernelRun(path, name, target.kernel.name_span.start_line)
        run.kernels.append(kernel)
        if target.spec is None:
            kernel.skipped = target.note or "no spec"
            listener.finished(kernel)
            continue
        listener.started(kernel)
        started = time.monotonic()
        kernel.outcome, kernel.cached = _outcome(engine, target, settings, kernel, listener)
        kernel.seconds = time.monotonic() - started
        best = kernel.outcome.best
        if best is not None:
            source = best.candidate.source
            kernel.written = True
        listener.finished(kernel)
    run.rewritten = source
    return run


def _outcome(
    engine: Engine, target: KernelTarget, settings: RunSettings, kernel: KernelRun, listener: RunListener
) -> tuple[OptimizeOutcome, bool]:
    # The LLM's proposals differ run to run, and a run of it is asked for: it is never answered from cache.
    cacheable = LLM_PROPOSER not in settings.proposers and engine.cache.enabled
    key = result_key(
        "repository-outcome", str(target.path), target.source, target.kernel.name, settings,
        engine.device_key(), engine.settings,
    )  # fmt: skip
    if cacheable:
        cached = engine.cache.get(key)
        if isinstance(cached, OptimizeOutcome):
            return cached, True

    def on_progress(p: Progress) -> None:
        listener.progressed(kernel, p)

    outcome = optimize(
        engine, target, settings.proposers, on_progress, settings.budget, sanitize=settings.sanitize
    )
    if cacheable and outcome.baseline.usable:
        with contextlib.suppress(Exception):  # an outcome that does not pickle is run again next time
            engine.cache.set(key, outcome)
    return outcome, False
