"""The model behind the loop: Claude through the `anthropic` SDK, or a self-hosted model behind an
OpenAI-compatible chat API (e.g. vLLM serving a kernel model trained on our exported feedback).

Both take the provider-neutral conversation (agent/llm/transcript.py) and give back a `Reply`. The SDKs
retry rate limits (429, honouring retry-after), overload (529), server errors and timeouts themselves;
what still fails comes out as `ProviderError`, and a reply that cannot be read as `MalformedReply`, for
the loop to retry or to stop on with the reason. Neither message ever holds the API key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from cuda_agent.agent.llm.settings import LlmSettings, api_key
from cuda_agent.agent.llm.transcript import ToolCall, Turn, Usage

EPHEMERAL = {"type": "ephemeral"}
# The SDKs sleep as long as a 429 or 529 asks (a spent quota may ask for hours): a longer wait is reported
# instead, and the loop ends with the reason while the offline results stand.
MAX_RETRY_AFTER_S = 60.0


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    schema: dict[str, Any]  # JSON schema of the input object


@dataclass(frozen=True)
class Reply:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop: str  # "tool_use", "end_turn", "max_tokens", or what the API said
    usage: Usage
    # The model's thinking blocks (Messages API `thinking` / `redacted_thinking`), verbatim with their
    # signatures: a reply that called tools must carry them back, or the API refuses the next request.
    reasoning: tuple[dict[str, Any], ...] = ()


class ProviderError(Exception):
    """The API could not be used (after the SDK's retries): rate limit, overload, auth, network, timeout."""


class MalformedReply(Exception):
    """A reply arrived but is not a message we can read."""


class ChatProvider(Protocol):
    name: str
    model: str

    def reply(self, system: str, turns: Sequence[Turn], tools: Sequence[ToolSpec]) -> Reply: ...


def make_provider(settings: LlmSettings) -> ChatProvider:
    if settings.provider == "openai-compatible":
        return OpenAICompatibleProvider(settings)
    return AnthropicProvider(settings)


@contextmanager
def _api_errors(sdk: Any, api: str) -> Iterator[None]:
    """Either SDK's exceptions (they share the names) as ours, after its own retries."""
    try:
        yield
    except sdk.APIResponseValidationError as exc:
        raise MalformedReply(f"the reply does not follow {api}: {exc.message}") from exc
    except ValueError as exc:  # a body that is not JSON at all
        raise MalformedReply(f"the reply is not JSON: {exc}") from exc
    except sdk.APIStatusError as exc:
        raise ProviderError(_status_message(exc.status_code, exc.body, exc.message, exc.response)) from exc
    except sdk.APITimeoutError as exc:
        raise ProviderError("the API did not answer in time (after retries)") from exc
    except sdk.APIConnectionError as exc:
        raise ProviderError(f"could not reach the API: {exc.message}") from exc


# -- Anthropic -----------------------------------------------------------------------------------------


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, settings: LlmSettings) -> None:
        import anthropic as sdk

        self._sdk = sdk
        self.model = settings.model_name
        self._max_tokens = settings.max_output_tokens
        self._client = sdk.Anthropic(
            api_key=api_key(settings)[0],
            base_url=settings.base_url,
            max_retries=settings.max_retries,
            timeout=settings.request_timeout_s,
            http_client=sdk.DefaultHttpxClient(event_hooks={"response": [_no_long_waits]}),
        )

    def reply(self, system: str, turns: Sequence[Turn], tools: Sequence[ToolSpec]) -> Reply:
        with _api_errors(self._sdk, "the Messages API"):
            message = self._client.messages.create(
                model=self.model,
                max_tokens=self._max_tokens,
                # The fixed part (instructions, kernel, spec, GPU, measurements) is cached with the tools
                # before it; the conversation's last block is a second breakpoint, so each turn re-reads
                # the previous turns from the cache too.
                system=[{"type": "text", "text": system, "cache_control": EPHEMERAL}],
                tools=[
                    {"name": t.name, "description": t.description, "input_schema": t.schema} for t in tools
                ],
                messages=anthropic_messages(turns),
            )
        return _anthropic_reply(message)


def anthropic_messages(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """The conversation in the Messages API's shape: tool results go back in a user message, and
    consecutive user parts are merged (the API wants user and assistant turns alternating)."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "assistant":
            # Thinking first, as the model wrote it (a reply's thinking precedes its text and tool calls).
            blocks: list[dict[str, Any]] = [dict(block) for block in turn.reasoning]
            blocks += [{"type": "text", "text": turn.text}] if turn.text else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input or {}}
                for c in turn.tool_calls
            ]
            messages.append(
                {"role": "assistant", "content": blocks or [{"type": "text", "text": "(no reply)"}]}
            )
            continue
        if turn.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": turn.tool_call_id,
                "content": turn.text or "(empty)",
                "is_error": turn.is_error,
            }
        else:
            block = {"type": "text", "text": turn.text or "(empty)"}
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": "user", "content": [block]})
    if messages:
        last = messages[-1]["content"][-1]
        messages[-1]["content"][-1] = {**last, "cache_control": EPHEMERAL}
    return messages


def _anthropic_reply(message: Any) -> Reply:
    _require_object(message)
    try:
        content = message.content
        if not isinstance(content, list):
            raise MalformedReply(f"the reply has no content list (got {type(content).__name__})")
        texts, calls, reasoning = [], [], []
        for block in content:
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(str(block.text))
            elif kind == "thinking":
                thinking = {"thinking": str(block.thinking), "signature": str(block.signature)}
                reasoning.append({"type": kind, **thinking})
            elif kind == "redacted_thinking":
                reasoning.append({"type": kind, "data": str(block.data)})
            elif kind == "tool_use":
                arguments = block.input
                problem = "" if isinstance(arguments, dict) else "the tool input is not a JSON object"
                calls.append(
                    ToolCall(str(block.id), str(block.name), arguments if not problem else None, problem)
                )
        usage = message.usage
        read = Usage(
            input_tokens=int(usage.input_tokens or 0),
            output_tokens=int(usage.output_tokens or 0),
            cache_write_tokens=int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
            cache_read_tokens=int(getattr(usage, "cache_read_input_tokens", 0) or 0),
        )
        stop = str(message.stop_reason or "")
        return Reply("\n".join(texts).strip(), tuple(calls), stop, read, tuple(reasoning))
    except MalformedReply:
        raise
    except (AttributeError, TypeError, ValueError) as exc:
        raise MalformedReply(f"the reply could not be read: {type(exc).__name__}: {exc}") from exc


# -- OpenAI-compatible ---------------------------------------------------------------------------------


class OpenAICompatibleProvider:
    name = "openai-compatible"

    def __init__(self, settings: LlmSettings) -> None:
        import openai as sdk

        self._sdk = sdk
        self.model = settings.model_name
        self._max_tokens = settings.max_output_tokens
        self._client = sdk.OpenAI(
            # A local vLLM started without --api-key accepts any key; the SDK insists on one.
            api_key=api_key(settings)[0] or "none",
            base_url=settings.base_url,
            max_retries=settings.max_retries,
            timeout=settings.request_timeout_s,
            http_client=sdk.DefaultHttpxClient(event_hooks={"response": [_no_long_waits]}),
        )

    def reply(self, system: str, turns: Sequence[Turn], tools: Sequence[ToolSpec]) -> Reply:
        with _api_errors(self._sdk, "the chat completions API"):
            completion = self._client.chat.completions.create(
                model=self.model,
                max_tokens=self._max_tokens,
                messages=[{"role": "system", "content": system}, *openai_messages(turns)],
                tools=[
                    {
                        "type": "function",
                        "function": {"name": t.name, "description": t.description, "parameters": t.schema},
                    }
                    for t in tools
                ],
            )
        return _openai_reply(completion)


def openai_messages(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if turn.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.input or {})},
                    }
                    for c in turn.tool_calls
                ]
            messages.append(message)
        elif turn.role == "tool":
            messages.append({"role": "tool", "tool_call_id": turn.tool_call_id, "content": turn.text})
        else:
            messages.append({"role": "user", "content": turn.text})
    return messages


_FINISH = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}


def _openai_reply(completion: Any) -> Reply:
    _require_object(completion)
    try:
        choices = completion.choices
        if not choices:
            raise MalformedReply("the reply has no choices")
        choice = choices[0]
        message = choice.message
        calls = []
        for call in message.tool_calls or []:
            problem, arguments = "", None
            try:
                arguments = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError as exc:
                problem = f"the tool arguments are not valid JSON ({exc.msg} at character {exc.pos})"
            if arguments is not None and not isinstance(arguments, dict):
                problem, arguments = "the tool arguments are not a JSON object", None
            calls.append(ToolCall(str(call.id), str(call.function.name), arguments, problem))
        usage = completion.usage
        cached = 0
        if usage is not None and getattr(usage, "prompt_tokens_details", None) is not None:
            cached = int(usage.prompt_tokens_details.cached_tokens or 0)
        read = Usage(
            input_tokens=int(usage.prompt_tokens or 0) - cached if usage else 0,
            output_tokens=int(usage.completion_tokens or 0) if usage else 0,
            cache_read_tokens=cached,
        )
        stop = _FINISH.get(str(choice.finish_reason), str(choice.finish_reason or ""))
        return Reply(str(message.content or "").strip(), tuple(calls), stop, read)
    except MalformedReply:
        raise
    except (AttributeError, TypeError, ValueError) as exc:
        raise MalformedReply(f"the reply could not be read: {type(exc).__name__}: {exc}") from exc


def _require_object(reply: Any) -> None:
    """A body that is not a JSON object (an HTML error page from a proxy, a bare list) is no reply."""
    if isinstance(reply, str | bytes | list | int | float) or reply is None:
        shown = reply[:80] if isinstance(reply, str | bytes | list) else reply
        raise MalformedReply(f"the reply is not a JSON object: {shown!r}")


def retry_after_s(headers: Any) -> float | None:
    """The wait a response asks for, in seconds (retry-after-ms, else retry-after in seconds)."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            return float(headers.get(name)) * scale
        except (TypeError, ValueError):
            continue
    return None


def _no_long_waits(response: Any) -> None:
    """An HTTP response hook: a retry-after beyond MAX_RETRY_AFTER_S tells the SDK not to retry."""
    wait = retry_after_s(response.headers)
    if wait is not None and wait > MAX_RETRY_AFTER_S:
        response.headers["x-should-retry"] = "false"


def _status_message(status: int, body: object, fallback: str, response: Any = None) -> str:
    """ "429 rate_limit_error: ..." from the API's error body where it has one."""
    # Anthropic's body is {"type": "error", "error": {...}}; the OpenAI SDK hands over the inner object.
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        kind, message = error.get("type") or error.get("code") or "error", str(error["message"])
    else:
        kind, message = "error", fallback
    hint = {401: " (the API key was refused)", 403: " (the API key may not use this model)"}.get(status, "")
    wait = retry_after_s(response.headers) if response is not None else None
    if wait is not None and wait > MAX_RETRY_AFTER_S:
        hint += f" (it asks to wait {wait:g} s: longer than the loop waits)"
    return f"{status} {kind}: {message}{hint}"
