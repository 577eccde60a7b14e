"""A reject with its reason from a real plain LSP client: Emacs with eglot (batch mode, set up as
docs/editors.md says) picks "Reject suggestion: unreadable" from its code-action menu, against the real
server over stdio with the recorded GPU worker (tests/emacs/reject_with_reason.el); the project's feedback
log records the reason. Skipped (or failed with CUDA_AGENT_E2E_REQUIRED=1) where Emacs or eglot is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cuda_agent.agent.feedback import REJECT_REASONS, read_records

from tests.server_support import editor_missing
from tests.test_emacs import ELEMENTWISE, RECORDING, SETUP, TIMEOUT_S, find_emacs

SCRIPT = Path(__file__).parent / "emacs" / "reject_with_reason.el"


def test_emacs_rejects_a_rewrite_with_a_reason_from_its_code_action_menu(tmp_path: Path) -> None:
    emacs, why_not = find_emacs()
    if emacs is None:
        editor_missing(why_not, SETUP)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)  # the project root: eglot's workspace, where the log goes
    source = project / "elementwise.cu"
    source.write_text(ELEMENTWISE.read_text())
    out = tmp_path / "out.json"
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "CUDA_AGENT_EMACS_FILE": str(source),
        "CUDA_AGENT_EMACS_OUT": str(out),
        "CUDA_AGENT_EMACS_PYTHON": sys.executable,
        "CUDA_AGENT_EMACS_REASON": "unreadable",
        "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
        "CUDA_AGENT_CACHE_DIR": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    run = subprocess.run(
        [emacs or "emacs", "--batch", "-l", str(SCRIPT)],
        cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert out.is_file(), run.stderr[-4000:]
    seen = json.loads(out.read_text())
    assert seen["status"] == 0, f"{seen.get('error')}\n{run.stderr[-4000:]}"

    # The menu offers Reject with each reason beside Apply and the plain Reject.
    menu = seen["rewrite_actions"]
    assert "Apply verified rewrite: 1.27× faster" in menu and "Reject suggestion" in menu
    assert [t for t in menu if t.startswith("Reject suggestion: ")] == [
        f"Reject suggestion: {reason}" for reason in REJECT_REASONS
    ]
    assert seen["rewrite_gone"] is True
    records = read_records(project / ".cuda-agent" / "feedback.jsonl")
    assert [(r.event, r.reason) for r in records] == [("shown", None), ("rejected", "unreadable")]
    assert records[0].suggestion_id == records[1].suggestion_id
