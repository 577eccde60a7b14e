"""A real Emacs with eglot, in batch mode, set up as docs/editors.md says, against the real server over stdio
with the GPU worker replaced by a recording (as in test_server_jobs.py).

tests/emacs/optimize_and_apply.el does the editing through eglot's own commands: it types a spec error and
fixes it (Flymake shows and clears it), hovers saxpy (plain text: eglot without markdown-mode asks for it),
picks "Add benchmark spec" for relu from the code-action menu, then "Optimize kernel" for saxpy, and when
the verified rewrite arrives "Apply verified rewrite" (eglot 1.9 resolves no code actions and draws no code
lenses: the edit comes inside the action, the timings in the hover). It writes what it saw as JSON.

Debian's `emacs-nox` with `elpa-eglot` (.ci/run installs them); CUDA_AGENT_E2E_REQUIRED=1 makes a missing
Emacs or eglot fail the test instead of skipping it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cuda_agent.agent.targets import load_targets

from tests.server_support import editor_missing, spec_and_rewrite_applied

ROOT = Path(__file__).parent.parent
ELEMENTWISE = ROOT / "examples" / "elementwise.cu"
RECORDING = Path(__file__).parent / "recordings" / "elementwise_h200.json"
SCRIPT = Path(__file__).parent / "emacs" / "optimize_and_apply.el"
HEADLINE = "saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200, 5 input sets, 2 sizes)"
SETUP = "Debian: apt-get install emacs-nox elpa-eglot; Emacs 29+ has eglot built in"
ERROR, INFORMATION = 1, 3  # LSP DiagnosticSeverity
TIMEOUT_S = 180  # the script's own waits are shorter; this only stops an Emacs that hangs


def find_emacs() -> tuple[str | None, str]:
    """An `emacs` on PATH that can load eglot; the second value says why there is none."""
    emacs = shutil.which("emacs")
    if emacs is None:
        return None, "no emacs on PATH"
    probe = subprocess.run(
        [emacs, "--batch", "--eval", '(progn (require \'eglot) (princ "eglot"))'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.stdout.strip() != "eglot":
        return None, f"{emacs} cannot load eglot: {probe.stderr.strip()[-300:]}"
    return emacs, ""


def test_emacs_eglot_shows_the_diagnostics_hover_and_applies_the_fix_and_the_rewrite(tmp_path: Path) -> None:
    emacs, why_not = find_emacs()
    if emacs is None:
        editor_missing(why_not, SETUP)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)  # a project root for eglot, as a checkout has
    source = project / "elementwise.cu"
    original = ELEMENTWISE.read_text()
    source.write_text(original)
    out, log = tmp_path / "out.json", tmp_path / "emacs.log"
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),  # no user init, no ~/.emacs.d written to
        "CUDA_AGENT_EMACS_FILE": str(source),
        "CUDA_AGENT_EMACS_OUT": str(out),
        "CUDA_AGENT_EMACS_LOG": str(log),
        "CUDA_AGENT_EMACS_PYTHON": sys.executable,
        "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
        "CUDA_AGENT_CACHE_DIR": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    run = subprocess.run(
        [emacs or "emacs", "--batch", "-l", str(SCRIPT)],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    transcript = (
        f"exit {run.returncode}\n--- log\n{log.read_text() if log.exists() else '<none>'}\n"
        f"--- stdout\n{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-4000:]}"
    )
    assert run.returncode == 0 and out.exists(), transcript
    seen = json.loads(out.read_text())
    assert seen["status"] == 0, transcript
    assert seen["major_mode"] == "cuda-mode" and seen["server_name"] == "cuda-agent"

    # The spec error appeared where the size name was typed, Flymake showed it, and the fix cleared it.
    lines = original.split("\n")
    x_line = next(i for i, text in enumerate(lines) if 'x = { role = "input"' in text)
    errors = [d for d in seen["spec_error"]["diagnostics"] if d["severity"] == ERROR]
    assert len(errors) == 1, seen["spec_error"]
    assert (errors[0]["line"], errors[0]["character"]) == (x_line, lines[x_line].index('"n"') + 1)
    assert "unknown size 'm'" in errors[0]["message"]
    assert any(d["line"] == x_line and d["type"] == "eglot-error" for d in seen["spec_error"]["shown"])
    assert seen["cleared_version"] > seen["spec_error"]["version"]

    # Hover in plain text: aligned columns, no Markdown to show raw.
    assert seen["hover_kind"] == "plaintext"
    hover = seen["hover"]
    assert hover.startswith("saxpy · spec written in the file")
    assert "|" not in hover and "**" not in hover and "`" not in hover
    header = next(line for line in hover.split("\n") if line.startswith("parameter"))
    x_row = next(line for line in hover.split("\n") if line.startswith("x "))
    assert x_row.index("input") == header.index("role") and x_row.index("float32") == header.index("dtype")

    # The quick fix wrote relu's inferred spec above it, and the server took the new text without errors.
    assert "Add benchmark spec for relu" in seen["relu_actions"], seen["relu_actions"]
    assert not [d for d in seen["after_spec"] if d["severity"] == ERROR]
    text = seen["text"]
    spec_comment = text[text.index("/* cuda-agent") : text.index("__global__ void relu")]
    assert spec_comment.split("\n")[1].startswith("# spec inferred from the 1-D element-wise pattern")
    assert spec_comment.split("\n")[2].startswith("kernel = ")  # one comment line, not two saying the same

    # "Optimize kernel" from the menu: answered with a message (no cuda-agent: prefix: eglot names the
    # server), and the verified rewrite arrived as a note on saxpy's name.
    assert "Optimize kernel: saxpy" in seen["saxpy_actions"], seen["saxpy_actions"]
    messages = [m["message"] for m in seen["messages"]]
    assert messages[0] == "Optimizing saxpy on NVIDIA H200", messages
    assert not any(m.startswith("cuda-agent") for m in messages)
    saxpy_line = next(i for i, line in enumerate(text.split("\n")) if "void saxpy(" in line)
    rewrite = seen["rewrite"]
    assert rewrite["message"] == HEADLINE and rewrite["severity"] == INFORMATION
    assert rewrite["line"] == saxpy_line
    assert any(d["line"] == saxpy_line and HEADLINE in d["text"] for d in seen["shown_rewrite"])
    # The timings a lens would have shown are in the hover.
    timed = seen["hover_timed"]
    assert "|" not in timed
    original_row = next(line for line in timed.split("\n") if line.startswith("original "))
    assert "0.0832 ms" in original_row and "1.00×" in original_row
    assert any(line.startswith("best: ") and "1.27×" in line for line in timed.split("\n"))

    # Applied from the menu: the edit came inside the action, and the buffer holds the rewrite.
    assert "Apply verified rewrite: 1.27× faster" in seen["rewrite_actions"], seen["rewrite_actions"]
    assert "Reject suggestion" in seen["rewrite_actions"]
    assert text == spec_and_rewrite_applied(original)
    targets = load_targets(Path("elementwise.cu"), text)
    saxpy, written_relu = targets.find("saxpy"), targets.find("relu")
    assert saxpy is not None and saxpy.spec is not None and saxpy.spec.launch.block == (256,)
    assert written_relu is not None and written_relu.spec is not None and not written_relu.spec.inferred
    # The server saw the applied text: no suggestion and no error on it.
    assert not [d for d in seen["after_apply"] if d["code"] == "verified-rewrite" or d["severity"] == ERROR]
