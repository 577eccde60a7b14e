"""The feedback log's figures at the sizes a busy workspace reaches (runs on this CPU machine):

    python bench/feedback_bench.py [--sizes-mb 50 200 400] [--file-kb 8] [--appends 300]

1. Appending: one sample record (lock, write, fsync), the cost a candidate adds to a search.
2. Exporting: logs of each size, made of real samples (a search of examples/elementwise.cu's saxpy against
   the recorded H200 worker, logged by the engine), copied for as many prompts as the size takes (each
   file padded to --file-kb, as real kernels' files are), with 5% of the records repeated (a cached result
   logged again). `cuda-agent feedback export` of each, all formats, in a fresh process: its wall time and
   peak RSS (getrusage of that process). Target: the peak RSS the same at every size (the export streams:
   read whole, a 448 MB log took 4 GB).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.feedback import FeedbackLog
from cuda_agent.agent.optimize import optimize
from cuda_agent.agent.targets import load_targets

from tests.llm_engine import recorded_engine, recording_with_rejection

ROOT = Path(__file__).resolve().parents[1]
EXPORT = (
    "import sys; from pathlib import Path; from cuda_agent.agent.feedback_export import export; "
    "s = export(Path(sys.argv[1]), Path(sys.argv[2])); print(s.samples, sum(s.pairs.values()), s.duplicates)"
)
IMPORTS = (
    "import cuda_agent.agent.feedback_export, pyarrow.parquet, sqlite3"  # the floor: a process that exports
)


def searched_samples(folder: Path) -> list[dict[str, Any]]:
    """The samples the engine logs for one real search (recorded GPU answers, one candidate rejected)."""
    target = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert target is not None
    log = folder / "search.jsonl"
    with recorded_engine(recording_with_rejection(folder, 512), recorder=CandidateLog(log)) as engine:
        optimize(engine, target, budget_s=30)
    return list(FeedbackLog(log).records())


def variant(sample: dict[str, Any], prompt: int, padding: str) -> dict[str, Any]:
    """The sample as if its kernel's file were another one: another prompt, its candidates' keys new."""
    copy = json.loads(json.dumps(sample))
    header = f"// file {prompt}\n{padding}\n"
    copy["original"]["file_text"] = header + copy["original"]["file_text"]
    copy["candidate"]["source"] = header + copy["candidate"]["source"]
    copy["prompt_key"] = hashlib.sha256(f"{sample['prompt_key']}{prompt}".encode()).hexdigest()[:32]
    copy["key"] = hashlib.sha256(f"{sample['key']}{prompt}".encode()).hexdigest()[:32]
    return copy


def write_log(path: Path, samples: list[dict[str, Any]], megabytes: int, file_kb: int) -> tuple[int, int]:
    """A log of about `megabytes`, in rotated files as the writers leave them; (records, bytes)."""
    rng = random.Random(0)
    words = ["threadIdx", "blockDim", "__syncthreads();", "float4", "acc", "+=", "tile", "[i]", "//"]
    padding = "// " + " ".join(rng.choice(words) for _ in range(file_kb * 1024 // 8))[: file_kb * 1024]
    limit = megabytes * 2**20
    written = records = 0
    part = 0
    out = None
    prompt = 0
    try:
        while written < limit:
            lines = [json.dumps(variant(s, prompt, padding), separators=(",", ":")) + "\n" for s in samples]
            lines += rng.sample(lines, max(1, len(lines) // 20))  # repeated records, as a cache's re-logging
            for line in lines:
                if out is None or out.tell() >= 64 * 2**20:  # the log's own rotation size
                    if out is not None:
                        out.close()
                    part += 1
                    out = path.with_name(f"feedback.{part}.jsonl").open("w", encoding="utf-8")
                out.write(line)
                written += len(line)
                records += 1
            prompt += 1
    finally:
        if out is not None:
            out.close()
    path.with_name(f"feedback.{part}.jsonl").rename(path)  # the newest part is the current file
    return records, written


def measured(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of `command`, in a process of its own."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"{command[:3]}… failed ({status})")
    return elapsed, usage.ru_maxrss / 1024, out  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[50, 200, 400])
    parser.add_argument("--file-kb", type=int, default=8, help="each kernel file padded to this size")
    parser.add_argument("--appends", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cuda-agent-feedback-bench-") as scratch:
        folder = Path(scratch)
        samples = [s for s in searched_samples(folder) if s.get("kind") == "candidate"]
        print(f"{len(samples)} samples from one search of saxpy (recorded H200 answers)")

        log = FeedbackLog(folder / "append" / "feedback.jsonl")
        record = variant(samples[0], 0, "// " + "x" * args.file_kb * 1024)
        started = time.perf_counter()
        for _ in range(args.appends):
            log.append(record)
        each = (time.perf_counter() - started) / args.appends
        size = len(json.dumps(record)) / 1024
        print(f"1. append (lock, write, fsync) of a {size:.0f} KiB record: {each * 1e3:.2f} ms")

        _, floor, _ = measured([sys.executable, "-c", IMPORTS])
        print(f"2. export, every format (a process that imports what the export needs: {floor:.0f} MiB RSS)")
        print(f"   {'log':>8} {'records':>9} {'samples':>9} {'pairs':>8} {'time':>8} {'peak RSS':>9}")
        for megabytes in args.sizes_mb:
            where = folder / f"log-{megabytes}"
            where.mkdir()
            records, written = write_log(where / "feedback.jsonl", samples, megabytes, args.file_kb)
            seconds, rss, out = measured(
                [sys.executable, "-c", EXPORT, str(where / "feedback.jsonl"), str(where / "out")]
            )
            distinct, pairs, _ = (int(v) for v in out.split())
            print(f"   {written / 2**20:6.0f} MB {records:9,} {distinct:9,} {pairs:8,} {seconds:7.1f}s "
                  f"{rss:6.0f} MiB")  # fmt: skip
            for path in where.rglob("*"):  # the next size needs the disk
                if path.is_file():
                    path.unlink()


if __name__ == "__main__":
    main()
