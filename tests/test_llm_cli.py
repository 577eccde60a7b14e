"""`cuda-agent optimize --proposer llm` and `cuda-agent doctor` as a user runs them: the real console script,
the real SDK against a local scripted Messages API, the engine answering from the H200 recording."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.llm_engine import RECORDING
from tests.llm_scripted import ScriptedApi, recorded_session

ROOT = Path(__file__).resolve().parents[1]
KEY = "test-key-cli-0123456789"
# Never inherited: a key or address from the machine would send these tests to a real API.
LLM_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")


def run(*args: str, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in LLM_ENV and not k.startswith("CUDA_AGENT_LLM_")}
    clean.update(
        COLUMNS="250",
        CUDA_AGENT_CACHE_DIR=str(tmp / "cache"),
        CUDA_AGENT_RECORDED_WORKER=str(RECORDING),
        **env,
    )
    return subprocess.run(
        [sys.executable, "-m", "cuda_agent", *args],
        capture_output=True,
        text=True,
        cwd=tmp,
        env=clean,
        timeout=120,
        check=False,
    )


def test_optimize_with_the_llm_proposer_writes_its_verified_rewrite(tmp_path: Path) -> None:
    file = tmp_path / "elementwise.cu"
    shutil.copy(ROOT / "examples" / "elementwise.cu", file)
    with ScriptedApi(recorded_session()) as api:
        result = run(
            "optimize", str(file), "--kernel", "saxpy", "--proposer", "llm", "--write",
            "--llm-transcript", "session.md",
            tmp=tmp_path, ANTHROPIC_API_KEY=KEY, CUDA_AGENT_LLM_BASE_URL=api.base_url,
        )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert len(api.requests) == 5
    assert (
        "saxpy: LLM: float4 loads and stores, 4 elements a thread; block [256]: 1.27× faster" in result.stdout
    )
    assert "LLM claude-sonnet-5-5: 5 turn(s), 3 candidate(s)" in result.stdout
    assert "compile error" in result.stdout and "no gain" in result.stdout  # every candidate is listed
    written = file.read_text()
    assert "float4 xv = *reinterpret_cast<const float4*>(x + i);" in written and "block = [256]" in written
    assert 'grid = ["ceil_div(n, block.x * 4)"]' in written  # the launch it was verified with
    transcript = (tmp_path / "session.md").read_text()
    assert transcript.startswith("# llm:claude-sonnet-5-5 on saxpy (elementwise.cu)")
    assert "### compile_and_test result (refused or failed)" in transcript
    assert KEY not in output and KEY not in transcript


def test_without_an_api_key_the_llm_proposer_says_so_once_and_the_others_run(tmp_path: Path) -> None:
    example = str(ROOT / "examples" / "elementwise.cu")
    alone = run("optimize", example, "--kernel", "saxpy", "--proposer", "llm", tmp=tmp_path)
    assert alone.returncode == 2
    assert alone.stderr.strip() == (
        "cuda-agent: the llm proposer is disabled: no API key: set ANTHROPIC_API_KEY in the environment of "
        "cuda-agent (or cudaAgent.llm.apiKey in the editor)"
    )
    assert "Traceback" not in alone.stderr

    both = run(
        "optimize",
        example,
        "--kernel",
        "saxpy",
        "--proposer",
        "launch-config",
        "--proposer",
        "llm",
        tmp=tmp_path,
    )
    assert both.returncode == 0, both.stdout + both.stderr
    assert both.stderr.count("the llm proposer is disabled") == 1
    assert "saxpy: block 256 (256 threads; was 128): 1.27× faster" in both.stdout


def test_doctor_says_which_model_the_llm_proposer_uses_or_why_it_is_off(tmp_path: Path) -> None:
    off = run("doctor", tmp=tmp_path)
    assert "LLM proposer: disabled: no API key: set ANTHROPIC_API_KEY" in off.stdout
    on = run("doctor", tmp=tmp_path, ANTHROPIC_API_KEY=KEY, CUDA_AGENT_LLM_BASE_URL="http://127.0.0.1:9")
    assert (
        "LLM proposer: anthropic claude-sonnet-5-5 at http://127.0.0.1:9; API key from ANTHROPIC_API_KEY; "
        "up to 12 turns, $2.00, 900 s a kernel" in on.stdout
    )
    assert KEY not in on.stdout + on.stderr
    local = run(
        "doctor",
        tmp=tmp_path,
        CUDA_AGENT_LLM_PROVIDER="openai-compatible",
        CUDA_AGENT_LLM_BASE_URL="http://127.0.0.1:8000/v1",
        CUDA_AGENT_LLM_MODEL="kernel-coder-7b",
    )
    assert (
        "LLM proposer: openai-compatible kernel-coder-7b at http://127.0.0.1:8000/v1; no API key (the server "
        in (local.stdout)
    )
