"""The study's options (`servetune.settings.TuneOptions`, declared there with their command-line
options so the CLI can build `servetune tune` without importing the tuner), the baselines' sources and the
confirmation's soak tries."""

from __future__ import annotations

from servetune.settings import DEFAULT_WORKLOAD, TuneOptions

__all__ = ["CONFIRM_SOAK_TRIES", "DEFAULT_WORKLOAD", "SOURCES_BASELINE", "TuneOptions"]

SOURCES_BASELINE = ("rules", "defaults")
"""The `source` of the two enqueued baselines: the rule-resolved config and SGLang's own defaults."""
CONFIRM_SOAK_TRIES = 2
"""A capacity confirmation soaks its winner at most this often: at its median confirmed capacity, then
one resolution lower when that does not hold (`servetune.tuner._confirm`)."""
