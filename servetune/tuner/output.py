"""The tuned config as a preset YAML (`--out best.yaml`) that `servetune resolve --preset` reads.

`set:` holds the winning trial's tuner layer (the searched values it launched with) over the
values of the study's own `--preset` (secrets left out); the rules, pins and SGLang resolve
everything else exactly as during the study. `evidence:`
holds what the choice rests on: metrics, baseline metrics, the trial numbers, the ratio and
its spread, hardware, model, workload and SGLang version.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from servetune.errors import TuningError
from servetune.secrets import redact
from servetune.tuner._result import TuneResult
from servetune.tuner._storage import redact_url

_KEEP_METRICS = (
    "capacity_request_rate",
    "capacity_goodput",
    "comparable_request_throughput",
    "comparable_output_throughput",
    "request_throughput",
    "output_throughput",
    "completed",
    "failed",
    "duration_s",
    "p50_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "client",
)


def build_preset(result: TuneResult, *, name: str | None = None) -> dict[str, Any]:
    """The preset mapping for `result` (validated against `servetune.schema.preset.Preset`)."""
    best, base = result.best, result.baseline
    if best is None:
        raise TuningError(
            f"study {result.study!r} has no feasible trial to write",
            help="see `servetune tune report` for the failures; relax --slo or widen the space",
        )
    meta = result.meta
    hardware = meta.get("hardware")
    gpu_name, gpu_count = _gpu(hardware, meta.get("gpu"))
    primary = result.objectives[0] if result.objectives else {"name": "throughput", "unit": ""}
    ratio = result.ratio()
    summary = (
        f"Tuned by servetune for {meta.get('model')} on {gpu_name or meta.get('gpu') or 'this GPU'} with "
        f"{meta.get('workload')}: trial {best.number}"
        + (f", {ratio:.3f}x the rule-resolved baseline on {primary['name']}" if ratio is not None else "")
        + "."
    )
    evidence: dict[str, Any] = {
        "study": result.study,
        "storage": redact_url(result.storage),
        "objectives": result.objectives,
        "slos": result.slos,
        "best_trial": best.number,
        "best_source": best.source,
        "baseline_trial": base.number if base else None,
        "trials": [t.number for t in result.trials],
        "trials_by_state": _count_states(result),
        "metrics": _brief_metrics(best.metrics),
        "baseline_metrics": _brief_metrics(base.metrics) if base else None,
        "ratio": ratio,
        "confirmation": _brief_confirmation(result.confirmation),
        "hardware": hardware,
        "model": meta.get("model"),
        "workload": meta.get("workload"),
        "sglang_version": meta.get("sglang_version"),
        "pins": meta.get("pins"),
        "study_preset": meta.get("preset"),
    }
    if meta.get("capacity"):
        evidence["capacity"] = _capacity_evidence(meta["capacity"], best, base, ratio)
    if best.fixed:
        evidence["fixed"] = best.fixed
    preset = {
        "name": name or _slug(f"tuned-{result.study}"),
        "summary": summary,
        "made_for": {
            "gpu": gpu_name or meta.get("gpu"),
            "gpu_count": gpu_count,
            "model": meta.get("model"),
            "workload": meta.get("workload"),
            "sglang_version": meta.get("sglang_version"),
        },
        "set": {**(meta.get("preset_set") or {}), **best.layer},
        "tune": meta.get("space") or {},
        "evidence": _clean(evidence),
    }
    try:
        from servetune.schema.preset import Preset
    except ImportError:  # the schema lands with the resolver; the shape above is its contract
        return preset
    Preset.model_validate(preset)
    return preset


def write_preset(result: TuneResult, path: str | Path, *, name: str | None = None) -> Path:
    """Write the preset YAML; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    preset = build_preset(result, name=name)
    header = (
        f"# Written by `servetune tune` (study {result.study!r}). Apply with:\n"
        f"#   servetune resolve --model {result.meta.get('model')} --preset {out}\n"
    )
    out.write_text(header + yaml.safe_dump(redact(preset), sort_keys=False, allow_unicode=True, width=100))
    return out


def _gpu(hardware: Any, named: str | None) -> tuple[str | None, int | None]:
    """(GPU name, count) from a dumped `HardwareProfile`, else the named profile."""
    gpu = hardware.get("gpu") if isinstance(hardware, dict) else None
    if isinstance(gpu, dict) and gpu.get("name"):
        count = gpu.get("count")
        return str(gpu["name"]), count if isinstance(count, int) else None
    return named, None


def _brief_metrics(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    if not metrics:
        return None
    return {k: _round(metrics[k]) for k in _KEEP_METRICS if k in metrics and metrics[k] is not None}


def _brief_confirmation(conf: dict[str, Any] | None) -> dict[str, Any] | None:
    if not conf:
        return None
    keep = ("objective", "rounds", "baseline_trial", "chosen_trial", "chosen_ratio", "note", "soaks")
    out = {k: conf.get(k) for k in keep}
    out["finalists"] = [
        {k: f.get(k) for k in ("trial", "median", "min", "max", "stdev", "ratios", "failures")}
        for f in conf.get("finalists", [])
    ]
    return out


def _capacity_evidence(meta: dict[str, Any], best, base, ratio: float | None) -> dict[str, Any]:
    """The SLOs, the search settings, and the capacity of the best and the baseline (req/s)."""

    def cap(t) -> dict[str, Any] | None:
        if t is None or not t.capacity:
            return None
        c = t.capacity
        return {
            "request_rate": c.get("request_rate"),
            "lowest_missed": c.get("lowest_missed"),
            "certified": c.get("certified"),
            "confidence": c.get("confidence"),
            "goodput": c.get("goodput"),
            "steps": len(c.get("steps") or []),
        }

    return {
        "slos": meta.get("slos"),
        "search": meta.get("search"),
        "best": cap(best),
        "baseline": cap(base),
        "ratio": ratio,
    }


def _count_states(result: TuneResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in result.trials:
        counts[t.state] = counts.get(t.state, 0) + 1
    return counts


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _clean(obj: Any) -> Any:
    """Drop None values and turn floats into rounded plain floats (readable YAML)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, float):
        return round(obj, 4)
    return obj


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")[:80] or "tuned"
