"""The verifier's checks on crafted numpy buffers (CPU): each fails when it should, passes when it should.
Also: the caller's Sandbox on a machine with no GPU says so plainly and does not hang."""

from __future__ import annotations

import time

import numpy as np
import pytest
from cuda_agent.sandbox.checks import (
    bfloat16_bits_to_float32,
    check_deterministic,
    check_guards,
    check_unchanged,
    compare_output,
    float32_to_bfloat16_bits,
    poisoned_elements,
    timed_runs_to_replay,
    unexplained_poison,
    unwritten_elements,
)
from cuda_agent.sandbox.plan import Tolerance

F32 = Tolerance(1e-4, 1e-4)


def poisoned(shape: tuple[int, ...], byte: int, dtype: str = "float32") -> np.ndarray:
    return np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, byte, np.uint8).view(dtype).reshape(shape)


# -- compare_output -------------------------------------------------------------------------------------


def test_compare_passes_within_tolerance() -> None:
    expected = np.linspace(-5, 5, 1000, dtype=np.float32)
    actual = expected + np.float32(1e-4) * 0.9 * (1 + np.abs(expected))
    assert compare_output(actual, expected, F32, "float32") is None


def test_compare_reports_count_errors_and_first_index_in_the_argument_shape() -> None:
    expected = np.zeros((4, 5), np.float32)
    actual = expected.copy()
    actual[2, 3] = 0.5
    actual[3, 0] = -2.0
    failure = compare_output(actual, expected, F32, "float32", argument="out")
    assert failure is not None and failure.check == "mismatch"
    assert failure.bad_elements == 2 and failure.total_elements == 20
    assert failure.first_bad_index == (2, 3)
    assert failure.expected == 0.0 and failure.actual == 0.5
    assert failure.max_abs_error == pytest.approx(2.0)
    assert "out: 2 of 20 elements" in failure.message


def test_compare_nan_rules() -> None:
    expected = np.array([np.nan, 1.0, np.inf, 2.0], np.float32)

    def first_bad(actual: list[float]) -> tuple[int, ...] | None:
        failure = compare_output(np.array(actual, np.float32), expected, F32, "float32")
        return None if failure is None else failure.first_bad_index

    assert first_bad([np.nan, 1.0, np.inf, 2.0]) is None
    assert first_bad([np.nan, np.nan, np.inf, 2.0]) == (1,)  # NaN where a finite value is expected
    assert first_bad([0.0, 1.0, np.inf, 2.0]) == (0,)  # a value where NaN is expected
    assert first_bad([np.nan, 1.0, -np.inf, 2.0]) == (2,)  # the wrong infinity
    assert first_bad([np.nan, 1.0, np.inf, np.inf]) == (3,)  # inf where a finite value is expected


def test_compare_integers_exactly() -> None:
    expected = np.arange(10, dtype=np.int32)
    assert compare_output(expected.copy(), expected, Tolerance(1.0, 1.0), "int32") is None
    actual = expected.copy()
    actual[7] += 1
    failure = compare_output(actual, expected, Tolerance(0.0, 0.0), "int32")
    assert failure is not None and failure.bad_elements == 1 and failure.first_bad_index == (7,)
    assert "exactly" in failure.message
    # a float output's tolerance written for the whole kernel leaves its integer outputs exact
    assert compare_output(actual, expected, Tolerance(1e-3, 0.0), "int32") is not None


def test_an_integer_output_is_compared_within_a_written_whole_unit() -> None:
    """`tolerance = { q = { atol = 1 } }` on an int8 output (a rounding that may land on either neighbour)."""
    expected = np.array([-128, -3, 0, 5, 127], dtype=np.int8)
    actual = expected.copy()
    actual[1] += 1  # -2 for -3
    assert compare_output(actual, expected, Tolerance(1.0, 0.0), "int8") is None
    actual[3] += 2
    failure = compare_output(actual, expected, Tolerance(1.0, 0.0), "int8", argument="q")
    assert failure is not None and failure.bad_elements == 1 and failure.first_bad_index == (3,)
    assert "atol=1" in failure.message and "exactly" not in failure.message


def test_compare_bfloat16_as_bit_patterns() -> None:
    values = np.array([1.0, -2.5, 3.140625, 100.0], np.float32)
    bits = float32_to_bfloat16_bits(values)
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(bfloat16_bits_to_float32(bits), values)  # all exact in bfloat16
    tolerance = Tolerance(1e-2, 1e-2)
    assert compare_output(bits.copy(), bits, tolerance, "bfloat16") is None
    off = bits.copy()
    off[3] = float32_to_bfloat16_bits(np.array([104.0], np.float32))[0]  # 4% off
    failure = compare_output(off, bits, tolerance, "bfloat16")
    assert failure is not None and failure.first_bad_index == (3,)
    assert failure.expected == 100.0 and failure.actual == 104.0


def test_bfloat16_rounds_to_nearest_even() -> None:
    halfway_down = np.array([1.0 + 2.0**-8], np.float32)  # between 1 and 1 + 2^-7: ties to even (1.0)
    halfway_up = np.array([1.0 + 3 * 2.0**-8], np.float32)  # ties to even: 1 + 2^-6
    assert bfloat16_bits_to_float32(float32_to_bfloat16_bits(halfway_down))[0] == 1.0
    assert bfloat16_bits_to_float32(float32_to_bfloat16_bits(halfway_up))[0] == 1.0 + 2.0**-6
    assert np.isnan(bfloat16_bits_to_float32(float32_to_bfloat16_bits(np.array([np.nan], np.float32))))[0]


def test_compare_float16() -> None:
    expected = np.array([1.0, 2.0, 3.0], np.float16)
    assert compare_output(expected + np.float16(0.01), expected, Tolerance(1e-2, 1e-2), "float16") is None
    assert compare_output(expected + np.float16(0.1), expected, Tolerance(1e-2, 1e-2), "float16") is not None


def test_compare_ignores_masked_elements() -> None:
    expected = np.zeros(8, np.float32)
    actual = expected.copy()
    actual[5] = 1.0
    ignore = np.zeros(8, bool)
    ignore[5] = True
    assert compare_output(actual, expected, F32, "float32", ignore=ignore) is None


# -- unwritten ----------------------------------------------------------------------------------------------


def test_unwritten_flags_elements_left_at_both_poisons() -> None:
    first, second = poisoned((6, 4), 0xFF), poisoned((6, 4), 0xA5)
    first[:3], second[:3] = 1.0, 1.0  # the first half written in both runs
    failure = unwritten_elements(first, second, 0xFF, 0xA5, argument="out")
    assert failure is not None and failure.check == "unwritten"
    assert failure.bad_elements == 12 and failure.first_bad_index == (3, 0)
    assert "never written" in failure.message


def test_unwritten_passes_a_value_that_equals_one_poison() -> None:
    # 0xA5A5A5A5 as a float is a value a kernel may legitimately produce: it then appears in both runs.
    value = poisoned((4,), 0xA5)
    assert unwritten_elements(value.copy(), value.copy(), 0xFF, 0xA5) is None
    minus_one = np.full(4, -1, np.int32)  # 0xFFFFFFFF: an int32 output of -1 equals the 0xFF poison
    assert unwritten_elements(minus_one.copy(), minus_one.copy(), 0xFF, 0xA5) is None


def test_unwritten_flags_work_skipped_on_the_repeat_launch() -> None:
    first = np.arange(8, dtype=np.float32)  # the first run computed
    second = poisoned((8,), 0xA5)  # the second, same buffers, skipped: its poison remains
    failure = unwritten_elements(first, second, 0xFF, 0xA5)
    assert failure is not None and failure.bad_elements == 8
    assert "only one of two runs" in failure.message


def test_unwritten_ignores_what_the_reference_never_wrote_and_passes_full_writes() -> None:
    first, second = poisoned((4,), 0xFF), poisoned((4,), 0xA5)
    first[:2], second[:2] = 3.0, 3.0
    assert unwritten_elements(first, second, 0xFF, 0xA5, ignore=np.array([0, 0, 1, 1], bool)) is None
    full = np.ones(4, np.float32)
    assert unwritten_elements(full, full.copy(), 0xFF, 0xA5) is None


# Outputs whose correct values hit a poison pattern by chance, as half-precision and byte outputs do: 0xA5A5
# is the fp16 value -0.02205, 0xA5 the byte 165.
COLLIDING = {
    "float16": np.array([0x3800, 0xA5A5, 0x3C00, 0xA5A5, 0x4200, 0xA5A5, 0x3400, 0x4800], np.uint16).view(
        np.float16
    ),
    "uint8": np.array([165, 3, 165, 165, 0, 255, 165, 7], np.uint8),
    "int8": np.array([-91, 3, -91, 5, -91, 0, 1, -91], np.int8),  # -91 is 0xA5
    "bfloat16": float32_to_bfloat16_bits(np.array([1.0, -2.86e-16, 3.0, -2.86e-16], np.float32)),
}


@pytest.mark.parametrize("dtype", sorted(COLLIDING))
def test_values_equal_to_a_poison_are_not_unwritten_in_any_dtype(dtype: str) -> None:
    correct = COLLIDING[dtype]
    assert poisoned_elements(correct, 0xA5).sum() >= 2  # the collision is real
    # Written everywhere, in both runs (poisoned 0xFF then 0xA5): the equal values are not "unwritten".
    assert unwritten_elements(correct.copy(), correct.copy(), 0xFF, 0xA5) is None
    assert unwritten_elements(correct.copy(), correct.copy(), 0xA5, 0xFF) is None
    # One element really skipped in both runs: exactly that one is reported.
    first, second = correct.copy(), correct.copy()
    first.view(np.uint8).reshape(len(correct), -1)[1] = 0xFF
    second.view(np.uint8).reshape(len(correct), -1)[1] = 0xA5
    failure = unwritten_elements(first, second, 0xFF, 0xA5)
    assert failure is not None and failure.bad_elements == 1 and failure.first_bad_index == (1,)


def timed_count(output: np.ndarray, poison: int) -> int:
    return int(poisoned_elements(output, poison).sum())


@pytest.mark.parametrize("dtype", sorted(COLLIDING))
def test_a_timed_run_is_judged_against_the_kernels_own_collisions(dtype: str) -> None:
    correct = COLLIDING[dtype]
    natural = timed_count(correct, 0xA5)
    # The timed run wrote everything: its poisoned count is its natural collisions, replayed twice with
    # the other poison the kernel computes the same values: nothing unexplained.
    assert unexplained_poison(timed_count(correct, 0xA5), (natural, natural)) <= 0
    # A run that skipped two elements (left at the run's poison) shows two unexplained elements.
    skipped = correct.copy()
    rows = skipped.view(np.uint8).reshape(len(correct), -1)
    rows[np.flatnonzero(~poisoned_elements(correct, 0xA5))[:2]] = 0xA5
    assert unexplained_poison(timed_count(skipped, 0xA5), (natural, natural)) == 2


def test_float_atomics_rounding_differently_give_a_margin_not_a_failure() -> None:
    # Two replays disagree by one element (an atomic sum rounding to the poison in one of them).
    assert unexplained_poison(101, (100, 101)) <= 0
    assert unexplained_poison(110, (100, 101)) == 8


def test_the_runs_replayed_are_the_most_poisoned_of_each_poison_byte() -> None:
    # Even runs were poisoned 0xFF (rarely hit by chance), odd runs 0xA5 (hit thousands of times).
    counts = [0, 4100, 0, 4080, 7, 4150, 0, 9000, 0, 4120]
    assert timed_runs_to_replay(counts) == [4, 5, 7]
    assert timed_runs_to_replay([0, 0, 0]) == []


def test_poisoned_elements_per_element_bytes() -> None:
    values = poisoned((3,), 0xFF, "float64")
    values[1] = 0.0
    np.testing.assert_array_equal(poisoned_elements(values, 0xFF), [True, False, True])


# -- guards -------------------------------------------------------------------------------------------------


def guarded(data_len: int, guard: int = 64, pattern: int = 0xCD) -> np.ndarray:
    raw = np.full(2 * guard + data_len, pattern, np.uint8)
    raw[guard : guard + data_len] = 0
    return raw


def test_guards_intact_pass() -> None:
    assert check_guards(guarded(100), 0xCD, 64) is None


def test_guards_catch_a_write_past_the_end() -> None:
    raw = guarded(100)
    raw[64 + 100 : 64 + 100 + 8] = 0  # 8 bytes right after the data
    failure = check_guards(raw, 0xCD, 64, argument="out")
    assert failure is not None and failure.check == "out_of_bounds"
    assert failure.bad_elements == 8 and failure.first_bad_index == (100,)
    assert "+0 to +7" in failure.message and "out" in failure.message


def test_guards_catch_a_write_before_the_start() -> None:
    raw = guarded(100)
    raw[64 - 4] = 1  # 4 bytes before the data
    failure = check_guards(raw, 0xCD, 64)
    assert failure is not None and failure.first_bad_index == (-4,)
    assert "4 to 4 bytes before" in failure.message


def test_guards_catch_a_single_byte_at_the_far_end() -> None:
    raw = guarded(10)
    raw[-1] = 0
    failure = check_guards(raw, 0xCD, 64)
    assert failure is not None and failure.first_bad_index == (10 + 63,)


# -- inputs unchanged and determinism -----------------------------------------------------------------------


def test_unchanged_input_passes_bitwise_even_with_nan() -> None:
    before = np.array([1.0, np.nan, -0.0], np.float32)
    assert check_unchanged(before, before.copy()) is None


def test_changed_input_fails_with_the_first_index() -> None:
    before = np.arange(12, dtype=np.float32).reshape(3, 4)
    after = before.copy()
    after[1, 2] = 0.0
    failure = check_unchanged(before, after, argument="x", dtype="float32")
    assert failure is not None and failure.check == "input_modified"
    assert failure.first_bad_index == (1, 2) and failure.expected == 6.0 and failure.actual == 0.0
    # -0.0 and 0.0 compare equal as floats, but the bits changed: still a modification.
    assert check_unchanged(np.array([0.0], np.float32), np.array([-0.0], np.float32)) is not None


def test_deterministic_within_tolerance_passes_and_a_race_fails() -> None:
    first = np.linspace(1, 2, 100, dtype=np.float32)
    atomics = first * np.float32(1 + 1e-6)  # summation order: last-bit differences
    assert check_deterministic(first, atomics, F32, "float32") is None
    raced = first.copy()
    raced[42] += 0.5
    failure = check_deterministic(first, raced, F32, "float32", argument="out")
    assert failure is not None and failure.check == "nondeterministic"
    assert failure.first_bad_index == (42,) and failure.bad_elements == 1


def test_deterministic_integers_must_match_exactly_and_nan_matches_nan() -> None:
    assert check_deterministic(np.array([1, 2]), np.array([1, 3]), Tolerance(1, 1), "int64") is not None
    nan = np.array([np.nan, 1.0], np.float32)
    assert check_deterministic(nan, nan.copy(), F32, "float32") is None


# -- the caller on a machine without a GPU ------------------------------------------------------------------


def test_sandbox_without_gpu_answers_no_gpu_quickly() -> None:
    pytest.importorskip("multiprocessing")
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed here: the no-GPU path is not what runs")
    except ImportError:
        pass
    from cuda_agent.sandbox.client import Sandbox
    from cuda_agent.sandbox.reports import WorkerError

    start = time.perf_counter()
    with Sandbox(timeout_s=5.0) as sandbox:
        first = sandbox.device_info(measure_ceilings=False)
        second = sandbox.device_info()  # answered at once, no new worker
    assert isinstance(first, WorkerError) and first.kind == "no_gpu"
    assert "CuPy is not installed" in first.message
    assert second == first
    assert time.perf_counter() - start < 30
