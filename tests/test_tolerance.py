"""Default tolerances: dtype-aware, and scaled with the length of the reduction behind each output."""

from __future__ import annotations

import math

from cuda_agent.sandbox.plan import Tolerance


def test_kernelbench_defaults_by_dtype() -> None:
    assert Tolerance.default("float32") == Tolerance(1e-4, 1e-4)
    assert Tolerance.default("float16") == Tolerance(1e-2, 1e-2)
    assert Tolerance.default("bfloat16") == Tolerance(1e-2, 1e-2)
    assert Tolerance.default("int32") == Tolerance(0.0, 0.0)


def test_short_reductions_scale_with_the_square_root_of_their_length() -> None:
    assert math.isclose(Tolerance.default("float32", 2048).atol, 1e-4 * math.sqrt(2048))
    assert math.isclose(Tolerance.default("float16", 4096).atol, 1e-2 * 64)


def test_a_16m_element_float32_sum_allows_the_error_an_atomic_sum_really_makes() -> None:
    # Seen on the H200: an atomicAdd sum of 16,777,216 N(0,1) floats was 1.01 away from torch's sum.
    assert Tolerance.default("float32", 16_777_216).atol > 1.01
    assert Tolerance.default("float32", 16_777_216).atol < 10


def test_integers_stay_exact_whatever_the_reduction() -> None:
    assert Tolerance.default("int32", 1 << 20) == Tolerance(0.0, 0.0)
