"""The `servetune` command line. One module per command group, each with `register(app)`.

Only typer, the stdlib and servetune's light modules are imported here: optuna, pynvml,
sglang and torch are imported inside the commands that need them (tests/cli/test_startup_imports.py).
"""

from __future__ import annotations

import sys

import typer

from servetune.cli import bench, catalog, compare, hardware, launch, presets, resolve, rules, runs, tune, workloads

app = typer.Typer(
    name="servetune",
    help="Resolve, launch and tune SGLang serving configurations, with a reason for every value.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

for _module in (resolve, hardware, rules, presets, catalog, workloads, launch, bench, tune, compare, runs):
    _module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map errors to exit codes (1 user error, 2 usage, 3 bug, 130 SIGINT, 143 SIGTERM)."""
    from servetune.cli._run import run_app

    code = run_app(app, sys.argv[1:] if argv is None else argv)
    sys.exit(code)
