"""The VS Code extension (vscode-client/): its unit tests under plain Node, and the end-to-end test in a real
VS Code: code-server with the packaged .vsix installed, driven through Debian's Chromium by playwright-core
(vscode-client/test/e2e/run.mjs), against the real server started by the extension, with the GPU worker
replaced by the recording (as in test_server_jobs.py).

.ci/run installs the toolchain (npm ci, the .vsix, code-server, chromium) and sets CUDA_AGENT_E2E_REQUIRED=1:
there a missing piece fails the test; elsewhere the test is skipped, saying what is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_agent.agent.feedback import REJECT_REASONS

ROOT = Path(__file__).parent.parent
CLIENT = ROOT / "vscode-client"
CODE_SERVER = CLIENT / ".e2e" / "code-server" / "node_modules" / ".bin" / "code-server"
VSIX = CLIENT / "cuda-agent.vsix"
ARTIFACTS = CLIENT / "test-artifacts"
SCREENSHOT = ARTIFACTS / "editor-with-rewrite.png"
REQUIRED = os.environ.get("CUDA_AGENT_E2E_REQUIRED") == "1"
SETUP = "run .ci/run, or: cd vscode-client && npm ci && npm run package && ./scripts/install-code-server.sh"
E2E_TIMEOUT_S = 420  # the run takes about 25 s here; this only stops a hung browser


def require(*missing: str | None) -> None:
    """Skip (or, where CI requires the extension's tests, fail) naming what is not installed."""
    reasons = [m for m in missing if m]
    if reasons:
        message = f"{'; '.join(reasons)} ({SETUP})"
        if REQUIRED:
            pytest.fail(f"CUDA_AGENT_E2E_REQUIRED=1 but {message}")
        pytest.skip(message)


def node_missing() -> str | None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "no node/npm on PATH"
    if not (CLIENT / "node_modules" / "vscode-languageclient").is_dir():
        return "the extension's node_modules are not installed"
    return None


def chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def sources_newer_than(target: Path) -> bool:
    built = target.stat().st_mtime
    sources = [CLIENT / "package.json", CLIENT / "esbuild.mjs", *(CLIENT / "src").rglob("*.ts")]
    return any(source.stat().st_mtime > built for source in sources)


def tail(run: subprocess.CompletedProcess[str], chars: int = 8000) -> str:
    return f"exit {run.returncode}\n--- stdout\n{run.stdout[-chars:]}\n--- stderr\n{run.stderr[-chars:]}"


def test_the_extension_offers_the_reject_reasons_the_server_records() -> None:
    """The quick pick after Reject offers src/protocol.ts's list; the server refuses any other reason."""
    protocol = (CLIENT / "src" / "protocol.ts").read_text()
    found = re.search(r"export const REJECT_REASONS = \[(.*?)\] as const;", protocol, re.S)
    assert found is not None
    assert tuple(re.findall(r"'([^']*)'", found.group(1))) == REJECT_REASONS


def test_extension_unit_tests() -> None:
    require(node_missing())
    run = subprocess.run(["npm", "test"], cwd=CLIENT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, tail(run)
    assert "# fail 0" in run.stdout, tail(run)
    assert "# pass " in run.stdout, tail(run)


def test_extension_end_to_end_in_code_server(capsys: pytest.CaptureFixture[str]) -> None:
    browser = chromium()
    no_code_server = "code-server is not installed (vscode-client/scripts/install-code-server.sh)"
    require(
        node_missing(),
        None if CODE_SERVER.exists() else no_code_server,
        None if browser else "no chromium on PATH (Debian: apt-get install chromium)",
    )
    if not VSIX.exists() or sources_newer_than(VSIX):  # test what the sources build, not an old package
        build = subprocess.run(
            ["npm", "run", "package"], cwd=CLIENT, capture_output=True, text=True, timeout=300
        )
        assert build.returncode == 0, tail(build)
    env = {
        **os.environ,
        "CUDA_AGENT_PYTHON": sys.executable,  # the Python running the tests has the server installed
        "CHROMIUM": str(browser),
        "VSIX": str(VSIX),
        "E2E_ARTIFACTS": str(ARTIFACTS),
    }
    run = subprocess.run(
        ["node", "test/e2e/run.mjs"],
        cwd=CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=E2E_TIMEOUT_S,
    )
    assert run.returncode == 0, tail(run)
    line = next((line for line in run.stdout.splitlines() if line.startswith("E2E_RESULT ")), None)
    assert line is not None, tail(run)
    result = json.loads(line.removeprefix("E2E_RESULT "))
    (ARTIFACTS / "e2e-result.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")

    assert result["ok"] is True
    assert result["problem"].startswith(
        "saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200"
    )
    assert "1.27× faster" in result["diff_title"] and "assumes" in result["diff_title"]
    assert result["candidates_listed"] == 13
    # Reject asked why (every reason, and a way to skip); the workspace's feedback log kept the one picked,
    # and counted the rewrite accepted once the refactor preview had made the text the rewrite.
    assert result["reject_reasons_offered"] == [*REJECT_REASONS, "No reason: just reject"]
    decisions = result["feedback_decisions"]
    assert [d for d in decisions if d["event"] == "rejected"] == [
        {"event": "rejected", "reason": "changes numerics I care about"}
    ]
    assert decisions[-1] == {"event": "accepted", "reason": None}
    assert [d["event"] for d in decisions].count("accepted") == 1
    # A Python without the server got the explanation of what to do (then the server came back).
    assert "the server is not installed" in result["not_installed_message"]
    assert "-m pip install cuda-agent" in result["not_installed_message"]
    # A headless server over TCP: refused without its token (the message names the setting), connected with
    # it, and reconnected by itself after the server went away and came back.
    assert "cudaAgent.server.token" in result["remote"]["refused"]
    assert result["remote"]["reconnected"] is True
    assert SCREENSHOT.is_file() and SCREENSHOT.stat().st_size > 20_000
    assert result["vsix_bytes"] == VSIX.stat().st_size

    assert result["vscode_activation_ms"] >= 0, result["vscode_activation"]

    with capsys.disabled():  # shown in CI's log even though pytest captures output
        print(
            f"\nVS Code extension end to end: passed in {result['duration_s']} s; "
            f"activation {result['vscode_activation_ms']:g} ms (VS Code's measure: loading the bundle and "
            f"activate(); activate() itself {result['activation_ms']} ms; server ready "
            f"{result['server_ready_ms']} ms after activation); "
            f".vsix {result['vsix_bytes'] / 1024:.1f} KiB ({result['vsix_bytes']} bytes); "
            f"screenshot {SCREENSHOT}"
        )
