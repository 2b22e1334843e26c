"""Pydantic models only: facts, rules, presets, decisions, the field catalog, workloads and search
spaces. The bottom layer: imports pydantic, the stdlib and `servetune.errors`, nothing else
(checked by import-linter). Every field has an attribute docstring (tested)."""

from servetune.schema.catalog import Catalog, EnvSpec, FieldSpec
from servetune.schema.decision import ConditionResult, Decision, Resolved, ResolvedConfig, RuleOutcome, Skipped
from servetune.schema.facts import (
    DeploymentFacts,
    Facts,
    GpuFacts,
    HardwareProfile,
    ModelFacts,
    SglangFacts,
    WorkloadFacts,
)
from servetune.schema.preset import MadeFor, Preset
from servetune.schema.rule import AllOf, AnyOf, Atom, Derived, Not, Ref, Rule
from servetune.schema.space import ChoiceDistribution, FloatDistribution, IntDistribution
from servetune.schema.workload import ImageSpec, TraceSpec, Workload

__all__ = [
    "AllOf",
    "AnyOf",
    "Atom",
    "Catalog",
    "ChoiceDistribution",
    "ConditionResult",
    "Decision",
    "DeploymentFacts",
    "Derived",
    "EnvSpec",
    "Facts",
    "FieldSpec",
    "FloatDistribution",
    "GpuFacts",
    "HardwareProfile",
    "ImageSpec",
    "IntDistribution",
    "MadeFor",
    "ModelFacts",
    "Not",
    "Preset",
    "Ref",
    "Resolved",
    "ResolvedConfig",
    "Rule",
    "RuleOutcome",
    "SglangFacts",
    "Skipped",
    "TraceSpec",
    "Workload",
    "WorkloadFacts",
]
