"""The server's settings: what the client sends, checked field by field.

They arrive as the `cudaAgent` section of `workspace/configuration` (VS Code's `cudaAgent.*` settings, a
Neovim `settings = { cudaAgent = {...} }` table), or as `initializationOptions` (the same keys, for
clients without configuration support), and again on `workspace/didChangeConfiguration`. A bad value
keeps the previous one and is reported, naming the setting: the server never fails on a setting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from cuda_agent.agent.optimize import PROPOSERS

SECTION = "cudaAgent"
Trigger = Literal["save", "idle", "manual"]
TRIGGERS: tuple[Trigger, ...] = ("save", "idle", "manual")
MAX_BUDGET_S = 3600.0


@dataclass(frozen=True)
class ServerSettings:
    trigger: Trigger = "save"  # when kernels are optimized without being asked: on save, after idle, never
    idle_seconds: float = 2.0  # with trigger "idle": this long after the last edit
    gpu_index: int = 0
    search_budget_s: float = 120.0  # wall time of one kernel's search
    proposers: tuple[str, ...] = ()  # () = every offline proposer
    feedback: bool = True  # log shown/accepted/rejected suggestions for training


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
    unknown = [v for v in value if v not in PROPOSERS]
    if unknown:
        raise ValueError(f"unknown proposer {', '.join(map(repr, unknown))} (known: {', '.join(PROPOSERS)})")
    return tuple(dict.fromkeys(value))


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


_FIELDS: dict[str, tuple[str, Any]] = {
    "trigger": ("trigger", _trigger),
    "idleSeconds": ("idle_seconds", _seconds(600.0)),
    "gpuIndex": ("gpu_index", _gpu_index),
    "searchBudgetSeconds": ("search_budget_s", _seconds(MAX_BUDGET_S)),
    "proposers": ("proposers", _proposers),
    "feedback": ("feedback", _flag),
}
# Keys a client may send that are not settings of the server (read elsewhere, or by the extension).
_NOT_OURS = frozenset({"token", "interpreter", "server", "llm"})


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


def section_of(settings_payload: Any) -> Any:
    """Our section of a didChangeConfiguration payload ({"cudaAgent": {...}}), or None."""
    if isinstance(settings_payload, Mapping):
        return settings_payload.get(SECTION)
    return None
