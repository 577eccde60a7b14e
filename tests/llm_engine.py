"""The engine for the LLM tests on a CPU: real compiles (NVRTC), GPU answers from the recording of
examples/elementwise.cu on the H200 (sandbox/recorded.py), no result cache. No tests here."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.engine import Baseline, Engine, EngineSettings
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.recorded import RECORDED_WORKER_ENV

RECORDING = Path(__file__).parent / "recordings" / "elementwise_h200.json"
# What the H200's verifier says of a saxpy that forgot `+ y[i]` (sandbox/checks.py's wording).
MISMATCH = (
    "y: 16777216 of 16777216 elements differ beyond atol=1e-05, rtol=1e-05 (max abs error 4.211, max rel "
    "error 1.372e+04); first at (0,): expected -0.8475, got 0.3061"
)


def recording_with_rejection(folder: Path, block: int) -> Path:
    """The recording, plus a saxpy launched with `block` that fails verification with a mismatch."""
    data = json.loads(RECORDING.read_text())
    data["kernels"]["saxpy"]["rejected"] = [{"block": [block], "check": "mismatch", "message": MISMATCH}]
    path = folder / "recording.json"
    path.write_text(json.dumps(data))
    return path


@contextmanager
def recorded_engine(recording: Path = RECORDING, recorder: CandidateLog | None = None) -> Iterator[Engine]:
    previous = os.environ.get(RECORDED_WORKER_ENV)
    os.environ[RECORDED_WORKER_ENV] = str(recording)
    try:
        with Engine(EngineSettings(use_cache=False), recorder=recorder) as engine:
            yield engine
    finally:
        if previous is None:
            os.environ.pop(RECORDED_WORKER_ENV, None)
        else:
            os.environ[RECORDED_WORKER_ENV] = previous


def baseline_of(path: Path, kernel: str, folder: Path) -> Baseline:
    target = load_targets(path).find(kernel)
    assert target is not None
    with recorded_engine(recording_with_rejection(folder, 512)) as engine:
        baseline = engine.baseline(target)
    assert baseline.usable, baseline
    return baseline
