"""The language server on the GPU pool: `cuda-agent serve --tcp --ray ADDRESS` with two editors optimizing
at once. A local Ray cluster of two logical GPUs whose actors answer from a recording that takes the time
a GPU's runs take (the GPU is the one thing CI cannot reach; the server, Ray and the search are real)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

from tests.repository_support import KERNELS, slow_recording
from tests.server_support import SERVER_ENV, wait_until

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cuda-agent[cluster]')")

SEARCH_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    os.environ["RAY_AUTH_MODE"] = "disabled"
    context = ray.init(
        address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
        configure_logging=False,
    )  # fmt: skip
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


@asynccontextmanager
async def pool_server(address: str, recording: Path, cache: Path) -> AsyncIterator[int]:
    env = {
        **SERVER_ENV, "RAY_AUTH_MODE": "disabled", "CUDA_AGENT_RECORDED_WORKER": str(recording),
        "CUDA_AGENT_CACHE_DIR": str(cache),
    }  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cuda_agent", "serve", "--tcp", "--port", "0", "--ray", address,
        env=env, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        while True:
            line = await asyncio.wait_for(process.stderr.readline(), timeout=60)
            assert line, "the server ended before it listened"
            if b"listening on" in line:
                break
        yield int(line.decode().rsplit(":", 1)[1])
    finally:
        process.terminate()
        await process.wait()


async def editor(port: int, path: Path) -> tuple[LanguageClient, list[Any], list[float]]:
    """A client like VS Code's, keeping every cudaAgent/result notification with the time it came, and
    the time of every progress report (one a candidate evaluated)."""
    client = make_test_lsp_client()
    results: list[Any] = []
    reports: list[float] = []

    @client.feature("cudaAgent/result")
    def on_result(params: Any) -> None:
        results.append((time.monotonic(), params))

    recorded = client.protocol.fm.features[types.PROGRESS]

    def on_progress(params: types.ProgressParams) -> Any:
        if isinstance(params.value, dict) and params.value.get("kind") == "report":
            reports.append(time.monotonic())
        return recorded(params)

    client.protocol.fm.features[types.PROGRESS] = on_progress

    await client.start_tcp("127.0.0.1", port)
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            initialization_options={"searchBudgetSeconds": 120},
        )
    )
    text = path.read_text()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=path.as_uri(), language_id="cuda", version=1, text=text)
        )
    )
    return client, results, reports


def finished(results: list[Any]) -> float | None:
    return next((at for at, r in results if not r.searching), None)


async def test_two_editors_optimize_at_once_and_neither_waits_for_the_other(cluster: str, tmp_path: Path):
    first_file, second_file = tmp_path / "a" / "axpy.cu", tmp_path / "b" / "axpy.cu"
    for path in (first_file, second_file):
        path.parent.mkdir()
        path.write_text((KERNELS / "axpy.cu").read_text())
    async with pool_server(cluster, slow_recording(tmp_path, 0.3), tmp_path / "cache") as port:
        (
            (first, first_results, first_reports),
            (second, second_results, second_reports),
        ) = await asyncio.gather(editor(port, first_file), editor(port, second_file))
        try:
            started = time.monotonic()
            for client, path in ((first, first_file), (second, second_file)):
                answer = await client.workspace_execute_command_async(
                    types.ExecuteCommandParams(
                        command="cudaAgent.optimize", arguments=[path.as_uri(), "daxpy"]
                    )
                )
                assert answer["started"] is True, answer
            await wait_until(
                lambda: finished(first_results) and finished(second_results),
                SEARCH_TIMEOUT_S,
                "both searches",
            )
        finally:
            for client in (first, second):
                await client.shutdown_session()
    for results in (first_results, second_results):
        final = next(r for _, r in results if not r.searching)
        assert final.rewrite is not None and final.rewrite.speedup == pytest.approx(80 / 60, rel=1e-6)
    # Side by side on the pool's two GPUs: each editor's search evaluated candidates before the other's
    # ended; one after another, the second would report its first candidate only after the first's end.
    first_end, second_end = finished(first_results), finished(second_results)
    assert first_end is not None and second_end is not None
    assert first_reports and second_reports
    assert second_reports[0] < first_end, (second_reports[0] - started, first_end - started)
    assert first_reports[0] < second_end, (first_reports[0] - started, second_end - started)


async def test_a_search_on_the_pool_stops_soon_after_its_cancel(cluster: str, tmp_path: Path):
    """Candidates run on both GPUs at once: a cancel stops the search at the candidates in flight, and no
    new one starts."""
    path = tmp_path / "axpy.cu"
    path.write_text((KERNELS / "axpy.cu").read_text())
    async with pool_server(cluster, slow_recording(tmp_path, 0.3), tmp_path / "cache") as port:
        client, _, reports = await editor(port, path)
        try:
            optimize = types.ExecuteCommandParams(
                command="cudaAgent.optimize", arguments=[path.as_uri(), "daxpy"]
            )
            assert (await client.workspace_execute_command_async(optimize))["started"] is True
            await wait_until(lambda: len(reports) >= 2, SEARCH_TIMEOUT_S, "candidates evaluated")
            cancel = types.ExecuteCommandParams(
                command="cudaAgent.cancelOptimization", arguments=[path.as_uri(), "daxpy"]
            )
            assert await client.workspace_execute_command_async(cancel) == {"cancelled": True}
            cancelled_at = time.monotonic()

            def ended() -> bool:
                return any(
                    isinstance(r[-1], types.WorkDoneProgressEnd)
                    for r in client.progress_reports.values()
                    if r
                )

            await wait_until(ended, 30, "the search's progress to end")
            # A candidate takes three runs of 0.3 s: the ones in flight finish (0.9 s at most), nothing more
            # starts (the rest of the batch of 8 took 2.7 s when the pool kept starting candidates).
            assert time.monotonic() - cancelled_at < 2.0
        finally:
            await client.shutdown_session()
