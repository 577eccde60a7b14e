"""How clients reach the server: stdio (an editor starts it), or TCP or WebSocket (a headless server on
a GPU box; WebSocket for clients that cannot open raw sockets, such as browser-based editors).

pygls's own `start_tcp` / `start_ws` serve one connection and then shut the process down. Here each
connection gets a fresh session (its own LanguageServer: documents, capabilities, token check) over
pygls's protocol and message loop, while the Backend (engine, GPU worker) is shared, so clients can come
and go and the next one finds the worker warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from cuda_agent.server.access import TOKEN_ENV, is_loopback
from cuda_agent.server.app import CudaAgentServer, create_server
from cuda_agent.server.backend import Backend
from cuda_agent.server.framing import (
    MAX_MESSAGE_BYTES,
    FrameReader,
    StdinChunks,
    handle_body,
    serve_messages,
    stream_chunks,
)
from pygls.io_ import StdoutWriter, WebSocketWriter

logger = logging.getLogger(__name__)

LEAVE_FLUSH_S = 0.5  # on exit, how long the feedback log may take to write what it was handed


class InsecureBind(Exception):
    """Listening beyond loopback without a token would let anyone on the network run code on the GPU."""


def tune_for_latency() -> None:
    """Each request allocates thousands of short-lived protocol objects (a big file's lenses), and at
    Python's default thresholds that set off full collections over every kernel map held: 30-50 ms
    pauses in 1% of requests. Reference counting frees those objects anyway; cycles wait longer.

    The search runs Python on worker threads; at the default 5 ms switch interval a request waits up
    to 5 ms for the GIL at each step of its round trip (read, handle, write)."""
    gc.set_threshold(20_000, 50, 1000)
    sys.setswitchinterval(0.001)


def serve_stdio(backend: Backend, token: str | None = None) -> NoReturn:
    """Serve the editor on stdin/stdout until it says `exit` (or closes stdin), then leave at once: exit
    code 0 after `shutdown`, else 1, as LSP says. Leaving waits for no work in progress: a compile of a
    huge file or a GPU job can take minutes (an exit once waited 256 s), so the GPU worker and running
    compilers are killed and the process ends without joining its threads."""
    tune_for_latency()
    server = create_server(backend, token=token)
    code = 1
    loop = asyncio.new_event_loop()
    try:
        code = loop.run_until_complete(_stdio_session(server))
    except KeyboardInterrupt:
        code = 130
    except Exception:
        logger.exception("the stdio session failed")
    finally:
        _leave(server, backend, code)


async def _stdio_session(server: CudaAgentServer) -> int:
    """Read messages until `exit` (its exit code) or the end of stdin."""
    exit_code: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server.exit_requested = exit_code
    server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
    reader = FrameReader(StdinChunks(sys.stdin.buffer))
    reading = asyncio.ensure_future(serve_messages(reader, server.protocol, server.report_server_error))
    await asyncio.wait({reading, exit_code}, return_when=asyncio.FIRST_COMPLETED)
    if exit_code.done():
        return exit_code.result()
    reading.result()  # its failure, if that is why it ended
    logger.info("the client closed stdin without exit")
    return 0 if getattr(server.protocol, "_shutdown", False) else 1


def _leave(server: CudaAgentServer, backend: Backend, code: int) -> NoReturn:
    """End the process now: kill what runs outside it, give the feedback log a moment, flush, exit.
    `os._exit`, not `sys.exit`: the interpreter's exit joins every worker thread, and one may be inside a
    compile (NVRTC runs in-process and cannot be interrupted)."""
    try:  # nothing may keep the process from leaving
        backend.abort()
        server.feedback.flush(timeout_s=LEAVE_FLUSH_S)
    except Exception:
        logger.exception("stopping the work in progress failed")
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def check_bind(host: str, token: str | None) -> None:
    if not is_loopback(host) and not token:
        raise InsecureBind(
            f"refusing to listen on {host} without a token: anyone who can reach it could run code on this "
            f"machine's GPU. Pass --token (or set {TOKEN_ENV}) and give clients the same token in "
            'initializationOptions {"token": ...}; or listen on 127.0.0.1 and reach it through an SSH tunnel.'
        )


def _end(server: CudaAgentServer) -> None:
    """A session is over: its jobs and documents go; the Backend (and the GPU worker) stays."""
    server.end_session()
    if server._thread_pool is not None:
        server._thread_pool.shutdown(wait=False)


async def serve_tcp(
    backend: Backend,
    host: str,
    port: int,
    token: str | None,
    on_listening: Callable[[str, int], None] | None = None,
) -> None:
    """Serve clients one after another (or side by side) until cancelled."""
    check_bind(host, token)

    async def session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        logger.info("client connected: %s", peer)
        server = create_server(backend, token=token, session_mode=True)
        server.protocol.set_writer(writer)  # type: ignore[arg-type]  # StreamWriter has write/close
        try:
            frames = FrameReader(stream_chunks(reader))
            await serve_messages(frames, server.protocol, server.report_server_error)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away mid-message: the same as a disconnect
        finally:
            _end(server)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            logger.info("client disconnected: %s", peer)

    listener = await asyncio.start_server(session, host, port)
    bound = listener.sockets[0].getsockname()
    if on_listening is not None:
        on_listening(str(bound[0]), int(bound[1]))
    async with listener:
        await listener.serve_forever()


async def serve_ws(
    backend: Backend,
    host: str,
    port: int,
    token: str | None,
    on_listening: Callable[[str, int], None] | None = None,
) -> None:
    """The same sessions over WebSocket (one JSON-RPC message a frame, no Content-Length headers)."""
    check_bind(host, token)
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.exceptions import ConnectionClosed

    async def session(websocket: ServerConnection) -> None:
        logger.info("client connected: %s", websocket.remote_address)
        server = create_server(backend, token=token, session_mode=True)
        server.protocol.set_writer(WebSocketWriter(websocket), include_headers=False)
        try:
            # One message a frame: no headers to resynchronise on, but the same handling (framing.py).
            with contextlib.suppress(ConnectionClosed):
                async for data in websocket:
                    body = data.encode() if isinstance(data, str) else data
                    handle_body(server.protocol, body, error_handler=server.report_server_error)
            await websocket.close()
        finally:
            _end(server)
            logger.info("client disconnected: %s", websocket.remote_address)

    # websockets' own cap is 1 MiB: opening a 30,000-line file would close the session. The stdio cap, then.
    async with serve(session, host, port, max_size=MAX_MESSAGE_BYTES) as listener:
        bound = next(iter(listener.sockets)).getsockname()
        if on_listening is not None:
            on_listening(str(bound[0]), int(bound[1]))
        await listener.serve_forever()


def run_tcp(backend: Backend, host: str, port: int, token: str | None, websocket: bool = False) -> None:
    tune_for_latency()

    def announce(bound_host: str, bound_port: int) -> None:
        # One line on stderr that scripts (and the tests) read to learn the port when --port 0 was asked.
        scheme = "ws://" if websocket else ""
        print(f"cuda-agent: listening on {scheme}{bound_host}:{bound_port}", file=sys.stderr, flush=True)

    serve = serve_ws if websocket else serve_tcp
    try:
        asyncio.run(serve(backend, host, port, token, announce))
    except KeyboardInterrupt:
        pass
    finally:
        backend.close()
