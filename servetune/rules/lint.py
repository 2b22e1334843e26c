"""`servetune rules lint`: run the rules over every given GPU x model x workload x version."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servetune.errors import ConflictError
from servetune.rules.conditions import UNKNOWN, evaluate
from servetune.rules.engine import resolve
from servetune.rules.loader import RuleSet
from servetune.schema.catalog import Catalog
from servetune.schema.facts import (
    FACT_PATHS,
    DeploymentFacts,
    Facts,
    GpuFacts,
    ModelFacts,
    SglangFacts,
    WorkloadFacts,
    fact_value,
    sglang_memory_defaults,
)
from servetune.versions import in_window

__all__ = ["WORKLOAD_VARIANTS", "LintReport", "lint"]

WORKLOAD_VARIANTS = (
    WorkloadFacts(),
    WorkloadFacts(name="text", kind="text", image_reuse="none"),
    WorkloadFacts(name="unique-images", kind="multimodal", image_reuse="unique", images_per_request=1),
    WorkloadFacts(name="repeated-images", kind="multimodal", image_reuse="repeated", images_per_request=1),
)


@dataclass
class LintReport:
    """Findings: errors fail `rules lint`; warnings do not."""

    combinations: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    matches: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "combinations": self.combinations,
            "errors": self.errors,
            "warnings": self.warnings,
            "matches": self.matches,
        }

    def render(self) -> str:
        """Human form."""
        lines = [
            f"checked {len(self.matches)} rules over {self.combinations} "
            "GPU x model x workload x deployment x version combinations"
        ]
        for rid, n in sorted(self.matches.items()):
            lines.append(f"  {rid:<48} can match {n}")
        lines += [f"error: {e}" for e in self.errors] + [f"warning: {w}" for w in self.warnings]
        lines.append(f"{len(self.errors)} errors, {len(self.warnings)} warnings")
        return "\n".join(lines)


def lint(
    rules: RuleSet, *, gpus: Sequence[GpuFacts], models: Sequence[ModelFacts], catalogs: Sequence[Catalog]
) -> LintReport:
    """Evaluate every rule over each GPU x model x workload x deployment x SGLang version (fields
    unknown, so three-valued) and resolve each combination to catch conflicts, cycles and require
    violations.

    The caller supplies the GPUs, models and catalogs (the CLI passes every bundled one), so rules
    never import hardware detection or the model registry.
    """
    report = LintReport(matches={r.id: 0 for r in rules.rules})
    seen_errors: set[str] = set()
    for gpu, model, workload, nnodes, catalog in itertools.product(gpus, models, WORKLOAD_VARIANTS, (1, 2), catalogs):
        chunk, max_bs = sglang_memory_defaults(gpu.memory_mib, 1)
        facts = Facts(
            gpu=gpu,
            model=model,
            workload=workload,
            deployment=DeploymentFacts(nnodes=nnodes),
            sglang=SglangFacts(
                version=catalog.sglang_version,
                default_cuda_graph_max_bs_decode=max_bs,
                default_chunked_prefill_size=chunk,
            ),
        )
        report.combinations += 1

        def lookup(path: str, facts: Facts = facts) -> Any:
            return fact_value(facts, path) if path in FACT_PATHS else UNKNOWN

        for lr in rules.rules:
            if in_window(catalog.sglang_version, lr.rule.sglang) and evaluate(lr.rule.when, lookup) is not False:
                report.matches[lr.id] += 1
        try:
            resolve(facts, rules, catalog)
        except ConflictError as exc:
            text = (
                f"{exc.message} (on {gpu.name}, {model.name}, workload {workload.name}, "
                f"nnodes {nnodes}, SGLang {catalog.sglang_version})"
            )
            if exc.message not in seen_errors:
                seen_errors.add(exc.message)
                report.errors.append(text)
    for rid, n in report.matches.items():
        if n == 0:
            report.warnings.append(
                f"rule '{rid}' ({rules.get(rid).location}) never matches any bundled GPU x model x workload"
            )
    for lr in rules.rules:
        for key, value in lr.rule.set.items():
            spec = next((c.fields.get(key) for c in catalogs if key in c.fields), None)
            if spec is not None and spec.default is not None and spec.default == value and not isinstance(value, bool):
                report.warnings.append(
                    f"rule '{lr.id}' sets {key}={value!r}, SGLang's default (harmless, but pins it for every version)"
                )
    return report
