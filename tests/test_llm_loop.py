"""The LLM proposer's loop through the real `anthropic` SDK against a local server that speaks the Messages
API and replies from a script; the engine is real (compiles with NVRTC) and answers verify and time from
the H200 recording of examples/elementwise.cu (block 256: 1.27× faster; tests/llm_engine.py).

No test here reaches the real API: every client is pointed at the local server."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.engine import Engine
from cuda_agent.agent.llm.settings import LlmBudget, LlmSettings
from cuda_agent.agent.optimize import OptimizeOutcome, optimize
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.llm_engine import recorded_engine, recording_with_rejection
from tests.llm_scripted import (
    HttpError,
    Raw,
    Reply,
    ScriptedApi,
    Slow,
    Step,
    compile_and_test,
    recorded_session,
    redacted_thinking,
    reply,
    text,
    thinking,
    tool_use,
)

ROOT = Path(__file__).resolve().parents[1]
KEY = "test-key-not-real"
SPEEDUP = 0.0832 / 0.0653  # the recording's block 256
SAXPY = """__global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""
FORGOT_Y = SAXPY.replace("a * x[i] + y[i]", "a * x[i]")


@pytest.fixture
def target() -> KernelTarget:
    found = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert found is not None
    return found


def settings(api: ScriptedApi, **changes: object) -> LlmSettings:
    budget = {k: v for k, v in changes.items() if k in LlmBudget.__dataclass_fields__}
    rest = {k: v for k, v in changes.items() if k not in budget}
    return LlmSettings(base_url=api.base_url, api_key=KEY, budget=LlmBudget(**budget), **rest)  # type: ignore[arg-type]


def run(
    engine: Engine,
    target: KernelTarget,
    steps: list[Step],
    proposers: tuple[str, ...] = ("llm",),
    **changes: object,
) -> tuple[OptimizeOutcome, ScriptedApi]:
    with ScriptedApi(steps) as api:
        return optimize(engine, target, proposers, llm=settings(api, **changes)), api


def test_a_recorded_session_fixes_a_compile_error_is_refused_host_code_and_its_best_wins(
    target: KernelTarget,
) -> None:
    with recorded_engine() as engine:
        outcome, api = run(engine, target, recorded_session())

    session = outcome.llm
    assert session is not None and session.stop_reason == "the model finished" and session.replies == 5
    assert [r.status for r in outcome.results] == ["compile error", "faster", "no gain"]
    best = outcome.best
    assert best is not None and best is outcome.results[1]
    assert best.candidate.proposer == "llm:claude-sonnet-5-5"
    assert best.speedup == pytest.approx(SPEEDUP)
    assert "float4" in best.candidate.source and "block = [256]" in best.candidate.source
    assert outcome.explanation.startswith(
        "LLM: float4 loads and stores, 4 elements a thread; block [256]: 1.27×"
    )
    assert "LLM claude-sonnet-5-5: 5 turn(s), 3 candidate(s)" in outcome.explanation

    compile_error, faster, refused, no_gain = api.tool_results()
    # The compile error points into the code the model sent, with the line itself.
    assert 'line 5 of your code, column 58: error: identifier "idx" is undefined' in compile_error
    assert "| float4 xv = *reinterpret_cast<const float4*>(x + idx);" in compile_error
    assert "result: compile error; nothing was run" in compile_error
    # A measured rewrite: both medians, the speedup with its interval, roofline and registers.
    assert "original:  0.0832 ms median" in faster and "candidate: 0.0653 ms median" in faster
    assert "speedup 1.274x" in faster and "74% of the measured roofline" in faster
    assert "registers/thread" in faster and "result: faster (new best)" in faster
    # Host code never reaches the compiler: the model reads why.
    assert refused.startswith("refused, nothing was compiled or run:")
    assert "host code is refused" in refused and "kernel launches (<<<...>>>) are refused" in refused
    assert "best so far: 1.27x (yours" in no_gain

    first = api.requests[0]
    assert first["model"] == "claude-sonnet-5-5"
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}  # the fixed part is cached
    assert (
        "## The GPU\nNVIDIA H200" in first["system"][0]["text"]
        and "oracle = { y = " in first["system"][0]["text"]
    )
    assert [t["name"] for t in first["tools"]] == [
        "compile_and_test",
        "compile",
        "gpu_properties",
        "original_profile",
    ]
    assert api.requests[-1]["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # The key goes to the API (this SDK sends it as a bearer token; older ones as x-api-key), nowhere else.
    assert all(KEY in h.get("authorization", "") + h.get("x-api-key", "") for h in api.headers)
    assert session.usage.cache_read_tokens > 0 and session.cost_usd > 0

    transcript = session.transcript()
    assert transcript[0]["role"] == "system" and transcript[1]["role"] == "user"
    assert [t["role"] for t in transcript[2:4]] == ["assistant", "tool"]
    assert KEY not in repr(transcript) and KEY not in repr(session)


def test_a_wrong_result_is_shown_to_the_model_and_its_fix_is_measured(
    target: KernelTarget, tmp_path: Path
) -> None:
    steps: list[Step] = [
        reply(compile_and_test(FORGOT_Y, block=[512], description="wider blocks")),
        reply(text("I dropped `+ y[i]`."), compile_and_test(SAXPY, block=[256], description="fixed")),
        reply(text("Done.")),
    ]
    with recorded_engine(recording_with_rejection(tmp_path, 512)) as engine:
        outcome, api = run(engine, target, steps)

    wrong, fixed = api.tool_results()
    assert "verification FAILED (1 check(s)):" in wrong
    assert "mismatch: y: 16777216 of 16777216 elements differ beyond atol=1e-05" in wrong
    assert "result: rejected (wrong results are never timed)" in wrong
    assert "result: faster (new best)" in fixed
    assert [r.status for r in outcome.results] == ["rejected", "faster"]
    assert (
        outcome.best is outcome.results[1] and outcome.best.candidate.description == "LLM: fixed; block [256]"
    )


def test_the_models_thinking_goes_back_with_its_tool_calls(target: KernelTarget) -> None:
    """Current models think by default; the API refuses a tool result whose call lost its thinking."""
    first = (thinking("Memory-bound: wider loads."), redacted_thinking())
    steps: list[Step] = [
        reply(*first, text("Trying float4."), compile_and_test(SAXPY, block=[256])),
        reply(thinking("That was faster; done."), text("Done.")),
    ]
    with recorded_engine() as engine:
        outcome, api = run(engine, target, steps)

    assert outcome.llm is not None and outcome.llm.stop_reason == "the model finished"
    assert outcome.best is not None and outcome.best.speedup == pytest.approx(SPEEDUP)
    sent_back = api.requests[1]["messages"][-2]
    assert sent_back["role"] == "assistant" and sent_back["content"][:2] == list(first)
    # Kept in the transcript too: the feedback log's trajectories hold what the model thought.
    said = [t for t in outcome.llm.transcript() if t.get("role") == "assistant"]
    assert said[0]["reasoning"][0]["thinking"] == "Memory-bound: wider loads."


def test_rate_limits_and_overload_are_retried_by_the_sdk(target: KernelTarget) -> None:
    steps: list[Step] = [
        HttpError(429, "rate_limit_error", "Too many requests", {"retry-after": "1", "retry-after-ms": "20"}),
        HttpError(529, "overloaded_error", "Overloaded", {"retry-after-ms": "20"}),
        reply(compile_and_test(SAXPY, block=[256])),
        reply(text("Done.")),
    ]
    with recorded_engine() as engine:
        outcome, api = run(engine, target, steps)

    assert len(api.requests) == 4
    assert [h.get("x-stainless-retry-count") for h in api.headers[:3]] == ["0", "1", "2"]  # one call, retried
    assert outcome.llm is not None and outcome.llm.stop_reason == "the model finished"
    assert outcome.best is not None and outcome.best.speedup == pytest.approx(SPEEDUP)


def test_a_rate_limit_asking_for_a_long_wait_is_reported_not_slept_through(target: KernelTarget) -> None:
    spent = HttpError(429, "rate_limit_error", "Daily quota spent", {"retry-after": "3600"})
    with recorded_engine() as engine:
        outcome, api = run(engine, target, [spent, reply(text("never asked"))])

    assert len(api.requests) == 1
    assert outcome.llm is not None and outcome.llm.stop_reason == (
        "the model's API failed: 429 rate_limit_error: Daily quota spent (it asks to wait 3600 s: longer "
        "than the loop waits)"
    )


def test_an_api_that_stays_overloaded_ends_the_llm_and_the_offline_result_stands(
    target: KernelTarget,
) -> None:
    overloaded = HttpError(529, "overloaded_error", "Overloaded", {"retry-after-ms": "10"})
    with recorded_engine() as engine:
        outcome, api = run(engine, target, [overloaded] * 3, ("launch-config", "llm"), max_retries=1)

    assert len(api.requests) == 2  # the call and its one retry
    assert outcome.llm is not None
    assert outcome.llm.stop_reason == "the model's API failed: 529 overloaded_error: Overloaded"
    assert outcome.best is not None and outcome.best.candidate.proposer == "launch-config"
    assert "stopped: the model's API failed: 529 overloaded_error" in outcome.explanation


def test_unreadable_replies_are_asked_for_again_then_reported(target: KernelTarget) -> None:
    steps: list[Step] = [
        Raw(b"not json"),
        Raw(b"<html>502 Bad Gateway</html>", content_type="text/html"),
        reply(compile_and_test(SAXPY, block=[256])),
        Raw(b'{"type": "message"}'),
        Raw(b"[]"),
        Raw(b"{"),
    ]
    with recorded_engine() as engine:
        outcome, _ = run(engine, target, steps)

    assert outcome.llm is not None
    assert (
        outcome.llm.stop_reason
        == "the model's replies could not be read (3 tries): the reply is not JSON: "
        + ("Expecting property name enclosed in double quotes: line 1 column 2 (char 1)")
    )
    assert outcome.best is not None and outcome.best.speedup == pytest.approx(SPEEDUP)  # found before


def test_bad_tool_calls_get_an_error_result_the_model_reads(target: KernelTarget) -> None:
    steps: list[Step] = [
        reply(tool_use("compile_and_test", block=[256]), tool_use("run_on_host", command="nvidia-smi")),
        reply(compile_and_test(SAXPY, block=[256], grid=["n / block.x"])),
        reply(compile_and_test(SAXPY, block=[256])),
        reply(text("Done.")),
    ]
    with recorded_engine() as engine:
        outcome, api = run(engine, target, steps)

    missing, unknown, bad_grid, measured = api.tool_results()
    assert missing.startswith("refused, nothing was compiled or run:\n- `kernel_source` must be a string")
    assert unknown.startswith("there is no tool 'run_on_host'; the tools are compile_and_test, compile,")
    assert "'/' is not allowed: use // for integer division or ceil_div(a, b)" in bad_grid
    assert "result: faster" in measured
    results = [
        b for m in api.requests[-1]["messages"] for b in m["content"] if b.get("type") == "tool_result"
    ]
    assert [b["is_error"] for b in results] == [True, True, True, False]
    assert len(outcome.results) == 1  # refusals cost no GPU time


def test_the_model_can_compile_only_and_read_the_gpu_and_the_original(target: KernelTarget) -> None:
    steps: list[Step] = [
        reply(
            tool_use("gpu_properties"), tool_use("original_profile"), tool_use("compile", kernel_source=SAXPY)
        ),
        reply(text("Nothing to add.")),
    ]
    with recorded_engine() as engine:
        outcome, api = run(engine, target, steps, ("launch-config", "llm"))

    gpu, profile, compiled = api.tool_results()
    assert gpu.startswith("NVIDIA H200: compute capability 9.0 (sm_90), 132 SMs, 140 GiB memory, L2 60 MiB")
    assert "measured ceilings: copy bandwidth 4,186 GB/s" in gpu
    assert "time at the benchmark size: 0.0832 ms median" in profile
    assert "- block 256 (256 threads; was 128): faster 1.27x" in profile  # the offline search's candidates
    assert compiled.startswith("compile ok (nvrtc): nvrtc sm_90,") and "registers/thread" in compiled
    assert outcome.llm is not None and outcome.llm.results == []  # nothing was run on the GPU for these


def test_the_budgets_end_the_session(target: KernelTarget) -> None:
    # 1,000 tokens in and out a turn: $0.012 at claude-sonnet-5-5's $2 / $10 per million.
    usage = {"input_tokens": 1000, "output_tokens": 1000}
    again = [Reply((compile_and_test(SAXPY, block=[b]),), "tool_use", usage) for b in (256, 512, 1024)]
    with recorded_engine() as engine:
        by_turns, _ = run(engine, target, list(again), turns=2)
        by_cost, _ = run(engine, target, list(again), cost_usd=0.02)
        by_patience, _ = run(engine, target, [reply(compile_and_test(SAXPY, block=[64])), *again], patience=2)

    assert by_turns.llm is not None and by_turns.llm.stop_reason == "turn limit (2)"
    assert len(by_turns.results) == 2
    assert by_cost.llm is not None and by_cost.llm.cost_usd == pytest.approx(0.012)
    assert by_cost.llm.stop_reason == "another turn would pass the cost budget ($0.02)"
    assert by_patience.llm is not None and by_patience.llm.stop_reason == "no better candidate in the last 2"
    assert [r.status for r in by_patience.results] == ["no gain", "faster", "no gain", "no gain"]


def test_a_reply_cut_at_the_output_limit_is_answered_and_the_loop_goes_on(target: KernelTarget) -> None:
    steps: list[Step] = [
        reply(text("Here is a long explanation of"), stop="max_tokens"),
        reply(compile_and_test(SAXPY, block=[256])),
        reply(text("Done.")),
    ]
    with recorded_engine() as engine:
        outcome, api = run(engine, target, steps)
    assert "cut off at the output limit" in api.requests[1]["messages"][-1]["content"][-1]["text"]
    assert (
        outcome.best is not None
        and outcome.llm is not None
        and outcome.llm.stop_reason == "the model finished"
    )


def test_a_model_that_does_not_answer_in_time_is_reported(target: KernelTarget) -> None:
    with recorded_engine() as engine:
        outcome, _ = run(
            engine, target, [Slow(3.0, reply(text("late")))], max_retries=0, request_timeout_s=0.3
        )
    assert outcome.llm is not None
    assert outcome.llm.stop_reason == "the model's API failed: the API did not answer in time (after retries)"


def test_without_an_api_key_the_llm_is_disabled_with_one_clear_message(
    target: KernelTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "CUDA_AGENT_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with ScriptedApi([]) as api, recorded_engine() as engine:
        outcome = optimize(engine, target, ("launch-config", "llm"), llm=LlmSettings(base_url=api.base_url))
        assert api.requests == []
    assert outcome.llm is None
    assert outcome.notes == (
        "LLM proposer disabled: no API key: set ANTHROPIC_API_KEY in the environment of cuda-agent "
        "(or cudaAgent.llm.apiKey in the editor)",
    )
    assert outcome.best is not None and outcome.best.candidate.proposer == "launch-config"


def test_the_llm_is_not_among_the_default_proposers(
    target: KernelTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with ScriptedApi([]) as api, recorded_engine() as engine:
        outcome = optimize(engine, target, llm=settings(api))
        assert api.requests == []
    assert (
        outcome.llm is None
        and outcome.best is not None
        and outcome.best.candidate.proposer == "launch-config"
    )
