"""Which model the LLM proposer talks to, with what limits, and whether it can run at all.

The API key comes from the editor's settings or the environment. It lives only in memory: it is left out
of every repr, never logged, and never written to a cache or the feedback log.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

Provider = Literal["anthropic", "openai-compatible", "off"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai-compatible", "off")
# The current Sonnet in the SDK's model list (claude-sonnet-4-5 reaches end-of-life on 2026-11-30).
DEFAULT_MODEL = "claude-sonnet-5-5"

ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
OPENAI_KEY_ENV = "OPENAI_API_KEY"
# Ours, for either provider; the environment of the CLI or of `cuda-agent serve`.
KEY_ENV = "CUDA_AGENT_LLM_API_KEY"
PROVIDER_ENV = "CUDA_AGENT_LLM_PROVIDER"
MODEL_ENV = "CUDA_AGENT_LLM_MODEL"
BASE_URL_ENV = "CUDA_AGENT_LLM_BASE_URL"


@dataclass(frozen=True)
class LlmBudget:
    """When the loop stops, whichever comes first (the model may also stop by itself)."""

    turns: int = 12  # model replies
    tokens: int = 1_000_000  # input + output tokens of all turns (cached input included)
    seconds: float = 900.0  # wall time of the whole session, model and engine
    cost_usd: float = 2.0  # estimated from the token counts (agent/llm/pricing.py)
    patience: int = 5  # evaluated candidates in a row without a new best


@dataclass(frozen=True)
class LlmSettings:
    provider: Provider = "anthropic"
    model: str | None = None  # None: DEFAULT_MODEL for Anthropic; required for an OpenAI-compatible server
    base_url: str | None = None  # None: the SDK's default (Anthropic's API)
    api_key: str | None = field(default=None, repr=False, compare=False)
    budget: LlmBudget = LlmBudget()
    max_retries: int = 4  # the SDK's own retries of 429, 529, 5xx and timeouts (honouring retry-after)
    # A long reply takes minutes (the SDK's own limit for a request without streaming is 10).
    request_timeout_s: float = 600.0
    # Thinking counts against it, and current models think by default (adaptive thinking): 8,192 left
    # too little for the code after a long think.
    max_output_tokens: int = 16_000

    @property
    def model_name(self) -> str:
        return self.model or (DEFAULT_MODEL if self.provider == "anthropic" else "")


def settings_from_env(environ: Mapping[str, str] | None = None, **overrides: object) -> LlmSettings:
    """Settings from CUDA_AGENT_LLM_PROVIDER/MODEL/BASE_URL, then `overrides` that are not None."""
    env = os.environ if environ is None else environ
    settings = LlmSettings()
    provider = env.get(PROVIDER_ENV, "").strip()
    if provider in PROVIDERS:
        settings = replace(settings, provider=provider)  # type: ignore[arg-type]
    if env.get(MODEL_ENV, "").strip():
        settings = replace(settings, model=env[MODEL_ENV].strip())
    if env.get(BASE_URL_ENV, "").strip():
        settings = replace(settings, base_url=env[BASE_URL_ENV].strip())
    given = {name: value for name, value in overrides.items() if value is not None}
    return replace(settings, **given)  # type: ignore[arg-type]


def api_key(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The key to use and where it came from (for messages: the name, never the value)."""
    env = os.environ if environ is None else environ
    if settings.api_key:
        return settings.api_key, "the editor's cudaAgent.llm.apiKey"
    names = (ANTHROPIC_KEY_ENV, KEY_ENV) if settings.provider == "anthropic" else (KEY_ENV, OPENAI_KEY_ENV)
    for name in names:
        if env.get(name, "").strip():
            return env[name].strip(), name
    return None, ""


def disabled_reason(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the LLM proposer cannot run with these settings, in one sentence the user can act on; None
    when it can."""
    if settings.provider == "off":
        return "the LLM proposer is off (cudaAgent.llm.provider, or CUDA_AGENT_LLM_PROVIDER)"
    package = "anthropic" if settings.provider == "anthropic" else "openai"
    if importlib.util.find_spec(package) is None:
        return f"the {package} package is not installed (python -m pip install {package})"
    if settings.provider == "anthropic":
        if api_key(settings, environ)[0] is None:
            return (
                f"no API key: set {ANTHROPIC_KEY_ENV} in the environment of cuda-agent "
                "(or cudaAgent.llm.apiKey in the editor)"
            )
        return None
    if not settings.base_url:
        return (
            f"no base URL for the OpenAI-compatible server: set {BASE_URL_ENV} "
            "(or --llm-base-url, cudaAgent.llm.baseUrl)"
        )
    if not settings.model:
        return (
            f"no model named for the OpenAI-compatible server: set {MODEL_ENV} "
            "(or --llm-model, cudaAgent.llm.model)"
        )
    return None


def describe(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> str:
    """One line for `cuda-agent doctor` and the editor: what would run, or why nothing does."""
    reason = disabled_reason(settings, environ)
    if reason is not None:
        return f"disabled: {reason}"
    _, source = api_key(settings, environ)
    where = f" at {settings.base_url}" if settings.base_url else ""
    key = f"API key from {source}" if source else "no API key (the server needs none)"
    b = settings.budget
    return (
        f"{settings.provider} {settings.model_name}{where}; {key}; up to {b.turns} turns, "
        f"${b.cost_usd:.2f}, {b.seconds:g} s a kernel"
    )
