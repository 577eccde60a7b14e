"""The worker's promises on a real GPU, with the figures printed (and kept under $OUT):
ceilings measured; verify + time of a ~1 ms kernel in 2 s; the same kernel timed twice within 2%;
a short kernel timed without the host's launch cost; a restart after a crash within 3 s; the
faster/slower decision; an impossible time rejected."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from cuda_agent.sandbox.client import Sandbox
from cuda_agent.sandbox.plan import KernelUnderTest, LaunchPlan
from cuda_agent.sandbox.protocol import TimeRequest, TimingResult, VerifyRequest
from cuda_agent.sandbox.reports import DeviceInfo, VerificationReport, WorkerError

from tests.test_adversarial_gpu import (
    KERNELS,
    compiled,
    original,
    record,
    scale_add_launch,
    scale_add_problem,
)

ONE_MS_N = 1 << 28  # 3 GiB moved a launch: about 0.8 ms at the H200's ~4 TB/s


@pytest.fixture(scope="module")
def device(sandbox: Sandbox) -> DeviceInfo:
    info = sandbox.device_info(measure_ceilings=True)
    assert isinstance(info, DeviceInfo), info
    return info


def one_ms_kernel(extra_sizes: tuple[int, ...] = (1_000_003, 257)) -> tuple[KernelUnderTest, tuple]:  # type: ignore[type-arg]
    sizes = (ONE_MS_N, *extra_sizes)
    kernel = replace(original("scale_add"), launches=tuple(scale_add_launch(n) for n in sizes))
    return kernel, tuple(scale_add_problem(n) for n in sizes)


@pytest.mark.gpu
def test_device_info_and_ceilings(device: DeviceInfo) -> None:
    assert device.ceilings is not None
    rates = ", ".join(f"{k} {v:.1f}" for k, v in device.ceilings.flops_tflops.items())
    record(
        f"device: {device.name} sm_{device.compute_capability[0]}{device.compute_capability[1]}, "
        f"{device.multiprocessors} SMs, L2 {device.l2_bytes >> 20} MiB, driver {device.driver_version}, "
        f"runtime {device.runtime_version}; copy {device.ceilings.copy_bandwidth_gbs:.0f} GB/s; "
        f"TFLOP/s: {rates}"
    )
    assert 1000 < device.ceilings.copy_bandwidth_gbs < 10_000
    assert device.ceilings.flops_tflops.get("float32", 0) > 5


@pytest.mark.gpu
def test_verify_and_time_of_a_memory_bound_1ms_kernel(sandbox: Sandbox, device: DeviceInfo) -> None:
    kernel, problems = one_ms_kernel()
    start = time.perf_counter()
    report = sandbox.verify(VerifyRequest(kernel, problems, kernel, input_sets=5))
    verified = time.perf_counter()
    single = replace(kernel, launches=kernel.launches[:1])
    timed = sandbox.time(TimeRequest((single,), problems[0], single))
    done = time.perf_counter()
    assert isinstance(report, VerificationReport) and report.passed, report
    assert isinstance(timed, TimingResult) and not timed.failures, timed
    r = timed.reports[0]
    record(
        f"1 ms kernel (n=2^28): verify {verified - start:.2f} s (3 sizes x 5 sets), "
        f"time {done - verified:.2f} s ({r.runs} runs), total {done - start:.2f} s; "
        f"median {r.median_ms:.3f} ms, p10-p90 {r.p10_ms:.3f}-{r.p90_ms:.3f}, "
        f"{r.bandwidth_gbs:.0f} GB/s = {r.roofline_fraction or 0:.0%} of copy bandwidth"
    )  # the ≤ 2 s target is a benchmark figure (bench/engine_bench.py), not asserted here


@pytest.mark.gpu
def test_timing_the_same_kernel_twice_agrees(sandbox: Sandbox, device: DeviceInfo) -> None:
    kernel, problems = one_ms_kernel(())
    medians = []
    for _ in range(2):
        timed = sandbox.time(TimeRequest((kernel,), problems[0], kernel))
        assert isinstance(timed, TimingResult) and not timed.failures, timed
        medians.append(timed.reports[0].median_ms)
    gap = abs(medians[0] / medians[1] - 1)
    record(f"timed twice: medians {medians[0]:.4f} / {medians[1]:.4f} ms, gap {gap:.2%}")
    assert gap <= 0.10  # a loose sanity bound; the 2% target is reported by bench/engine_bench.py


@pytest.mark.gpu
def test_a_short_kernel_is_timed_without_the_hosts_launch_cost(sandbox: Sandbox, device: DeviceInfo) -> None:
    # 64 KiB moved: the kernel itself takes a few microseconds; queuing it from Python takes tens.
    n = 1 << 13
    kernel = replace(original("scale_add"), launches=(scale_add_launch(n),))
    medians = {}
    for hidden in (True, False):
        request = TimeRequest((kernel,), scale_add_problem(n), kernel, budget_s=0.2, hide_launch_cost=hidden)
        timed = sandbox.time(request)
        assert isinstance(timed, TimingResult) and not timed.failures, timed
        medians[hidden] = timed.reports[0].median_ms
    record(
        f"{n} elements: median {medians[True] * 1e3:.1f} µs with the launch cost hidden, "
        f"{medians[False] * 1e3:.1f} µs without"
    )
    assert medians[True] < 0.010  # the kernel's own time, not the host's
    assert medians[True] <= medians[False] * 1.05


@pytest.mark.gpu
@pytest.mark.parametrize("standby", [True, False], ids=["standby", "cold"])
def test_restart_after_a_crash(standby: bool) -> None:
    illegal = compiled((KERNELS / "adversarial" / "illegal_address.cu").read_text(), "scale_add")
    reference = original("scale_add")
    problems = (scale_add_problem(257),)
    small = replace(reference, launches=reference.launches[2:3])
    crash = KernelUnderTest(illegal, small.launches, "illegal")
    with Sandbox(timeout_s=4.0, standby=standby) as sandbox:
        warm = sandbox.verify(VerifyRequest(small, problems, small, input_sets=1))
        assert isinstance(warm, VerificationReport) and warm.passed, warm
        time.sleep(1.0 if standby else 0.0)  # a standby is started beside a busy worker; give it its start
        crashed = sandbox.verify(VerifyRequest(crash, problems, small, input_sets=1))
        start = time.perf_counter()
        again = sandbox.verify(VerifyRequest(small, problems, small, input_sets=1))
        restart_s = time.perf_counter() - start
    assert isinstance(crashed, WorkerError) and crashed.kind == "cuda_error" and crashed.restarted, crashed
    assert isinstance(again, VerificationReport) and again.passed, again
    record(f"restart after a crash ({'standby worker' if standby else 'cold start'}): {restart_s:.2f} s")


@pytest.mark.gpu
def test_faster_only_beyond_the_noise(sandbox: Sandbox, device: DeviceInfo) -> None:
    stride = compiled((KERNELS / "adversarial" / "legit_grid_stride.cu").read_text(), "scale_add")
    problem = scale_add_problem(1 << 26)
    few_blocks = KernelUnderTest(stride, (LaunchPlan((8, 1, 1), (256, 1, 1)),), "8 blocks")
    full = KernelUnderTest(stride, (scale_add_launch(1 << 26, "grid_stride"),), "1056 blocks")
    faster = sandbox.time(TimeRequest((few_blocks, full), problem, full, budget_s=0.3))
    same = sandbox.time(TimeRequest((full, full), problem, full, budget_s=0.3))
    assert isinstance(faster, TimingResult) and faster.comparison is not None, faster
    assert isinstance(same, TimingResult) and same.comparison is not None, same
    record(f"8 -> 1056 blocks: speedup {faster.comparison.speedup:.2f}; {faster.comparison.decision}")
    record(f"same kernel twice: speedup {same.comparison.speedup:.3f}; {same.comparison.decision}")
    assert faster.comparison.faster and faster.comparison.speedup > 2
    assert not same.comparison.faster and not same.comparison.slower


@pytest.mark.gpu
def test_a_clear_verdict_settles_early_and_an_unclear_one_does_not(
    sandbox: Sandbox, device: DeviceInfo
) -> None:
    """A search's screening: a clear difference is settled after a few dozen pairs with the full
    measurement's verdict; the same kernel against itself runs the whole budget. (The speedups differ more
    than their intervals say: the H100 took 0.163 for the first 50 pairs of a latency-bound 66-block
    kernel against 0.139 over 124, its clocks falling as a request goes on; what is shown is confirmed
    in full, Engine.confirm.)"""
    stride = compiled((KERNELS / "adversarial" / "legit_grid_stride.cu").read_text(), "scale_add")
    problem = scale_add_problem(1 << 26)
    few_blocks = KernelUnderTest(stride, (LaunchPlan((66, 1, 1), (256, 1, 1)),), "66 blocks")
    full = KernelUnderTest(stride, (scale_add_launch(1 << 26, "grid_stride"),), "1056 blocks")
    whole = sandbox.time(TimeRequest((few_blocks, full), problem, full, budget_s=0.3))
    early = sandbox.time(TimeRequest((few_blocks, full), problem, full, budget_s=0.3, settle_early=True))
    same = sandbox.time(TimeRequest((full, full), problem, full, budget_s=0.3, settle_early=True))
    for timed in (whole, early, same):
        assert isinstance(timed, TimingResult) and timed.comparison is not None and not timed.failures, timed
    assert whole.comparison is not None and early.comparison is not None and same.comparison is not None
    record(f"66 -> 1056 blocks, whole budget: {whole.comparison.speedup:.3f}; {whole.comparison.decision}")
    record(f"66 -> 1056 blocks, settled: {early.comparison.speedup:.3f}; {early.comparison.decision}")
    record(f"same kernel, settling asked: {same.comparison.decision}")
    assert early.comparison.settled_early and early.comparison.faster and whole.comparison.faster
    assert early.comparison.candidate.runs < whole.comparison.candidate.runs
    assert early.comparison.speedup == pytest.approx(whole.comparison.speedup, rel=0.25)
    assert not same.comparison.settled_early and not same.comparison.faster
    assert same.comparison.candidate.runs >= whole.comparison.candidate.runs / 2


@pytest.mark.gpu
def test_a_kernel_that_writes_part_of_its_output_in_every_run_passes_the_timed_checks(
    sandbox: Sandbox, device: DeviceInfo
) -> None:
    """An original launched over half its output (as an inferred spec's sizes can make it) leaves the rest
    unwritten in every run, the replays too: no timed failure, where a kernel that stops writing after
    many launches still fails (tests/kernels/adversarial/cached_launch_counter.cu)."""
    n = 1 << 24
    full = scale_add_launch(n)
    half = KernelUnderTest(
        original("scale_add").compiled, (replace(full, grid=(full.grid[0] // 2, 1, 1)),), "half"
    )
    problem = scale_add_problem(n, bytes_moved=6 * n)  # half of the 12 bytes an element it would move
    timed = sandbox.time(TimeRequest((half, half), problem, half, budget_s=0.1))
    assert isinstance(timed, TimingResult), timed
    record(f"half the output written every run: {[f.message[:100] for f in timed.failures] or 'no failure'}")
    assert not timed.failures


@pytest.mark.gpu
def test_a_time_below_the_physical_floor_is_implausible(sandbox: Sandbox, device: DeviceInfo) -> None:
    """A spec that claims 10x the bytes a kernel really moves makes an honest kernel 'impossibly' fast."""
    kernel = replace(original("scale_add"), launches=(scale_add_launch(1 << 26),))
    lying = scale_add_problem(1 << 26, bytes_moved=120 * (1 << 26))
    timed = sandbox.time(TimeRequest((kernel,), lying, kernel, budget_s=0.1))
    assert isinstance(timed, TimingResult), timed
    checks = [f.check for f in timed.failures]
    record(f"10x bytes claimed: {checks} {timed.failures[0].message[:100] if timed.failures else ''}")
    assert checks == ["implausible"]
