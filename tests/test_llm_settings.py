"""The LLM proposer's settings as the editor sends them, the cost estimate shown to the user, and the API
key kept out of messages and logs (CPU only)."""

from __future__ import annotations

import io
import logging

import pytest
from cuda_agent.agent.llm.pricing import cost_usd, price_of
from cuda_agent.agent.llm.redact import RedactSecrets
from cuda_agent.agent.llm.settings import LlmSettings, api_key, describe
from cuda_agent.agent.llm.transcript import Usage
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.server.settings import ServerSettings, read_settings

KEY = "sk-test-0123456789"


def test_the_editor_turns_the_llm_on_and_sets_its_limits() -> None:
    settings, problems = read_settings(
        {"llm": {"provider": "anthropic", "model": "", "apiKey": KEY, "maxTurns": 6, "maxCostUsd": 0.5}},
        ServerSettings(),
    )
    assert problems == []
    llm = settings.llm
    assert (llm.provider, llm.model_name, llm.budget.turns, llm.budget.cost_usd) == (
        "anthropic", "claude-sonnet-5-5", 6, 0.5,
    )  # fmt: skip
    assert api_key(llm, {}) == (KEY, "the editor's cudaAgent.llm.apiKey")
    assert KEY not in repr(settings)  # never in a repr, so never in a log line that prints settings
    assert settings.job_proposers(llm_usable=True) == (*PROPOSERS, "llm")
    assert settings.job_proposers(llm_usable=False) == tuple(PROPOSERS)

    alone, _ = read_settings({"proposers": ["llm"], "llm.provider": "none"}, ServerSettings())
    assert alone.llm.provider == "off" and alone.llm_requested
    assert alone.llm_for_jobs().provider == "anthropic"  # "llm" named with no provider: Claude
    assert alone.job_proposers(llm_usable=True) == ("llm",)
    assert alone.job_proposers(llm_usable=False) == tuple(PROPOSERS)  # disabled: the offline search instead


def test_bad_llm_settings_are_named_and_the_key_is_never_echoed() -> None:
    previous = ServerSettings()
    settings, problems = read_settings(
        {"llm": {"provider": "gpt", "apiKey": 12345, "maxTurns": 0, "colour": "red"}}, previous
    )
    assert settings == previous
    assert problems == [
        "cudaAgent.llm.provider: expected one of anthropic, openai-compatible, off, got 'gpt'; keeping the "
        "previous value",
        "cudaAgent.llm.apiKey: expected a string, got int (the value is not shown); keeping the previous "
        "value",
        "cudaAgent.llm.maxTurns: expected a whole number from 1 to 100, got 0; keeping the previous value",
        "cudaAgent.llm.colour: not a setting (llm settings: provider, model, baseUrl, apiKey, maxTurns, "
        "maxCostUsd, budgetSeconds)",
    ]
    assert "12345" not in " ".join(problems)


@pytest.mark.parametrize(
    ("model", "dollars"),
    [
        ("claude-sonnet-5-5", 0.019),  # $2 in, $10 out, cache writes 1.25x and reads 0.1x of the input price
        ("claude-opus-4-1", 0.1425),
        ("claude-haiku-4-5", 0.0095),
        ("claude-fable-5-1", 0.095),
    ],
)
def test_the_cost_estimate_follows_the_price_list(model: str, dollars: float) -> None:
    usage = Usage(input_tokens=1000, output_tokens=1000, cache_write_tokens=2000, cache_read_tokens=10_000)
    assert cost_usd(price_of("anthropic", model), usage) == pytest.approx(dollars)


def test_a_model_without_a_price_is_estimated_high_and_says_so() -> None:
    unknown = price_of("anthropic", "claude-nova-1")
    assert unknown.note == (
        "priced as Claude Fable, the priciest current model: the model is not in the price table"
    )
    fable = price_of("anthropic", "claude-fable-5-1")
    assert (unknown.input_per_mtok, unknown.output_per_mtok) == (fable.input_per_mtok, fable.output_per_mtok)
    assert cost_usd(price_of("openai-compatible", "kernel-coder-7b"), Usage(10**6, 10**6)) == 0.0


def test_describe_names_the_source_of_the_key_not_the_key() -> None:
    line = describe(LlmSettings(), {"ANTHROPIC_API_KEY": KEY})
    assert line == (
        "anthropic claude-sonnet-5-5; API key from ANTHROPIC_API_KEY; up to 12 turns, $2.00, 900 s a kernel"
    )
    assert describe(LlmSettings(provider="off"), {}) == (
        "disabled: the LLM proposer is off (cudaAgent.llm.provider, or CUDA_AGENT_LLM_PROVIDER)"
    )


def test_the_servers_log_never_shows_a_key_a_client_sent() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactSecrets())
    logger = logging.getLogger("test_llm_settings.pygls")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        # What pygls logs at DEBUG when the client answers workspace/configuration.
        logger.debug('Received result for message "%s": %s', 3, [{"llm": {"apiKey": KEY, "provider": "x"}}])
        logger.debug("headers %s", {"x-api-key": KEY})
    finally:
        logger.removeHandler(handler)
    logged = stream.getvalue()
    assert KEY not in logged
    assert "'apiKey': '<redacted>', 'provider': 'x'" in logged and "'x-api-key': '<redacted>'" in logged
