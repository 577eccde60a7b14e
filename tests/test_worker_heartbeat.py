"""The worker's heartbeats during host work: the caller hears from a worker that is compiling or loading
(seconds of CuPy's compiler on a fresh machine), never from one waiting on a kernel under test."""

from __future__ import annotations

from multiprocessing import Pipe
from multiprocessing.connection import Connection

from cuda_agent.sandbox.protocol import Heartbeat
from cuda_agent.sandbox.worker import HOST_BEAT_S, _Beat


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
