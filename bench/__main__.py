"""`python -m bench [--suite classic|outside|holdout|all] [--kernels NAME...] [--budget-s 180]
[--out bench/results]`: the bench suites (bench/suite.py), all of them unless --suite says which.

`python -m bench --merge A.json B.json`: one table from runs of parts of the suite (a GPU session too short
for all of it runs it in parts)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.runner import DEFAULT_BUDGET_S, DEFAULT_OUT
from bench.suite import ALL, SUITE_CHOICES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bench's options, shared with `cuda-agent bench`."""
    parser.add_argument(
        "--suite", choices=SUITE_CHOICES, default=ALL, help="which suite (default: all of them)"
    )
    parser.add_argument(
        "--kernels", nargs="+", metavar="NAME", help="only these (kernel names or file stems, in any suite)"
    )
    parser.add_argument(
        "--budget-s", type=float, default=DEFAULT_BUDGET_S, help="search budget a kernel, in seconds"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the JSON and Markdown")
    parser.add_argument("--proposer", action="append", help="only these proposers (default: all offline)")
    parser.add_argument(
        "--cache", action="store_true", help="reuse cached results (default off: search times stay honest)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    add_arguments(parser)
    parser.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON", help="merge these runs' tables")
    args = parser.parse_args(argv)
    if args.merge:
        return merge_runs(args.merge, args.out)
    # Imported after parsing, so --help answers without loading the engine.
    from cuda_agent.agent.candidate_log import CandidateLog
    from cuda_agent.agent.engine import Engine, EngineSettings

    from bench.runner import run_bench

    settings = EngineSettings(gpu_index=args.gpu, use_cache=args.cache)
    recorder = CandidateLog.for_folder(Path.cwd())  # every candidate a sample in the workspace's log
    try:
        with Engine(settings, recorder=recorder) as engine:
            return run_bench(engine, args.kernels, args.budget_s, args.out, args.proposer, suite=args.suite)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def merge_runs(paths: Sequence[Path], out: Path) -> int:
    from rich.console import Console
    from rich.markup import escape

    from bench.report import from_json, merge, rich_table, run_summary_lines, write

    console = Console(highlight=False)
    try:
        run = merge([from_json(path.read_text(encoding="utf-8")) for path in paths])
    except (OSError, ValueError, TypeError, KeyError) as exc:
        console.print(f"[red]cannot merge: {escape(str(exc))}[/]")
        return 2
    console.print(rich_table(run))
    for line in run_summary_lines(run):
        console.print(line)
    json_path, markdown_path, html_path = write(run, out)
    console.print(f"wrote {json_path}, {markdown_path.name} and {html_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
