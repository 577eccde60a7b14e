"""The server's settings: what the client sends, checked field by field.

They arrive as the `cudaAgent` section of `workspace/configuration` (VS Code's `cudaAgent.*` settings, a
Neovim `settings = { cudaAgent = {...} }` table), or as `initializationOptions` (the same keys, for
clients without configuration support), and again on `workspace/didChangeConfiguration`. A bad value
keeps the previous one and is reported, naming the setting: the server never fails on a setting.

The compile environment (`includeDirs`, `defines`, `nvccFlags`) is checked like the command line's -I, -D
and --nvcc-flag; relative include folders are resolved against the workspace folder (server/backend.py), on
the machine the server runs on.

The LLM proposer's settings sit under `llm` (VS Code sends `cudaAgent.llm.provider` as {"llm": {...}}; the
flat "llm.provider" spelling is read too). `llm.apiKey` is accepted but never echoed in a message or log.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from cuda_agent.agent.compile_environment import define_problem, flag_problem
from cuda_agent.agent.llm import LLM_PROPOSER
from cuda_agent.agent.llm.settings import PROVIDER_ENV, PROVIDERS, LlmSettings, settings_from_env
from cuda_agent.agent.optimize import PROPOSER_NAMES, PROPOSERS

SECTION = "cudaAgent"
Trigger = Literal["save", "idle", "manual"]
TRIGGERS: tuple[Trigger, ...] = ("save", "idle", "manual")
MAX_BUDGET_S = 3600.0


def default_llm() -> LlmSettings:
    """Off unless the server's environment names a provider (CUDA_AGENT_LLM_PROVIDER): a server for many
    clients on a GPU box can be started with the LLM on; otherwise the editor's setting turns it on."""
    settings = settings_from_env()
    return (
        settings
        if os.environ.get(PROVIDER_ENV, "").strip() in PROVIDERS
        else replace(settings, provider="off")
    )


@dataclass(frozen=True)
class ServerSettings:
    trigger: Trigger = "save"  # when kernels are optimized without being asked: on save, after idle, never
    idle_seconds: float = 2.0  # with trigger "idle": this long after the last edit
    gpu_index: int = 0
    search_budget_s: float = 120.0  # wall time of one kernel's search
    proposers: tuple[str, ...] = ()  # () = every offline proposer
    feedback: bool = True  # log shown/accepted/rejected suggestions for training
    sanitize: bool = True  # check a rewrite under compute-sanitizer before it is shown
    include_dirs: tuple[str, ...] = ()  # as written: relative ones are the workspace folder's
    defines: tuple[str, ...] = ()  # NAME or NAME=VALUE
    nvcc_flags: tuple[str, ...] = ()
    llm: LlmSettings = field(default_factory=default_llm)

    @property
    def llm_requested(self) -> bool:
        """The LLM proposer is asked for: a provider is chosen, or "llm" is among the proposers."""
        return self.llm.provider != "off" or LLM_PROPOSER in self.proposers

    def job_proposers(self, llm_usable: bool) -> tuple[str, ...]:
        """What a job runs: the chosen offline proposers (all when none is named), then the LLM when it is
        asked for and usable. "llm" alone means the LLM without the offline search."""
        offline = tuple(p for p in self.proposers if p != LLM_PROPOSER)
        if not offline and not (self.proposers and llm_usable):
            offline = tuple(PROPOSERS)
        return (*offline, LLM_PROPOSER) if llm_usable and self.llm_requested else offline

    def llm_for_jobs(self) -> LlmSettings:
        """The LLM settings a job uses: "llm" among the proposers with no provider chosen means Anthropic."""
        if self.llm.provider == "off" and LLM_PROPOSER in self.proposers:
            return replace(self.llm, provider="anthropic")
        return self.llm


# setting name (as the client writes it) -> (field, reader)
def _trigger(value: Any) -> Trigger:
    if value not in TRIGGERS:
        raise ValueError(f"expected one of {', '.join(TRIGGERS)}, got {value!r}")
    return value  # type: ignore[no-any-return]


def _seconds(limit: float) -> Any:
    def read(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"expected a number of seconds, got {value!r}")
        if not 0 < value <= limit:
            raise ValueError(f"expected more than 0 and at most {limit:g} seconds, got {value!r}")
        return float(value)

    return read


def _gpu_index(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a GPU index (0, 1, …), got {value!r}")
    return value


def _proposers(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of proposer names, got {value!r}")
    unknown = [v for v in value if v not in PROPOSER_NAMES]
    if unknown:
        raise ValueError(
            f"unknown proposer {', '.join(map(repr, unknown))} (known: {', '.join(PROPOSER_NAMES)})"
        )
    return tuple(dict.fromkeys(value))


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of {what}, got {value!r}")
    return [v.strip() for v in value if v.strip()]  # "" is an unfilled row of VS Code's list editor


def _include_dirs(value: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_strings(value, "folders")))


def _checked(what: str, problem: Callable[[str], str | None]) -> Any:
    def read(value: Any) -> tuple[str, ...]:
        items = _strings(value, what)
        problems = [p for p in map(problem, items) if p is not None]
        if problems:
            raise ValueError("; ".join(problems))
        return tuple(items)

    return read


_FIELDS: dict[str, tuple[str, Any]] = {
    "trigger": ("trigger", _trigger),
    "idleSeconds": ("idle_seconds", _seconds(600.0)),
    "gpuIndex": ("gpu_index", _gpu_index),
    "searchBudgetSeconds": ("search_budget_s", _seconds(MAX_BUDGET_S)),
    "proposers": ("proposers", _proposers),
    "feedback": ("feedback", _flag),
    "sanitize": ("sanitize", _flag),
    "includeDirs": ("include_dirs", _include_dirs),
    "defines": ("defines", _checked("macro definitions (NAME or NAME=VALUE)", define_problem)),
    "nvccFlags": ("nvcc_flags", _checked("compiler flags", flag_problem)),
}
# Keys a client may send that are not settings of the server (read elsewhere, or by the extension).
_NOT_OURS = frozenset({"token", "interpreter", "server"})
LLM = "llm"


def _provider(value: Any) -> str:
    if value == "none":  # the VS Code extension's name for off
        return "off"
    if value not in PROVIDERS:
        raise ValueError(f"expected one of {', '.join(PROVIDERS)}, got {value!r}")
    return str(value)


def _optional_text(value: Any) -> str | None:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value.strip() or None  # "" is VS Code's unset: the default


def _secret(value: Any) -> str | None:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__} (the value is not shown)")
    return value.strip() or None


def _count(limit: int) -> Any:
    def read(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise ValueError(f"expected a whole number from 1 to {limit}, got {value!r}")
        return value

    return read


def _dollars(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1000:
        raise ValueError(f"expected US dollars, more than 0 and at most 1000, got {value!r}")
    return float(value)


# llm.<key> -> (what it sets, reader); budget fields live in LlmSettings.budget.
_LLM_FIELDS: dict[str, tuple[str, Any]] = {
    "provider": ("provider", _provider),
    "model": ("model", _optional_text),
    "baseUrl": ("base_url", _optional_text),
    "apiKey": ("api_key", _secret),
    "maxTurns": ("budget.turns", _count(100)),
    "maxCostUsd": ("budget.cost_usd", _dollars),
    "budgetSeconds": ("budget.seconds", _seconds(MAX_BUDGET_S)),
}


def read_settings(raw: Any, previous: ServerSettings) -> tuple[ServerSettings, list[str]]:
    """`previous` with the valid values of `raw` applied, and one message per value that was not.
    A missing key keeps its previous value; `null` (VS Code's unset) too."""
    if raw is None:
        return previous, []
    if not isinstance(raw, Mapping):
        return previous, [f"{SECTION}: expected an object of settings, got {type(raw).__name__}"]
    settings, problems = previous, []
    for key, value in raw.items():
        if key in _NOT_OURS or value is None:
            continue
        if key == LLM or key.startswith(f"{LLM}."):
            items = value if key == LLM else {key.split(".", 1)[1]: value}
            settings = _read_llm(items, settings, problems)
            continue
        known = _FIELDS.get(key)
        if known is None:
            problems.append(f"{SECTION}.{key}: not a setting (settings: {', '.join(_FIELDS)})")
            continue
        field, reader = known
        try:
            settings = replace(settings, **{field: reader(value)})
        except ValueError as exc:
            problems.append(f"{SECTION}.{key}: {exc}; keeping {getattr(settings, field)!r}")
    return settings, problems


def _read_llm(raw: Any, settings: ServerSettings, problems: list[str]) -> ServerSettings:
    if not isinstance(raw, Mapping):
        problems.append(f"{SECTION}.{LLM}: expected an object of settings, got {type(raw).__name__}")
        return settings
    llm = settings.llm
    for key, value in raw.items():
        if value is None:
            continue
        known = _LLM_FIELDS.get(key)
        if known is None:
            problems.append(f"{SECTION}.{LLM}.{key}: not a setting (llm settings: {', '.join(_LLM_FIELDS)})")
            continue
        field_name, reader = known
        try:
            read = reader(value)
        except ValueError as exc:
            problems.append(f"{SECTION}.{LLM}.{key}: {exc}; keeping the previous value")
            continue
        if field_name.startswith("budget."):
            llm = replace(llm, budget=replace(llm.budget, **{field_name.split(".", 1)[1]: read}))
        else:
            llm = replace(llm, **{field_name: read})
    return replace(settings, llm=llm)


def section_of(settings_payload: Any) -> Any:
    """Our section of a didChangeConfiguration payload ({"cudaAgent": {...}}), or None."""
    if isinstance(settings_payload, Mapping):
        return settings_payload.get(SECTION)
    return None
