"""The stdio server under a client that writes what it likes: the real `cuda-agent serve` process over real
pipes, fed raw bytes. Whatever came before, the next valid request is answered; a request whose params
do not fit its method is answered with an error; `exit` leaves within a second, compile running or not,
with the exit code LSP asks for."""

from __future__ import annotations

import json
import queue
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.server_support import SERVE, SERVER_ENV

INVALID_PARAMS, INVALID_REQUEST = -32602, -32600
EXIT_WITHIN_S = 1.0


class RawClient:
    """A server process spoken to in bytes: frames written as given, messages read as they come."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=SERVER_ENV
        )
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self._next_id = 1000

    def _read_stdout(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            length = None
            while (line := stream.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line or length is None:
                self.messages.put(None)
                return
            self.messages.put(json.loads(stream.read(length)))

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        self.stderr += (line.decode(errors="replace") for line in self.process.stderr)

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    def request(self, method: str, params: Any = None, with_params: bool = True) -> int:
        self._next_id += 1
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if with_params:
            message["params"] = params
        self.send(message)
        return self._next_id

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def answer(self, message_id: int, timeout_s: float = 20.0) -> dict[str, Any]:
        """The response to `message_id` (server-to-client requests and notifications are passed over)."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                break
            assert message is not None, "the server closed stdout:\n" + "".join(self.stderr[-20:])
            if message.get("id") == message_id and "method" not in message:
                return message
        raise AssertionError(f"no answer to request {message_id}:\n" + "".join(self.stderr[-20:]))

    def wait_for(self, method: str, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            message = self.messages.get(timeout=left)
            if message is not None and message.get("method") == method:
                return message
        raise AssertionError(f"no {method} within {timeout_s} s")

    def initialize(self) -> None:
        self.answer(self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}}), 60)
        self.notify("initialized", {})

    def hover_is_answered(self) -> None:
        """A valid request after whatever came before gets its answer."""
        uri = "file:///nowhere/k.cu"
        position = {"line": 0, "character": 0}
        message_id = self.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": position})
        assert "result" in self.answer(message_id)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def server() -> Any:
    client = RawClient()
    client.initialize()
    yield client
    client.close()


BAD_FRAMES = {
    "a length of 99999999999": b"Content-Length: 99999999999\r\n\r\n{}",
    "a length over the cap": b"Content-Length: %d\r\n\r\n{}" % (64 * 1024 * 1024 + 1),
    "a length that is no number": b'Content-Length: abc\r\n\r\n{"jsonrpc": "2.0", "method": "x"}',
    "a negative length": b'Content-Length: -5\r\n\r\n{"jsonrpc": "2.0", "method": "x"}',
    "no Content-Length header": b'Content-Type: x\r\n\r\n{"jsonrpc": "2.0", "id": 1, "method": "shutdown"}',
    "no header at all": b'{"jsonrpc": "2.0", "id": 2, "method": "shutdown"}',
    "binary bytes": bytes(range(256)) * 64,
    "a length too short": b'Content-Length: 10\r\n\r\n{"jsonrpc": "2.0", "id": 3, "method": "shutdown"}',
    "a length too long": b'Content-Length: 90\r\n\r\n{"jsonrpc": "2.0", "method": "x"}',
    "a body that is no JSON": b"Content-Length: 5\r\n\r\n{{{{{",
    "a header line of a megabyte": b"X" * (1 << 20) + b"\r\n\r\n",
}


@pytest.mark.parametrize("frame", sorted(BAD_FRAMES))
def test_after_a_bad_frame_the_next_request_is_answered(server: RawClient, frame: str) -> None:
    server.write(BAD_FRAMES[frame])
    server.hover_is_answered()
    server.hover_is_answered()
    assert server.process.poll() is None


def test_after_random_bytes_and_headers_every_next_request_is_answered(server: RawClient) -> None:
    """Fuzzing: what a broken client may write (noise, headers with unreadable or oversized lengths, bodies
    that are no JSON), each time followed by a valid request."""
    rng = random.Random(15)
    headers = [b"Content-Length: %s\r\n" % v for v in (b"abc", b"-1", b"1e3", b"", b"99999999999999")]
    headers += [b"Content-Type: application/json\r\n", b"X-Junk: \x00\xff\r\n", b"\r\n"]
    for _ in range(30):
        parts = []
        for _ in range(rng.randint(1, 6)):
            kind = rng.random()
            if kind < 0.4:
                noise = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000)))
                parts.append(noise.replace(b"ength", b"ENGTX"))  # no valid Content-Length by chance
            elif kind < 0.8:
                parts.append(rng.choice(headers))
            else:
                junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 50))).replace(b"ength", b"")
                parts.append(b"Content-Length: %d\r\n\r\n%s" % (len(junk), junk))
        server.write(b"".join(parts) + b"\r\n")
        server.hover_is_answered()
    assert server.process.poll() is None


MALFORMED = [
    ("textDocument/hover", None, False),
    ("textDocument/hover", {}, True),
    ("textDocument/hover", [1, 2], True),
    ("textDocument/hover", {"textDocument": {"uri": "file:///k.cu"}}, True),
    ("textDocument/hover", {"textDocument": {"uri": "file:///k.cu"}, "position": None}, True),
    ("textDocument/hover", {"textDocument": {"uri": "file:///k.cu"}, "position": {"line": "a"}}, True),
    (
        "textDocument/hover",
        {"textDocument": {"uri": "file:///k.cu"}, "position": {"line": -1, "character": 0}},
        True,
    ),
    ("textDocument/codeLens", None, False),
    ("textDocument/codeLens", {"textDocument": None}, True),
    ("textDocument/codeAction", {"textDocument": {"uri": "file:///k.cu"}}, True),
    ("codeAction/resolve", {}, True),
    ("workspace/executeCommand", {}, True),
    ("initialize", {}, True),
]


def test_every_request_with_invalid_params_gets_an_error_reply(server: RawClient) -> None:
    for method, params, with_params in MALFORMED:
        answer = server.answer(server.request(method, params, with_params))
        assert answer.get("error", {}).get("code") == INVALID_PARAMS, (method, params, answer)
        assert method in answer["error"]["message"]
    server.hover_is_answered()
    # After shutdown a request is answered with an error, not dropped.
    assert "result" in server.answer(server.request("shutdown"))
    hover = {"textDocument": {"uri": "file:///k.cu"}, "position": {"line": 0, "character": 0}}
    after = server.answer(server.request("textDocument/hover", hover))
    assert after.get("error", {}).get("code") == INVALID_REQUEST


def _exit(server: RawClient) -> tuple[int, float]:
    start = time.monotonic()
    server.notify("exit")
    code = server.process.wait(timeout=30)
    return code, time.monotonic() - start


def test_exit_without_shutdown_leaves_at_once_with_code_1(server: RawClient) -> None:
    code, seconds = _exit(server)
    assert code == 1 and seconds < EXIT_WITHIN_S, (code, seconds)


def test_exit_after_shutdown_leaves_at_once_with_code_0(server: RawClient) -> None:
    assert "result" in server.answer(server.request("shutdown"))
    code, seconds = _exit(server)
    assert code == 0 and seconds < EXIT_WITHIN_S, (code, seconds)


def test_closing_stdin_without_exit_leaves_with_code_1(server: RawClient) -> None:
    assert server.process.stdin is not None
    server.process.stdin.close()
    assert server.process.wait(timeout=10) == 1


@pytest.mark.parametrize("shutdown_first", [False, True])
def test_exit_during_a_compile_leaves_within_a_second(tmp_path: Path, shutdown_first: bool) -> None:
    """A save of a file that takes NVRTC tens of seconds to compile (5,000 nested loops: ~50 s here),
    then exit: the process leaves at once, without waiting for the compile."""
    loops = "for (int k = 0; k < 1; ++k) " * 5000
    text = (
        "__global__ void nest(const float* x, float* y, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    if (i < n) {{ {loops} y[i] = x[i]; }}\n}}\n"
    )
    path = tmp_path / "nest.cu"
    path.write_text(text)
    uri = path.as_uri()
    client = RawClient()
    try:
        client.initialize()
        document = {"uri": uri, "languageId": "cuda", "version": 1, "text": text}
        client.notify("textDocument/didOpen", {"textDocument": document})
        client.wait_for("textDocument/publishDiagnostics")
        client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
        # A round trip: the save was taken (its cheap diagnostics are the open's, not published again).
        client.answer(client.request("textDocument/codeLens", {"textDocument": {"uri": uri}}))
        time.sleep(2.0)
        waiting = list(client.messages.queue)  # nothing taken off yet: the compile's diagnostics
        assert not any(m and m.get("method") == "textDocument/publishDiagnostics" for m in waiting), (
            "the compile finished already: this test needs a slower one"
        )
        if shutdown_first:
            assert "result" in client.answer(client.request("shutdown"))
        code, seconds = _exit(client)
        assert code == (0 if shutdown_first else 1)
        assert seconds < EXIT_WITHIN_S, f"exit took {seconds:.2f} s"
    finally:
        client.close()
