"""Hardware facts: named GPU profiles, saved profile files, and NVML detection.

    profile = named_profile("h100-sxm:8")
    profile = load_profile("h200.yaml")
    profile = detect()            # NVML; raises HardwareDetectionError without a driver

NVML (`pynvml`) is imported only inside `detect()` and `machine_id()`.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from servetune.errors import SourceLocation, SpecError, UnknownNameError, did_you_mean
from servetune.limits import MAX_GPUS_PER_NODE
from servetune.schema.facts import GpuFacts, HardwareProfile
from servetune.yamlio import load_yaml_with_spans, spec_error_from_validation

__all__ = ["detect", "load_profile", "machine_id", "named_profile", "profile_names", "save_profile"]


@functools.cache
def _profiles() -> dict[str, dict]:
    text = resources.files("servetune.data").joinpath("gpus.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def profile_names() -> list[str]:
    """Names accepted by `--gpu`."""
    return sorted(_profiles())


def named_profile(spec: str) -> HardwareProfile:
    """A bundled GPU profile by name, `NAME` or `NAME:COUNT` (case-insensitive).

    Raises:
        UnknownNameError: The name is not bundled, or the count is not a positive integer.
    """
    name, _, count_text = spec.strip().lower().partition(":")
    profiles = _profiles()
    if name not in profiles:
        guess = did_you_mean(name, profiles)
        raise UnknownNameError(
            f"unknown GPU '{spec}'",
            help=(f"did you mean '{guess}'? " if guess else "") + "known GPUs: " + ", ".join(profile_names()),
            notes=["or pass --hardware FILE (written by `servetune hardware --save FILE` on the GPU machine)"],
        )
    data = dict(profiles[name])
    if count_text:
        if not count_text.isdigit() or not 1 <= int(count_text) <= MAX_GPUS_PER_NODE:
            raise UnknownNameError(
                f"GPU count must be an integer from 1 to {MAX_GPUS_PER_NODE} (GPUs on one node), "
                f"but got '{count_text}' in '{spec}'",
                help=f"write e.g. --gpu {name}:8; for several nodes add --nnodes N",
            )
        data["count"] = int(count_text)
    return HardwareProfile(gpu=GpuFacts(**data), source=f"named:{name}")


def load_profile(path: str | Path) -> HardwareProfile:
    """Load a profile saved by `servetune hardware --save` (YAML or JSON).

    Raises:
        SpecError: Missing file, bad YAML, unknown keys or wrong types, with file:line.
    """
    data, spans = load_yaml_with_spans(path)
    if not isinstance(data, dict):
        raise SpecError(
            "a hardware profile must be a mapping with a 'gpu:' key",
            location=spans.nearest((), SourceLocation(str(path))),
            help="write one with `servetune hardware --save FILE`, or see `servetune hardware --gpu h200 --json`",
        )
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        raise spec_error_from_validation(
            exc, data, spans, path, model=HardwareProfile, what="hardware profile"
        ) from None


def save_profile(profile: HardwareProfile, path: str | Path) -> None:
    """Write `profile` as YAML (reloadable with `load_profile`).

    Raises:
        SpecError: The file cannot be written (missing folder, a directory, disk full).
    """
    data = profile.model_dump(mode="json")
    text = "# servetune hardware profile\n" + yaml.safe_dump(data, sort_keys=False)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(
            f"cannot write the hardware profile to {path}: {exc.strerror or exc}",
            help="--save takes a file path in an existing, writable directory",
        ) from None


def detect(record_to: str | Path | None = None, replay_from: str | Path | None = None) -> HardwareProfile:
    """Detect the node's GPUs through NVML (see `servetune.hardware._nvml`)."""
    from servetune.hardware import _nvml

    return _nvml.detect(record_to=record_to, replay_from=replay_from)


def machine_id(replay_from: str | Path | None = None) -> str | None:
    """This machine's GPUs as one identity, or None without NVML (see `servetune.hardware._nvml.machine_id`)."""
    from servetune.hardware import _nvml

    return _nvml.machine_id(replay_from=replay_from)
