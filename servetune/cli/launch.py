"""`servetune launch`: SGLang in the foreground with the resolved launch; Ctrl-C stops it cleanly."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from servetune.cli._options import ResolveOpts, resolve_options

_SERVER = "Server"


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command("launch")
    @resolve_options()
    def launch(
        opts: ResolveOpts,
        port: Annotated[
            int, typer.Option("--port", help="Port to serve on; refused if already in use.", rich_help_panel=_SERVER)
        ] = 30000,
        host: Annotated[str, typer.Option("--host", help="Address to bind.", rich_help_panel=_SERVER)] = "127.0.0.1",
        sglang_cmd: Annotated[
            Optional[str],
            typer.Option(
                "--sglang-cmd",
                help="Command prefix instead of `python -m sglang.launch_server` (also $SERVETUNE_SGLANG_CMD); "
                "the argv is appended.",
                rich_help_panel=_SERVER,
            ),
        ] = None,
        run_dir: Annotated[
            Optional[Path],
            typer.Option(
                "--run-dir",
                help="Run directory (default: a new one under $SERVETUNE_RUNS_DIR or ./runs).",
                rich_help_panel=_SERVER,
            ),
        ] = None,
        startup_timeout: Annotated[
            float,
            typer.Option(
                "--startup-timeout", min=0.1, help="Seconds to wait until the server is ready.", rich_help_panel=_SERVER
            ),
        ] = 900.0,
        stop_grace: Annotated[
            float,
            typer.Option(
                "--stop-grace", min=0, help="Seconds between SIGTERM and SIGKILL on stop.", rich_help_panel=_SERVER
            ),
        ] = 30.0,
        quiet: Annotated[
            bool,
            typer.Option(
                "--quiet",
                help="Do not copy the server log to stdout (it is still written to the run directory).",
                rich_help_panel=_SERVER,
            ),
        ] = False,
    ) -> None:
        """Start SGLang with the resolved launch and keep it in the foreground; Ctrl-C stops it cleanly."""
        from servetune.launch import LaunchOptions
        from servetune.runner import SglangRunner

        options = LaunchOptions(
            sglang_cmd=sglang_cmd,
            host=host,
            port=port,
            startup_timeout_s=startup_timeout,
            stop_grace_s=stop_grace,
            run_dir=run_dir,
        )
        SglangRunner(options).serve(opts.context().resolve(), follow_log=not quiet)
