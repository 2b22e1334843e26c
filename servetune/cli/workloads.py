"""`servetune workloads list|show`: the traffic shapes a benchmark can drive."""

from __future__ import annotations

import json
from typing import Annotated

import typer

workloads_app = typer.Typer(
    help="List and show benchmark workloads (shipped ones; any .yaml file works too).", no_args_is_help=True
)


@workloads_app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
) -> None:
    """List the shipped workloads."""
    from servetune.bench.workloads import list_workloads

    workloads = list_workloads()
    if as_json:
        typer.echo(json.dumps([w.model_dump(mode="json", by_alias=True) for w in workloads], indent=2))
        return
    width = max(len(w.name) for w in workloads)
    for w in workloads:
        typer.echo(f"{w.name:<{width}}  {w.kind:<10}  {w.summary}")


@workloads_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="A shipped workload name or a path to a workload .yaml file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of the YAML form.")] = False,
) -> None:
    """Show one workload in full, its default search space (`tune:`) included."""
    from servetune.bench.workloads import load_workload, workload_path

    workload = load_workload(name)
    data = workload.model_dump(mode="json", by_alias=True, exclude_none=True)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    path = workload_path(name)
    typer.echo(f"# {path}")
    typer.echo(path.read_text(encoding="utf-8").rstrip())


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    app.add_typer(workloads_app, name="workloads")
