"""`cuda-agent serve --tcp` and `--ws`: clients come and go without the server ending; off loopback a token
is needed.

Traffic only ever goes to 127.0.0.1, also when the server listens on 0.0.0.0."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

from tests.server_support import SERVE, SERVER_ENV

KERNEL = """__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
"""


@asynccontextmanager
async def tcp_server(*options: str, transport: str = "--tcp") -> AsyncIterator[int]:
    """A `serve --tcp --port 0` (or `--ws`) process; yields the port it announced on stderr."""
    process = await asyncio.create_subprocess_exec(
        *SERVE, transport, "--port", "0", *options, env=SERVER_ENV, stderr=subprocess.PIPE
    )
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stderr.readline(), timeout=30)
        assert b"listening on" in line, line
        yield int(line.decode().rsplit(":", 1)[1])
    finally:
        process.terminate()
        await process.wait()


async def session(
    port: int, token: str | None = None, transport: str = "--tcp", text: str = KERNEL
) -> list[types.CodeLens]:
    """One client: connect, initialize, open a file, ask for code lens, shut down, exit, disconnect."""
    client = LanguageClient("tcp-test", "1")
    if transport == "--ws":
        await client.start_ws("127.0.0.1", port)
    else:
        await client.start_tcp("127.0.0.1", port)
    try:
        await client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(),
                initialization_options={"token": token} if token else None,
            )
        )
        client.initialized(types.InitializedParams())
        uri = "file:///remote/axpy.cu"
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="cuda", version=1, text=text)
            )
        )
        lenses = await client.text_document_code_lens_async(
            types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        await client.shutdown_async(None)
        client.exit(None)
        return list(lenses or [])
    finally:
        await client.stop()


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
async def test_serves_one_client_after_another(transport: str):
    async with tcp_server(transport=transport) as port:
        for _ in range(3):
            lenses = await asyncio.wait_for(session(port, transport=transport), timeout=30)
            assert next(lens.command.title for lens in lenses if lens.command) == "▶ Optimize"


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
async def test_serves_several_clients_at_once(transport: str):
    async with tcp_server(transport=transport) as port:
        answers = await asyncio.wait_for(
            asyncio.gather(*(session(port, transport=transport) for _ in range(6))), timeout=60
        )
        for lenses in answers:
            assert next(lens.command.title for lens in lenses if lens.command) == "▶ Optimize"


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
async def test_a_file_of_several_mebibytes_opens(transport: str):
    """websockets caps a message at 1 MiB unless told otherwise: a big generated file would end the
    session. Every transport takes what stdio takes."""
    padding = "// " + "x" * 200 + "\n"
    text = padding * 15_000 + KERNEL  # ~3 MiB
    async with tcp_server(transport=transport) as port:
        lenses = await asyncio.wait_for(session(port, transport=transport, text=text), timeout=60)
        assert [lens.range.start.line for lens in lenses if lens.command.title == "▶ Optimize"] == [15_000]


async def test_a_client_that_vanishes_mid_session_does_not_end_the_server():
    async with tcp_server() as port:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b'Content-Length: 500\r\n\r\n{"jsonrpc": ')  # then hang up mid-message
        await writer.drain()
        writer.close()
        assert await asyncio.wait_for(session(port), timeout=30)


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
def test_listening_beyond_loopback_without_a_token_is_refused(transport: str):
    env = {k: v for k, v in SERVER_ENV.items() if k != "CUDA_AGENT_TOKEN"}
    done = subprocess.run(
        [*SERVE, transport, "--host", "0.0.0.0", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a token" in done.stderr


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
async def test_with_a_token_only_clients_presenting_it_are_served(transport: str):
    async with tcp_server("--host", "0.0.0.0", "--token", "s3cret", transport=transport) as port:
        with pytest.raises(JsonRpcException, match="needs a token"):
            await asyncio.wait_for(session(port, token="wrong", transport=transport), timeout=30)
        with pytest.raises(JsonRpcException, match="needs a token"):
            await asyncio.wait_for(session(port, transport=transport), timeout=30)
        assert await asyncio.wait_for(session(port, token="s3cret", transport=transport), timeout=30)
