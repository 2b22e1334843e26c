"""The one entry point the commands share: facts in, a validated, explained launch out.

    from servetune.api import resolve_launch
    res = resolve_launch("qwen3-vl-8b-instruct", gpu="h200")
    res.argv()      # ["--model-path", "Qwen/Qwen3-VL-8B-Instruct", "--decode-attention-backend", "flashinfer", ...]
    res.env()       # {"SGLANG_VLM_CACHE_SIZE_MB": "0", ...}

Contract (stable for launch/bench/tune):
- `resolve_launch(model, *, gpu=None, hardware=None, workload=None, sglang_version=None,
  preset=None, sets=(), envs=(), nnodes=None, tp=None, rules_files=(), trial=None,
  use_rules=True) -> Resolution`
  * `model`: bundled name, HF id or local directory.  `gpu`: named profile ("h200", "h100-sxm:8").
    `hardware`: a saved profile file or a `HardwareProfile`.  Neither given → NVML detection.
  * `workload`: a workload name or file (its facts feed rules), or a `Workload` object.
  * `sets` / `envs`: user pins as "FIELD=VALUE" / "NAME=VALUE" strings (or a dict).
  * `trial`: {field or SGLANG_* env: value} applied at the tuner layer; a trial that breaks a
    `require` rule raises `RequireViolation` (a `ConflictError`) and must not be launched.
  * `use_rules=False` gives SGLang's own defaults (only preset/trial/pins apply).
- `Resolution.argv()` → flags after `python -m sglang.launch_server`, `--model-path` first.
- `Resolution.env()` → {name: str value} of env vars decided (never secrets).
- `Resolution.requested()` → {field: value} for the server fields decided (for /server_info diffs).
- `Resolution.pinned` → frozenset of field/env names the user pinned (left out of tuning).
- `Resolution.facts`, `.config` (ResolvedConfig with Decision chains), `.catalog`, `.preset`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from servetune.context import Context, Resolution, parse_assignments, workload_facts
from servetune.schema.facts import HardwareProfile
from servetune.schema.preset import Preset

__all__ = ["Context", "Resolution", "parse_assignments", "resolve_launch", "workload_facts"]


def resolve_launch(
    model: str,
    *,
    gpu: str | None = None,
    hardware: str | Path | HardwareProfile | None = None,
    workload: Any = None,
    sglang_version: str | None = None,
    preset: str | Path | Preset | None = None,
    sets: Iterable[str] | Mapping[str, Any] = (),
    envs: Iterable[str] | Mapping[str, Any] = (),
    nnodes: int | None = None,
    tp: int | None = None,
    rules_files: Iterable[str | Path] = (),
    trial: Mapping[str, Any] | None = None,
    use_rules: bool = True,
) -> Resolution:
    """Build a `Context` (all the reading) and resolve once. See the module docstring.

    Commands that resolve more than once (the tuner) build the `Context` themselves.
    """
    ctx = Context.build(
        model,
        gpu=gpu,
        hardware=hardware,
        workload=workload,
        sglang_version=sglang_version,
        preset=preset,
        sets=sets,
        envs=envs,
        nnodes=nnodes,
        tp=tp,
        rules_files=rules_files,
        use_rules=use_rules,
    )
    return ctx.resolve(trial)
