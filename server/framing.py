"""LSP messages from a byte stream (stdio, a TCP connection), whatever a broken or hostile client writes.

pygls 2.1.1's reader (`pygls.io_.run_async`) trusts the stream: `Content-Length: 99999999999` made it
allocate that much (a MemoryError ended the server), and a header it could not read (`abc`, a negative
length, none at all) left it reading the following bodies as headers, so no later message was ever
understood. Here a message's size is capped, a frame that cannot be read is reported on stderr and
skipped, and reading resumes at the next `Content-Length` header, wherever in the bytes it starts.

And a request that pygls cannot turn into its method's params (a hover without a position, a code lens
with a null document) gets the JSON-RPC error reply: pygls logged it and answered nothing, and the
client waited for ever. Likewise a request after `shutdown` is answered with an error, as LSP says.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import re
import threading
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO

import cattrs
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.protocol import JsonRPCProtocol

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # far above any real message (a 60,000-line file is ~2 MiB)
MAX_HEADER_BYTES = 8192  # a header line longer than this is no header
CHUNK_BYTES = 65536
# A header that a cut line may have left behind at its end is this long at most, so it is read again.
_HEADER_TAIL_BYTES = 64

_HEADER = re.compile(rb"([A-Za-z][A-Za-z0-9-]*)[ \t]*:[ \t]*([^\r\n]*?)[ \t]*\r?\n")
_CONTENT_LENGTH = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)

ReadChunk = Callable[[int], Awaitable[bytes]]  # up to n bytes, at least one; b"" at the end of the stream


class FrameReader:
    """Message bodies from a stream of `Content-Length` frames, resynchronising after bytes that are not."""

    def __init__(self, read_chunk: ReadChunk, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._read_chunk = read_chunk
        self._buffer = bytearray()
        self._eof = False
        self.max_message_bytes = max_message_bytes
        self._skipped = 0  # bytes skipped since the last good frame, said once reading resumes

    async def next_body(self) -> bytes | None:
        """The next message's body; None at the end of the stream."""
        length: int | None = None
        problem: str | None = None
        in_headers = False
        while True:
            line = await self._line()
            if not line:
                self._report_end(in_headers)
                return None
            if not line.strip():
                if not in_headers:
                    continue  # a blank line between messages: harmless
                if problem is None and length is None:
                    problem = "no Content-Length header"
                if problem is None and length is not None and length > self.max_message_bytes:
                    problem = f"a message of {length:,} bytes is over the limit of {self.max_message_bytes:,}"
                if problem is None and length is not None:
                    body = await self._exactly(length)
                    if body is None:
                        logger.error("the stream ended inside a message of %s bytes", f"{length:,}")
                        return None
                    self._resumed()
                    return body
                # Its body (if it has one) is skipped as bytes that are not a header, up to the next one.
                logger.error("skipped a message whose header cannot be read: %s", problem)
                in_headers, length, problem = False, None, None
                continue
            header = _HEADER.fullmatch(line)
            if header is not None:
                in_headers = True
                if header.group(1).lower() == b"content-length":
                    value = header.group(2)
                    length, problem = (int(value), None) if value.isdigit() else (None, _bad_length(value))
                continue  # Content-Type and any other header: nothing to do
            # Not a header: skip it, up to a Content-Length header that may start inside it.
            if in_headers:
                logger.error("skipped a message whose headers are broken by %r", line[:40])
                in_headers, length, problem = False, None, None
            self._skip(line)

    def resume_after(self, body: bytes) -> None:
        """A body that is no JSON may have swallowed the next frame (its length said more than it held):
        read again from a Content-Length header inside it, if there is one."""
        found = _CONTENT_LENGTH.search(body)
        if found is not None:
            self._buffer[:0] = body[found.start() :]

    def _skip(self, line: bytes) -> None:
        if not self._skipped:
            logger.error("bytes that are no LSP header (%r...): skipped to a Content-Length", line[:40])
        found = _CONTENT_LENGTH.search(line, 1)
        if found is not None:
            self._buffer[:0] = line[found.start() :]
            self._skipped += found.start()
        elif not line.endswith(b"\n") and len(line) > _HEADER_TAIL_BYTES:
            # Cut at MAX_HEADER_BYTES: a header may start in its last bytes and end in the next ones.
            self._buffer[:0] = line[-_HEADER_TAIL_BYTES:]
            self._skipped += len(line) - _HEADER_TAIL_BYTES
        else:
            self._skipped += len(line)

    def _resumed(self) -> None:
        if self._skipped:
            logger.warning("reading resumed at a message header after %s bytes skipped", f"{self._skipped:,}")
            self._skipped = 0

    def _report_end(self, in_headers: bool) -> None:
        if in_headers or self._skipped:
            logger.error("the stream ended inside a message header (%s bytes skipped)", f"{self._skipped:,}")

    async def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = await self._read_chunk(CHUNK_BYTES)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    async def _line(self) -> bytes:
        """Up to and with the next newline, at most MAX_HEADER_BYTES (a longer run comes cut); what is left
        at the end of the stream; b"" after it."""
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched, MAX_HEADER_BYTES)
            if end != -1 or len(self._buffer) >= MAX_HEADER_BYTES:
                size = end + 1 if end != -1 else MAX_HEADER_BYTES
                line = bytes(self._buffer[:size])
                del self._buffer[:size]
                return line
            searched = len(self._buffer)
            if not await self._fill():
                line = bytes(self._buffer)
                self._buffer.clear()
                return line

    async def _exactly(self, size: int) -> bytes | None:
        while len(self._buffer) < size:
            if not await self._fill():
                return None
        body = bytes(self._buffer[:size])
        del self._buffer[:size]
        return body


def _bad_length(value: bytes) -> str:
    return f"Content-Length {value[:40].decode('ascii', 'replace')!r} is not a size in bytes"


def stream_chunks(reader: asyncio.StreamReader) -> ReadChunk:
    """A TCP connection's bytes, as FrameReader reads them."""
    return reader.read


class StdinChunks:
    """stdin's bytes, read on a daemon thread of its own: not in the server's thread pool, whose shutdown
    (and the interpreter's exit) would wait for a read that returns only when the client writes again."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._wanted: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[bytes], int]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._serve, name="cuda-agent-stdin", daemon=True).start()

    async def __call__(self, size: int) -> bytes:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        self._wanted.put((loop, future, size))
        return await future

    def _serve(self) -> None:
        while True:
            loop, future, size = self._wanted.get()
            try:
                read1 = getattr(self._stream, "read1", None)
                data = read1(size) if read1 is not None else self._stream.read(size)
            except (OSError, ValueError):
                data = b""
            try:
                loop.call_soon_threadsafe(_resolve, future, data)
            except RuntimeError:  # the loop is closed: the server is leaving
                return
            if not data:
                return


def _resolve(future: asyncio.Future[bytes], data: bytes) -> None:
    if not future.done():
        future.set_result(data)


async def serve_messages(
    reader: FrameReader,
    protocol: JsonRPCProtocol,
    error_handler: Callable[[Exception, type[JsonRpcException]], Any] | None = None,
) -> None:
    """Hand each message to the protocol until the stream ends (pygls's message loop, with the frames
    read by `reader` and the requests it cannot structure answered)."""
    while (body := await reader.next_body()) is not None:
        handle_body(protocol, body, reader, error_handler)


def handle_body(
    protocol: JsonRPCProtocol,
    body: bytes,
    reader: FrameReader | None = None,
    error_handler: Callable[[Exception, type[JsonRpcException]], Any] | None = None,
) -> None:
    """One message's body, as pygls would take it, except that nothing a client sends goes unanswered
    when it has an id to answer to. `reader`: the stream it came from, for a body that is no JSON."""
    try:
        message = json.loads(body, object_hook=protocol.structure_message)
    except Exception as error:
        _answer_unreadable(protocol, body, error)
        if reader is not None:
            reader.resume_after(body)
        return
    if not hasattr(message, "jsonrpc"):  # a dict without "jsonrpc", a list (a batch), a number...
        logger.error("skipped a message that is no JSON-RPC 2.0 message: %r", body[:60])
        _answer(protocol, message, JsonRpcInvalidRequest("not a JSON-RPC 2.0 message"))
        return
    method = getattr(message, "method", None)
    if _is_request(message) and getattr(protocol, "_shutdown", False) and method != "exit":
        # pygls drops these silently; LSP says they are answered with an error.
        _answer(protocol, message, JsonRpcInvalidRequest("the server is shutting down (shutdown came)"))
        return
    try:
        protocol.handle_message(message)
    except Exception as error:  # what pygls's own loop does with a handler's failure
        logger.exception("unable to handle message")
        if error_handler is not None:
            error_handler(error, JsonRpcException)


def _answer_unreadable(protocol: JsonRPCProtocol, body: bytes, error: Exception) -> None:
    """A body that is no JSON (logged: nothing to answer), or whose params do not fit its method
    (answered InvalidParams, where it is a request)."""
    try:
        raw = json.loads(body)
    except ValueError as not_json:  # nor UTF-8: no id to answer to
        logger.error("skipped a message that is not JSON: %s (%r...)", not_json, body[:60])
        return
    method = raw.get("method") if isinstance(raw, dict) else None
    reason = _why(error)
    logger.error("cannot read the %s message%s: %s", method or "unnamed", _id_text(raw), reason)
    if isinstance(method, str):
        _answer(protocol, raw, JsonRpcInvalidParams(f"invalid params for {method}: {reason}"))
    else:
        _answer(protocol, raw, JsonRpcInvalidRequest(f"not a request: {reason}"))


def _why(error: Exception) -> str:
    cause = error.__cause__
    if isinstance(cause, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(cause))
    return str(cause or error) or type(error).__name__


def _id_text(raw: object) -> str:
    return f" (id {raw['id']!r})" if isinstance(raw, dict) and "id" in raw else ""


def _is_request(message: object) -> bool:
    return hasattr(message, "id") and hasattr(message, "method")


def _answer(protocol: JsonRPCProtocol, message: object, error: JsonRpcException) -> None:
    """Send `error` to the request `message` (a structured message or the raw dict), where it has an id.
    An id that is no string or number is answered with id null, as JSON-RPC says for an id it cannot read."""
    if isinstance(message, dict):
        if "id" not in message:
            return  # a notification: nothing to answer
        message_id = message["id"]
    elif hasattr(message, "id"):
        message_id = message.id
    else:
        logger.error("%s (not answered: the message has no id)", error.message)
        return
    if not isinstance(message_id, (int, str)) or isinstance(message_id, bool):
        message_id = None
    protocol._send_response(message_id, None, error.to_response_error())  # type: ignore[arg-type]
