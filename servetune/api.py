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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servetune.errors import SpecError
from servetune.schema.catalog import Catalog
from servetune.schema.decision import ResolvedConfig
from servetune.schema.facts import DeploymentFacts, Facts, HardwareProfile, SglangFacts, WorkloadFacts, sglang_memory_defaults
from servetune.schema.preset import Preset

__all__ = ["Resolution", "parse_assignments", "resolve_launch", "workload_facts"]


@dataclass(frozen=True)
class Resolution:
    """A resolved launch: facts, the config with provenance, and its target catalog."""

    facts: Facts
    config: ResolvedConfig
    catalog: Catalog
    hardware: HardwareProfile
    preset: Preset | None = None
    rules: Any = None
    """The `RuleSet` resolved with (for `explain`)."""

    @property
    def pinned(self) -> frozenset[str]:
        """Names the user pinned."""
        return self.config.pinned

    def argv(self) -> list[str]:
        """Flags after `python -m sglang.launch_server`."""
        from servetune.render import render_argv

        return render_argv(self.config, self.catalog, self.facts.model.path)

    def env(self) -> dict[str, str]:
        """Env vars to launch with."""
        from servetune.render import render_env

        return render_env(self.config)

    def requested(self) -> dict[str, Any]:
        """`{field: value}` of decided server fields (plus `model_path`)."""
        return {"model_path": self.facts.model.path, **{k: r.value for k, r in self.config.fields.items()}}


def parse_assignments(items: Iterable[str] | Mapping[str, Any], *, option: str) -> dict[str, Any]:
    """`["a=1", "b=x"]` → `{"a": "1", "b": "x"}` (CLI text, typed later by the catalog)."""
    if isinstance(items, Mapping):
        return dict(items)
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"{option} needs NAME=VALUE, but got {item!r}", help=f"write e.g. {option} max_running_requests=256")
        if key.startswith("--"):
            raise SpecError(
                f"{option} takes the field name, not the flag: got {key!r}",
                help=f"write {option} {key[2:].replace('-', '_')}={value}",
            )
        out[key] = value
    return out


def workload_facts(workload: Any) -> WorkloadFacts:
    """Facts the rules see from a `Workload` (or none)."""
    if workload is None:
        return WorkloadFacts()
    images = getattr(workload, "images", None)
    reuse = "none"
    if images is not None:
        reuse = "unique" if images.reuse == "unique" else "repeated"
    return WorkloadFacts(
        name=workload.name,
        kind=workload.kind,
        image_reuse=reuse,
        images_per_request=images.per_request if images is not None else 0,
        input_tokens=workload.input_tokens,
        output_tokens=workload.output_tokens,
        max_concurrency=workload.max_concurrency,
    )


def _hardware(gpu: str | None, hardware: str | Path | HardwareProfile | None) -> HardwareProfile:
    from servetune import hardware as hw

    if gpu and hardware:
        raise SpecError("give --gpu or --hardware, not both")
    if isinstance(hardware, HardwareProfile):
        return hardware
    if hardware:
        return hw.load_profile(hardware)
    if gpu:
        return hw.named_profile(gpu)
    return hw.detect()


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
    """Detect or load facts, load rules, preset and catalog, and resolve. See the module docstring."""
    from servetune.catalog import available_versions, default_version, load_catalog
    from servetune.modelinfo import load_model_facts
    from servetune.presets import load_preset
    from servetune.rules.engine import LayerInput, resolve
    from servetune.rules.loader import load_rules

    version = sglang_version or default_version()
    catalog = load_catalog(version)
    profile = _hardware(gpu, hardware)
    model_facts = load_model_facts(model)
    if isinstance(workload, (str, Path)):
        from servetune.bench.workloads import load_workload

        workload = load_workload(workload)
    pins = parse_assignments(sets, option="--set")
    env_pins = parse_assignments(envs, option="--env")
    for key in env_pins:
        if not key.isupper() or key.islower():
            raise SpecError(f"--env takes an environment variable name, but got {key!r}", help="use --set for SGLang fields")
    for key in pins:
        if key.isupper() and not key.islower():
            raise SpecError(f"--set takes an SGLang field name, but got the env var {key!r}", help=f"use --env {key}=...")
    if nnodes is not None:
        pins["nnodes"] = nnodes
    if tp is not None:
        pins["tp_size"] = tp
    deployment = DeploymentFacts(nnodes=int(pins.get("nnodes", 1)), tp=int(pins.get("tp_size", 1)))
    chunk, max_bs = sglang_memory_defaults(profile.gpu.memory_mib, deployment.tp)
    facts = Facts(
        gpu=profile.gpu,
        model=model_facts,
        workload=workload_facts(workload),
        deployment=deployment,
        sglang=SglangFacts(version=version, default_cuda_graph_max_bs_decode=max_bs, default_chunked_prefill_size=chunk),
    )
    catalogs = [load_catalog(v) for v in available_versions()]
    rules = load_rules(list(rules_files), catalogs=catalogs)
    layers: list[LayerInput] = []
    preset_obj: Preset | None = None
    if preset is not None:
        preset_obj, preset_path, locations = load_preset(preset)
        layers.append(LayerInput("preset", preset_obj.name, preset_obj.set, locations, preset_obj.summary, strict=False))
    if trial:
        layers.append(LayerInput("tuner", "trial", dict(trial), reason="tuner trial"))
    if pins:
        layers.append(LayerInput("pin", "cli --set", pins, reason="pinned on the command line", from_text=True))
    if env_pins:
        layers.append(LayerInput("pin", "cli --env", env_pins, reason="pinned on the command line", from_text=True))
    config = resolve(facts, rules, catalog, layers, use_rules=use_rules)
    return Resolution(facts=facts, config=config, catalog=catalog, hardware=profile, preset=preset_obj, rules=rules)
