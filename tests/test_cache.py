"""The results cache: keys follow what a result depends on, values come back fast."""

from __future__ import annotations

import time
from pathlib import Path

from cuda_agent.agent.cache import ResultCache, result_key
from cuda_agent.sandbox.plan import ArgumentPlan, LaunchPlan, Problem, Tolerance


def _problem(n: int) -> Problem:
    args = (
        ArgumentPlan("x", "input", "float32", (n,)),
        ArgumentPlan("y", "output", "float32", (n,)),
    )
    return Problem(f"n={n}", {"n": n}, args, {"y": Tolerance(1e-4, 1e-4)})


def test_key_is_stable_for_equal_inputs_and_changes_with_any_part() -> None:
    launch = LaunchPlan((4, 1, 1), (256, 1, 1))
    key = result_key("baseline", _problem(1024), launch, b"cubin", ("H200", (9, 0), "580"))
    assert key == result_key("baseline", _problem(1024), launch, b"cubin", ("H200", (9, 0), "580"))
    assert key != result_key("baseline", _problem(2048), launch, b"cubin", ("H200", (9, 0), "580"))
    assert key != result_key(
        "baseline", _problem(1024), LaunchPlan((2, 1, 1), (512, 1, 1)), b"cubin", ("H200", (9, 0), "580")
    )
    assert key != result_key("baseline", _problem(1024), launch, b"other", ("H200", (9, 0), "580"))
    assert key != result_key("baseline", _problem(1024), launch, b"cubin", ("H100", (9, 0), "580"))
    assert key != result_key("candidate", _problem(1024), launch, b"cubin", ("H200", (9, 0), "580"))


def test_values_survive_reopening_and_come_back_in_milliseconds(tmp_path: Path) -> None:
    with ResultCache(tmp_path) as cache:
        cache.set("k", _problem(7))
    with ResultCache(tmp_path) as cache:
        start = time.perf_counter()
        value = cache.get("k")
        elapsed = time.perf_counter() - start
    assert value == _problem(7)
    assert elapsed < 0.05


def test_disabled_cache_stores_nothing(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, enabled=False)
    cache.set("k", 1)
    assert cache.get("k") is None
