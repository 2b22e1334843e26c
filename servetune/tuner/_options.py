"""`TuneOptions`: everything `servetune tune` takes, one field per CLI option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    resolution: float = 0.05
    """Capacity: the search stops when the highest met and lowest missed rates are this close (relative)."""
    step_seconds: float = 120.0
    """Capacity: a step's longest run (s); it stops at its verdict."""
    confidence: float = 0.95
    """Capacity: confidence of each step's SLO verdicts."""
    step_warmup_seconds: float = 5.0
    """Capacity: seconds of arrivals at each step's start that no verdict judges."""
    soak_horizon: float = 300.0
    """Capacity: the backlog test extrapolates to this many seconds after a step's start."""
    backlog_seconds: float = 30.0
    """Capacity: seconds of judged arrivals before the backlog test first decides."""
    warmup_wave: int = 64
    """Capacity: requests sent all at once after each launch, judged by nothing."""
    confirm_step_seconds: float | None = None
    """Capacity: a step's longest run in the confirmation's searches; None: `step_seconds`."""
    confirm_soak_seconds: float = 300.0
    """Capacity: after the confirmation rounds, a soak of this many seconds of the winner at its
    confirmed capacity and of the baseline at the winner's rate (fresh launches; 0: none)."""
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
    finalists: int = 3
    """Finalists confirmed at most, in rank order, until one is confirmed better than the baseline."""
    startup_timeout_s: float | None = None
    n_startup_trials: int = 2  # the two enqueued baselines (see _sampler.TPE_SETUP)
    enqueue_baselines: bool = True
    local_trials: int | None = None
    """TPE only: trials of the local phase (`_local`), one-field changes of the best so far;
    None: `_local.local_budget` (two per searched field, at most a quarter of `trials`); 0: off."""
    model_seed: bool = True
    """Capacity studies: fit the server model on the baselines' searches, prune the space by it and
    seed the first sampled trial (`_model`); False: search as without a model."""
    budget_s: float | None = None
    """`--budget`: stop launching once the next trial and the confirmation no longer fit (s; None: no limit)."""
