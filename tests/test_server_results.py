"""A result with its PyTorch comparison: the hover rows and the feedback record that carries it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.feedback import read_records
from cuda_agent.agent.targets import load_targets
from cuda_agent.server.feedback import SuggestionFeedback
from cuda_agent.server.hover import timing_rows
from cuda_agent.server.rewrites import MeasuredTime, OptimizeResult, Rewrite

ROOT = Path(__file__).resolve().parents[1]
ELEMENTWISE = (ROOT / "examples" / "elementwise.cu").read_text()


def time(ms: float) -> MeasuredTime:
    return MeasuredTime(ms, ms * 0.99, ms * 1.01, 100)


RESULT = OptimizeResult(
    uri="file:///w/elementwise.cu", version=3, kernel="saxpy", gpu="NVIDIA H200", input_sets=5, sizes=2,
    explanation="", measured_at="2026-11-29T22:00:00+00:00", original=time(0.0832),
    rewrite=Rewrite("c1", "block 256", "launch-config", ELEMENTWISE.replace("[128]", "[256]"), (),
                    0.0832 / 0.0653, time(0.0832), time(0.0653), "faster"),
    candidates=(),
)  # fmt: skip


def test_hover_compares_the_rewrite_with_torch_compile_once_timed() -> None:
    assert not any("torch.compile" in row for row in timing_rows(RESULT))
    rows = timing_rows(replace(RESULT, torch_eager=time(0.1700), torch_compile=time(0.0850)))
    assert any(
        row.startswith("| PyTorch eager (the spec's oracle) | 0.1700 ms |") and "| 0.49× |" in row
        for row in rows
    )
    assert any(row.startswith("| torch.compile (the spec's oracle) | 0.0850 ms |") for row in rows)
    assert "The rewrite is 1.30× faster than torch.compile of the same function." in rows
    slower = timing_rows(replace(RESULT, torch_compile=time(0.0500)))
    assert "The rewrite is 0.77× slower than torch.compile of the same function." in slower


def test_hover_says_what_applying_the_rewrite_leaves_to_the_user() -> None:
    assert not any(row.startswith("Note:") for row in timing_rows(RESULT))
    note = "the spec now compiles it with --use_fast_math; add it to your own build"
    rewrite = replace(RESULT.rewrite, notes=(note,))
    assert f"Note: {note}" in timing_rows(replace(RESULT, rewrite=rewrite))


def test_a_decision_record_carries_torch_compile_measured_after_the_suggestion_was_shown(
    tmp_path: Path,
) -> None:
    target = load_targets(Path("elementwise.cu"), ELEMENTWISE).find("saxpy")
    assert target is not None
    feedback = SuggestionFeedback(CandidateLog())  # not this process's engines' log
    feedback.configure(tmp_path, enabled=True)
    feedback.shown(ELEMENTWISE, target, RESULT)
    feedback.torch_timed(RESULT.uri, "saxpy", 0.0850)
    feedback.decided(RESULT.uri, "saxpy", "accepted")
    feedback.flush()
    shown, accepted = read_records(feedback.log_path)  # type: ignore[arg-type]
    assert shown.event == "shown" and shown.measurement.torch_compile_ms is None  # not known yet then
    assert accepted.event == "accepted" and accepted.measurement.torch_compile_ms == 0.0850


def test_the_search_replacing_its_best_so_far_logs_each_shown_rewrite_once(tmp_path: Path) -> None:
    target = load_targets(Path("elementwise.cu"), ELEMENTWISE).find("saxpy")
    assert target is not None
    feedback = SuggestionFeedback(CandidateLog())  # not this process's engines' log
    feedback.configure(tmp_path, enabled=True)
    first = replace(RESULT, searching=True)
    better = replace(
        RESULT,
        searching=True,
        rewrite=replace(RESULT.rewrite, candidate_id="c2", source=ELEMENTWISE.replace("[128]", "[512]")),
    )  # type: ignore[type-var]
    for shown in (first, better, replace(better, searching=False)):  # the last: the search's final result
        feedback.shown(ELEMENTWISE, target, shown)
    feedback.decided(RESULT.uri, "saxpy", "accepted")
    feedback.flush()
    records = read_records(feedback.log_path)  # type: ignore[arg-type]
    assert [(r.event, r.candidate.source.count("[512]")) for r in records] == [
        ("shown", 0), ("superseded", 0), ("shown", 1), ("accepted", 1),
    ]  # fmt: skip
    assert records[0].suggestion_id == records[1].suggestion_id != records[2].suggestion_id
