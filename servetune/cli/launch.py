"""`servetune launch`: SGLang in the foreground with the resolved launch; Ctrl-C stops it cleanly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from servetune.cli._declare import with_options
from servetune.context import ResolveOptions
from servetune.options import QUIET, RUN_DIR, SGLANG_CMD, STARTUP_TIMEOUT, opt

_SERVER = "Server"


@dataclass(kw_only=True)
class ServeOptions:
    """How `servetune launch` serves (`LaunchOptions` for one foreground server)."""

    port: Annotated[
        int, opt("--port", panel=_SERVER, help="Port to serve on (1-65535); refused if already in use.")
    ] = 30000
    host: Annotated[str, opt("--host", panel=_SERVER, help="Address to bind.")] = "127.0.0.1"
    sglang_cmd: Annotated[str | None, SGLANG_CMD] = None
    run_dir: Annotated[Path | None, RUN_DIR] = None
    startup_timeout: Annotated[float, STARTUP_TIMEOUT] = 900.0
    stop_grace: Annotated[
        float, opt("--stop-grace", min=0, panel=_SERVER, help="Seconds between SIGTERM and SIGKILL on stop.")
    ] = 30.0
    quiet: Annotated[bool, QUIET] = False


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command("launch")
    @with_options(target=ResolveOptions, o=ServeOptions, required=("model",))
    def launch(target: ResolveOptions, o: ServeOptions) -> None:
        """Start SGLang with the resolved launch and keep it in the foreground; Ctrl-C stops it cleanly."""
        from servetune.launch import LaunchOptions
        from servetune.runner import SglangRunner

        options = LaunchOptions(
            sglang_cmd=o.sglang_cmd, host=o.host, port=o.port, startup_timeout_s=o.startup_timeout,
            stop_grace_s=o.stop_grace, run_dir=o.run_dir,
        )  # fmt: skip
        SglangRunner(options).serve(target.context().resolve(), follow_log=not o.quiet)
