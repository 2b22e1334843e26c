"""Presets: shipped (`servetune/data/presets/*.yaml`) and user files, by name or path."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from servetune.errors import SourceLocation, SpecError, UnknownNameError, did_you_mean
from servetune.schema.preset import Preset
from servetune.yamlio import display_path, load_yaml_with_spans, spec_error_from_validation

__all__ = ["list_presets", "load_preset", "preset_files", "write_preset"]


def preset_files() -> dict[str, Path]:
    """Shipped preset name → file."""
    folder = resources.files("servetune.data").joinpath("presets")
    return {Path(f.name).stem: Path(str(f)) for f in folder.iterdir() if f.name.endswith((".yaml", ".yml"))}


def _path_for(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists() or "/" in str(name_or_path):
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


def load_preset(name_or_path: str | Path | Preset) -> tuple[Preset, str | None, dict[str, str]]:
    """Load a preset; returns `(preset, shown path, {key: file:line})`.

    Raises:
        UnknownNameError: Unknown shipped name.
        SpecError: Bad YAML or schema, with file:line and key path.
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
    return preset, shown, locations


def list_presets() -> list[tuple[str, Preset]]:
    """Shipped presets by name."""
    return [(name, load_preset(path)[0]) for name, path in sorted(preset_files().items())]


def write_preset(preset: Preset, path: str | Path) -> None:
    """Write a preset YAML that `load_preset` reads back."""
    data = preset.model_dump(mode="json", exclude_defaults=False)
    text = "# servetune preset (resolve with: servetune resolve --preset " + str(path) + " ...)\n"
    Path(path).write_text(text + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
