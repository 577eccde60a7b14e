"""Verified results on disk, so reopening a file or re-running a command shows the last results at once.

Keys hash everything a result depends on: the kernel's device source, the resolved problems and launches,
the GPU (name, compute capability, driver), the compiler and its flags, and this tool's version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import diskcache
import platformdirs

from cuda_agent import __version__

_SIZE_LIMIT = 2**30  # results are small; a gigabyte holds years of them


def cache_dir() -> Path:
    override = os.environ.get("CUDA_AGENT_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("cuda-agent")) / "results"


def _canonical(value: Any) -> Any:
    """A JSON-able, order-stable form of dataclasses, tuples, dicts and bytes."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, bytes):
        return hashlib.sha256(value).hexdigest()
    return value


def result_key(kind: str, *parts: Any) -> str:
    """A stable key for a result of `kind` ("baseline", "candidate", "ceilings") from all it depends on."""
    payload = json.dumps([kind, __version__, *(_canonical(p) for p in parts)], sort_keys=True, default=str)
    return f"{kind}:{hashlib.sha256(payload.encode()).hexdigest()}"


class ResultCache:
    """A thin wrapper over diskcache: process- and thread-safe, values pickled."""

    def __init__(self, directory: Path | None = None, enabled: bool = True) -> None:
        self.enabled = enabled
        self._cache = (
            diskcache.Cache(str(directory or cache_dir()), size_limit=_SIZE_LIMIT) if enabled else None
        )

    def get(self, key: str) -> Any | None:
        if self._cache is None:
            return None
        try:
            return self._cache.get(key)
        except Exception:  # an entry pickled by an older layout: treat as a miss, never crash a command
            return None

    def set(self, key: str, value: Any) -> None:
        if self._cache is not None:
            self._cache.set(key, value)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> ResultCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
