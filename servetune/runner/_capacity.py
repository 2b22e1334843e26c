"""A capacity measurement: one launch, then the capacity search's steps against it
(`servetune.bench.capacity`), each step a guarded benchmark with its own run directory."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.runner._base import BaseRunner, BaseServer, Failure, Measurement, RunTimings
from servetune.runner._guard import RunawayGuard

if TYPE_CHECKING:
    from servetune.bench.capacity import CapacityStep
    from servetune.bench.slo import LatencySlo
    from servetune.context import Resolution
    from servetune.schema.workload import Workload

__all__ = ["CapacitySearch", "measure_capacity", "step_workload"]


DEFAULT_START_RATE = 4.0
"""A capacity search's first rate (req/s) when neither the option nor the workload gives one."""


@dataclass(frozen=True)
class CapacitySearch:
    """How a capacity search runs (`servetune.bench.capacity.find_capacity`'s settings)."""

    start_rate: float = DEFAULT_START_RATE
    """First rate tried (req/s)."""
    resolution: float = 0.1
    """Stop when the bracket's ends are within this relative distance."""
    step_s: float = 20.0
    """Seconds of arrivals per step (requests = rate x step_s, at least `min_requests`)."""
    min_requests: int = 64
    """Requests per step at least."""
    min_rate: float = 0.05
    """Lowest rate tried."""
    max_rate: float = 10_000.0
    """Highest rate tried."""
    max_steps: int = 24
    """Steps at most."""
    warmup_requests: int = 4
    """Warm-up requests before each step (none are measured)."""

    @classmethod
    def for_workload(
        cls, workload: Workload, *, start_rate: float | None, resolution: float, step_s: float, min_requests: int
    ) -> CapacitySearch:
        """The search for `workload`: it starts at `start_rate`, else the workload's `request_rate`, else 4 req/s."""
        return cls(
            start_rate=start_rate or workload.request_rate or DEFAULT_START_RATE,
            resolution=resolution,
            step_s=step_s,
            min_requests=min_requests,
        )

    def settings(self) -> dict[str, Any]:
        """`find_capacity` keyword arguments."""
        return {
            "start_rate": self.start_rate,
            "resolution": self.resolution,
            "step_s": self.step_s,
            "min_requests": self.min_requests,
            "min_rate": self.min_rate,
            "max_rate": self.max_rate,
            "max_steps": self.max_steps,
        }


def step_workload(workload: Workload, rate: float, requests: int, warmup: int) -> Workload:
    """The workload of one step: Poisson arrivals at `rate`, open loop (no concurrency cap)."""
    return workload.model_copy(
        update={"request_rate": rate, "max_concurrency": None, "requests": requests, "warmup_requests": warmup}
    )


class _StepFailed(Exception):
    def __init__(self, failure: Failure, metrics: Any) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.metrics = metrics


def measure_capacity(
    runner: BaseRunner,
    resolution: Resolution,
    workload: Workload,
    slos: Sequence[LatencySlo],
    *,
    run_dir: Path,
    search: CapacitySearch | None = None,
    gpus: Sequence[str] | None = None,
    floor: float | None = None,
    on_step: Callable[[CapacityStep], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> Measurement:
    """Launch once and find the highest rate that meets every SLO; failures are data.

    A server that dies or a step that errors ends the search with that failure (`oom`, `crash`,
    `bench_error`); a step far slower than its arrivals allow is `too_slow` (its guard's deadline:
    the step's own arrival time, `RUNAWAY_FACTOR` over). `floor` (the incumbent's capacity) cuts a
    config that misses there. `Measurement.capacity` holds the result and `metrics` the steps'
    metrics at the capacity rate.
    """
    from servetune.bench.capacity import find_capacity

    search = search or CapacitySearch()

    def search_on(server: BaseServer, timings: RunTimings) -> tuple[Any, Failure | None, dict[str, Any]]:
        metrics_at: dict[float, Any] = {}
        index = 0

        def run_step(rate: float, requests: int, should_stop: Callable[[int, Any], bool]) -> Any:
            nonlocal index
            index += 1
            step_dir = Path(run_dir) / "steps" / f"{index:02d}-{rate:.4g}"
            guard = RunawayGuard.from_rate(rate, requests=requests, concurrency=None)
            wl = step_workload(workload, rate, requests, search.warmup_requests)

            def halt(done: int, partial: Any) -> bool:
                return bool(stop and stop()) or should_stop(done, partial)

            metrics, failure = runner._bench(
                server, wl, requests, step_dir, None, halt, timings, guard=guard, slos=slos
            )
            if failure is not None:
                raise _StepFailed(failure, metrics)
            if stop and stop():
                raise KeyboardInterrupt
            metrics_at[rate] = metrics
            return metrics

        bench_t = time.monotonic()
        try:
            capacity = find_capacity(run_step, slos, floor=floor, on_step=on_step, **search.settings())
        except _StepFailed as exc:
            return None, exc.failure, {}
        finally:
            timings.bench_s = time.monotonic() - bench_t
        if capacity.request_rate is None:
            return None, None, {"capacity": capacity}
        return metrics_at.get(capacity.request_rate), None, {"capacity": capacity}

    out = runner.session(resolution, run_dir=run_dir, gpus=gpus, body=search_on)
    if out.capacity is not None:
        runner.record(Path(run_dir), "capacity.json", out.capacity.model_dump(mode="json"))
    return out
