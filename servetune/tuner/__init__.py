"""`servetune tune`: an Optuna study over the SGLang fields the rules and the user left open.

    from servetune.tuner import TuneOptions, Tuner, write_preset
    result = Tuner(TuneOptions(model="qwen3-8b", gpu="h200", workload="text-chat", trials=20,
                               sglang_cmd="python -m servetune.testing.standin")).run()
    write_preset(result, "best.yaml")
    result.as_json()   # {"best": {...}, "baseline": {...}, "trials": [...], "ratio": ...}

Modules: `space` (search spaces: YAML, compact CLI form, catalog checks, baseline mapping),
`objectives` (objectives and SLOs), `loop` (the ask-and-tell study), `_evaluate` (one real
launch + benchmark), `_storage` (RDB storage, heartbeats, lost-worker recovery), `output`
(preset YAML), `report` (tables and plots). optuna is imported inside functions only, so
importing this package (and the CLI) stays light.

Storage opens in optuna-dashboard: `optuna-dashboard sqlite:///runs/tune/<study>/study.db`.
"""

from __future__ import annotations

from servetune.tuner.loop import TuneOptions, Tuner, TuneResult, load_result
from servetune.tuner.output import build_preset, write_preset

__all__ = ["TuneOptions", "TuneResult", "Tuner", "build_preset", "load_result", "write_preset"]
