"""The sweep over code we did not write (bench/sweep_bench.py), on a small folder: it counts kernels,
specs and what the analysis-driven proposers offer, says why a kernel got no spec, and with --compile
checks the first round's candidates with nvcc."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget

from bench.sweep_bench import main, sweep
from tests.test_rewrite_warp_per_output import needs_compiler

ROOT = Path(__file__).resolve().parents[1]


def folder(tmp_path: Path) -> Path:
    (tmp_path / "sumsq.cu").write_text(
        (ROOT / "bench" / "kernels" / "outside" / "sumsq_blocks.cu").read_text()
    )
    # no spec can be inferred: three sizes, and a buffer read where another says
    (tmp_path / "mix.cu").write_text(
        "__global__ void mix(const float* a, const int* at, float* b, int p, int q, int r) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < p * q * r) b[i] = a[at[i]];\n}\n"
    )
    return tmp_path


def test_the_sweep_counts_specs_offers_and_the_reasons_for_no_spec(tmp_path: Path) -> None:
    found = sweep([folder(tmp_path)])
    assert (found.kernels, found.with_spec, found.offered) == (2, 1, 1)
    assert found.by_proposer["rewrite:block-to-loop"] == 1 and not found.raised
    assert list(found.no_spec) == ["an index read from memory in a[at[i]]"]


@needs_compiler
def test_with_compile_every_candidate_of_a_compiling_original_compiles(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([str(folder(tmp_path)), "--compile"]) == 0
    printed = capsys.readouterr().out
    assert "kernels: 2; with a spec: 1; offered a rewrite or an idiom: 1" in printed
    assert "broken where the original compiles: 0" in printed


def test_with_all_the_transforms_and_launch_tuning_are_counted_too(tmp_path: Path) -> None:
    found = sweep([folder(tmp_path)], every=True)
    assert found.by_proposer["rewrite:block-to-loop"] == 1 and not found.raised
    assert found.by_proposer["launch-config"] == 1 and found.by_proposer["restrict"] == 1
    assert "launch-config" not in sweep([folder(tmp_path)]).by_proposer


@needs_compiler
def test_the_second_round_is_made_on_the_rewrites_files_and_compiles(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """--second-round: every follow-up proposer on the first rewrites, as a later round makes them (on an
    accessor kernel, on the file a rewrite brought back), and each compiles."""
    (tmp_path / "lstm.cu").write_text(
        (ROOT / "bench" / "kernels" / "outside" / "lstm_cell_accessors.cu").read_text()
    )
    found = sweep([tmp_path], second_round=True)
    assert found.combined >= 10 and not found.raised  # launch tuning and the transforms, on two bases
    assert main([str(tmp_path), "--compile", "--second-round"]) == 0
    printed = capsys.readouterr().out
    assert f"second-round candidates on the first analysis-driven ones: {found.combined}" in printed
    assert "broken where the original compiles: 0" in printed


def test_a_candidate_whose_file_does_not_read_back_is_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite that spoils the spec it writes (a launch written twice over a grid of another length), or
    whose file says another launch than the one it ran with, breaks the user's file: the sweep says so."""
    (tmp_path / "bias_relu.cu").write_text((ROOT / "bench" / "kernels" / "bias_relu_fp16.cu").read_text())
    assert not sweep([tmp_path]).broke  # every real proposer's files read back

    def spoiled(target: KernelTarget) -> list:  # type: ignore[type-arg]
        (candidate,) = PROPOSERS["rewrite:word-spans"](target)[:1]
        candidate = replace(candidate, proposer="rewrite:spoiled")
        grid = 'grid = ["ceil_div(cols, 2 * block.x)", "ceil_div(rows, block.y)"]'
        wrong = replace(candidate, launch=LaunchSpec(block=(64, 4), grid=candidate.launch.grid))  # type: ignore[union-attr]
        return [replace(candidate, source=candidate.source.replace(grid, grid + 'y)"]')), wrong]

    monkeypatch.setitem(PROPOSERS, "rewrite:spoiled", spoiled)
    broke = sweep([tmp_path]).broke
    assert len(broke) == 2, broke
    assert "rewrite:spoiled: its file does not read back: TOML syntax error" in broke[0]
    assert broke[1].endswith("rewrite:spoiled: its file reads back another launch")
