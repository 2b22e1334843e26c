"""`servetune launch`: SGLang in the foreground with the resolved launch; Ctrl-C stops it cleanly."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

_TARGET = "Target"
_SERVER = "Server"


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command("launch")
    def launch(
        model: Annotated[str, typer.Option("--model", help="Bundled model name, HF id or local model directory.", rich_help_panel=_TARGET)],
        gpu: Annotated[Optional[str], typer.Option("--gpu", help="Named GPU profile, e.g. h200 or h100-sxm:8 (default: NVML detection).", rich_help_panel=_TARGET)] = None,
        hardware: Annotated[Optional[Path], typer.Option("--hardware", help="Saved hardware profile (YAML).", rich_help_panel=_TARGET)] = None,
        preset: Annotated[Optional[str], typer.Option("--preset", help="Preset name or file.", rich_help_panel=_TARGET)] = None,
        workload: Annotated[Optional[str], typer.Option("--workload", help="Workload name or file whose facts feed the rules.", rich_help_panel=_TARGET)] = None,
        sglang_version: Annotated[Optional[str], typer.Option("--sglang-version", help="Target SGLang version (catalog).", rich_help_panel=_TARGET)] = None,
        sets: Annotated[Optional[list[str]], typer.Option("--set", help="Pin an SGLang field: FIELD=VALUE (repeatable).", rich_help_panel=_TARGET)] = None,
        envs: Annotated[Optional[list[str]], typer.Option("--env", help="Pin an env var: NAME=VALUE (repeatable).", rich_help_panel=_TARGET)] = None,
        port: Annotated[int, typer.Option("--port", help="Port to serve on; refused if already in use.", rich_help_panel=_SERVER)] = 30000,
        host: Annotated[str, typer.Option("--host", help="Address to bind.", rich_help_panel=_SERVER)] = "127.0.0.1",
        sglang_cmd: Annotated[Optional[str], typer.Option("--sglang-cmd", help="Command prefix instead of `python -m sglang.launch_server` (also $SERVETUNE_SGLANG_CMD).", rich_help_panel=_SERVER)] = None,
        run_dir: Annotated[Optional[Path], typer.Option("--run-dir", help="Run directory (default: a new one under ./runs).", rich_help_panel=_SERVER)] = None,
        startup_timeout: Annotated[float, typer.Option("--startup-timeout", help="Seconds to wait until the server is ready.", rich_help_panel=_SERVER)] = 900.0,
        stop_grace: Annotated[float, typer.Option("--stop-grace", help="Seconds between SIGTERM and SIGKILL on stop.", rich_help_panel=_SERVER)] = 30.0,
        quiet: Annotated[bool, typer.Option("--quiet", help="Do not copy the server log to stdout (it is still written to the run directory).", rich_help_panel=_SERVER)] = False,
    ) -> int:
        """Start SGLang with the resolved launch and keep it in the foreground; Ctrl-C stops it cleanly."""
        from servetune.launch._foreground import run_foreground

        return run_foreground(
            model=model, gpu=gpu, hardware=hardware, preset=preset, workload=workload, sglang_version=sglang_version,
            sets=sets or [], envs=envs or [], host=host, port=port, sglang_cmd=sglang_cmd, run_dir=run_dir,
            startup_timeout_s=startup_timeout, stop_grace_s=stop_grace, follow_log=not quiet,
        )
