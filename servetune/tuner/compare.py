"""`servetune compare`: two configs, fresh launches interleaved (A B A B ...), the ratio B/A with its
spread and a verdict, through the tuner's confirmation (`_confirm.run_interleaved`).

    from servetune.tuner.compare import CompareSide, compare, side_layer
    ctx = Context.build("qwen3-8b", gpu="h200", workload="text-chat")
    a = CompareSide("A", side_layer(ctx, "runs/run-1", ()))
    b = CompareSide("B", side_layer(ctx, None, ["cuda_graph_max_bs_decode=64"]))
    record = compare(ctx, runner, a, b, workload=ctx.workload, rounds=3, run_dir=Path("runs/compare"))
    record["b"]["median"], record["b"]["verdict"]    # e.g. 1.12, "better"

Both sides resolve from one `Context` (the same facts, rules, pins); a side is a tuner layer: a
preset's `set:`, a run directory's resolved values, and `--a-set`/`--b-set` pins on top.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.errors import SpecError
from servetune.tuner._confirm import run_interleaved
from servetune.tuner._evaluate import Slot, evaluate, evaluate_capacity

if TYPE_CHECKING:
    from servetune.bench.slo import LatencySlo
    from servetune.context import Context
    from servetune.runner import BaseRunner, CapacitySearch
    from servetune.schema.workload import Workload


@dataclass(frozen=True)
class CompareSide:
    """One config of a comparison: a tuner layer over the shared `Context`."""

    label: str
    layer: dict[str, Any] = field(default_factory=dict)
    """Values at the tuner layer (fields and SGLANG_* env vars)."""
    use_rules: bool | None = None
    """False: SGLang's own defaults under the layer (`--b-no-rules`); None: as the context."""
    source: str = ""
    """What the user named (a preset, a run directory, pins), for the output."""


def side_layer(ctx: Context, source: str | None, sets: Iterable[str]) -> dict[str, Any]:
    """The tuner layer of one side: a run directory's resolved values (`resolved.yaml`) or a preset's
    `set:`, then `sets` ("FIELD=VALUE", typed by the catalog) on top.

    Raises:
        SpecError: A run directory without `resolved.yaml`, a bad preset, or a bad pin.
    """
    from servetune.catalog.values import coerce_env, coerce_field, is_env_name
    from servetune.context import parse_assignments

    layer: dict[str, Any] = {}
    if source:
        path = Path(source)
        layer.update(_run_dir_values(path) if path.is_dir() else _preset_values(source))
    for key, text in parse_assignments(list(sets), option="--a-set/--b-set").items():
        try:
            if is_env_name(key):
                layer[key] = coerce_env(ctx.catalog.env.get(key), text, from_text=True)
            elif key in ctx.catalog.fields:
                layer[key] = coerce_field(ctx.catalog.fields[key], text, from_text=True)
            else:
                layer[key] = text  # the resolver names the unknown field and suggests one
        except ValueError as exc:
            raise SpecError(f"bad value for {key}: {exc}", key_path=f"{key}={text}") from None
    return layer


def _run_dir_values(path: Path) -> dict[str, Any]:
    from servetune.yamlio import load_yaml

    resolved = path / "resolved.yaml"
    if not resolved.is_file():
        raise SpecError(
            f"{path} is a directory without resolved.yaml",
            help="name the run directory of a `servetune launch`/`bench` run or a tuner trial, or a preset file",
        )
    data = load_yaml(resolved) or {}
    config = data.get("config", data) if isinstance(data, Mapping) else {}
    out: dict[str, Any] = {}
    for group in ("fields", "env"):
        for key, record in (config.get(group) or {}).items():
            value = record.get("value") if isinstance(record, Mapping) else record
            if value is not None and key != "model_path":
                out[key] = value
    return out


def _preset_values(source: str) -> dict[str, Any]:
    from servetune.presets import load_preset

    preset, _, _ = load_preset(source)
    return dict(preset.set)


def _objective(rounds: int, objective: str, slos: tuple[LatencySlo, ...], search: CapacitySearch | None):
    """The comparison's objective, once its settings are checked."""
    from servetune.tuner.objectives import parse_objectives

    if rounds < 1:
        raise SpecError(f"--rounds must be >= 1, but got {rounds}", key_path="--rounds")
    obj = parse_objectives(objective)[0]
    if obj.name == "capacity" and (not slos or search is None):
        raise SpecError("--objective capacity needs at least one latency --slo", help="e.g. --slo p99_ttft_ms<=1000")
    if obj.name not in ("throughput", "capacity"):
        raise SpecError(f"compare measures throughput or capacity, but got {objective!r}", key_path="--objective")
    return obj


def compare(
    ctx: Context,
    runner: BaseRunner,
    a: CompareSide,
    b: CompareSide,
    *,
    workload: Workload,
    rounds: int,
    run_dir: Path,
    objective: str = "throughput",
    slos: tuple[LatencySlo, ...] = (),
    search: CapacitySearch | None = None,
    requests: int | None = None,
    on_round: Callable[[int, str, float | None, str | None], None] | None = None,
) -> dict[str, Any]:
    """Measure A and B in turn, `rounds` times, each a fresh launch; B/A per round and a verdict.

    `objective` `throughput` (steady req/s) or `capacity` (a capacity search against `slos`, each
    round starting at that side's last capacity). B's runs are guarded against runaways with A's
    best rate so far as the reference (`too_slow`: B is worse). `on_round(round, label, value,
    failure)` is called after each measurement.

    Returns:
        `{"objective", "unit", "rounds", "a": {"label", "source", "values", "failures", "noise"},
        "b": {..., "ratios", "median", "min", "max", "stdev", "verdict"}}`.
    """
    from servetune.tuner._trial import guard_record

    obj = _objective(rounds, objective, slos, search)
    sides = {a.label: a, b.label: b}
    res = {label: ctx.resolve(s.layer or None, use_rules=s.use_rules) for label, s in sides.items()}
    count = {label: 0 for label in sides}
    best_rate: dict[str, float] = {}
    last: dict[str, float] = {}
    guards: list[dict[str, Any]] = []
    n = requests or workload.tune_requests or workload.requests

    def measure(label: Hashable) -> tuple[float | None, str | None]:
        key = str(label)
        count[key] += 1
        out_dir = Path(run_dir) / f"r{count[key]}-{key}"
        if obj.name == "capacity":
            s = dataclasses.replace(search, seed=count[key])  # one round, one set of step sequences for both
            s = dataclasses.replace(s, start_rate=last[key]) if key in last else s
            m = evaluate_capacity(
                runner, res[key], workload=workload, slos=slos, search=s, slot=Slot(0), run_dir=out_dir
            )
        else:
            guard = None
            if key == b.label and a.label in best_rate:
                from servetune.runner import RunawayGuard

                ref = best_rate[a.label]
                guard = RunawayGuard.from_rate(ref, requests=n, concurrency=workload.max_concurrency)
                guards.append(guard_record(guard, ref))
            m = evaluate(runner, res[key], workload=workload, slot=Slot(0), run_dir=out_dir, requests=n, guard=guard)
        value = obj.value(m.metrics) if m.metrics and not m.stopped_early else None
        failure = m.failure.cls if m.failure is not None else None
        if value is not None:
            last[key] = value
            rate = m.metrics.get("comparable_request_throughput") or value
            best_rate[key] = max(best_rate.get(key, 0.0), float(rate))
        if on_round is not None:
            on_round(count[key], key, value, failure)
        return value, failure

    out = run_interleaved([a.label, b.label], rounds, measure, direction=obj.direction)
    return {
        "objective": obj.name,
        "unit": obj.unit,
        "rounds": rounds,
        "a": {"label": a.label, "source": a.source, **out["base"]},
        "b": {"label": b.label, "source": b.source, **out["others"][b.label]},
        "guards": guards,
        "run_dir": str(run_dir),
    }
