"""A real Vim with ALE, in a tmux pane (a terminal, as a user has), set up as docs/editors.md says
(tests/vim/vimrc), against the real server over stdio with the GPU worker replaced by a recording (as in
test_server_jobs.py).

tests/vim/optimize_and_apply.vim does the editing through ALE's own commands: it types a spec error and
fixes it, hovers saxpy (:ALEHover: ALE asks for plain text), picks "Add benchmark spec" for relu from
:ALECodeAction's menu, then "Optimize kernel" for saxpy, and when the verified rewrite arrives "Apply
verified rewrite". ALE declares neither workspace/applyEdit nor work-done progress, resolves no code action,
answers no server request and draws no code lens: everything has to come inside the actions, the hover and
the messages. It writes what it saw (ALE's diagnostics, the menus, the preview window, the screen) as JSON.

Debian's `vim` with `vim-ale`, and tmux (.ci/run installs them); CUDA_AGENT_E2E_REQUIRED=1 makes a missing
one fail the test instead of skipping it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from cuda_agent.agent.targets import load_targets

from tests.server_support import editor_missing, spec_and_rewrite_applied

ROOT = Path(__file__).parent.parent
ELEMENTWISE = ROOT / "examples" / "elementwise.cu"
RECORDING = Path(__file__).parent / "recordings" / "elementwise_h200.json"
VIMRC = Path(__file__).parent / "vim" / "vimrc"
SCRIPT = Path(__file__).parent / "vim" / "optimize_and_apply.vim"
HEADLINE = "saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200, 5 input sets, 2 sizes)"
SETUP = "Debian: apt-get install vim vim-ale tmux"
TIMEOUT_S = 180  # the script's own waits are shorter; this only stops a Vim that hangs


def find_vim() -> tuple[str | None, str]:
    """A `vim` that loads ALE, and tmux to give it a terminal; the second value says what is missing."""
    vim, tmux = shutil.which("vim"), shutil.which("tmux")
    if vim is None or tmux is None:
        return None, " and ".join(
            f"no {name} on PATH" for name, found in (("vim", vim), ("tmux", tmux)) if not found
        )
    probe = subprocess.run(
        [vim, "-N", "-u", "NONE", "-i", "NONE", "-es", "-c", "packadd ale",
         "-c", 'call writefile([exists(":ALEHover") ? "ale" : "none"], "/dev/stdout")', "-c", "qall!"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if probe.stdout.strip() != "ale":
        return None, f"{vim} has no ALE (packadd ale): {probe.stdout.strip()} {probe.stderr.strip()}"[:300]
    return vim, ""


def test_vim_ale_shows_the_diagnostics_hover_and_applies_the_fix_and_the_rewrite(tmp_path: Path) -> None:
    vim, why_not = find_vim()
    if vim is None:
        editor_missing(why_not, SETUP)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    source = project / "elementwise.cu"
    original = ELEMENTWISE.read_text()
    source.write_text(original)
    out, log, socket = tmp_path / "out.json", tmp_path / "vim.log", tmp_path / "tmux.sock"
    env = {
        **{k: v for k, v in os.environ.items() if k != "TMUX"},  # our own tmux server, not the user's
        "HOME": str(tmp_path / "home"),
        "CUDA_AGENT_VIM_OUT": str(out),
        "CUDA_AGENT_VIM_LOG": str(log),
        "CUDA_AGENT_VIM_PYTHON": sys.executable,
        "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
        "CUDA_AGENT_CACHE_DIR": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    tmux = ["tmux", "-S", str(socket)]
    command = [vim or "vim", "-N", "-u", str(VIMRC), "-i", "NONE", "-n", source.name, "-S", str(SCRIPT)]
    started = subprocess.run(
        [*tmux, "new-session", "-d", "-s", "cuda", "-x", "200", "-y", "50", "--", *command],
        cwd=project, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not out.exists() and time.monotonic() < deadline:
            alive = subprocess.run([*tmux, "has-session", "-t", "cuda"], env=env, capture_output=True)
            if alive.returncode != 0:
                break  # Vim quit without writing its answer
            time.sleep(0.2)
        screen = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "cuda"], env=env, capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
    transcript = f"--- log\n{log.read_text() if log.exists() else '<none>'}\n--- screen\n{screen}"
    assert out.exists(), transcript
    seen = json.loads(out.read_text())
    assert seen["status"] == 0, (
        f"{seen.get('error')}\n{transcript}\n--- last screen\n{seen['screens']['last']}"
    )
    assert seen["filetype"] == "cuda"

    # The spec error appeared where the size name was typed, and the fix cleared it.
    lines = original.split("\n")
    x_line = next(i for i, text in enumerate(lines) if 'x = { role = "input"' in text)
    errors = [d for d in seen["spec_error"] if d["type"] == "E"]
    assert len(errors) == 1, seen["spec_error"]
    assert (errors[0]["line"], errors[0]["col"]) == (x_line, lines[x_line].index('"n"') + 1)
    assert "unknown size 'm'" in errors[0]["text"]
    assert not [d for d in seen["cleared"] if d["type"] == "E"]

    # Hover in plain text, in the preview window: aligned columns, nothing of Markdown's to show raw.
    hover = seen["hover"]
    assert hover[0] == "saxpy · spec written in the file"
    assert not any("|" in line or "**" in line or "`" in line for line in hover)
    header = next(line for line in hover if line.startswith("parameter"))
    x_row = next(line for line in hover if line.startswith("x "))
    assert x_row.index("input") == header.index("role") and x_row.index("float32") == header.index("dtype")
    assert header in seen["screens"]["hover"]  # on the screen, as the user sees it

    # The quick fix, and "Optimize kernel" answered on the screen (without a cuda-agent: prefix: ALE
    # names the linter).
    assert "1) Add benchmark spec for relu" in seen["relu_menu"], seen["relu_menu"]
    assert "Optimize kernel: saxpy" in seen["saxpy_menu"], seen["saxpy_menu"]
    answer = next(line for line in seen["screens"]["optimize"].split("\n") if "Optimizing saxpy" in line)
    assert answer.strip() == "Info:cuda_agent: Optimizing saxpy on NVIDIA H200"

    # The verified rewrite arrived on saxpy's name (ALE 3.3 shows information as a warning), its timings
    # in the hover (ALE draws no code lens).
    text = seen["text"]
    saxpy_line = next(i for i, line in enumerate(text.split("\n")) if "void saxpy(" in line)
    rewrite = seen["rewrite"]
    assert rewrite["text"] == HEADLINE and rewrite["line"] == saxpy_line
    timed = seen["hover_timed"]
    original_row = next(line for line in timed if line.startswith("original "))
    assert "0.0832 ms" in original_row and "1.00×" in original_row
    assert any(line.startswith("best: ") and "1.27×" in line for line in timed)

    # Applied from the menu (the edit inside the action: ALE resolves none and takes no applyEdit).
    assert "Apply verified rewrite: 1.27× faster" in seen["rewrite_menu"], seen["rewrite_menu"]
    assert "Reject suggestion" in seen["rewrite_menu"]
    assert text == spec_and_rewrite_applied(original)
    saxpy = load_targets(Path("elementwise.cu"), text).find("saxpy")
    assert saxpy is not None and saxpy.spec is not None and saxpy.spec.launch.block == (256,)
    # The server has the applied text: the hover shows the new launch, and nothing is wrong with it.
    assert any(line.startswith("launch") and "block (256)" in line for line in seen["hover_applied"])
    assert not [d for d in seen["after_apply"] if d["type"] == "E" or d["code"] == "verified-rewrite"]
