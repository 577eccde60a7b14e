"""Two kernels timed in interleaved pairs: the verdict (faster, slower, no difference beyond the noise),
the baseline's own noise, and when a verdict is settled before the budget is spent (a search's screening:
most of its candidates are clearly faster or slower after a few dozen pairs). Pure statistics, no GPU."""

from __future__ import annotations

import math
import statistics
from functools import cache

import numpy as np
from cuda_agent.sandbox.reports import Comparison, TimingReport

MIN_NOISE = 0.01  # no speedup under 1% is claimed, however quiet the GPU
# Settling early: the first look after SETTLE_MIN_PAIRS pairs, then every SETTLE_EVERY. Each look asks a
# 99.9% interval (not the final 95%) to clear the threshold: looking a dozen times must not make a verdict
# easier to reach than looking once. The interval must also be narrow enough to rank candidates by.
SETTLE_MIN_PAIRS = 48
SETTLE_EVERY = 16
SETTLE_ALPHA = 0.001
SETTLE_WIDTH = 0.02  # of the median ratio: the speedup known to about ±1%


def compare(
    baseline: TimingReport,
    candidate: TimingReport,
    baseline_ms: list[float],
    candidate_ms: list[float],
    settled_early: bool = False,
) -> Comparison:
    """Faster only when the whole 95% bootstrap interval of the paired ratio lies below 1 − noise."""
    ratios = np.asarray(candidate_ms) / np.asarray(baseline_ms)
    resampled = np.random.default_rng(0).integers(0, len(ratios), size=(2000, len(ratios)))
    low, high = (float(q) for q in np.percentile(np.median(ratios[resampled], axis=1), [2.5, 97.5]))
    noise = baseline_noise(baseline_ms)
    threshold = max(noise, MIN_NOISE)
    faster, slower = high < 1 - threshold, low > 1 + threshold
    verdict = "faster" if faster else "slower" if slower else "no difference beyond the noise"
    early = (
        f"; settled after {len(ratios)} pairs (a {1 - SETTLE_ALPHA:.1%} interval of the median clear of "
        f"the threshold and within {SETTLE_WIDTH:.0%})"
        if settled_early
        else ""
    )
    decision = (
        f"{len(ratios)} interleaved pairs (order AB/BA alternating, fresh inputs and a flushed L2 before "
        f"every launch); candidate/baseline time ratio: median {float(np.median(ratios)):.3f}, 95% bootstrap "
        f"CI [{low:.3f}, {high:.3f}]; baseline noise {noise:.1%} (the largest gap between the medians of "
        f"its first and second halves and of its odd and even runs); threshold {threshold:.1%}: {verdict}"
        f"{early}"
    )
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        speedup=baseline.median_ms / candidate.median_ms if candidate.median_ms else float("inf"),
        ratio_ci=(low, high),
        faster=faster,
        slower=slower,
        decision=decision,
        settled_early=settled_early,
    )


def baseline_noise(times: list[float]) -> float:
    """How far the baseline disagrees with itself: medians of its halves in time, and of odd/even runs."""
    if len(times) < 4:
        return 1.0  # too few runs to know: claim nothing
    half = len(times) // 2
    pairs = ((times[:half], times[half:]), (times[0::2], times[1::2]))
    return max(abs(statistics.median(a) / statistics.median(b) - 1) for a, b in pairs)


def settled(baseline_ms: list[float], candidate_ms: list[float]) -> bool:
    """Whether more pairs would not change the verdict nor the ranking: at a look (SETTLE_MIN_PAIRS pairs,
    then every SETTLE_EVERY), a distribution-free 99.9% interval of the median ratio lies wholly beyond
    the threshold on one side, and is narrower than SETTLE_WIDTH of the median."""
    n = min(len(baseline_ms), len(candidate_ms))
    if n < SETTLE_MIN_PAIRS or (n - SETTLE_MIN_PAIRS) % SETTLE_EVERY:
        return False
    ratios = sorted(c / b for b, c in zip(baseline_ms[:n], candidate_ms[:n], strict=True))
    low, high = median_interval(ratios, SETTLE_ALPHA)
    threshold = max(baseline_noise(baseline_ms[:n]), MIN_NOISE)
    median = statistics.median(ratios)
    return (high < 1 - threshold or low > 1 + threshold) and high - low <= SETTLE_WIDTH * median


def median_interval(ordered: list[float], alpha: float) -> tuple[float, float]:
    """The order-statistic interval of the median of `ordered` (sorted) at confidence 1 − alpha: the
    k-th smallest and k-th largest, k the most the binomial tail allows (no assumption on the
    distribution of the ratios, whose tails are long when the GPU stalls)."""
    k = _order_statistic(len(ordered), alpha)
    return ordered[k - 1], ordered[len(ordered) - k]


@cache
def _order_statistic(n: int, alpha: float) -> int:
    """The largest k ≥ 1 with P(Binomial(n, ½) ≤ k − 1) ≤ alpha / 2 (1 when even k = 1 is too wide)."""
    tail, k = 0, 0
    while k < n // 2:
        tail += math.comb(n, k)
        if tail > alpha / 2 * 2**n:
            break
        k += 1
    return max(k, 1)
