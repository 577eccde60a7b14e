"""The HTML report, opened as people open it: a real browser (Debian's Chromium, headless) with the network
cut off, a screenshot kept in test-artifacts/ and its charts' marks found in the pixels."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cuda_agent.html_report import AFTER, BEFORE, KernelEntry, Page, Point, render
from tests.repository_support import ROOT, cli, make_repository

ARTIFACTS = ROOT / "test-artifacts"
REQUIRED = os.environ.get("CUDA_AGENT_E2E_REQUIRED") == "1"


def chromium() -> str:
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    return found


def screenshot(page: Path, out: Path, height: int = 2400) -> dict[tuple[int, int, int], int]:
    """The page rendered offline (every host name unresolvable, no proxy reachable); its colours counted."""
    from PIL import Image

    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--no-first-run",
         f"--window-size=1280,{height}", f"--screenshot={out}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and out.exists(), done.stderr[-3000:]
    with Image.open(out) as image:
        return dict((colour, count) for count, colour in image.convert("RGB").getcolors(1 << 24) or [])


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def test_the_run_report_is_self_contained_and_its_charts_render(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    report = tmp_path / "report.html"
    done = cli("optimize", ".", "--gpus", "0,1", "--proposer", "launch-config", "--report", str(report),
               cwd=repo, cache=tmp_path / "cache")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    page = report.read_text()
    # Nothing fetched from anywhere: no script, stylesheet, image or font by address (the one URL is the
    # SVG namespace, which is a name, not a fetch).
    assert not re.search(r"<script|<link|<img|<iframe|url\(|@import|src=", page)
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg"}
    for kernel in ["leaky_relu_forward", "daxpy", "add_bias", "clamp_inplace"]:
        assert f">{kernel}</a>" in page
    assert "GPU: NVIDIA H200" in page
    assert "1.33× faster (0.080 ms → 0.060 ms)" in page  # daxpy, its speedup and times
    assert "-block = [128]" in page and "+block = [256]" in page  # the best rewrite's diff
    assert "y differs at 17 of 100003 elements" in page  # a rejected candidate with its reason
    assert "against the PyTorch expression; checks: mismatch" in page  # the verification it passed

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "html-report.png"
    colours = screenshot(report, shot)
    # Each timed kernel draws a before and an after mark in its chart: hundreds of pixels of each colour.
    assert colours.get(rgb(BEFORE), 0) > 2000, "the before marks did not render"
    assert colours.get(rgb(AFTER), 0) > 2000, "the after marks did not render"


def test_a_kernel_with_counted_flops_gets_a_log_roofline(tmp_path: Path) -> None:
    """A compute-heavy kernel is placed by its FLOP rate at its intensity: below the roof, the rewrite
    higher than the original."""
    before, after = Point(900.0, 2_000.0, 32.0, 0.04), Point(2_500.0, 30_000.0, 32.0, 0.6)
    entry = KernelEntry(
        "matmul", "matmul.cu:12", "faster", 3.0, 0.2, 15.0, "tiled", before=before, after=after
    )
    page = Page("a matmul", "NVIDIA H200", 4186.0, 50.5, (), (), (entry,))
    text = render(page)
    marks = re.findall(r'<circle class="mark" cx="([\d.]+)" cy="([\d.]+)" r="7" fill="(#\w+)"', text)
    by_colour = {colour: (float(x), float(y)) for x, y, colour in marks}
    assert by_colour[AFTER][1] < by_colour[BEFORE][1]  # SVG y grows downwards: after is higher
    assert by_colour[AFTER][0] == by_colour[BEFORE][0]  # the same intensity: a rewrite moves the work up
    assert "50.5 TFLOP/s" in text and "4,186 GB/s" in text
    path = tmp_path / "matmul.html"
    path.write_text(text)
    colours = screenshot(path, tmp_path / "matmul.png", height=900)
    assert colours.get(rgb(AFTER), 0) > 50 and colours.get(rgb(BEFORE), 0) > 50
