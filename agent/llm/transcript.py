"""The conversation of an LLM session, provider-neutral: what the model was told, what it replied, what the
tools returned. Kept with the session's candidates, logged with a shown suggestion (the exported dataset
trains on whole trajectories), and rendered as Markdown for the editor's "show transcript"."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class Usage:
    """Tokens of one reply, or of a session when added up. `input_tokens` excludes the cached parts."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any] | None  # None: the arguments could not be read (see `problem`)
    problem: str = ""


@dataclass(frozen=True)
class Turn:
    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()  # assistant turns
    tool_call_id: str = ""  # tool turns: the call answered
    tool_name: str = ""
    is_error: bool = False  # a tool turn that refused or could not run the call
    usage: Usage | None = None  # assistant turns
    seconds: float = 0.0  # the model's time (assistant) or the engine's (tool)
    # Assistant turns: the model's thinking blocks, sent back verbatim (see providers.Reply.reasoning).
    reasoning: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tool_calls"] = [asdict(call) for call in self.tool_calls]
        data["reasoning"] = [dict(block) for block in self.reasoning]  # as JSON reads it back
        return data


def transcript_json(system: str, turns: list[Turn] | tuple[Turn, ...]) -> tuple[dict[str, Any], ...]:
    """The whole conversation as plain JSON-able records, the fixed prompt first."""
    return (Turn("system", system).to_json(), *(turn.to_json() for turn in turns))


def render_markdown(records: tuple[dict[str, Any], ...] | list[dict[str, Any]], title: str = "") -> str:
    """A transcript (as `transcript_json` writes it) for a person to read."""
    lines = [f"# {title}", ""] if title else []
    for record in records:
        role = record.get("role", "?")
        if role == "system":
            lines += ["## Prompt", "", str(record.get("text", "")), ""]
        elif role == "user":
            lines += ["## User", "", str(record.get("text", "")), ""]
        elif role == "assistant":
            seconds = record.get("seconds") or 0.0
            lines += [f"## Model ({seconds:.1f} s)", ""]
            if record.get("text"):
                lines += [str(record["text"]), ""]
            for call in record.get("tool_calls") or []:
                arguments = call.get("input")
                shown = json.dumps(arguments, indent=2) if arguments is not None else call.get("problem", "")
                source = (arguments or {}).get("kernel_source") if isinstance(arguments, dict) else None
                if isinstance(source, str):
                    rest = {k: v for k, v in arguments.items() if k != "kernel_source"}
                    shown = json.dumps(rest) + "\n```\n\n```cuda\n" + source
                lines += [f"**{call.get('name', '?')}**", "", "```", shown, "```", ""]
        elif role == "tool":
            status = " (refused or failed)" if record.get("is_error") else ""
            lines += [f"### {record.get('tool_name', 'tool')} result{status}", "", "```"]
            lines += [str(record.get("text", "")), "```", ""]
    return "\n".join(lines).rstrip() + "\n"
