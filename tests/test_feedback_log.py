"""The feedback log with many writers: real processes appending to one log at once, killed with SIGKILL at
any moment, lose no record they had acknowledged; rotation keeps every record readable in order."""

from __future__ import annotations

import fcntl
import hashlib
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from cuda_agent.agent.feedback import FeedbackLog

ROOT = Path(__file__).resolve().parents[1]

# Appends records of 2 MB (a write long enough to be killed inside) and prints each record's id once
# `append` has returned: an acknowledged record. The payload is made once, so that the next append starts
# at once after an acknowledgement (where the test kills).
WRITER = """
import hashlib, os, sys
from pathlib import Path
from cuda_agent.agent.feedback import FeedbackLog

log = FeedbackLog(Path(sys.argv[1]), max_file_bytes=int(sys.argv[3]), max_files=100_000)
payload = os.urandom(2**20).hex()
digest = hashlib.sha256(payload.encode()).hexdigest()
for n in range(10**9):
    log.append({"kind": "test", "id": f"{sys.argv[2]}-{n}", "payload": payload, "digest": digest})
    print(f"{sys.argv[2]}-{n}", flush=True)
"""


def start_writer(log: Path, name: str, cap: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(log), name, str(cap)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def test_writers_killed_with_sigkill_mid_append_lose_no_acknowledged_record(tmp_path: Path) -> None:
    log = tmp_path / "feedback.jsonl"
    cap = 12 * 2**20  # rotated every few records, so that kills also land in rotations
    rng = random.Random(17)
    writers = [start_writer(log, f"w{i}", cap) for i in range(3)]
    acked: list[str] = []
    for kill in range(30):
        # Three writers at once; one of them killed a moment after an acknowledgement: inside its next
        # append (serialising the record, waiting for the lock, writing, fsyncing) or between two.
        victim = writers.pop(rng.randrange(len(writers)))
        assert victim.stdout is not None
        acked += [victim.stdout.readline().strip() for _ in range(rng.randint(1, 2))]
        time.sleep(rng.uniform(0.0, 0.006))
        victim.send_signal(signal.SIGKILL)
        out, _ = victim.communicate(timeout=30)
        acked += [line for line in out.split("\n")[:-1] if line]  # a line cut by the kill is not one
        writers.append(start_writer(log, f"w{kill + 3}", cap))
    for writer in writers:
        writer.send_signal(signal.SIGKILL)
        writer.communicate(timeout=30)

    found = {record["id"]: record for record in FeedbackLog(log).records()}
    missing = [rid for rid in acked if rid not in found]
    assert missing == [] and len(acked) >= 30
    for rid in acked:
        record = found[rid]
        assert hashlib.sha256(record["payload"].encode()).hexdigest() == record["digest"]
    assert len(FeedbackLog(log).files()) > 2  # it rotated while being written and killed


def test_a_writer_killed_holding_the_lock_mid_line_leaves_a_torn_line_the_next_one_starts_after(
    tmp_path: Path,
) -> None:
    log = FeedbackLog(tmp_path / "feedback.jsonl")
    log.append({"kind": "test", "id": "before"})
    # What a writer killed inside its write leaves: the lock taken, half a record written, then SIGKILL.
    torn = json.dumps({"kind": "test", "id": "torn", "payload": "x" * 4096})
    script = f"""
import fcntl, os, signal
lock = os.open({str(log.path) + ".lock"!r}, os.O_RDWR | os.O_CREAT)
fcntl.flock(lock, fcntl.LOCK_EX)
fd = os.open({str(log.path)!r}, os.O_WRONLY | os.O_APPEND)
os.write(fd, {torn[: len(torn) // 2]!r}.encode())
os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.run([sys.executable, "-c", script], check=False, timeout=30)
    assert killed.returncode == -signal.SIGKILL
    # The kernel released the dead writer's lock: a second process appends at once.
    after = "from cuda_agent.agent.feedback import FeedbackLog; FeedbackLog(Path(sys.argv[1])).append(record)"
    after = f"import sys; from pathlib import Path; record = {{'kind': 'test', 'id': 'after'}}; {after}"
    subprocess.run([sys.executable, "-c", after, str(log.path)], check=True, timeout=30, cwd=ROOT)
    assert [r["id"] for r in log.records()] == ["before", "after"]
    with open(str(log.path) + ".lock") as lock:  # and nobody holds it now
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_rotation_keeps_every_record_in_order_and_drops_only_the_oldest_files(tmp_path: Path) -> None:
    log = FeedbackLog(tmp_path / "feedback.jsonl", max_file_bytes=10_000, max_files=4)
    for n in range(60):
        log.append({"kind": "test", "n": n, "pad": "p" * 900})
    names = [p.name for p in log.files()]
    assert names[-1] == "feedback.jsonl" and len(names) == 4
    numbers = [int(name.split(".")[1]) for name in names[:-1]]
    assert numbers == sorted(numbers) and numbers[-1] > 3  # rotated more often than files are kept
    seen = [r["n"] for r in log.records()]
    assert seen == list(range(seen[0], 60))  # the newest records, in order, none twice
    assert 20 < len(seen) < 60


def test_a_reader_started_before_a_rotation_reads_each_record_once(tmp_path: Path) -> None:
    log = FeedbackLog(tmp_path / "feedback.jsonl", max_file_bytes=5_000, max_files=100)
    for n in range(20):
        log.append({"kind": "test", "n": n, "pad": "p" * 900})
    reader = log.records()
    first = next(reader)
    for n in range(20, 40):  # rotations while the reader is part-way
        log.append({"kind": "test", "n": n, "pad": "p" * 900})
    seen = [first["n"], *(r["n"] for r in reader)]
    assert len(seen) == len(set(seen)) and seen[:20] == list(range(20))
    assert [r["n"] for r in log.records()] == list(range(40))


def test_the_log_holds_no_lock_file_of_a_reader_where_nothing_was_written(tmp_path: Path) -> None:
    log = FeedbackLog(tmp_path / "nothing" / "feedback.jsonl")
    assert list(log.records()) == [] and not log.exists()
    assert not (tmp_path / "nothing").exists()
