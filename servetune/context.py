"""The facts, catalog, rules, preset and pins of one command, gathered once; resolving is pure.

    from servetune.context import Context
    ctx = Context.build("qwen3-vl-8b-instruct", gpu="h200", workload="single-image-stream")
    res = ctx.resolve()                                   # the rules' launch
    res = ctx.resolve(trial={"chunked_prefill_size": 4096})  # a tuner trial on top
    res = ctx.resolve(use_rules=False)                    # SGLang's own defaults + preset + pins

`Context.build` does all the reading: NVML detection (when neither `gpu` nor `hardware` is
given), the model's config.json, the workload file, the field catalogs, the rule files and the
preset. `Context.resolve` reads nothing: the tuner builds one context per study and resolves
every trial, baseline and confirmation run from it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from servetune.errors import SpecError, did_you_mean
from servetune.options import opt
from servetune.schema.catalog import Catalog
from servetune.schema.decision import ResolvedConfig
from servetune.schema.facts import (
    DeploymentFacts,
    Facts,
    HardwareProfile,
    SglangFacts,
    WorkloadFacts,
    sglang_memory_defaults,
)
from servetune.schema.preset import Preset
from servetune.secrets import is_secret_name, register, register_env

if TYPE_CHECKING:
    from servetune.rules.engine import LayerInput
    from servetune.rules.loader import RuleSet
    from servetune.schema.workload import Workload

__all__ = ["Context", "Resolution", "parse_assignments", "workload_facts"]


@dataclass(frozen=True)
class Resolution:
    """A resolved launch: facts, the config with provenance, and its target catalog."""

    facts: Facts
    config: ResolvedConfig
    catalog: Catalog
    hardware: HardwareProfile
    preset: Preset | None = None
    rules: RuleSet | None = None
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

    @property
    def api_key(self) -> str | None:
        """The server's `api_key` when one was decided (a pin, a preset): the benchmark client sends it."""
        resolved = self.config.fields.get("api_key")
        return str(resolved.value) if resolved is not None and resolved.value else None

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
            raise SpecError(
                f"{option} needs NAME=VALUE, but got {item!r}", help=f"write e.g. {option} max_running_requests=256"
            )
        if key.startswith("--"):
            raise SpecError(
                f"{option} takes the field name, not the flag: got {key!r}",
                help=f"write {option} {key[2:].replace('-', '_')}={value}",
            )
        out[key] = value
    return out


def workload_facts(workload: Workload | None) -> WorkloadFacts:
    """Facts the rules see from a `Workload` (or none)."""
    if workload is None:
        return WorkloadFacts()
    images = workload.images
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


_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_LAUNCHER_FIELDS = {
    "model_path": ("the model is chosen with --model", "use --model PATH (its config.json feeds the rules)"),
    "host": ("the launcher sets --host itself", "use `servetune launch --host ADDR`"),
    "port": ("the launcher sets --port itself", "use `servetune launch --port N` (bench and tune pick free ports)"),
}


def _check_pin_names(pins: Mapping[str, Any], env_pins: Mapping[str, Any], catalog: Catalog) -> None:
    """Refuse pins that would not mean what they say: bad env names, and fields the launcher sets itself."""
    for key in env_pins:
        if _ENV_NAME.match(key):
            continue  # SGLANG_* names are checked against the catalog when resolving (with a did-you-mean)
        if _ENV_NAME.match(key.upper()):
            raise SpecError(
                f"--env takes an environment variable name, but got {key!r}", help="use --set for SGLang fields"
            )
        cleaned = re.sub(r"[^A-Z0-9_]+", "_", key.upper()).strip("_")
        guess = did_you_mean(cleaned, catalog.env) or (cleaned if _ENV_NAME.match(cleaned) else None)
        raise SpecError(
            f"--env takes an environment variable name (A-Z, 0-9 and _ only), but got {key!r}",
            help=f"did you mean --env {guess}=...?" if guess else "write --env NAME=VALUE",
        )
    for key in pins:
        if key.isupper() and not key.islower():
            raise SpecError(
                f"--set takes an SGLang field name, but got the env var {key!r}", help=f"use --env {key}=..."
            )
        if key in _LAUNCHER_FIELDS:
            why, fix = _LAUNCHER_FIELDS[key]
            raise SpecError(f"--set {key} cannot be pinned: {why}, so the pin would not be what runs", help=fix)


def _register_secrets(catalog: Catalog, values: Mapping[str, Any]) -> None:
    """Register the values of secret fields and env vars (`FieldSpec.secret`, `is_secret_name`)."""
    for key, value in values.items():
        spec = catalog.fields.get(key) or catalog.env.get(key)
        if (spec is not None and spec.secret) or (spec is None and is_secret_name(key)):
            register(str(value))


HW, MODEL, WORK = "Hardware", "Model", "Workload"
"""The `--help` panels of the resolve options."""
RULES = opt("--rules", panel=MODEL, help="Extra rule file (repeatable), checked and applied with the built-in ones.")


@dataclass(kw_only=True)
class ResolveOptions:
    """What a launch is resolved from (`Context.build`), as every command that resolves one takes it:
    resolve, explain, launch, bench, compare and tune (the study's `TuneOptions` extends it)."""

    model: Annotated[
        str | None,
        opt(
            "--model", "-m", panel=MODEL,
            help="Bundled model name, HF id, or local model directory (holding config.json); with bench --url, "
            "the model id to request (default: the server's first).",
        ),
    ] = None  # fmt: skip
    gpu: Annotated[
        str | None,
        opt(
            "--gpu", panel=HW,
            help="Named GPU profile, e.g. h200 or h100-sxm:8 (see `servetune hardware --list`). Without "
            "--gpu/--hardware, NVML detects this machine's GPUs.",
        ),
    ] = None  # fmt: skip
    hardware: Annotated[
        Path | None, opt("--hardware", panel=HW, help="Hardware profile file written by `servetune hardware --save`.")
    ] = None
    workload: Annotated[
        str | None,
        opt(
            "--workload", "-w", panel=WORK,
            help="Workload name (`servetune workloads list`) or file: what bench and compare send, what a study "
            "measures (default text-chat) and its tune: block, and facts the rules read (single-use vs repeated "
            "images).",
        ),
    ] = None  # fmt: skip
    sglang_version: Annotated[
        str | None,
        opt(
            "--sglang-version", panel=MODEL,
            help="Target SGLang version (default: the installed SGLang if it has a catalog, else the newest catalog).",
        ),
    ] = None  # fmt: skip
    preset: Annotated[
        str | None,
        opt(
            "--preset", "-p", panel=MODEL,
            help="Preset name or file, applied above the rules and below --set (under a study's trials; its tune: "
            "block adds to the space).",
        ),
    ] = None  # fmt: skip
    sets: Annotated[
        tuple[str, ...],
        opt(
            "--set", "-s", panel=MODEL,
            help="Pin an SGLang field: FIELD=VALUE (repeatable). Pins win over everything but `require` rules.",
        ),
    ] = ()  # fmt: skip
    envs: Annotated[
        tuple[str, ...], opt("--env", "-e", panel=MODEL, help="Pin an env var: NAME=VALUE (repeatable).")
    ] = ()
    nnodes: Annotated[int | None, opt("--nnodes", min=1, panel=HW, help="Nodes the server spans (pins nnodes).")] = None
    tp: Annotated[int | None, opt("--tp", min=1, panel=HW, help="Tensor-parallel size (pins tp_size).")] = None
    rules: Annotated[tuple[Path, ...], RULES] = ()
    no_rules: Annotated[
        bool, opt("--no-rules", panel=MODEL, help="Apply no rules: SGLang's own defaults plus preset and pins.")
    ] = False

    def context_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `Context.build` (all but the model)."""
        return dict(
            gpu=self.gpu, hardware=self.hardware, workload=self.workload, sglang_version=self.sglang_version,
            preset=self.preset, sets=self.sets, envs=self.envs, nnodes=self.nnodes, tp=self.tp,
            rules_files=self.rules, use_rules=not self.no_rules,
        )  # fmt: skip

    def context(self, **overrides: Any) -> Context:
        """Build the `Context` (detection, catalogs, rules, preset: all the reading, once)."""
        return Context.build(self.model, **{**self.context_kwargs(), **overrides})


@dataclass(frozen=True)
class Context:
    """Everything a resolution needs, read once: facts, catalogs, rules, preset and pins."""

    facts: Facts
    """Hardware, model, workload, deployment and SGLang-version facts the rules match on."""
    hardware: HardwareProfile
    """The GPU profile (detected, named or loaded)."""
    catalog: Catalog
    """The target SGLang version's field catalog."""
    rules: RuleSet
    """Built-in rules plus any `--rules` files, checked against every catalog."""
    workload: Workload | None = None
    """The workload (its facts feed the rules; bench and tune drive it)."""
    preset: Preset | None = None
    """The preset applied above the rules, if any."""
    preset_layer: LayerInput | None = None
    """The preset's layer, with its file locations."""
    pins: dict[str, Any] = field(default_factory=dict)
    """`--set` pins (and `--nnodes`/`--tp`), as given."""
    env_pins: dict[str, Any] = field(default_factory=dict)
    """`--env` pins, as given."""
    use_rules: bool = True
    """False resolves SGLang's own defaults plus preset, trial and pins (`--no-rules`)."""

    @classmethod
    def build(
        cls,
        model: str,
        *,
        gpu: str | None = None,
        hardware: str | Path | HardwareProfile | None = None,
        workload: Workload | str | Path | None = None,
        sglang_version: str | None = None,
        preset: str | Path | Preset | None = None,
        sets: Iterable[str] | Mapping[str, Any] = (),
        envs: Iterable[str] | Mapping[str, Any] = (),
        nnodes: int | None = None,
        tp: int | None = None,
        rules_files: Iterable[str | Path] = (),
        use_rules: bool = True,
    ) -> Context:
        """Detect or load the facts and read the catalogs, rules and preset (all the I/O).

        Args:
            model: A bundled name, HF id or local model directory (never downloaded).
            gpu: A named GPU profile ("h200", "h100-sxm:8"). With neither `gpu` nor
                `hardware`, NVML detects this machine's GPUs.
            hardware: A saved profile file or a `HardwareProfile`.
            workload: A workload name, file or `Workload`.
            sglang_version: The target release (default: installed SGLang's, else the newest catalog).
            preset: A shipped preset name, a file, or a `Preset`.
            sets, envs: User pins, "FIELD=VALUE" / "NAME=VALUE" strings or a mapping.
            nnodes, tp: Pins for `nnodes` / `tp_size`.
            rules_files: Extra rule files.
            use_rules: False: SGLang's own defaults plus preset, trial and pins.

        Raises:
            SpecError: A bad pin, preset, rule file, model or workload (with where and how to fix).
            HardwareDetectionError: NVML detection failed.
        """
        from servetune.catalog import available_versions, default_version, load_catalog
        from servetune.modelinfo import load_model_facts
        from servetune.presets import load_preset, made_for_mismatch
        from servetune.rules.engine import LayerInput
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
        _check_pin_names(pins, env_pins, catalog)
        register_env()
        _register_secrets(catalog, {**pins, **env_pins})
        if nnodes is not None:
            pins["nnodes"] = nnodes
        if tp is not None:
            pins["tp_size"] = tp
        deployment = DeploymentFacts.from_pins(pins)
        chunk, max_bs = sglang_memory_defaults(profile.gpu.memory_mib, deployment.tp)
        facts = Facts(
            gpu=profile.gpu,
            model=model_facts,
            workload=workload_facts(workload),
            deployment=deployment,
            sglang=SglangFacts(
                version=version, default_cuda_graph_max_bs_decode=max_bs, default_chunked_prefill_size=chunk
            ),
        )
        catalogs = [load_catalog(v) for v in available_versions()]
        rules = load_rules(list(rules_files), catalogs=catalogs)
        preset_obj: Preset | None = None
        preset_layer = None
        if preset is not None:
            preset_obj, _, locations = load_preset(preset, catalogs=catalogs)
            mismatch = made_for_mismatch(
                preset_obj,
                models=[str(model), model_facts.name, model_facts.path],
                gpu=profile.gpu.name,
                sglang_version=version,
            )
            if mismatch is not None:
                logging.getLogger("servetune.presets").warning(mismatch)
            preset_layer = LayerInput(
                "preset", preset_obj.name, preset_obj.set, locations, preset_obj.summary, strict=False
            )
        return cls(
            facts=facts,
            hardware=profile,
            catalog=catalog,
            rules=rules,
            workload=workload,
            preset=preset_obj,
            preset_layer=preset_layer,
            pins=pins,
            env_pins=env_pins,
            use_rules=use_rules,
        )

    def resolve(self, trial: Mapping[str, Any] | None = None, *, use_rules: bool | None = None) -> Resolution:
        """Resolve the launch, with `trial` ({field or SGLANG_* env: value}) at the tuner layer.

        Pure: it reads no file, environment or device. A trial that breaks a `require` rule
        raises `RequireViolation` (a `ConflictError`) and must not be launched.

        Args:
            trial: Values at the tuner layer (between preset and pins).
            use_rules: Override the context's `use_rules` (the tuner's `defaults` baseline).
        """
        from servetune.rules.engine import LayerInput, resolve

        layers: list[LayerInput] = []
        if self.preset_layer is not None:
            layers.append(self.preset_layer)
        if trial:
            layers.append(LayerInput("tuner", "trial", dict(trial), reason="tuner trial"))
        if self.pins:
            layers.append(
                LayerInput("pin", "cli --set", self.pins, reason="pinned on the command line", from_text=True)
            )
        if self.env_pins:
            layers.append(
                LayerInput("pin", "cli --env", self.env_pins, reason="pinned on the command line", from_text=True)
            )
        rules_on = self.use_rules if use_rules is None else use_rules
        config = resolve(self.facts, self.rules, self.catalog, layers, use_rules=rules_on)
        check_gpu_fit(config, self.facts)
        # the one side effect: a secret a preset or rule decided is hidden from every writer from now on
        _register_secrets(self.catalog, config.values())
        return Resolution(
            facts=self.facts,
            config=config,
            catalog=self.catalog,
            hardware=self.hardware,
            preset=self.preset,
            rules=self.rules,
        )


def check_gpu_fit(config: ResolvedConfig, facts: Facts) -> None:
    """The parallel layout must fit the GPUs: tp_size x pp_size (x dp_size, unless DP attention puts
    the replicas on the tensor-parallel GPUs) at most the node's GPUs x nnodes.

    Raises:
        RequireViolation: A tuner trial asked for more (such a config is never launched).
        SpecError: A pin, preset or rule did, naming each value, where it was decided, and the GPUs.
    """
    from servetune.errors import RequireViolation

    def value(key: str, default: Any) -> Any:
        r = config.fields.get(key)
        return r.value if r is not None and r.value is not None else default

    try:
        tp, pp, dp = int(value("tp_size", 1)), int(value("pp_size", 1)), int(value("dp_size", 1))
        nnodes = int(value("nnodes", facts.deployment.nnodes))
    except (TypeError, ValueError):
        return
    dp_attention = bool(value("enable_dp_attention", False))
    need = tp * pp * (1 if dp_attention else dp)
    have = facts.gpu.count * nnodes
    if need <= have:
        return
    parts, layers = [], set()
    for key in ("tp_size", "pp_size", "dp_size"):
        r = config.fields.get(key)
        if r is not None and (key != "dp_size" or not dp_attention):
            d = r.decision
            layers.add(d.layer)
            parts.append(f"{key}={r.value} ({d.layer} {d.source}{f', {d.location}' if d.location else ''})")
    message = (
        f"{' x '.join(parts)} needs {need} GPUs, but the target has {have}: {facts.gpu.count} x {facts.gpu.name}"
        + (f" x {nnodes} nodes" if nnodes > 1 else "")
    )
    if "tuner" in layers:
        raise RequireViolation(message)
    raise SpecError(
        message,
        help=f"lower --tp/--set dp_size, or name the node you launch on: --gpu NAME:{need} (or --hardware FILE, "
        "or --nnodes N)",
    )
