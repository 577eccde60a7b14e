"""The seam where optimization jobs will plug in (issue 4, next slice).

What goes here: one background job per kernel on the GPU worker, cancelled when its text changes, the
kernel under the cursor first, work-done progress, results into the cache and back as diagnostics,
lenses, hover rows and `refactor.rewrite` actions. The command handler already calls `request`
with everything a job needs; nothing else in the server has to change shape.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cuda_agent.agent.targets import KernelTarget
from cuda_agent.server.backend import GpuStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobAnswer:
    started: bool
    message: str


class OptimizationJobs:
    async def request(self, uri: str, version: int, target: KernelTarget, gpu: GpuStatus) -> JobAnswer:
        """Start (or move to the front) the optimization job of one kernel at one document version."""
        logger.info("optimization requested for %s in %s (version %s)", target.kernel.name, uri, version)
        return JobAnswer(
            started=False,
            message=(
                f"cuda-agent: found {gpu.name}, but optimization jobs from the editor are not wired yet; "
                f"run `cuda-agent optimize {target.path.name} --kernel {target.kernel.name}` meanwhile."
            ),
        )

    def cancel_all(self) -> None:
        """Called when a client session ends."""
