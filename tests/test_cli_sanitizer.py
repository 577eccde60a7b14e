"""The compute-sanitizer gate through the command line, as a user runs it, with the GPU worker's answers
from the H200 recording (block 256 is the faster saxpy): without the tool the rewrite is written and says it
was not checked; a finding keeps it out of the file and shows the line of the rewrite; a clean run says what
it cost. compute-sanitizer itself is a stand-in here (tests/test_sanitizer.py), named by
$CUDA_AGENT_COMPUTE_SANITIZER; the real one runs in tests/test_sanitizer_gpu.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cuda_agent.sandbox.sanitizer import SANITIZER_ENV

from tests.test_cli import EXAMPLES, RECORDING, run
from tests.test_sanitizer import calls, fake_sanitizer

SAXPY_LINE = 33  # `if (i < n) y[i] = a * x[i] + y[i];` in examples/elementwise.cu, and in its rewrite
RACE = (
    f"========= Error: Race reported between Write access at saxpy+0x100 in elementwise.cu:{SAXPY_LINE}\n"
    f"=========     and Read access at saxpy+0x150 in elementwise.cu:{SAXPY_LINE} [2 hazards]\n"
    "=========\x20\n"
    "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
)


def flat(text: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(text.split())


@pytest.fixture
def elementwise(tmp_path: Path) -> Path:
    path = tmp_path / "elementwise.cu"
    path.write_bytes((EXAMPLES / "elementwise.cu").read_bytes())
    return path


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """compute-sanitizer as the stand-in; its calls are logged to the returned path."""
    log = tmp_path / "sanitizer-calls.jsonl"
    monkeypatch.setenv(SANITIZER_ENV, str(fake_sanitizer(tmp_path)))
    monkeypatch.setenv("FAKE_SANITIZER_LOG", str(log))
    return log


def optimize(path: Path, *flags: str) -> tuple[int, str, str]:
    result = run("optimize", str(path), "--kernel", "saxpy", *flags, cache=path.parent, recording=RECORDING)
    return result.returncode, result.stdout, result.stderr


def test_write_without_compute_sanitizer_writes_and_says_it_was_not_checked(
    elementwise: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SANITIZER_ENV, str(elementwise.parent / "nowhere" / "compute-sanitizer"))
    code, out, err = optimize(elementwise, "--write")
    assert code == 0, out + err
    assert "not checked by compute-sanitizer: not found" in flat(out)
    assert "block = [256]" in elementwise.read_text() and "wrote" in out
    assert "Traceback" not in err


def test_a_finding_keeps_the_rewrite_out_of_the_file_and_names_its_line(
    elementwise: Path, stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SANITIZER_REPORTS", json.dumps({"racecheck": RACE}))
    original = elementwise.read_bytes()
    code, out, err = optimize(elementwise, "--write")
    assert code == 0, out + err
    text = flat(out)
    assert "rejected by compute-sanitizer: block 256" in text
    assert f"racecheck race at {elementwise}, line {SAXPY_LINE} of the rewrite" in text
    assert "if (i < n) y[i] = a * x[i] + y[i];" in text  # the line itself
    assert "no faster candidate passed compute-sanitizer" in text  # the explanation says why
    assert "rejected by compute-sanitizer (first: racecheck: Error: Race reported" in text
    assert elementwise.read_bytes() == original and "wrote" not in out
    # Each of the three faster candidates (block 256, and it with two __launch_bounds__) was checked in turn,
    # the best first, its four tools side by side.
    assert sorted(c["tool"] for c in calls(stand_in)) == sorted(
        ["memcheck", "racecheck", "synccheck", "initcheck"] * 3
    )
    assert text.count("rejected by compute-sanitizer: block 256") == 3


def test_a_clean_run_is_written_and_says_what_each_tool_cost(elementwise: Path, stand_in: Path) -> None:
    code, out, err = optimize(elementwise, "--write")
    assert code == 0, out + err
    text = flat(out)
    assert "checked by compute-sanitizer, no findings: memcheck" in text
    for tool in ("racecheck", "synccheck", "initcheck"):
        assert f"{tool} " in text.split("no findings:", 1)[1]
    assert "block = [256]" in elementwise.read_text()
    logged = calls(stand_in)
    assert sorted(c["tool"] for c in logged) == ["initcheck", "memcheck", "racecheck", "synccheck"]
    # The benchmark size (2 x 16M elements) is above the memory tools' cap: the verification size only.
    assert {tuple(c["problems"]) for c in logged} == {("n=1000003",)}


def test_a_rewrite_the_tool_could_not_check_is_shown_but_not_written(
    elementwise: Path, stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SANITIZER_FAIL", "synccheck")
    original = elementwise.read_bytes()
    code, out, err = optimize(elementwise, "--write")
    text = flat(out)
    assert code == 1, out + err
    assert "not checked by compute-sanitizer: synccheck could not run (exit status 1)" in text
    assert "RuntimeError: the stand-in failed" in text
    assert "not writing saxpy's rewrite: compute-sanitizer could not check it" in text
    assert "block = [256]" in out and elementwise.read_bytes() == original  # shown, not written


def test_the_gate_is_off_without_write_unless_asked_and_no_sanitize_turns_it_off(
    elementwise: Path, stand_in: Path
) -> None:
    code, out, _ = optimize(elementwise)
    assert code == 0 and "compute-sanitizer" not in out and calls(stand_in) == []
    code, out, _ = optimize(elementwise, "--write", "--no-sanitize")
    assert code == 0 and "compute-sanitizer" not in out and calls(stand_in) == []
    assert "block = [256]" in elementwise.read_text()
    code, out, _ = optimize(elementwise, "--sanitize")
    assert code == 0 and "checked by compute-sanitizer, no findings" in flat(out)
    assert len(calls(stand_in)) == 4


def test_compare_with_sanitize_rejects_a_rewrite_with_a_finding(
    elementwise: Path, stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = elementwise.parent / "saxpy_256.cu"
    new.write_text(elementwise.read_text().replace("block = [128]", "block = [256]"))
    monkeypatch.setenv("FAKE_SANITIZER_REPORTS", json.dumps({"racecheck": RACE}))
    args = ("compare", str(elementwise), str(new), "--kernel", "saxpy")
    clean = run(*args, cache=elementwise.parent, recording=RECORDING)
    assert clean.returncode == 0 and "compute-sanitizer" not in clean.stdout  # off unless asked
    result = run(*args, "--sanitize", cache=elementwise.parent, recording=RECORDING)
    text = flat(result.stdout)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "verdict: rejected" in text
    assert f"line {SAXPY_LINE} of {new}: if (i < n) y[i] = a * x[i] + y[i];" in text


def test_doctor_says_whether_compute_sanitizer_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SANITIZER_ENV, str(fake_sanitizer(tmp_path)))
    found = run("doctor", cache=tmp_path)
    assert f"compute-sanitizer: {tmp_path / 'compute-sanitizer'} (Version 2025.3.1.0 (stand-in))" in flat(
        found.stdout
    )
    monkeypatch.setenv(SANITIZER_ENV, str(tmp_path / "missing"))
    missing = run("doctor", cache=tmp_path)
    assert "compute-sanitizer: not found" in missing.stdout
