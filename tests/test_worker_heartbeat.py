"""The worker's heartbeats during host work: the caller hears from a worker that is compiling or loading
(seconds of CuPy's compiler on a fresh machine), never from one waiting on a kernel under test."""

from __future__ import annotations

import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection

from cuda_agent.sandbox.protocol import Heartbeat
from cuda_agent.sandbox.worker import HOST_BEAT_S, _Beat, worker_main


def heard(conn: Connection, seconds: float) -> list[object]:
    messages = []
    while conn.poll(seconds):
        messages.append(conn.recv())
        seconds = 0.0
    return messages


def test_host_work_is_announced_only_while_no_kernel_is_queued() -> None:
    caller, worker = Pipe()
    queued = [False]
    beat = _Beat(worker, lambda: queued[0])
    assert heard(caller, 2.5 * HOST_BEAT_S) == []  # idle between requests: nothing

    beat.request_started()
    beat("reference")
    assert [m.note for m in heard(caller, 0.1)] == ["reference"]  # type: ignore[attr-defined]
    (host,) = heard(caller, 2.5 * HOST_BEAT_S)
    assert isinstance(host, Heartbeat) and host.note == "reference (then host work)"

    queued[0] = True  # a kernel under test launched and not yet finished: silence, so a hang times out
    assert heard(caller, 2.5 * HOST_BEAT_S) == []

    queued[0] = False
    beat.respond("the answer")
    assert heard(caller, 2.5 * HOST_BEAT_S) == ["the answer"]


def test_host_work_beats_keep_an_announced_silence() -> None:
    caller, worker = Pipe()
    beat = _Beat(worker, lambda: False)
    beat.request_started()
    beat("importing torch", expect_silence_s=60.0)
    first, host = heard(caller, 0.1) + heard(caller, 2.5 * HOST_BEAT_S)
    assert first.expect_silence_s == 60.0  # type: ignore[attr-defined]
    # The caller's deadline is reset by each beat: the thread's must not cut the announced minute short.
    assert isinstance(host, Heartbeat) and 55.0 < host.expect_silence_s < 60.0


def test_host_work_takes_its_allowance_back_when_it_ends() -> None:
    """A hung candidate right after an oracle once waited out the oracle's 30 s allowance (35.7 s to its
    verdict): leaving host work must tell the caller that the plain timeout applies again."""
    caller, worker = Pipe()
    beat = _Beat(worker, lambda: False)
    beat.request_started()
    with beat.host_work("evaluating the oracle", limit_s=60.0):
        (start,) = heard(caller, 0.1)
        assert isinstance(start, Heartbeat) and start.expect_silence_s == 60.0
    (end,) = heard(caller, 0.1)
    assert isinstance(end, Heartbeat) and end.expect_silence_s == 0.0 and end.note.endswith("done")
    # A kernel is queued next and hangs: no beat carries the old allowance.
    queued_silence = [m for m in heard(caller, 2.5 * HOST_BEAT_S) if getattr(m, "expect_silence_s", 0)]
    assert queued_silence == []


def test_host_work_past_its_limit_falls_silent() -> None:
    """An oracle that never finishes must not be kept alive by the host-work heartbeat for ever."""
    caller, worker = Pipe()
    beat = _Beat(worker, lambda: False)
    beat.request_started()
    with beat.host_work("evaluating the oracle", limit_s=1.5 * HOST_BEAT_S):
        heard(caller, 0.1)
        time.sleep(1.6 * HOST_BEAT_S)
        assert len(heard(caller, 0.0)) <= 1  # at most the one beat inside the limit
        assert heard(caller, 2.5 * HOST_BEAT_S) == []  # then silence: the caller will call it a hang


def test_a_worker_whose_caller_left_before_it_started_exits_quietly() -> None:
    """A standby worker started at a session's end found its pipe closed and printed a BrokenPipeError
    traceback. Whether it gets as far as its GPU (the ready notice) or not (no GPU here: the error), it
    returns without raising."""
    ours, theirs = Pipe()
    ours.close()
    worker_main(theirs, 0)  # must not raise BrokenPipeError
