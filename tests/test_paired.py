"""The statistics of interleaved pairs (sandbox/paired.py): when a screening measurement may stop, and the
interval it stops on. Pure arithmetic on lists of times: no GPU."""

from __future__ import annotations

import random

from cuda_agent.sandbox.paired import (
    SETTLE_EVERY,
    SETTLE_MIN_PAIRS,
    compare,
    median_interval,
    settled,
)
from cuda_agent.sandbox.reports import TimingReport


def times(n: int, median: float, spread: float, seed: int) -> list[float]:
    """n times around `median`, with long-tailed stalls as a GPU has them (one in 20 runs 30% slow)."""
    draw = random.Random(seed)
    return [median * (1 + draw.gauss(0, spread)) * (1.3 if draw.random() < 0.05 else 1.0) for _ in range(n)]


def test_a_clearly_faster_candidate_settles_at_the_first_look() -> None:
    baseline = times(SETTLE_MIN_PAIRS, 1.0, 0.003, seed=1)
    candidate = times(SETTLE_MIN_PAIRS, 0.5, 0.003, seed=2)
    assert settled(baseline, candidate)
    assert settled(candidate, baseline)  # clearly slower settles too: no need to time a loser longer
    assert not settled(baseline[:-1], candidate[:-1])  # before the first look
    assert not settled(baseline + baseline[:1], candidate + candidate[:1])  # between looks


def test_no_difference_never_settles() -> None:
    """Equal kernels: no look in 500 pairs settles, so the whole budget decides (no difference)."""
    baseline, candidate = times(500, 1.0, 0.01, seed=3), times(500, 1.0, 0.01, seed=4)
    looks = range(SETTLE_MIN_PAIRS, 501, SETTLE_EVERY)
    assert not any(settled(baseline[:n], candidate[:n]) for n in looks)


def test_a_gain_inside_the_threshold_does_not_settle() -> None:
    """0.7% faster with 0.2% noise: under the 1% a verdict needs, whatever the number of pairs."""
    baseline, candidate = times(500, 1.0, 0.002, seed=5), times(500, 0.993, 0.002, seed=6)
    looks = range(SETTLE_MIN_PAIRS, 501, SETTLE_EVERY)
    assert not any(settled(baseline[:n], candidate[:n]) for n in looks)


def test_a_noisy_gain_waits_until_its_interval_is_narrow() -> None:
    """20% faster but 3% noise a run: clear of the threshold early, not yet precise enough to rank."""
    baseline, candidate = times(500, 1.0, 0.03, seed=7), times(500, 0.8, 0.03, seed=8)
    assert not settled(baseline[:SETTLE_MIN_PAIRS], candidate[:SETTLE_MIN_PAIRS])
    first = next(
        n for n in range(SETTLE_MIN_PAIRS, 501, SETTLE_EVERY) if settled(baseline[:n], candidate[:n])
    )
    assert first > SETTLE_MIN_PAIRS


def test_the_median_interval_is_distribution_free_and_widens_with_confidence() -> None:
    ordered = sorted(times(100, 1.0, 0.01, seed=9))
    narrow, wide = median_interval(ordered, 0.05), median_interval(ordered, 0.001)
    assert wide[0] <= narrow[0] <= narrow[1] <= wide[1]
    # n = 100 at 95%: the 40th and 61st smallest (a binomial table's figures)
    assert narrow == (ordered[39], ordered[60])
    assert median_interval([1.0, 2.0, 3.0], 0.001) == (1.0, 3.0)  # too few: the whole range


def test_compare_says_when_it_settled_early() -> None:
    baseline, candidate = times(64, 1.0, 0.003, seed=10), times(64, 0.5, 0.003, seed=11)
    reports = [TimingReport(label, sorted(t)[32], min(t), max(t), len(t)) for label, t in
               (("original", baseline), ("candidate", candidate))]  # fmt: skip
    early = compare(*reports, baseline, candidate, settled_early=True)
    assert early.faster and early.settled_early and "settled after 64 pairs" in early.decision
    assert "settled" not in compare(*reports, baseline, candidate).decision
