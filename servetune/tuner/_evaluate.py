"""One evaluation of a config, as the tuner reads it: the runner measures (launch + benchmark),
this module turns its `Measurement` into flat metrics or a failure.

The runner (`servetune.runner`) owns the launch, the benchmark and the run directory; the tuner
adds what only it cares about: metrics flattened for objectives and SLOs, a run in which no
request completed counted as `bench_error`, and the failure record its trials store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.runner import Failure

if TYPE_CHECKING:
    from collections.abc import Callable

    from servetune.bench.slo import LatencySlo
    from servetune.context import Resolution
    from servetune.runner import BaseRunner, CapacitySearch, RunawayGuard, ShouldStop
    from servetune.schema.workload import Workload

LOG_TAIL_CHARS = 4000


@dataclass(frozen=True)
class Slot:
    """Where a trial runs: a GPU set (None = inherit `CUDA_VISIBLE_DEVICES`); ports are the
    launcher's (it reserves a free one per launch, safe across threads and processes)."""

    index: int
    gpus: tuple[str, ...] | None = None


@dataclass
class Outcome:
    """A measurement as the tuner reads it: flat metrics (`objectives.flatten_metrics`) or a failure."""

    metrics: dict[str, Any] | None = None
    failure: Failure | None = None
    stopped_early: bool = False
    timing: dict[str, Any] = field(default_factory=dict)
    """The measurement's `RunTimings` as JSON (start-up with its phases, bench, stop, total)."""
    server_info: dict[str, Any] = field(default_factory=dict)
    capacity: dict[str, Any] | None = None
    """A capacity trial's search (`Capacity`, as JSON: SLOs, steps, the bracket), else None."""
    below_floor: float | None = None
    """A capacity trial cut below the incumbent's capacity: that floor (req/s)."""


def config_hash(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """Identity of a launch: the resolved argv and SGLang env, nothing about where it runs."""
    blob = json.dumps({"argv": list(argv), "env": dict(sorted(env.items()))}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def failure_record(failure: Failure) -> dict[str, Any]:
    """What a FAIL trial stores in `user_attrs["failure"]`: class, message and the log's tail."""
    from servetune.secrets import redact_text

    return {
        "class": failure.cls,
        "message": redact_text(failure.message),
        "log_tail": redact_text(failure.log_tail)[-LOG_TAIL_CHARS:],
    }


def evaluate(
    runner: BaseRunner,
    resolution: Resolution,
    *,
    workload: Workload,
    slot: Slot,
    run_dir: Path,
    requests: int | None,
    should_stop: ShouldStop | None = None,
    guard: RunawayGuard | None = None,
) -> Outcome:
    """Measure `resolution` in `slot` through `runner` (`BaseRunner.measure`) and read the result;
    `guard` stops a run that misses its deadlines (`too_slow`)."""
    from servetune.tuner.objectives import flatten_metrics

    m = runner.measure(
        resolution,
        workload,
        run_dir=run_dir,
        requests=requests,
        gpus=slot.gpus,
        should_stop=should_stop,
        guard=guard,
    )
    out = Outcome(
        timing=m.timings.model_dump(mode="json", exclude_none=True),
        server_info=dict(m.server_info or {}),
    )
    if m.failure is not None:
        out.failure = m.failure
        return out
    flat = flatten_metrics(m.metrics) if m.metrics is not None else {}
    out.stopped_early = bool(flat.get("stopped_early"))
    if not flat.get("completed") and not out.stopped_early:
        errors = "; ".join(flat.get("errors") or ["no errors reported"])
        out.failure = Failure(
            cls="bench_error", stage="bench", message=f"no request completed: {errors}", log_tail=_log_tail(run_dir)
        )
        return out
    out.metrics = flat
    return out


def evaluate_capacity(
    runner: BaseRunner,
    resolution: Resolution,
    *,
    workload: Workload,
    slos: tuple[LatencySlo, ...],
    search: CapacitySearch,
    slot: Slot,
    run_dir: Path,
    floor: float | None = None,
    stop: Callable[[], bool] | None = None,
    resume: Path | None = None,
) -> Outcome:
    """A capacity search of `resolution` (`measure_capacity`: one launch, the search's steps; `resume`:
    the run directory of an interrupted launch of the same trial, whose finished steps are kept).

    The outcome's metrics are the step's at the capacity rate plus `capacity_request_rate` and
    `capacity_goodput`. A search cut at `floor` sets `below_floor` (the trial cannot beat the
    incumbent); a config that misses an SLO at the lowest rate tried is `slo_unmet`."""
    from servetune.runner import measure_capacity
    from servetune.tuner.objectives import CAPACITY_METRIC, flatten_metrics

    m = measure_capacity(
        runner, resolution, workload, slos, run_dir=run_dir, search=search, gpus=slot.gpus, floor=floor, stop=stop,
        resume=resume,
    )  # fmt: skip
    cap = m.capacity
    out = Outcome(
        timing=m.timings.model_dump(mode="json", exclude_none=True),
        server_info=dict(m.server_info or {}),
        capacity=cap.model_dump(mode="json") if cap is not None else None,
    )
    if m.failure is not None:
        out.failure = m.failure
        return out
    flat = flatten_metrics(m.metrics) if m.metrics is not None else {}
    if cap.below_floor:
        out.below_floor = floor
        out.stopped_early = True
        out.metrics = flat
        return out
    if cap.request_rate is None:
        out.failure = Failure(
            cls="slo_unmet", stage="bench", message=f"{', '.join(cap.slos)} not met at any rate tried: {cap.note}"
        )
        return out
    out.metrics = {**flat, CAPACITY_METRIC: cap.request_rate, "capacity_goodput": cap.goodput}
    return out


def _log_tail(run_dir: Path) -> str:
    try:
        return (Path(run_dir) / "server.log").read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""
