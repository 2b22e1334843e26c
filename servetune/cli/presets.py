"""`servetune presets list|show`."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the `presets` group."""
    presets = typer.Typer(help="Shipped and user presets (named bundles of SGLang values).", no_args_is_help=True)
    app.add_typer(presets, name="presets")

    @presets.command("list")
    def list_cmd() -> None:
        """List shipped presets."""
        from servetune.presets import list_presets

        for name, preset in list_presets():
            print(f"{name:<32} {preset.summary}")

    @presets.command("show")
    def show_cmd(
        name: Annotated[str, typer.Argument(help="Preset name or file.")],
        as_json: Annotated[bool, typer.Option("--json")] = False,
    ) -> None:
        """Show a preset: what it sets, what it was made for, its evidence."""
        import yaml

        from servetune.presets import load_preset

        preset, path, _ = load_preset(name)
        data = preset.model_dump(mode="json", by_alias=True)
        if as_json:
            print(json.dumps(data, indent=2))
        else:
            print(f"# {path}")
            print(yaml.safe_dump(data, sort_keys=False), end="")
