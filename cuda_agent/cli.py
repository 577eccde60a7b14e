"""`cuda-agent`: check, optimize and compare CUDA kernels on the GPU from the command line."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax

from cuda_agent import __version__
from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.candidates import OF_THE_REWRITE, Candidate, CandidateResult
from cuda_agent.agent.compile_environment import absolute_include_dir, define_problem, flag_problem
from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.engine import Progress as JobProgress
from cuda_agent.agent.executors import PoolSettings
from cuda_agent.agent.executors.base import RAY_ADDRESS_ENV
from cuda_agent.agent.executors.ray_pool import RayUnavailable, import_ray
from cuda_agent.agent.feedback_export import FORMATS as FEEDBACK_FORMATS
from cuda_agent.agent.feedback_export import MAX_PAIRS_PER_PROMPT
from cuda_agent.agent.llm import LLM_PROPOSER
from cuda_agent.agent.llm.settings import (
    LlmBudget,
    LlmSettings,
    describe,
    disabled_reason,
    settings_from_env,
)
from cuda_agent.agent.llm.transcript import render_markdown
from cuda_agent.agent.optimize import PROPOSER_NAMES, PROPOSERS, optimize
from cuda_agent.agent.repository import RunSettings, SourceError, find_sources, optimize_repository
from cuda_agent.agent.rewrite import unified_diff
from cuda_agent.agent.search import SearchBudget
from cuda_agent.agent.spec import SpecError
from cuda_agent.agent.targets import FileTargets, KernelTarget, load_targets
from cuda_agent.html_report import render
from cuda_agent.line_endings import in_line_endings_of
from cuda_agent.repository_view import LiveProgress, report_page, summary_table, totals_line
from cuda_agent.sandbox.reports import CompileResult, DeviceInfo, WorkerError
from cuda_agent.sandbox.sanitizer import NOT_FOUND, find_compute_sanitizer, sanitizer_version
from cuda_agent.tables import (
    baseline_table,
    candidates_table,
    compile_line,
    device_table,
    failure_line,
    timing_line,
)

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def relative(path: Path) -> Path:
    """Paths as the user typed them, relative to where they stand when possible."""
    try:  # a link by its own name, not its target's
        return (path.parent.resolve() / path.name).relative_to(Path.cwd())
    except ValueError:
        return path


class UsageError(Exception):
    """Bad input from the user: printed as one line naming the file, never a traceback."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cuda-agent", description=__doc__)
    parser.add_argument("--version", action="version", version=f"cuda-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
        pool = p.add_argument_group("a pool of GPUs (requests spread over them)")
        pool.add_argument(
            "--gpus", type=_gpu_list, metavar="0,1,…", default=(),
            help="one worker per GPU of this machine, these indices",
        )  # fmt: skip
        pool.add_argument(
            "--ray", metavar="ADDRESS", default=None,
            help=f"a Ray cluster's GPUs, one worker actor each (auto: the cluster running here; local: start "
            f"one on this machine; default ${RAY_ADDRESS_ENV}); needs cuda-agent[cluster]",
        )  # fmt: skip
        pool.add_argument(
            "--ray-workers", type=int, metavar="N", default=None,
            help="worker actors to start (default: one per GPU of the cluster)",
        )  # fmt: skip
        p.add_argument("--timeout", type=float, default=5.0, help="seconds before a launch counts as hung")
        p.add_argument("--arch", help="compile for this target (default: the GPU's, else sm_90)")
        p.add_argument("--no-cache", action="store_true", help="ignore and do not store cached results")

    def compile_options(p: argparse.ArgumentParser) -> None:
        # As a compiler's: repeatable, each checked (and a folder made absolute) where it is typed.
        group = p.add_argument_group("compiling (besides the file's folder and its compile_commands.json)")
        group.add_argument(
            "-I", "--include-dir", dest="include_dirs", action="append", default=[], type=_include_dir,
            metavar="DIR", help="search DIR for #include files (repeatable)",
        )  # fmt: skip
        group.add_argument(
            "-D", "--define", dest="defines", action="append", default=[], type=_define,
            metavar="NAME[=VALUE]", help="define a macro (repeatable)",
        )  # fmt: skip
        group.add_argument(
            "--nvcc-flag", dest="nvcc_flags", action="append", default=[], type=_nvcc_flag, metavar="FLAG",
            help="pass FLAG to the compiler, one word (repeatable): --nvcc-flag=--expt-relaxed-constexpr",
        )  # fmt: skip

    check = sub.add_parser("check", help="discover, compile, verify and time the kernels of a file")
    check.add_argument("file", type=Path)
    check.add_argument("--kernel", help="only this kernel")
    compile_options(check)
    common(check)

    opt = sub.add_parser(
        "optimize",
        help="search for verified, faster rewrites of a file's kernels, or of a whole repository's",
    )
    opt.add_argument(
        "paths", type=Path, nargs="+", metavar="PATH",
        help="a .cu file, or several files and folders (their .cu/.cuh files, .gitignore honoured): "
        "every kernel with a spec, written or inferred, over the GPUs at once",
    )  # fmt: skip
    opt.add_argument("--kernel", help="only this kernel (one file only)")
    opt.add_argument(
        "--proposer", action="append", choices=sorted(PROPOSER_NAMES),
        help="default: all offline ones; llm: a language model that revises its rewrites from the engine's "
        "results, after the offline ones chosen (needs ANTHROPIC_API_KEY, or an OpenAI-compatible server)",
    )  # fmt: skip
    opt.add_argument("--write", action="store_true", help="apply the best verified rewrite to the file")
    opt.add_argument(
        "--report", type=Path, metavar="FILE.html",
        help="write one self-contained HTML page of the run: per kernel the speedup, the roofline before and "
        "after, every candidate, the best one's diff, its verification, the GPU",
    )  # fmt: skip
    opt.add_argument(
        "--sanitize", action=argparse.BooleanOptionalAction, default=None,
        help="check the best rewrite under compute-sanitizer (memcheck, racecheck, synccheck, initcheck) "
        "before it is shown or written; a finding rejects it and the next best is checked (default: on with "
        "--write)",
    )  # fmt: skip
    opt.add_argument(
        "--budget-s",
        type=float,
        default=SearchBudget.seconds,
        help="search time a kernel (default %(default)g s)",
    )
    opt.add_argument(
        "--max-candidates", type=int, default=SearchBudget.candidates,
        help="candidates evaluated a kernel (default %(default)d)",
    )  # fmt: skip
    # fmt: off
    llm = opt.add_argument_group("the llm proposer")
    llm.add_argument("--llm-provider", choices=["anthropic", "openai-compatible"],
                     help="default: $CUDA_AGENT_LLM_PROVIDER, else anthropic")
    llm.add_argument("--llm-model", help="default: $CUDA_AGENT_LLM_MODEL, else claude-sonnet-5-5 (Anthropic)")
    llm.add_argument("--llm-base-url", help="the API's address (default: $CUDA_AGENT_LLM_BASE_URL, else "
                     "Anthropic's)")
    llm.add_argument("--llm-max-turns", type=int, default=LlmBudget.turns,
                     help="model turns a kernel (default %(default)d)")
    llm.add_argument("--llm-max-cost", type=float, default=LlmBudget.cost_usd,
                     help="estimated US dollars a kernel (default %(default)g)")
    llm.add_argument("--llm-budget-s", type=float, default=LlmBudget.seconds,
                     help="wall time of the LLM loop a kernel (default %(default)g s)")
    llm.add_argument("--llm-transcript", type=Path, help="write the LLM sessions' transcripts here (.md)")
    # fmt: on
    compile_options(opt)
    common(opt)

    compare = sub.add_parser("compare", help="verify NEW's kernel against OLD's and time both, interleaved")
    compare.add_argument("old", type=Path)
    compare.add_argument("new", type=Path)
    compare.add_argument("--kernel", help="the kernel in OLD (default: the only one)")
    compare.add_argument("--new-kernel", help="its name in NEW (default: the same)")
    compare.add_argument(
        "--sanitize", action=argparse.BooleanOptionalAction, default=False,
        help="check NEW's kernel under compute-sanitizer too, once verified (default: off)",
    )  # fmt: skip
    compile_options(compare)
    common(compare)

    doctor = sub.add_parser("doctor", help="GPU, driver, CUDA, NVRTC, nvcc, CuPy and measured ceilings")
    common(doctor)

    serve = sub.add_parser("serve", help="run the language server (stdio, or TCP for a remote GPU box)")
    listen = serve.add_mutually_exclusive_group()
    listen.add_argument("--tcp", action="store_true", help="listen on TCP instead of talking over stdio")
    listen.add_argument("--ws", action="store_true", help="listen for WebSocket clients instead")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=2087, help="port (default 2087; 0 picks a free one)")
    serve.add_argument(
        "--token",
        default=os.environ.get("CUDA_AGENT_TOKEN"),
        help='clients must send it in initializationOptions {"token": ...}; required off loopback '
        "(default: $CUDA_AGENT_TOKEN)",
    )
    serve.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="stderr only"
    )
    common(serve)

    feedback = sub.add_parser(
        "feedback", help="the log of every candidate evaluated, and of users' decisions on suggestions"
    )
    feedback_sub = feedback.add_subparsers(dest="feedback_command", required=True)
    export = feedback_sub.add_parser(
        "export", help="write datasets that TRL and verl train on as they are (JSONL, Parquet, dataset card)"
    )
    export.add_argument(
        "--log", type=Path,
        help="the log (default: the workspace's .cuda-agent/feedback.jsonl, else the user data dir's); its "
        "rotated files are read too",
    )  # fmt: skip
    export.add_argument("--out", type=Path, required=True, help="folder for the datasets")
    export.add_argument(
        "--format", dest="formats", action="append", choices=[*FEEDBACK_FORMATS, "all"],
        help="preferences: TRL prompt/chosen/rejected; rewards: prompt/completion with the milestone reward; "
        "verl: verl's parquet layout; trajectories: LLM sessions as chat messages (repeatable; default all)",
    )  # fmt: skip
    export.add_argument(
        "--max-pairs-per-prompt", type=int, default=MAX_PAIRS_PER_PROMPT, metavar="N",
        help="measured preference pairs kept a prompt (default %(default)d)",
    )  # fmt: skip

    bench = sub.add_parser("bench", help="optimize the bench suite and compare with torch.compile")
    bench_main = _bench_main()
    if bench_main is not None:
        bench_main.add_arguments(bench)
    common(bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "feedback":  # no GPU, no engine: reads and writes files only
        try:
            return cmd_feedback_export(args)
        except UsageError as exc:
            err.print(f"[bold red]cuda-agent: error:[/] {escape(str(exc))}")
            return 2
    settings = EngineSettings(
        gpu_index=args.gpu, timeout_s=args.timeout, arch=args.arch, use_cache=not args.no_cache,
        include_dirs=tuple(getattr(args, "include_dirs", ())), defines=tuple(getattr(args, "defines", ())),
        nvcc_flags=tuple(getattr(args, "nvcc_flags", ())),
    )  # fmt: skip
    if args.command == "serve":
        return cmd_serve(settings, args)
    pool = PoolSettings.from_environment(
        getattr(args, "gpus", ()), getattr(args, "ray", None), getattr(args, "ray_workers", None)
    )
    # Every candidate evaluated is a sample in the workspace's feedback log (CUDA_AGENT_FEEDBACK=0: none).
    recorder = CandidateLog.for_folder(Path.cwd())
    try:
        with Engine(settings, pool=pool, recorder=recorder) as engine:
            return COMMANDS[args.command](engine, args)
    except RayUnavailable as exc:
        err.print(f"[bold red]cuda-agent: error:[/] --ray: {escape(str(exc))}")
        return 2
    except UsageError as exc:
        err.print(f"[bold red]cuda-agent: error:[/] {exc}")
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


# -- helpers -------------------------------------------------------------------------------------------


def _gpu_list(text: str) -> tuple[int, ...]:
    try:
        indices = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: GPU indices separated by commas, as 0,1,2") from None
    if not indices or any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise argparse.ArgumentTypeError(f"{text!r}: distinct GPU indices separated by commas, as 0,1,2")
    return indices


def _include_dir(text: str) -> str:
    """-I DIR: absolute, against where the user stands; argparse names the option in the error (exit 2)."""
    try:
        return absolute_include_dir(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _define(text: str) -> str:
    if (problem := define_problem(text)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _nvcc_flag(text: str) -> str:
    if (problem := flag_problem(text)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _load(path: Path) -> FileTargets:
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        # As bytes: Python's text mode turns \r\n into \n, and `--write` wrote a CRLF file back as LF.
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from exc
    return load_targets(path, data.decode("utf-8", errors="replace"))


def _write_rewrite(path: Path, loaded: str, rewritten: str) -> str | None:
    """Write the rewritten file, in the file's own line endings; why not, if it must not be written."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"cannot read it again ({exc.strerror})"
    try:
        current = data.decode("utf-8")
    except UnicodeDecodeError:
        return "it is not valid UTF-8, and writing would replace the bytes that are not"
    if current != loaded:
        return "it changed on disk while it was being optimized"
    try:
        path.write_bytes(in_line_endings_of(current, rewritten).encode("utf-8"))
    except OSError as exc:
        return f"cannot write it ({exc.strerror})"
    return None


def _print_spec_errors(path: Path, errors: Sequence[SpecError]) -> None:
    for e in errors:
        err.print(
            f"[bold]{relative(path)}:{e.line + 1}:{e.column + 1}:[/] [red]spec error:[/] {escape(e.message)}"
        )


def _select(files: FileTargets, name: str | None) -> list[KernelTarget]:
    if not files.targets:
        raise UsageError(f"{relative(files.path)}: no __global__ kernel found")
    if name is None:
        return list(files.targets)
    target = files.find(name)
    if target is None:
        names = ", ".join(t.kernel.name for t in files.targets)
        raise UsageError(f"{relative(files.path)}: no kernel named {name!r} (kernels: {names})")
    return [target]


def _gpu_or_explain(engine: Engine) -> DeviceInfo | None:
    device = engine.device()
    if isinstance(device, WorkerError):
        console.print(
            f"[yellow]No GPU: {escape(device.message)}[/]\n"
            "Discovery, spec checks and compiling work without one (below); verifying, timing and optimizing "
            "need a GPU (run on a GPU machine, or connect to a headless server on one)."
        )
        return None
    return device


def _runnable(target: KernelTarget) -> bool:
    if target.spec is None:
        console.print(f"[yellow]{target.kernel.name}: {target.note}[/]")
        return False
    return True


# -- commands ------------------------------------------------------------------------------------------


def cmd_check(engine: Engine, args: argparse.Namespace) -> int:
    files = _load(args.file)
    _print_spec_errors(args.file, files.spec_errors)
    targets = _select(files, args.kernel)
    gpu = _gpu_or_explain(engine)
    failed = bool(files.spec_errors)
    checked = 0
    for target in targets:
        if target.spec is None:
            # Compiling needs no spec: the compiler's errors belong on their lines whatever else is missing.
            console.print(f"[yellow]{target.kernel.name}: not checked: {escape(target.note)}[/]")
            if target.compilable:
                failed |= not _compile_only(engine, target)
            continue
        checked += 1
        if target.spec.inferred:
            console.print(f"[bold]{target.kernel.name}[/]: {escape(target.spec.inference_note)}")
        if gpu is None:
            failed |= not _compile_only(engine, target)
            continue
        with console.status(f"{target.kernel.name}: compiling, verifying, timing…"):
            baseline = engine.baseline(target)
        console.print(baseline_table(baseline, gpu))
        _print_compile_diagnostics(target, baseline.compile)
        console.print()
        failed |= not baseline.usable
    if not checked:
        # A script must be able to tell "nothing could be run" from "all passed".
        err.print(
            f"[bold red]cuda-agent: {relative(args.file)}: no kernel could be checked[/] (none has a spec, "
            "written or inferred): add a /* cuda-agent ... */ spec comment next to the kernel"
        )
        return 1
    return 1 if failed else 0


def _compile_only(engine: Engine, target: KernelTarget) -> bool:
    """Without a GPU: compile the kernel and show the result. True when it compiled."""
    result = engine.compile(target, target.source)
    console.print(f"[bold]{target.kernel.name}[/]: compile {compile_line(result)}")
    _print_compile_diagnostics(target, result)
    return result.ok


def _print_compile_diagnostics(target: KernelTarget, result: CompileResult) -> None:
    for d in result.diagnostics:
        where = f"{relative(target.path)}:{d.line or '?'}" + (f":{d.column}" if d.column else "")
        style = "red" if d.severity == "error" else "yellow"
        console.print(f"  {where}: [{style}]{d.severity}:[/] {escape(d.message)}")


def cmd_optimize(engine: Engine, args: argparse.Namespace) -> int:
    if len(args.paths) > 1 or args.paths[0].is_dir() or args.report is not None:
        if args.kernel is not None:
            raise UsageError("--kernel names a kernel of one file; give one file with it")
        return cmd_optimize_repository(engine, args)
    args.file = args.paths[0]
    files = _load(args.file)
    _print_spec_errors(args.file, files.spec_errors)
    targets = _select(files, args.kernel)
    gpu = _gpu_or_explain(engine)
    if gpu is None:
        for target in targets:
            if _runnable(target):
                _compile_only(engine, target)
        return 1
    proposers = tuple(args.proposer or PROPOSERS)
    llm = _llm_settings(args) if LLM_PROPOSER in proposers else None
    if llm is not None and (reason := disabled_reason(llm)) is not None:
        err.print(f"[yellow]cuda-agent: the llm proposer is disabled: {escape(reason)}[/]")
        proposers = tuple(p for p in proposers if p != LLM_PROPOSER)
        if not proposers:
            return 2
    transcripts: list[str] = []
    source = files.source
    failed = False
    sanitize = args.write if args.sanitize is None else args.sanitize
    for name in [t.kernel.name for t in targets]:
        # Each kernel is optimized on the latest text, with the rewrites chosen for earlier ones applied.
        target = load_targets(args.file, source).find(name)
        if target is None or not _runnable(target):
            continue
        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=console, transient=True,
        ) as bar:  # fmt: skip
            task = bar.add_task(f"{target.kernel.name}: baseline", total=None, best="")

            def on_progress(p: JobProgress, task: int = task) -> None:
                best, stage = f"best {p.best_speedup:.2f}×", "candidates"
                if p.max_turns:  # the LLM loop: "LLM turn 4/12 … best 2.30×, est. $0.12"
                    best, stage = f"{best}, est. ${p.cost_usd:.2f}", f"LLM turn {p.turn}/{p.max_turns}"
                bar.update(task, description=f"{p.kernel}: {stage}", total=p.total, completed=p.done,
                           best=best)  # fmt: skip

            budget = SearchBudget(seconds=args.budget_s, candidates=args.max_candidates)
            outcome = optimize(engine, target, proposers, on_progress, budget, llm=llm, sanitize=sanitize)
        if outcome.llm is not None:
            title = f"{outcome.llm.proposer} on {target.kernel.name} ({relative(args.file)})"
            transcripts.append(render_markdown(outcome.llm.transcript(), title))
        console.print(baseline_table(outcome.baseline, gpu))
        if outcome.results:
            console.print(candidates_table(outcome.results))
        console.print(f"[bold]{target.kernel.name}:[/] {escape(outcome.explanation)}")
        _print_sanitizer_rejections(outcome.results, args.file)
        if outcome.best is None:
            failed |= not outcome.baseline.usable
            console.print()
            continue
        best = outcome.best.candidate
        diff = unified_diff(source, best.source, str(relative(args.file)))
        console.print(Syntax(diff, "diff", background_color="default"))
        if best.assumptions:
            console.print("assumes: " + "; ".join(best.assumptions))
        for note in best.notes:  # what the file alone does not carry: the user must do it themselves
            console.print(f"[yellow]note: {escape(note)}[/]")
        checked = outcome.best.sanitizer
        if checked is not None:
            style = "green" if checked.passed else "yellow"
            console.print(f"[{style}]{escape(checked.summary(OF_THE_REWRITE))}[/]")
            if args.write and checked.status == "not_checked" and checked.reason != NOT_FOUND:
                # Written unchecked only where the tool is missing (said above); not when it failed to check.
                console.print(
                    f"[yellow]not writing {target.kernel.name}'s rewrite: compute-sanitizer could not check "
                    "it (--no-sanitize writes it unchecked)[/]\n"
                )
                failed = True
                continue
        source = best.source
        console.print()
    if args.write and source != files.source:
        if (refused := _write_rewrite(args.file, files.source, source)) is not None:
            err.print(f"[red]cuda-agent: not writing {relative(args.file)}: {escape(refused)}[/]")
            return 1
        console.print(f"[green]wrote {relative(args.file)}[/]")
    if args.llm_transcript is not None and transcripts:
        args.llm_transcript.write_text("\n".join(transcripts), encoding="utf-8")
        console.print(f"wrote the LLM transcript to {relative(args.llm_transcript)}")
    return 1 if failed else 0


def _kernel_count(path: Path) -> int:
    """The file's kernels, for the progress display: written specs only (each file's run infers the rest),
    and 0 for a file that cannot be read (its run says why)."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return 0
    return len(load_targets(path, text, infer=False).targets)


def cmd_optimize_repository(engine: Engine, args: argparse.Namespace) -> int:
    """Every kernel under the paths, over the executor's GPUs: one progress display, one summary table."""
    try:
        paths = find_sources(args.paths)
    except SourceError as exc:
        raise UsageError(str(exc)) from exc
    if not paths:
        raise UsageError(f"no .cu or .cuh file under {', '.join(str(p) for p in args.paths)}")
    gpu = _gpu_or_explain(engine)
    if gpu is None:
        return 1
    proposers = tuple(args.proposer or PROPOSERS)
    if LLM_PROPOSER in proposers:
        raise UsageError("the llm proposer runs on one file at a time: give one file with it")
    sanitize = args.write if args.sanitize is None else args.sanitize
    budget = SearchBudget(seconds=args.budget_s, candidates=args.max_candidates)
    total = sum(_kernel_count(p) for p in paths)
    console.print(f"{total} kernels in {len(paths)} files on {escape(engine.executor.where)}")
    started = time.monotonic()
    with LiveProgress(console, total, relative) as live:
        runs = optimize_repository(engine, paths, RunSettings(proposers, budget, sanitize), live)
    for run in runs:
        for message in run.spec_errors:
            err.print(f"[red]{escape(message)}[/]")
        if run.error:
            err.print(f"[red]cuda-agent: {relative(run.path)}: {escape(run.error)}[/]")
    console.print(summary_table(runs, relative))
    totals = totals_line(runs, time.monotonic() - started, engine.executor.where)
    console.print(totals)
    if args.report is not None:
        page = report_page(runs, gpu, totals, budget, proposers, relative)
        try:
            args.report.write_text(render(page), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--report {args.report}: cannot write it ({exc.strerror})") from exc
        console.print(f"wrote the report to {relative(args.report)}")
    failed = any(run.error for run in runs) or any(
        k.outcome is not None and not k.outcome.baseline.usable for run in runs for k in run.kernels
    )
    if args.write:
        for run in runs:
            if run.rewritten == run.loaded:
                continue
            if (refused := _write_rewrite(run.path, run.loaded, run.rewritten)) is not None:
                err.print(f"[red]cuda-agent: not writing {relative(run.path)}: {escape(refused)}[/]")
                failed = True
                continue
            written = sum(1 for k in run.kernels if k.written)
            console.print(
                f"[green]wrote {relative(run.path)}[/] ({written} kernel{'s' if written > 1 else ''})"
            )
    return 1 if failed else 0


def _print_sanitizer_rejections(results: Sequence[CandidateResult], path: Path) -> None:
    """Each candidate compute-sanitizer rejected: its findings at their lines of the rewrite's file."""
    for result in results:
        report = result.sanitizer
        if report is None or not report.rejected:
            continue
        what = escape(result.candidate.description)
        console.print(f"[red]rejected by compute-sanitizer:[/] {what} ({escape(report.costs())})")
        for finding in report.findings:
            where = (
                f"{relative(path)}, line {finding.line}{OF_THE_REWRITE}"
                if finding.line is not None
                else (finding.file or "no line given")
            )
            repeats = f" (×{finding.count})" if finding.count > 1 else ""
            console.print(f"  [red]{finding.tool} {finding.kind}[/] at {escape(where)}{repeats}")
            if finding.source_line:
                console.print(f"    {escape(finding.source_line)}")
            console.print(f"    [dim]{escape(finding.message)}[/]")


def _llm_settings(args: argparse.Namespace) -> LlmSettings:
    """The LLM proposer's settings: the environment, then the command line."""
    settings = settings_from_env(provider=args.llm_provider, model=args.llm_model, base_url=args.llm_base_url)
    budget = replace(
        settings.budget, turns=args.llm_max_turns, cost_usd=args.llm_max_cost, seconds=args.llm_budget_s
    )
    return replace(settings, budget=budget)


def cmd_compare(engine: Engine, args: argparse.Namespace) -> int:
    old_files, new_files = _load(args.old), _load(args.new)
    _print_spec_errors(args.old, old_files.spec_errors)
    old = _select(old_files, args.kernel)
    if len(old) != 1:
        raise UsageError(f"{relative(args.old)}: several kernels; name one with --kernel")
    original = old[0]
    if not _runnable(original):
        return 1
    new_name = args.new_kernel or original.kernel.name
    new = new_files.find(new_name)
    if new is None:
        raise UsageError(f"{relative(args.new)}: no kernel named {new_name!r}")
    new_errors = [e for e in new_files.spec_errors if e.kernel == new_name]
    _print_spec_errors(args.new, new_errors)
    own_launch = new.spec.launch if new.spec is not None and not new.spec.inferred else None
    candidate = Candidate(
        source=new_files.source,
        block=own_launch.block if own_launch else original.spec.launch.block,  # type: ignore[union-attr]
        description=f"{new_name} from {relative(args.new)}",
        proposer="hand-written",
        kernel_name=new.name_expression,
        launch=own_launch,
        include_dir=str(args.new.absolute().parent),  # its #includes resolve there, wherever nvcc runs
    )
    gpu = _gpu_or_explain(engine)
    if gpu is None:
        result = engine.compile(new, new_files.source)
        console.print(f"compile {relative(args.new)}: {compile_line(result)}")
        return 1
    with console.status("verifying and timing the original and the rewrite…"):
        baseline = engine.baseline(original)
        if not baseline.usable:
            console.print(baseline_table(baseline, gpu))
            console.print("[red]the original cannot serve as the reference; nothing compared[/]")
            return 1
        (result,) = engine.evaluate(baseline, [candidate])
        result = engine.confirm(baseline, result)  # the figures shown: a full measurement, not a screening
    if args.sanitize and result.verified:
        with console.status("checking the rewrite under compute-sanitizer…"):
            result = replace(result, sanitizer=engine.sanitize(baseline, result))
    console.print(baseline_table(baseline, gpu))
    console.print(candidates_table([result]))
    if not result.compile.ok:
        _print_compile_diagnostics(new, result.compile)
    verdict = result.status
    if result.verification and not result.verification.passed:
        for failure in result.verification.failures:
            console.print("  " + failure_line(failure))
    if result.comparison:
        c = result.comparison
        console.print(f"  original  {timing_line(c.baseline)}")
        console.print(f"  rewrite   {timing_line(c.candidate)}")
        console.print(f"  decision  {c.decision}")
    if result.sanitizer is not None:
        console.print(f"  sanitizer {escape(result.sanitizer.summary(f' of {relative(args.new)}'))}")
        _print_sanitizer_rejections([result], args.new)
    style = "bold green" if result.faster else ("bold red" if not result.verified else "yellow")
    speedup = f", {result.speedup:.2f}×" if result.speedup and result.verified else ""
    console.print(f"[{style}]verdict: {verdict}[/]{speedup}")
    return 0 if result.verified else 1


def cmd_doctor(engine: Engine, args: argparse.Namespace) -> int:
    console.print(f"cuda-agent {__version__} · Python {sys.version.split()[0]}")
    nvcc = shutil.which("nvcc")
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
        console.print(f"nvcc: {nvcc} ({out.strip().splitlines()[-1] if out.strip() else 'unknown version'})")
    else:
        console.print("nvcc: [yellow]not found[/] (only needed for files NVRTC cannot compile)")
    console.print(f"NVRTC: {_nvrtc_version()}")
    sanitizer = find_compute_sanitizer()
    if sanitizer is not None:
        console.print(f"compute-sanitizer: {sanitizer} ({escape(sanitizer_version(sanitizer))})")
    else:
        console.print(
            "compute-sanitizer: [yellow]not found[/] (PATH, $CUDA_AGENT_COMPUTE_SANITIZER, CUDA_HOME, "
            "/usr/local/cuda): rewrites are shown and written without its check, and say so"
        )
    for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy", "torch"):
        try:
            console.print(f"{dist}: {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    llm = settings_from_env()
    style = "yellow" if disabled_reason(llm) else "green"
    console.print(f"LLM proposer: [{style}]{escape(describe(llm))}[/]")
    device = engine.device()
    if isinstance(device, WorkerError):
        console.print(f"[yellow]GPU: {escape(device.message)}[/]")
        return 1
    console.print(device_table(device))
    return 0


def _bench_main() -> ModuleType | None:
    """bench/ lives in the source tree, not in the wheel: import it from the checkout this runs from."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "bench" / "suite.py").is_file():
        return None
    if str(root) not in sys.path:
        sys.path.append(str(root))
    return importlib.import_module("bench.__main__")


def cmd_bench(engine: Engine, args: argparse.Namespace) -> int:
    if _bench_main() is None:
        raise UsageError("the bench suite ships with the source repository: run this from a checkout")
    from bench.runner import run_bench

    # The bench measures search times: unless asked, cached results would make every search look instant.
    settings = replace(engine.settings, use_cache=args.cache and not args.no_cache)
    with Engine(settings, recorder=engine.recorder) as bench_engine:
        return run_bench(
            bench_engine, args.kernels, args.budget_s, args.out, args.proposer, console, suite=args.suite
        )


def _nvrtc_version() -> str:
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}"
    except Exception as exc:  # any failure to load the library is reported, not raised
        return f"[yellow]unavailable ({exc})[/]"


def cmd_serve(settings: EngineSettings, args: argparse.Namespace) -> int:
    """The language server. Its engine is created lazily on the server's engine thread, not here."""
    import logging

    from cuda_agent.agent.llm.redact import RedactSecrets
    from cuda_agent.server.backend import Backend
    from cuda_agent.server.transport import InsecureBind, check_bind, run_tcp, serve_stdio

    # stderr only: stdout is the LSP channel in stdio mode.
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level, format="cuda-agent %(levelname)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactSecrets())  # a client's cudaAgent.llm.apiKey never reaches the log
    if args.log_level != "DEBUG":
        logging.getLogger("pygls").setLevel(logging.WARNING)  # it logs every message at INFO
    pool = PoolSettings.from_environment(args.gpus, args.ray, args.ray_workers)
    if pool.ray_address:
        try:
            import_ray()  # said now, not in an editor's first GPU notice
        except RayUnavailable as exc:
            err.print(f"[bold red]cuda-agent: error:[/] --ray: {escape(str(exc))}")
            return 2
    if not (args.tcp or args.ws):
        serve_stdio(Backend(settings, pool), token=args.token)
        return 0
    try:
        check_bind(args.host, args.token)
    except InsecureBind as exc:
        err.print(f"[bold red]cuda-agent: error:[/] {escape(str(exc))}")
        return 2
    run_tcp(Backend(settings, pool), args.host, args.port, args.token, websocket=args.ws)
    return 0


def cmd_feedback_export(args: argparse.Namespace) -> int:
    from cuda_agent.agent.feedback import FeedbackLog, default_log_path, find_workspace
    from cuda_agent.agent.feedback_export import ExportError, export

    log = args.log
    if log is None:
        log = default_log_path(find_workspace(Path.cwd()))
        if not FeedbackLog(log).exists():
            log = default_log_path(None)
    formats = FEEDBACK_FORMATS if not args.formats or "all" in args.formats else tuple(args.formats)
    try:
        summary = export(log, args.out, formats, args.max_pairs_per_prompt)
    except ExportError as exc:
        raise UsageError(f"{relative(log)}: {exc}") from exc
    for note in summary.notes:
        err.print(f"[yellow]note: {escape(note)}[/]")
    for path in summary.files:
        console.print(f"wrote {relative(path)}")
    pairs = sum(summary.pairs.values())
    rewards = ", ".join(f"{reward:+d}: {count:,}" for reward, count in sorted(summary.rewards.items()))
    console.print(
        f"{summary.samples:,} samples of {summary.prompts:,} prompts ({rewards or 'no rewards'}), "
        f"{pairs:,} preference pairs, {summary.trajectories:,} LLM sessions"
    )
    return 0


COMMANDS = {
    "check": cmd_check,
    "optimize": cmd_optimize,
    "compare": cmd_compare,
    "doctor": cmd_doctor,
    "bench": cmd_bench,
}
