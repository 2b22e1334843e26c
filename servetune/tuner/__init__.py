"""`servetune tune`: an Optuna study over the SGLang fields the rules and the user left open.

    from servetune.tuner import TuneOptions, Tuner, write_preset
    result = Tuner(TuneOptions(model="qwen3-8b", gpu="h200", workload="text-chat", trials=20,
                               sglang_cmd="python -m servetune.testing.standin")).run()
    write_preset(result, "best.yaml")
    result.as_json()   # {"best": {...}, "baseline": {...}, "trials": [...], "ratio": ...}

Modules: `space` (search spaces: YAML, compact CLI form, catalog checks, baseline mapping),
`objectives` (objectives and SLOs), `events` (what a running study reports), `_options`
(`TuneOptions`), `_tuner` (the `Tuner` facade), `_setup` (the `Context`, space, slots, sampler,
pruner and study, built once; resume checks; baselines), `_worker` (slot workers), `_trial` (one
trial: resolve, measure through the runner, tell), `_evaluate` (a runner's measurement as the
tuner reads it), `_local` (the local phase), `_pruning`, `_sampler`, `_confirm` (re-measuring
the finalists), `_result` (a study read back: `TuneResult`), `_storage` (RDB storage,
heartbeats, lost-worker recovery), `output` (preset YAML), `report` (tables and plots). optuna is
imported inside functions only, so importing this package (and the CLI) stays light.

Every measurement goes through a `servetune.runner.BaseRunner` (`Tuner(options, runner=...)`):
`SglangRunner` by default, `servetune.testing.FakeRunner` in unit tests.

Storage opens in optuna-dashboard: `optuna-dashboard sqlite:///runs/tune/<study>/study.db`.
"""

from __future__ import annotations

from servetune.tuner._options import SOURCES_BASELINE, TuneOptions
from servetune.tuner._result import (
    JOURNAL as CONFIRM_JOURNAL,
)
from servetune.tuner._result import (
    TrialSummary,
    TuneResult,
    load_result,
    pareto_front,
    pick_best,
    rank_feasible,
    summarize_trial,
)
from servetune.tuner._storage import redact_url
from servetune.tuner._tuner import Tuner
from servetune.tuner._worker import MAX_REPROPOSALS
from servetune.tuner.output import build_preset, write_preset

__all__ = [
    "CONFIRM_JOURNAL",
    "redact_url",
    "MAX_REPROPOSALS",
    "SOURCES_BASELINE",
    "TrialSummary",
    "TuneOptions",
    "TuneResult",
    "Tuner",
    "build_preset",
    "load_result",
    "pareto_front",
    "pick_best",
    "rank_feasible",
    "summarize_trial",
    "write_preset",
]
