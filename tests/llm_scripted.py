"""A local HTTP server that speaks the Anthropic Messages API or the OpenAI chat completions API and
answers from a script, so the real SDKs (and the real loop) run with no network and no real model.

Shared by the LLM tests, the GPU test and bench/llm_loop_bench.py. No tests here.

    with ScriptedApi([reply(compile_and_test(code, block=[256])), reply(text("done"))]) as api:
        settings = LlmSettings(base_url=api.base_url, api_key="test-key")

Steps: `Reply` (an assistant message), `HttpError` (status with an API error body and headers, e.g. 429
with retry-after), `Raw` (any body: a malformed reply), `Slow` (answer late: a timeout). A step may also be
a function of the request body returning one of those. When the script runs out, the model ends its turn.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

Wire = Literal["anthropic", "openai"]
SESSION_RECORDING = Path(__file__).parent / "recordings" / "llm_saxpy_session.json"
_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    blocks: tuple[dict[str, Any], ...]
    stop: str = "tool_use"
    usage: dict[str, int] | None = None


@dataclass(frozen=True)
class HttpError:
    status: int
    kind: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Raw:
    body: bytes
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class Slow:
    seconds: float
    then: Reply


Step = Reply | HttpError | Raw | Slow | Callable[[dict[str, Any]], "Reply | HttpError | Raw | Slow"]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def thinking(value: str) -> dict[str, Any]:
    """A thinking block, as current models send one by default (adaptive thinking), with its signature."""
    return {"type": "thinking", "thinking": value, "signature": f"sig-{next(_ids):04d}"}


def redacted_thinking() -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": f"opaque-{next(_ids):04d}"}


def tool_use(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name, "input": arguments}


def compile_and_test(kernel_source: str, **launch: Any) -> dict[str, Any]:
    return tool_use("compile_and_test", kernel_source=kernel_source, **launch)


def reply(*blocks: dict[str, Any], stop: str | None = None) -> Reply:
    uses_tools = any(b["type"] == "tool_use" for b in blocks)
    return Reply(tuple(blocks), stop or ("tool_use" if uses_tools else "end_turn"))


def launch_session(kernel_source: str, blocks: Sequence[Sequence[int]]) -> list[Step]:
    """Replies that work for any kernel whose grid is written in terms of the block: its own code at each
    block shape in turn, then the end. For measuring the loop on a kernel without hand-written replies."""
    steps: list[Step] = [
        reply(compile_and_test(kernel_source, block=list(block), description=f"block {list(block)}"))
        for block in blocks
    ]
    return [*steps, reply(text("The best block is measured above."))]


def recorded_session(path: Path = SESSION_RECORDING) -> list[Step]:
    """Recorded model replies (Messages API content blocks), as a script."""
    data = json.loads(path.read_text())
    return [Reply(tuple(r["content"]), r["stop_reason"], r.get("usage")) for r in data["replies"]]


class ScriptedApi:
    def __init__(self, steps: Sequence[Step], wire: Wire = "anthropic") -> None:
        self.steps = list(steps)
        self.wire = wire
        self.requests: list[dict[str, Any]] = []  # JSON bodies, in order
        self.headers: list[dict[str, str]] = []
        self.answered_at: list[float] = []  # monotonic time of each answer
        self.sent: list[Reply] = []  # the replies given, in order
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}" + ("/v1" if self.wire == "openai" else "")

    def __enter__(self) -> ScriptedApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def tool_results(self, request: int = -1) -> list[str]:
        """The tool results the model was sent in a request (the last one by default), as text."""
        body = self.requests[request]
        if self.wire == "openai":
            return [m["content"] for m in body["messages"] if m["role"] == "tool"]
        found = []
        for message in body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    found.append(content if isinstance(content, str) else "".join(c["text"] for c in content))
        return found

    # -- serving -----------------------------------------------------------------------------------------

    def _next(self, body: dict[str, Any]) -> Reply | HttpError | Raw | Slow:
        with self._lock:
            self.requests.append(body)
            refused = _dropped_thinking(body, self.sent) if self.wire == "anthropic" else None
            if refused is not None:
                return refused
            step = self.steps.pop(0) if self.steps else reply(text("(the script has ended)"))
        step = step(body) if callable(step) else step
        if isinstance(step, Reply):
            with self._lock:
                self.sent.append(step)
        return step

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests read the recorded requests instead."""

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with api._lock:
                    api.headers.append({k.lower(): v for k, v in self.headers.items()})
                step = api._next(body)
                if isinstance(step, Slow):
                    time.sleep(step.seconds)
                    step = step.then
                # The client may have given up waiting (a timeout test).
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(step, body)
                api.answered_at.append(time.monotonic())

            def _send(self, step: Reply | HttpError | Raw, body: dict[str, Any]) -> None:
                headers: dict[str, str] = {}
                if isinstance(step, Raw):
                    status, payload, content_type = step.status, step.body, step.content_type
                elif isinstance(step, HttpError):
                    status, content_type, headers = step.status, "application/json", step.headers
                    error = {"type": step.kind, "message": step.message}
                    payload = json.dumps(
                        {"type": "error", "error": error} if api.wire == "anthropic" else {"error": error}
                    ).encode()
                else:
                    status, content_type = 200, "application/json"
                    payload = json.dumps(
                        _anthropic(step, body) if api.wire == "anthropic" else _openai(step, body)
                    )
                    payload = payload.encode()
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

        return Handler


def _dropped_thinking(body: dict[str, Any], sent: list[Reply]) -> HttpError | None:
    """The Messages API's refusal of a conversation whose last assistant turn (a tool call) lost the
    thinking blocks the model sent with it: they must come back first, unchanged, signature included."""
    messages = body.get("messages", [])
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last is None or not sent:
        return None
    reasoning = [b for b in sent[-1].blocks if b["type"] in ("thinking", "redacted_thinking")]
    content = messages[last]["content"]
    if reasoning and (not isinstance(content, list) or content[: len(reasoning)] != reasoning):
        first = content[0].get("type") if isinstance(content, list) and content else "text"
        return HttpError(
            400,
            "invalid_request_error",
            f"messages.{last}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{first}`. A final `assistant` message must start with the thinking blocks sent with its "
            "tool calls, unchanged.",
        )
    return None


def _usage(step: Reply, body: dict[str, Any], first: bool) -> dict[str, int]:
    if step.usage is not None:
        return step.usage
    size = len(json.dumps(body)) // 4  # about four characters a token
    return {
        "input_tokens": 50,
        "output_tokens": 400,
        "cache_creation_input_tokens": size if first else 0,
        "cache_read_input_tokens": 0 if first else size,
    }


def _anthropic(step: Reply, body: dict[str, Any]) -> dict[str, Any]:
    first = len(body.get("messages", [])) <= 1
    return {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": list(step.blocks),
        "stop_reason": step.stop,
        "stop_sequence": None,
        "usage": _usage(step, body, first),
    }


def _openai(step: Reply, body: dict[str, Any]) -> dict[str, Any]:
    content = "".join(b["text"] for b in step.blocks if b["type"] == "text") or None
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
        }
        for b in step.blocks
        if b["type"] == "tool_use"
    ]
    finish = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}.get(step.stop, step.stop)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": len(json.dumps(body)) // 4, "completion_tokens": 400, "total_tokens": 0},
    }
