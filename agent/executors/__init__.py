"""Where verify and time requests run: one GPU worker, one worker per local GPU, or a Ray cluster's GPUs.

Every executor has the same few methods (`Executor`); the engine asks it for the device, hands it verify,
time, torch-timing and sanitizer requests, and fans a search's candidates out over `workers` of them.
Each request is whole (a time request carries the candidate and its baseline, timed interleaved), so any
worker can take any request; a pool holds workers of one GPU model only, so no timing is ever compared
with one from another model.
"""

from cuda_agent.agent.executors.base import Executor, PoolSettings, open_executor

__all__ = ["Executor", "PoolSettings", "open_executor"]
