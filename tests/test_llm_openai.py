"""The second provider: a self-hosted model behind an OpenAI-compatible chat API (vLLM, for one), through
the real `openai` SDK against a local server that speaks chat completions and replies from a script. The
engine is real and answers verify and time from the H200 recording (tests/llm_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cuda_agent.agent.llm.settings import LlmSettings, disabled_reason
from cuda_agent.agent.optimize import optimize
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.llm_engine import recorded_engine
from tests.llm_scripted import HttpError, Raw, ScriptedApi, Step, compile_and_test, reply, text

ROOT = Path(__file__).resolve().parents[1]
MODEL = "kernel-coder-7b"
SAXPY = """__global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""


@pytest.fixture
def target() -> KernelTarget:
    found = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert found is not None
    return found


def settings(api: ScriptedApi) -> LlmSettings:
    return LlmSettings(provider="openai-compatible", model=MODEL, base_url=api.base_url, max_retries=2)


def unreadable_arguments() -> Raw:
    """A chat completion whose tool call carries arguments that are not JSON (a small model's slip)."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "compile_and_test", "arguments": "{kernel"},
    }
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }
    return Raw(json.dumps(body).encode())


def test_a_self_hosted_model_fixes_its_compile_error_and_its_rewrite_is_measured(
    target: KernelTarget,
) -> None:
    steps: list[Step] = [
        HttpError(429, "rate_limit_exceeded", "Rate limit reached", {"retry-after-ms": "20"}),
        reply(text("First try."), compile_and_test(SAXPY.replace("x[i]", "xx[i]"), block=[256])),
        unreadable_arguments(),
        reply(compile_and_test(SAXPY, block=[256], description="256 threads")),
        reply(text("Block 256 is best.")),
    ]
    with ScriptedApi(steps, wire="openai") as api, recorded_engine() as engine:
        outcome = optimize(engine, target, ("llm",), llm=settings(api))

    session = outcome.llm
    assert session is not None and session.stop_reason == "the model finished"
    assert session.proposer == f"llm:{MODEL}" and session.cost_usd == 0.0
    assert "self-hosted: no per-token price" in outcome.explanation
    assert [r.status for r in outcome.results] == ["compile error", "faster"]
    assert outcome.best is not None and outcome.best.candidate.proposer == f"llm:{MODEL}"
    assert outcome.best.candidate.description == "LLM: 256 threads; block [256]"

    compile_error, unreadable, measured = api.tool_results()
    assert "line 4 of your code" in compile_error and 'identifier "xx" is undefined' in compile_error
    assert unreadable.startswith(
        "could not read the arguments of compile_and_test: the tool arguments are not"
    )
    assert "result: faster (new best)" in measured

    first = api.requests[0]
    assert first["model"] == MODEL and first["messages"][0]["role"] == "system"
    assert first["tools"][0] == {
        "type": "function",
        "function": {
            "name": "compile_and_test",
            "description": first["tools"][0]["function"]["description"],
            "parameters": first["tools"][0]["function"]["parameters"],
        },
    }
    last = api.requests[-1]["messages"]
    assert [m["role"] for m in last[1:4]] == ["user", "assistant", "tool"]
    assert last[2]["tool_calls"][0]["function"]["name"] == "compile_and_test"
    assert api.headers[1]["x-stainless-retry-count"] == "1"  # the 429 was retried by the SDK


def test_an_openai_compatible_server_needs_an_address_and_a_model() -> None:
    assert disabled_reason(LlmSettings(provider="openai-compatible", model=MODEL), {}) == (
        "no base URL for the OpenAI-compatible server: set CUDA_AGENT_LLM_BASE_URL "
        "(or --llm-base-url, cudaAgent.llm.baseUrl)"
    )
    no_model = LlmSettings(provider="openai-compatible", base_url="http://127.0.0.1:8000/v1")
    assert disabled_reason(no_model, {}) == (
        "no model named for the OpenAI-compatible server: set CUDA_AGENT_LLM_MODEL "
        "(or --llm-model, cudaAgent.llm.model)"
    )
    assert (
        disabled_reason(LlmSettings(provider="openai-compatible", model=MODEL, base_url="http://h/v1"), {})
        is None
    )
