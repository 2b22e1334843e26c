"""One measurement: launch a resolved config, benchmark it, stop it, classify what went wrong.

Nothing here is simulated: the server is a real process started by `servetune.launch`, the
load is real HTTP from `servetune.bench`. A failure comes back as data (`Failure`), never as
an exception, except Ctrl-C.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servetune.errors import ServetuneError

LOG_TAIL_CHARS = 4000


@dataclass
class Failure:
    """Why a trial has no score: a class (oom, crash, startup_timeout, bench_error, require, ...)."""

    cls: str
    message: str
    log_tail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"class": self.cls, "message": self.message, "log_tail": self.log_tail[-LOG_TAIL_CHARS:]}


@dataclass
class Measurement:
    """What one launch + benchmark produced."""

    metrics: dict[str, Any] | None = None
    failure: Failure | None = None
    stopped_early: bool = False
    launch_s: float = 0.0
    bench_s: float = 0.0
    server_info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Slot:
    """Where a trial runs: a GPU set (None = inherit `CUDA_VISIBLE_DEVICES`); ports are the
    launcher's (it reserves a free one per launch, safe across threads and processes)."""

    index: int
    gpus: tuple[str, ...] | None = None


def config_hash(argv: list[str], env: Mapping[str, str]) -> str:
    """Identity of a launch: the resolved argv and SGLang env, nothing about where it runs."""
    blob = json.dumps({"argv": list(argv), "env": dict(sorted(env.items()))}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def measure(
    resolution,
    *,
    workload,
    slot: Slot,
    run_dir: Path,
    requests: int | None,
    sglang_cmd: str | None,
    client: str,
    startup_timeout_s: float | None,
    should_stop: Callable[[int, Any], bool] | None = None,
) -> Measurement:
    """Launch `resolution` in `slot`, run `workload` against it, stop it (`managed_run`)."""
    from servetune.launch import LaunchOptions, managed_run
    from servetune.tuner.objectives import flatten_metrics

    options: dict[str, Any] = {"run_dir": run_dir}
    if sglang_cmd:
        options["sglang_cmd"] = sglang_cmd
    if slot.gpus is not None:
        options["cuda_visible_devices"] = ",".join(slot.gpus)
    if startup_timeout_s:
        options["startup_timeout_s"] = startup_timeout_s
    try:
        run = managed_run(
            resolution.argv(),
            resolution.env(),
            resolution.requested(),
            workload,
            LaunchOptions(**options),
            requests=requests,
            client=client,
            should_stop=should_stop,
        )
    except ServetuneError as exc:  # bad options or workload: not a property of the config
        return Measurement(failure=Failure("error", exc.message, "\n".join(exc.notes)))
    out = Measurement(
        launch_s=run.timings.startup_s or 0.0,
        bench_s=run.timings.bench_s or 0.0,
        server_info=dict(run.server_info or {}),
    )
    if not run.ok:
        out.failure = Failure(run.failure or "crash", run.message or "", run.log_tail)
        return out
    flat = flatten_metrics(run.metrics)
    out.stopped_early = bool(flat.get("stopped_early"))
    if not flat.get("completed") and not out.stopped_early:
        errors = "; ".join(flat.get("errors") or ["no errors reported"])
        out.failure = Failure("bench_error", f"no request completed: {errors}", run.log_tail)
        return out
    out.metrics = flat
    return out
