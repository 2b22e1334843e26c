"""Presets: shipped (`servetune/data/presets/*.yaml`) and user files, by name or path."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from servetune.errors import SourceLocation, SpecError, UnknownNameError, did_you_mean
from servetune.schema.preset import Preset
from servetune.yamlio import Spans, display_path, load_yaml_with_spans, spec_error_from_validation

if TYPE_CHECKING:
    from servetune.schema.catalog import Catalog

__all__ = ["list_presets", "load_preset", "made_for_mismatch", "preset_files", "write_preset"]


def preset_files() -> dict[str, Path]:
    """Shipped preset name → file."""
    folder = resources.files("servetune.data").joinpath("presets")
    return {Path(f.name).stem: Path(str(f)) for f in folder.iterdir() if f.name.endswith((".yaml", ".yml"))}


def _path_for(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists() or path.is_symlink() or "/" in str(name_or_path):
        return path
    shipped = preset_files()
    if str(name_or_path) in shipped:
        return shipped[str(name_or_path)]
    guess = did_you_mean(str(name_or_path), shipped)
    raise UnknownNameError(
        f"unknown preset '{name_or_path}'",
        help=(f"did you mean '{guess}'? " if guess else "")
        + "shipped presets: "
        + (", ".join(sorted(shipped)) or "none")
        + "; or pass a preset file path",
    )


def load_preset(
    name_or_path: str | Path | Preset, *, catalogs: Sequence[Catalog] = ()
) -> tuple[Preset, str | None, dict[str, str]]:
    """Load a preset; returns `(preset, shown path, {key: file:line})`.

    With `catalogs`, every `set:` value must be one some catalogued SGLang release accepts, and every
    `tune:` range one SGLang can use (a field only some releases have is fine: the resolver skips it
    with a note where it is missing).

    Raises:
        UnknownNameError: Unknown shipped name, or a `set:` key no catalogued release has.
        SpecError: Bad YAML or schema, or a value no release accepts, with file:line:col, the key
            path and what the field takes.
    """
    if isinstance(name_or_path, Preset):
        return name_or_path, None, {}
    path = _path_for(name_or_path)
    shown = display_path(path)
    data, spans = load_yaml_with_spans(path)
    if not isinstance(data, dict):
        raise SpecError(
            "a preset must be a mapping with 'name', 'summary' and 'set'", location=SourceLocation(shown, 1)
        )
    try:
        preset = Preset.model_validate(data)
    except ValidationError as exc:
        raise spec_error_from_validation(exc, data, spans, shown, model=Preset, what="preset") from None
    locations = {}
    for key in preset.set:
        loc = spans.get(("set", key))
        locations[key] = f"{shown}:{loc.line}" if loc else shown
    if catalogs:
        _check_values(preset, spans, shown, catalogs)
    return preset, shown, locations


def _check_values(preset: Preset, spans: Spans, shown: str, catalogs: Sequence[Catalog]) -> None:
    from servetune.catalog.ranges import distribution_problem
    from servetune.catalog.values import is_env_name, rejected_by_every_release, value_help

    ordered = sorted(catalogs, key=lambda c: tuple(int(p) if p.isdigit() else 0 for p in c.sglang_version.split(".")))
    newest, versions = ordered[-1], ", ".join(c.sglang_version for c in reversed(ordered))
    for key, value in preset.set.items():
        where = spans.nearest(("set", key), SourceLocation(shown))
        known = any(key in (c.env if is_env_name(key) else c.fields) for c in catalogs)
        if not known and (not is_env_name(key) or key.startswith("SGLANG_")):
            options = sorted({n for c in catalogs for n in (c.env if is_env_name(key) else c.fields)})
            guess = did_you_mean(key, options)
            raise UnknownNameError(
                f"'{key}' is not an SGLang {'environment variable' if is_env_name(key) else 'field'} in any "
                f"catalogued version ({versions})",
                location=where,
                key_path=f"set.{key}",
                help=f"did you mean '{guess}'?" if guess else "`servetune catalog show VERSION` lists the names",
            )
        reason = rejected_by_every_release(key, value, catalogs)
        if reason is not None:
            raise SpecError(
                f"{key}: {value!r} is a value no SGLang release accepts ({versions}): {reason}",
                location=where,
                key_path=f"set.{key}",
                help=value_help(newest, key),
            )
    for key, dist in preset.tune.items():
        problem = distribution_problem(key, dist)
        if problem is not None:
            raise SpecError(
                problem,
                location=spans.nearest(("tune", key), SourceLocation(shown)),
                key_path=f"tune.{key}",
                help="narrow the range",
            )


def _model_key(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def made_for_mismatch(preset: Preset, *, models: Sequence[str], gpu: str, sglang_version: str) -> str | None:
    """A warning when the model, GPU or SGLang release the preset was made for (its `made_for`, else
    the same keys of its `evidence`) is not the target's, naming both; None when they agree or the
    preset does not say. `models` are the target's names (as given, its `--model-path`)."""
    made, evidence = preset.made_for, preset.evidence
    hardware = evidence.get("hardware") if isinstance(evidence.get("hardware"), dict) else {}
    theirs = {
        "model": made.model or evidence.get("model"),
        "gpu": made.gpu or (hardware.get("gpu") or {}).get("name"),
        "SGLang": made.sglang_version or evidence.get("sglang_version"),
    }
    mine = {"model": models[0] if models else "?", "gpu": gpu, "SGLang": sglang_version}
    differs = {
        "model": theirs["model"] and _model_key(str(theirs["model"])) not in {_model_key(m) for m in models},
        "gpu": theirs["gpu"]
        and str(theirs["gpu"]).lower() not in gpu.lower()
        and gpu.lower() not in str(theirs["gpu"]).lower(),
        "SGLang": theirs["SGLang"] and str(theirs["SGLang"]) != sglang_version,
    }
    wrong = [key for key, bad in differs.items() if bad]
    if not wrong:
        return None
    made_text = ", ".join(f"{k} {theirs[k]}" for k in wrong)
    target_text = ", ".join(f"{k} {mine[k]}" for k in wrong)
    return (
        f"preset '{preset.name}' was made for {made_text}; this launch is for {target_text}: "
        "its values were measured elsewhere and may not carry over (re-tune with `servetune tune`)"
    )


def list_presets() -> list[tuple[str, Preset]]:
    """Shipped presets by name."""
    return [(name, load_preset(path)[0]) for name, path in sorted(preset_files().items())]


def write_preset(preset: Preset, path: str | Path) -> None:
    """Write a preset YAML that `load_preset` reads back."""
    data = preset.model_dump(mode="json", exclude_defaults=False)
    text = "# servetune preset (resolve with: servetune resolve --preset " + str(path) + " ...)\n"
    Path(path).write_text(text + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
