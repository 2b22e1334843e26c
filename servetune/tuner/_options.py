"""The study's options (`servetune.settings.TuneOptions`, declared there with their command-line
options so the CLI can build `servetune tune` without importing the tuner) and the baselines' sources."""

from __future__ import annotations

from servetune.settings import DEFAULT_WORKLOAD, TuneOptions

__all__ = ["DEFAULT_WORKLOAD", "SOURCES_BASELINE", "TuneOptions"]

SOURCES_BASELINE = ("rules", "defaults")
"""The `source` of the two enqueued baselines: the rule-resolved config and SGLang's own defaults."""
