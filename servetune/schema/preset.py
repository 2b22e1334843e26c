"""Presets: a named bundle of values (same `set:` shape as rules) with what it was made for and
the evidence behind it. `servetune tune --out best.yaml` writes one; `resolve --preset` reads it.

    name: qwen3-vl-8b-h200-single-image
    summary: Tuned for single-use images on one H200.
    made_for: {gpu: NVIDIA H200, model: qwen3-vl-8b-instruct, workload: single-image-stream, sglang_version: 0.5.17}
    set:
      max_running_requests: 384
      SGLANG_MM_FEATURE_CACHE_MB: 3072
    evidence: {metrics: {...}, baseline_metrics: {...}, trials: [3, 7], ratio: 1.08}
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servetune.schema.rule import parse_set_mapping
from servetune.schema.space import Distribution


class MadeFor(BaseModel):
    """The context a preset was made for (informational; shown by `presets show`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True)

    gpu: str | None = None
    """GPU name, e.g. `NVIDIA H200`."""
    gpu_count: int | None = None
    """GPUs on the node."""
    model: str | None = None
    """Model name or HF id."""
    workload: str | None = None
    """Workload name."""
    sglang_version: str | None = None
    """SGLang version."""


class Preset(BaseModel):
    """A named set of SGLang fields and env vars, applied above rules and below trials and pins."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    """Kebab-case name."""
    summary: str = Field(min_length=1)
    """One line: the intent of the preset."""
    made_for: MadeFor = MadeFor()
    """What it was made for."""
    set: dict[str, Any] = Field(default_factory=dict)
    """SGLang fields and `SGLANG_*` env vars."""
    tune: dict[str, Distribution] = Field(default_factory=dict)
    """Optional default search space for `servetune tune --preset`."""
    evidence: dict[str, Any] = Field(default_factory=dict)
    """Measurements behind it (metrics, baseline, trials, study), free-form."""

    @field_validator("set", mode="before")
    @classmethod
    def _parse_set(cls, value: Any) -> Any:
        return parse_set_mapping(value)
