"""Objectives (`--objective throughput,p99_ttft`, `--objective capacity`) and SLOs (`--slo p99_ttft_ms<=2000`).

An objective names a metric of the benchmark and a direction. An SLO is a bound on a metric;
Optuna sees it as a constraint value `c` (feasible when `c <= 0`) through `constraints_func`.
Metric names are the keys of the benchmark's metrics, flattened (`servetune bench --json`).

`capacity` is different: each trial is a capacity search (`servetune.runner.measure_capacity`)
and its `--slo` are latency SLOs (`servetune.bench.slo.parse_slos`) that define the capacity,
not constraints on a run; it is the study's only objective.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from servetune.bench.slo import MetricBound, parse_bound
from servetune.errors import SpecError, did_you_mean

Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class Objective:
    """One optimised quantity: a metric key and a direction."""

    name: str
    metric: str
    direction: Direction
    unit: str

    def value(self, metrics: Mapping[str, Any]) -> float | None:
        """The metric's value, or None when the run did not produce it."""
        return metric_value(metrics, self.metric)

    @property
    def is_throughput(self) -> bool:
        """A closed-loop throughput figure (req/s or tok/s), the objectives the runaway guard watches."""
        return self.metric.startswith("comparable_")


# Throughput objectives use the steady-state figures: ramp-up and drain are trimmed, so runs
# of different lengths (and pruned partial runs) compare.
_THROUGHPUT = {
    "throughput": ("comparable_request_throughput", "req/s"),
    "request_throughput": ("comparable_request_throughput", "req/s"),
    "token_throughput": ("comparable_output_throughput", "tok/s"),
    "output_throughput": ("comparable_output_throughput", "tok/s"),
}
CAPACITY = "capacity"
"""The capacity objective's name: the highest Poisson rate (req/s) at which every latency SLO holds."""
CAPACITY_METRIC = "capacity_request_rate"
"""The flat metric a capacity trial stores its capacity under."""
_LATENCY = re.compile(r"^(?P<pct>p\d+|mean|median)_(?P<what>ttft|tpot|itl|e2e|e2el)$")


def parse_objectives(text: str | list[str] | tuple[str, ...]) -> tuple[Objective, ...]:
    """`throughput`, `token_throughput`, `p99_ttft`, `p50_tpot`, ... comma-separated; the first is primary."""
    items = [t.strip() for part in ([text] if isinstance(text, str) else text) for t in part.split(",") if t.strip()]
    if not items:
        raise SpecError("--objective is empty", help="use throughput, token_throughput or e.g. throughput,p99_ttft")
    objectives = []
    if CAPACITY in items and len(items) > 1:
        raise SpecError(
            f"--objective capacity is searched alone, but got {','.join(items)}",
            key_path="--objective",
            help="use --objective capacity with latency --slo bounds, or throughput objectives without it",
        )
    for item in items:
        if item == CAPACITY:
            objectives.append(Objective(CAPACITY, CAPACITY_METRIC, "maximize", "req/s"))
            continue
        if item in _THROUGHPUT:
            metric, unit = _THROUGHPUT[item]
            objectives.append(Objective(item, metric, "maximize", unit))
            continue
        m = _LATENCY.match(item.removesuffix("_ms"))
        if m:
            what = "e2e_latency" if m["what"] in ("e2e", "e2el") else m["what"]
            objectives.append(Objective(item.removesuffix("_ms"), f"{m['pct']}_{what}_ms", "minimize", "ms"))
            continue
        hint = did_you_mean(item, [*_THROUGHPUT, CAPACITY, "p99_ttft", "p99_tpot", "p99_e2e", "p50_ttft"])
        raise SpecError(
            f"unknown objective {item!r}",
            key_path="--objective",
            help=(f"did you mean {hint!r}? " if hint else "")
            + "objectives: throughput, token_throughput, capacity, or a latency percentile like p99_ttft, p99_e2e",
        )
    names = [o.name for o in objectives]
    if len(set(names)) != len(names):
        raise SpecError(f"--objective lists a metric twice: {names}")
    return tuple(objectives)


def parse_constraint(text: str) -> MetricBound:
    """A study's `--slo` on a throughput objective: the one `--slo` grammar (`bench.slo.parse_bound`),
    a latency SLO as a bound on its statistic's metric.

    Raises:
        SpecError: the grammar's errors; a metric the benchmark never reports (with the closest name).
    """
    bound = MetricBound.of(parse_bound(text))
    known = metric_names()
    if bound.metric not in known:
        hint = did_you_mean(bound.metric, known)
        raise SpecError(
            f"the benchmark reports no metric {bound.metric!r} (in the SLO {text!r})",
            key_path="--slo",
            help=(f"did you mean {hint!r}? " if hint else "")
            + "a study's --slo bounds a latency (p99_ttft_ms<=2000) or any figure of `bench --json`'s metrics, "
            "e.g. steady_request_throughput>=10, completed>=100",
        )
    return bound


def metric_names() -> frozenset[str]:
    """Every name `flatten_metrics` can produce: the numeric fields of `bench.schema.Metrics`, its steady
    window's as `steady_*`, and the `comparable_*` throughputs."""
    from servetune.bench.schema import Metrics, SteadyWindow

    names = {n for n, f in Metrics.model_fields.items() if _numeric(f.annotation)}
    names |= {f"steady_{n}" for n, f in SteadyWindow.model_fields.items() if _numeric(f.annotation)}
    return frozenset(names | {"comparable_request_throughput", "comparable_output_throughput"})


def _numeric(annotation: Any) -> bool:
    text = str(annotation)
    return any(t in text for t in ("float", "int")) and "list" not in text and "dict" not in text


def metric_value(metrics: Mapping[str, Any], key: str) -> float | None:
    """A finite float for `key`, else None."""
    value = metrics.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def flatten_metrics(metrics: Any) -> dict[str, Any]:
    """The bench's `Metrics` as one flat JSON-ready dict: its scalar fields, `steady_*` window
    figures, and the `comparable_*` throughputs the objectives rank by."""
    data = metrics.model_dump() if hasattr(metrics, "model_dump") else dict(metrics)
    steady = data.pop("steady", None) or {}
    flat = {k: v for k, v in data.items() if v is None or isinstance(v, (str, int, float, bool))}
    flat["errors"] = list(data.get("errors") or [])
    flat.update({f"steady_{k}": v for k, v in steady.items()})
    if hasattr(metrics, "comparable_request_throughput"):
        flat["comparable_request_throughput"] = metrics.comparable_request_throughput()
        flat["comparable_output_throughput"] = metrics.comparable_output_throughput()
    else:
        flat.setdefault(
            "comparable_request_throughput", flat.get("steady_request_throughput", flat.get("request_throughput"))
        )
        flat.setdefault(
            "comparable_output_throughput", flat.get("steady_output_throughput", flat.get("output_throughput"))
        )
    return flat
