"""The LLM loop's own overhead per turn, the model's time excluded: what one turn costs in our code
(building the candidate, compile, verify, time, the reply to the model). The model is a local server
speaking the Messages API with scripted replies, through the real `anthropic` SDK.

    python bench/llm_loop_bench.py          # CPU: the H200 recording answers verify and time (saxpy)
    python bench/llm_loop_bench.py --gpu    # on a GPU: the real worker, the ~1 ms matmul_naive kernel

Target on the H200: at most 1 s a turn for compile + verify + time of a 1 ms kernel.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scripted API server lives with the tests, in this checkout

from cuda_agent.agent.cache import ResultCache  # noqa: E402
from cuda_agent.agent.engine import Engine, EngineSettings  # noqa: E402
from cuda_agent.agent.llm.prompt import kernel_text  # noqa: E402
from cuda_agent.agent.llm.settings import LlmSettings  # noqa: E402
from cuda_agent.agent.optimize import optimize  # noqa: E402
from cuda_agent.agent.targets import load_targets  # noqa: E402
from cuda_agent.sandbox.recorded import RECORDED_WORKER_ENV  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from tests.llm_scripted import ScriptedApi, Step, launch_session, recorded_session  # noqa: E402

RECORDING = ROOT / "tests" / "recordings" / "elementwise_h200.json"
TARGET_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="the real GPU worker (default: the recording)")
    args = parser.parse_args()
    console = Console()
    if args.gpu:
        path, kernel = ROOT / "bench" / "kernels" / "matmul_naive.cu", "matmul"
    else:
        os.environ[RECORDED_WORKER_ENV] = str(RECORDING)
        path, kernel = ROOT / "examples" / "elementwise.cu", "saxpy"
    target = load_targets(path).find(kernel)
    assert target is not None
    steps: list[Step] = (
        launch_session(kernel_text(target), [(32, 8), (16, 16), (8, 32), (32, 4), (64, 4)])
        if args.gpu
        else recorded_session()
    )
    with (
        tempfile.TemporaryDirectory() as cache_dir,
        ScriptedApi(steps) as api,
        Engine(EngineSettings(use_cache=False), ResultCache(Path(cache_dir), enabled=False)) as engine,
    ):
        outcome = optimize(engine, target, ("llm",), llm=LlmSettings(base_url=api.base_url, api_key="bench"))
    session = outcome.llm
    assert session is not None, outcome.explanation
    where = "GPU" if args.gpu else "recording"
    table = Table(title=f"LLM loop per turn: {kernel} ({where}; {session.stop_reason})")
    for column in ("turn", "tools", "model ms", "loop overhead s", "candidate"):
        table.add_column(column, justify="right" if column != "tools" and column != "candidate" else "left")
    answers: dict[str, str] = {t.tool_call_id: _verdict(t.text) for t in session.turns if t.role == "tool"}
    assistant_turns = [t for t in session.turns if t.role == "assistant"]
    tool_overheads = []
    for number, (turn, overhead) in enumerate(zip(assistant_turns, session.overhead_s, strict=False), 1):
        if turn.tool_calls:
            tool_overheads.append(overhead)
        names = ", ".join(c.name for c in turn.tool_calls) or "(end)"
        verdicts = "; ".join(answers.get(c.id, "") for c in turn.tool_calls)
        table.add_row(str(number), names, f"{turn.seconds * 1e3:.1f}", f"{overhead:.3f}", verdicts)
    console.print(table)
    if outcome.baseline.timing is not None:
        console.print(f"original kernel: {outcome.baseline.timing.median_ms:.3f} ms median")
    console.print(
        f"loop overhead per tool turn: median {statistics.median(tool_overheads):.3f} s, "
        f"max {max(tool_overheads):.3f} s (target ≤ {TARGET_S:g} s for a 1 ms kernel on the H200)"
    )


def _verdict(tool_result: str) -> str:
    """The engine's verdict in a tool result: its "result: ..." line, or its first line (a refusal)."""
    lines = tool_result.splitlines()
    found = next((line for line in lines if line.startswith("result: ")), lines[0] if lines else "")
    return found.removeprefix("result: ")[:60]


if __name__ == "__main__":
    main()
