"""Every candidate evaluated is a sample in the feedback log, from every entry point: the CLI's optimize,
compare and bench, repository mode (the language server's: tests/test_feedback_server.py), each real search
run against the recorded GPU worker; a candidate counts once; CUDA_AGENT_FEEDBACK=0 turns it off; the
compute-sanitizer gate's verdicts reach the samples (a rejected candidate is incorrect in the export)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from cuda_agent.agent.candidate_log import MAX_FILE_BYTES, CandidateLog
from cuda_agent.agent.feedback import FeedbackLog
from cuda_agent.agent.feedback_export import export
from cuda_agent.agent.optimize import optimize
from cuda_agent.agent.sanitizer_gate import MAX_REJECTIONS
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.protocol import TorchTimingResult
from cuda_agent.sandbox.reports import TimingReport
from cuda_agent.sandbox.sanitizer import SANITIZER_ENV

from tests.llm_engine import MISMATCH, recorded_engine, recording_with_rejection
from tests.repository_support import EXPECTED, cli, make_repository
from tests.test_cli_sanitizer import RACE, SAXPY_LINE
from tests.test_sanitizer import fake_sanitizer

ROOT = Path(__file__).resolve().parents[1]
ELEMENTWISE = ROOT / "examples" / "elementwise.cu"
RECORDING = ROOT / "tests" / "recordings" / "elementwise_h200.json"


def samples(log: Path) -> list[dict[str, Any]]:
    return [r for r in FeedbackLog(log).records() if r.get("kind") == "candidate"]


def workspace(tmp_path: Path) -> Path:
    """A git checkout holding examples/elementwise.cu: its log is `.cuda-agent/feedback.jsonl` there."""
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    shutil.copy(ELEMENTWISE, root / "elementwise.cu")
    return root


def test_every_candidate_of_a_search_is_a_sample_with_its_verdict(tmp_path: Path) -> None:
    target = load_targets(ELEMENTWISE).find("saxpy")
    assert target is not None
    log = tmp_path / "feedback.jsonl"
    recording = recording_with_rejection(tmp_path, 512)  # block 512 fails verification with a mismatch
    with recorded_engine(recording, recorder=CandidateLog(log)) as engine:
        outcome = optimize(engine, target, budget_s=30)
    found = samples(log)
    assert [s["candidate"]["description"] for s in found] == [
        r.candidate.description for r in outcome.results
    ]
    assert [s["status"] for s in found] == [r.status for r in outcome.results]
    assert len({s["key"] for s in found}) == len(found)

    first, original = found[0], found[0]["original"]
    assert original["file_text"] == ELEMENTWISE.read_text() and original["kernel"] == "saxpy"
    assert 'kernel = "saxpy"' in original["spec"] and original["oracle"] == "PyTorch expression"
    assert original["problems"] == ["n=16777216", "n=1000003"]
    assert first["gpu"]["name"] == "NVIDIA H200" and first["gpu"]["driver_version"] == "recorded"
    assert first["toolchain"]["compiler"] == "nvrtc" and first["toolchain"]["arch"] == "sm_90"

    (rejected,) = [s for s in found if s["status"] == "rejected"]
    assert rejected["candidate"]["block"] == [512] and not rejected["verified"]
    (failure,) = rejected["verification"]["failures"]
    assert (failure["check"], failure["message"], failure["problem"]) == ("mismatch", MISMATCH, "n=16777216")
    assert rejected["measurement"] is None

    faster = next(s for s in found if s["status"] == "faster" and s["candidate"]["block"] == [256])
    m = faster["measurement"]
    assert m["baseline"]["median_ms"] == 0.0832 and m["candidate"]["median_ms"] == 0.0653
    assert m["speedup"] == pytest.approx(0.0832 / 0.0653)
    low, high = m["ratio_ci"]
    assert low < 0.0653 / 0.0832 < high < 1 and m["candidate"]["p10_ms"] < 0.0653 < m["candidate"]["p90_ms"]
    # a search's sample carries its screening: the input sets it was verified on (the shown one gets all)
    assert faster["verification"]["passed"] and faster["verification"]["input_sets"] == 2


def test_rewards_use_the_pytorch_times_measured_after_the_search(tmp_path: Path) -> None:
    target = load_targets(ELEMENTWISE).find("saxpy")
    assert target is not None
    log = tmp_path / "feedback.jsonl"
    with recorded_engine(recording_with_rejection(tmp_path, 512), recorder=CandidateLog(log)) as engine:
        outcome = optimize(engine, target, budget_s=30)
        # What Engine.time_torch hands the log on a GPU (the recording holds no PyTorch times): eager
        # 0.100 ms, torch.compile 0.070 ms.
        timed = TorchTimingResult(TimingReport("eager", 0.100, 0.099, 0.101, 50),
                                  TimingReport("compiled", 0.070, 0.069, 0.071, 50))  # fmt: skip
        engine.recorder.torch(outcome.baseline, timed, engine.gpu)
    summary = export(log, tmp_path / "out")
    rows = [json.loads(line) for line in (tmp_path / "out" / "rewards.jsonl").read_text().splitlines()]
    by_status = {(r["status"], r["candidate_ms"]): r["reward"] for r in rows}
    # 0.0653 ms: >5% faster than eager and than torch.compile; 0.0832 ms (no gain): than eager only.
    assert by_status[("faster", 0.0653)] == 3 and by_status[("no gain", 0.0832)] == 2
    assert by_status[("rejected", None)] == -1
    fast = next(r for r in rows if r["candidate_ms"] == 0.0653)
    assert fast["speedup_vs_eager"] == pytest.approx(0.100 / 0.0653)
    assert fast["speedup_vs_compile"] == pytest.approx(0.070 / 0.0653)
    assert summary.torch_timed == 1 and set(summary.rewards) == {-1, 2, 3}
    assert "| +3 |" in (tmp_path / "out" / "README.md").read_text()


def test_the_cli_logs_each_candidate_once_in_the_workspaces_log(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    args = ("optimize", "elementwise.cu", "--kernel", "saxpy", "--budget-s", "30")
    first = cli(*args, cwd=root, cache=tmp_path / "cache", recording=RECORDING)
    assert first.returncode == 0, first.stdout + first.stderr
    log = root / ".cuda-agent" / "feedback.jsonl"
    found = samples(log)
    assert len(found) > 5 and {s["original"]["kernel"] for s in found} == {"saxpy"}
    assert {s["original"]["file"] for s in found} == {"elementwise.cu"}  # a name, not the user's folders

    # Again: every result comes from the engine's cache, and the export counts each candidate once.
    again = cli(*args, cwd=root, cache=tmp_path / "cache", recording=RECORDING)
    assert again.returncode == 0, again.stdout + again.stderr
    repeated = samples(log)[len(found) :]
    assert [s["key"] for s in repeated] == [s["key"] for s in found] and all(s["cached"] for s in repeated)
    out = tmp_path / "out"
    exported = cli("feedback", "export", "--out", str(out), cwd=root, cache=tmp_path / "cache")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert f"{len(found)} samples of 1 prompts" in exported.stdout
    rows = (out / "rewards.jsonl").read_text().splitlines()
    assert len(rows) == len(found)
    assert (
        f"samples (distinct candidates): {len(found)} ({len(found)} repeated records counted once)"
        in (out / "README.md").read_text()
    )

    off = cli(*args, cwd=workspace(tmp_path / "off"), cache=tmp_path / "cache", recording=RECORDING,
              env={"CUDA_AGENT_FEEDBACK": "0"})  # fmt: skip
    assert off.returncode == 0 and not (tmp_path / "off" / "ws" / ".cuda-agent").exists()


def test_repository_mode_logs_every_kernels_candidates(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    result = cli("optimize", ".", "--proposer", "launch-config", cwd=repo, cache=tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    found = samples(repo / ".cuda-agent" / "feedback.jsonl")
    assert {s["original"]["kernel"] for s in found} == set(EXPECTED)
    (mismatch,) = [s for s in found if s["status"] == "rejected"]
    assert mismatch["original"]["kernel"] == "daxpy" and mismatch["candidate"]["block"] == [1024]
    assert mismatch["verification"]["failures"][0]["check"] == "mismatch"
    assert {s["candidate"]["proposer"] for s in found} == {"launch-config"}
    # daxpy is in two files (src/blas/axpy.cu and keep_tmp.cu, the same text): one prompt, its samples once.
    daxpy = [s for s in found if s["original"]["kernel"] == "daxpy"]
    assert len({s["key"] for s in daxpy}) == len(daxpy)


def test_compare_logs_the_hand_written_rewrite_with_its_compile_errors_on_their_lines(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    text = (root / "elementwise.cu").read_text()
    broken = root / "broken.cu"
    broken.write_text(text.replace("y[i] = a * x[i] + y[i];", "y[i] = a * x[i] + z[i];"))
    line = 1 + text.split("\n").index("    if (i < n) y[i] = a * x[i] + y[i];")
    compare = ("compare", "elementwise.cu")
    result = cli(
        *compare, "broken.cu", "--kernel", "saxpy", cwd=root, cache=tmp_path / "c", recording=RECORDING
    )
    assert result.returncode == 1, result.stdout + result.stderr
    fine = root / "fine.cu"
    fine.write_text(text.replace("block = [128]", "block = [256]"))
    result = cli(
        *compare, "fine.cu", "--kernel", "saxpy", cwd=root, cache=tmp_path / "c", recording=RECORDING
    )
    assert result.returncode == 0, result.stdout + result.stderr

    failed, faster = samples(root / ".cuda-agent" / "feedback.jsonl")
    assert failed["candidate"]["proposer"] == "hand-written" and failed["status"] == "compile error"
    errors = [d for d in failed["compile"]["diagnostics"] if d["severity"] == "error"]
    assert errors and errors[0]["line"] == line and '"z" is undefined' in errors[0]["message"]
    assert faster["status"] == "faster" and faster["candidate"]["block"] == [256]
    assert faster["candidate"]["description"] == "saxpy from fine.cu"


def test_the_bench_logs_its_candidates(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    recording = json.loads(RECORDING.read_text())
    recording["kernels"] = {"gelu": {"original_ms": 0.4, "candidates": [{"block": [512], "median_ms": 0.3}]}}
    (tmp_path / "gelu.json").write_text(json.dumps(recording))
    result = cli(
        "bench", "--kernels", "gelu", "--budget-s", "20", "--out", str(tmp_path / "results"),
        cwd=root, cache=tmp_path / "cache", recording=tmp_path / "gelu.json",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    found = samples(root / ".cuda-agent" / "feedback.jsonl")
    assert found and {s["original"]["kernel"] for s in found} == {"gelu"}
    assert any(s["status"] == "faster" and s["candidate"]["block"] == [512] for s in found)


def test_outside_a_workspace_the_cli_logs_to_the_user_data_dir(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(ELEMENTWISE, loose / "elementwise.cu")
    data = tmp_path / "data"
    env = {"CUDA_AGENT_FEEDBACK_LOG": "", "XDG_DATA_HOME": str(data)}
    result = cli("optimize", "elementwise.cu", "--kernel", "saxpy", cwd=loose, cache=tmp_path / "cache",
                 recording=RECORDING, env=env)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert samples(data / "cuda-agent" / "feedback.jsonl") and not (loose / ".cuda-agent").exists()
    assert os.environ.get("CUDA_AGENT_FEEDBACK_LOG")  # the other tests' commands log to a scratch log


def test_a_file_too_long_to_be_a_prompt_is_searched_but_not_logged(tmp_path: Path) -> None:
    text = ELEMENTWISE.read_text() + "// " + "padding " * (MAX_FILE_BYTES // 8) + "\n"
    target = load_targets(tmp_path / "huge.cu", text).find("saxpy")
    assert target is not None
    log = tmp_path / "feedback.jsonl"
    with recorded_engine(RECORDING, recorder=CandidateLog(log)) as engine:
        outcome = optimize(engine, target, ("launch-config",), budget_s=30)
    assert outcome.best is not None and not log.exists()


def sanitized_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reports: dict[str, str]) -> Path:
    """A search whose faster candidates go through the compute-sanitizer gate, the tool a stand-in answering
    `reports` ({tool: report}; none: clean); the log it wrote."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv(SANITIZER_ENV, str(fake_sanitizer(tmp_path)))
    monkeypatch.setenv("FAKE_SANITIZER_LOG", str(tmp_path / "sanitizer-calls.jsonl"))
    monkeypatch.setenv("FAKE_SANITIZER_REPORTS", json.dumps(reports))
    target = load_targets(ELEMENTWISE).find("saxpy")
    assert target is not None
    log = tmp_path / "feedback.jsonl"
    with recorded_engine(RECORDING, recorder=CandidateLog(log)) as engine:
        optimize(engine, target, budget_s=30, sanitize=True)
    return log


def rows_of(out: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]


def test_a_candidate_compute_sanitizer_rejected_is_incorrect_in_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = sanitized_search(tmp_path, monkeypatch, {"racecheck": RACE})
    verdicts = [r for r in FeedbackLog(log).records() if r.get("kind") == "sanitizer"]
    # The gate checked the faster candidates, best first, up to its limit: each rejection is logged.
    assert len(verdicts) == MAX_REJECTIONS
    assert {(v["status"], v["check"]) for v in verdicts} == {("rejected", "racecheck")}
    by_key = {s["key"]: s for s in samples(log)}
    assert all(by_key[v["key"]]["status"] == "faster" for v in verdicts)  # as the search timed them
    assert all(v["findings"][0]["line"] == SAXPY_LINE for v in verdicts)

    summary = export(log, tmp_path / "out")
    rows = {r["sample_key"]: r for r in rows_of(tmp_path / "out", "rewards")}
    for verdict in verdicts:
        row = rows[verdict["key"]]
        assert (row["reward"], row["verified"], row["status"]) == (-1, False, "rejected")
        assert (row["failed_check"], row["sanitizer"]) == ("racecheck", "rejected")
        assert row["reason"].startswith("rejected by compute-sanitizer racecheck: Error: Race")
    unchecked = [r for key, r in rows.items() if key not in {v["key"] for v in verdicts}]
    assert unchecked and all(r["sanitizer"] is None for r in unchecked)
    # Never the chosen side of a pair: incorrect, it is only ever the rejected one.
    rejected_sources = {rows[v["key"]]["completion"] for v in verdicts}
    pairs = rows_of(tmp_path / "out", "preferences")
    assert not any(p["chosen"] in rejected_sources for p in pairs)
    assert any(p["rejected"] in rejected_sources and p["rejected_status"] == "rejected" for p in pairs)
    assert summary.sanitizer == {"rejected": MAX_REJECTIONS}
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"checked by compute-sanitizer: rejected {MAX_REJECTIONS}" in card
    assert "compute-sanitizer's memcheck, racecheck, initcheck or synccheck found something" in card


def test_a_candidate_compute_sanitizer_passed_says_so_in_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = sanitized_search(tmp_path, monkeypatch, {})
    (verdict,) = [r for r in FeedbackLog(log).records() if r.get("kind") == "sanitizer"]
    assert verdict["status"] == "passed" and verdict["check"] is None
    assert {run["tool"] for run in verdict["runs"]} == {"memcheck", "racecheck", "synccheck", "initcheck"}
    export(log, tmp_path / "out", formats=("rewards",))
    (row,) = [r for r in rows_of(tmp_path / "out", "rewards") if r["sample_key"] == verdict["key"]]
    assert (row["sanitizer"], row["verified"], row["status"], row["reward"]) == ("passed", True, "faster", 1)
    assert row["candidate_ms"] == 0.0653  # the fastest: block 256


def test_of_two_verdicts_on_one_candidate_a_rejection_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A race need not show every run: one run that found it makes the candidate incorrect, whichever came
    first in the log."""
    clean = sanitized_search(tmp_path / "clean", monkeypatch, {})
    racy = sanitized_search(tmp_path / "racy", monkeypatch, {"racecheck": RACE})
    log = FeedbackLog(tmp_path / "both.jsonl")
    for record in [*FeedbackLog(racy).records(), *FeedbackLog(clean).records()]:
        log.append(record)
    (passed,) = [r for r in FeedbackLog(clean).records() if r.get("kind") == "sanitizer"]
    export(log.path, tmp_path / "out", formats=("rewards",))
    (row,) = [r for r in rows_of(tmp_path / "out", "rewards") if r["sample_key"] == passed["key"]]
    assert (row["sanitizer"], row["reward"], row["failed_check"]) == ("rejected", -1, "racecheck")


def test_a_candidate_failing_the_full_verification_is_incorrect_in_the_export(tmp_path: Path) -> None:
    """The search passed block 256 on its screening's 2 input sets; on all 5, before it was shown, it
    failed: its sample (logged as faster) is rejected in the export, never a preference pair's chosen side."""
    from tests.test_confirmation import spied_verify

    target = load_targets(ELEMENTWISE).find("saxpy")
    assert target is not None
    log = tmp_path / "feedback.jsonl"
    with recorded_engine(RECORDING, recorder=CandidateLog(log)) as engine:
        _, failed = spied_verify(engine, fail_full_once=True)
        outcome = optimize(engine, target, ("launch-config",), budget_s=30)
    assert failed == [256] and outcome.best is None
    (verdict,) = [r for r in FeedbackLog(log).records() if r.get("kind") == "verification"]
    (sample,) = [s for s in samples(log) if s["key"] == verdict["key"]]
    assert sample["candidate"]["block"] == [256] and sample["status"] == "faster"  # as screened
    assert (verdict["status"], verdict["check"], verdict["input_sets"]) == ("rejected", "mismatch", 5)

    export(log, tmp_path / "out")
    rows = {r["sample_key"]: r for r in rows_of(tmp_path / "out", "rewards")}
    row = rows[verdict["key"]]
    assert (row["reward"], row["verified"], row["status"], row["failed_check"]) == (
        -1,
        False,
        "rejected",
        "mismatch",
    )
    others = [r for key, r in rows.items() if key != verdict["key"]]
    assert others and all(r["status"] != "rejected" or r["failed_check"] != "mismatch" for r in others)
    assert not any(p["chosen"] == row["completion"] for p in rows_of(tmp_path / "out", "preferences"))
