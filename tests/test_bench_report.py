"""The bench report from hand-made results: summary figures, Markdown, JSON, file names."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.__main__ import main as bench_main
from bench.report import (
    BenchRun,
    KernelResult,
    from_json,
    geometric_mean,
    result_stem,
    rich_table,
    summarize,
    summary_lines,
    to_json,
    to_markdown,
    write,
)


def result(name: str, original: float | None, best: float | None = None, **extra: object) -> KernelResult:
    speedup = original / best if original and best else 1.0
    return KernelResult(name, f"{name}.cu", "n=1", original, best, speedup, **extra)  # type: ignore[arg-type]


RESULTS = (
    result("gelu", 4.0, 1.0, torch_compile_ms=0.9, first_improvement_s=2.0, best_description="float4"),
    result("softmax", 9.0, 1.0, torch_compile_ms=1.5, first_improvement_s=6.0, roofline_before=0.1),
    result("scan", 2.0, torch_compile_ms=1.0),  # never improved: counts 1.0×, first gain never
    result("broken", None, error="does not compile"),  # not timed: left out of every figure
)
RUN = BenchRun("NVIDIA H200", "2026-11-03T14:12:09+00:00", "0.1.0", 180.0, ("launch-config",), RESULTS)


def test_geometric_mean() -> None:
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([]) is None
    assert geometric_mean([0.0, math.inf]) is None


def test_summary_counts_unimproved_kernels_as_one_and_never() -> None:
    summary = summarize(RESULTS)
    assert (summary.kernels, summary.timed, summary.improved) == (4, 3, 2)
    assert summary.geomean_speedup == pytest.approx((4.0 * 9.0 * 1.0) ** (1 / 3))
    # vs torch.compile: 0.9/1.0, 1.5/1.0, 1.0/2.0
    assert summary.geomean_vs_torch_compile == pytest.approx((0.9 * 1.5 * 0.5) ** (1 / 3))
    assert (summary.at_least_torch_compile, summary.with_torch_compile) == (1, 3)
    assert summary.median_first_improvement_s == 6.0  # of 2, 6 and never
    assert summarize(RESULTS[2:]).median_first_improvement_s == math.inf


def test_a_kernel_two_percent_behind_torch_compile_ties_but_is_not_counted_as_faster() -> None:
    close = summarize(
        [result("copy", 2.0, 1.0, torch_compile_ms=0.98), result("far", 2.0, 1.0, torch_compile_ms=0.9)]
    )
    assert (close.at_least_torch_compile, close.within_tie_of_torch_compile) == (0, 1)
    assert "as fast as or faster than torch.compile: 0 of 2 (1 within 3%, the timing noise)" in summary_lines(
        close, 10
    )


def test_markdown_has_the_table_and_the_summary() -> None:
    text = to_markdown(RUN)
    assert text.startswith("# cuda-agent bench: NVIDIA H200")
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| kernel"))
    assert lines[header + 1].startswith("|---|---:")
    gelu = lines[header + 2]
    assert "| gelu | 4.000 ms | 1.000 ms | 4.00× |" in gelu and "| 0.900 ms | 0.90× | 2.0 s |" in gelu
    assert "| scan | 2.000 ms | — | 1.00× |" in text and "never" in text
    assert "not run: does not compile" in text
    assert "geometric-mean speedup over the originals: 3.30×" in text
    assert "as fast as or faster than torch.compile: 1 of 3" in text
    assert "median time to the first verified improvement: 6.0 s" in text


def test_json_round_trips_and_has_no_infinity() -> None:
    never = BenchRun(RUN.gpu, RUN.started, RUN.version, 10.0, (), RESULTS[2:3])
    data = json.loads(to_json(never))
    assert data["summary"]["median_first_improvement_s"] is None
    assert from_json(to_json(RUN)) == RUN
    assert json.loads(to_json(RUN))["summary"]["improved"] == 2


def test_files_are_named_by_date_and_gpu(tmp_path: Path) -> None:
    assert result_stem(RUN) == "2026-11-03T1412_NVIDIA-H200"
    json_path, markdown_path, html_path = write(RUN, tmp_path / "results")
    assert json_path.name == "2026-11-03T1412_NVIDIA-H200.json" and markdown_path.suffix == ".md"
    page = html_path.read_text()
    assert html_path.suffix == ".html" and all(f">{r.kernel}</a>" in page for r in RESULTS)
    assert from_json(json_path.read_text()) == RUN


def test_rich_table_has_a_row_per_kernel() -> None:
    table = rich_table(RUN)
    assert table.row_count == len(RESULTS)
    assert [c.header for c in table.columns][:4] == ["kernel", "original", "best", "speedup"]


def test_runs_of_parts_of_the_suite_merge_into_one_table(tmp_path: Path) -> None:
    first = BenchRun(RUN.gpu, "2026-11-03T14:12:09+00:00", RUN.version, 180.0, RUN.proposers, RESULTS[:2])
    later = BenchRun(RUN.gpu, "2026-11-03T14:30:00+00:00", RUN.version, 180.0, RUN.proposers, RESULTS[1:])
    paths = []
    for index, run in enumerate((later, first)):
        paths.append(tmp_path / f"{index}.json")
        paths[-1].write_text(to_json(run))
    out = tmp_path / "merged"
    assert bench_main(["--merge", *map(str, paths), "--out", str(out)]) == 0
    merged = from_json((out / "2026-11-03T1412_NVIDIA-H200.json").read_text())
    assert sorted(r.kernel for r in merged.results) == sorted(r.kernel for r in RESULTS)
    assert merged.summary.improved == 2 and merged.started == first.started


def test_runs_of_different_gpus_do_not_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = BenchRun("NVIDIA A100", RUN.started, RUN.version, 180.0, RUN.proposers, RESULTS[:1])
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    paths[0].write_text(to_json(RUN))
    paths[1].write_text(to_json(other))
    assert bench_main(["--merge", *map(str, paths), "--out", str(tmp_path)]) == 2
    assert "runs differ in gpu: NVIDIA A100, NVIDIA H200" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.md"))
