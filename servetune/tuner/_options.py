"""`TuneOptions`: everything `servetune tune` takes, one field per CLI option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIRM_MIN_STEP_S = 20.0
"""A capacity confirmation's steps last at least this long unless `--confirm-step-seconds` says
otherwise (bench's default step). On the H200 a 3B server offered more than it could sustain held
p99 TPOT for the first 6-7 s of a step, so 8 s steps measured burst, not sustained, capacity
(docs/h200-results.md, section 11)."""

SOURCES_BASELINE = ("rules", "defaults")
"""The `source` of the two enqueued baselines: the rule-resolved config and SGLang's own defaults."""


@dataclass
class TuneOptions:
    """Everything `servetune tune` takes; the CLI maps its options onto this one to one."""

    model: str
    gpu: str | None = None
    hardware: str | None = None
    workload: Any = "text-chat"
    sglang_version: str | None = None
    preset: str | None = None
    sets: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()
    nnodes: int | None = None
    """Pins `nnodes` (`--nnodes`)."""
    tp: int | None = None
    rules: tuple[str, ...] = ()
    """Extra rule files (`--rules`), checked and applied with the built-in ones."""
    no_rules: bool = False
    """`--no-rules`: the `rules` baseline and every trial resolve without rules (SGLang's defaults
    plus preset, trial and pins)."""
    trials: int = 20
    objective: str = "throughput"
    slos: tuple[str, ...] = ()
    """`--slo`: constraints METRIC<=N for throughput objectives; latency SLOs (`bench.slo`) for `capacity`."""
    start_rate: float | None = None
    """Capacity: the baselines' first rate (req/s; None: the workload's `request_rate`, else 4). Later
    trials start at the incumbent's capacity (their floor)."""
    resolution: float = 0.1
    """Capacity: the search stops when the highest met and lowest missed rates are this close (relative)."""
    step_seconds: float = 20.0
    """Capacity: seconds of arrivals per step (requests = rate x this, at least `step_requests`)."""
    step_requests: int = 64
    """Capacity: requests per step at least."""
    confirm_step_seconds: float | None = None
    """Capacity: seconds of arrivals per step of the confirmation's searches; None: the study's
    `step_seconds`, at least `CONFIRM_MIN_STEP_S`."""
    space_file: str | None = None
    space_sets: tuple[str, ...] = ()
    storage: str | None = None
    study: str | None = None
    run_dir: Path | None = None
    gpus: tuple[str, ...] = ()
    requests: int | None = None
    seed: int | None = 0
    sglang_cmd: str | None = None
    client: str = "auto"
    sampler: str = "tpe"
    prune: bool = True
    confirm_rounds: int = 2
    finalists: int = 1
    startup_timeout_s: float | None = None
    n_startup_trials: int = 2  # the two enqueued baselines (see _sampler.TPE_SETUP)
    enqueue_baselines: bool = True
    local_trials: int | None = None
    """TPE only: trials of the local phase (`_local`), one-field changes of the best so far;
    None: `_local.local_budget` (two per searched field, at most a quarter of `trials`); 0: off."""
