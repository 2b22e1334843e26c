"""How to start the server: `LaunchOptions`, the command prefix and its checks, argv helpers."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servetune.errors import LaunchError, SpecError
from servetune.launch._failures import FAILURE_HELP

__all__ = [
    "DEFAULT_SGLANG_MODULE",
    "SGLANG_CMD_ENV",
    "LaunchOptions",
    "argv_value",
    "check_command",
    "dir_problem",
    "split_command",
    "strip_host_port",
]

SGLANG_CMD_ENV = "SERVETUNE_SGLANG_CMD"
DEFAULT_SGLANG_MODULE = "sglang.launch_server"


class LaunchOptions(BaseModel):
    """How to start the server process; the argv and env come from the resolver."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    sglang_cmd: list[str] | None = None
    """Command prefix the argv is appended to (e.g. `srun --gpus 1 python -m sglang.launch_server`).
    None: `$SERVETUNE_SGLANG_CMD` (split with shlex), else `python -m sglang.launch_server`."""
    host: str = "127.0.0.1"
    """Address the server binds (`--host`)."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port (`--port`); None picks a free one, safe under parallel launches."""
    startup_timeout_s: float = Field(default=900.0, gt=0)
    """Seconds to wait for readiness (a first SGLang start on a fresh GPU machine took 128 s)."""
    stop_grace_s: float = Field(default=30.0, ge=0)
    """Seconds between SIGTERM and SIGKILL of the server's process group."""
    run_dir: Path | None = None
    """Where server.log, argv.txt, env.json and the server_info diff go; None makes a new one
    under `$SERVETUNE_RUNS_DIR` (default `./runs`)."""
    cuda_visible_devices: str | None = None
    """`CUDA_VISIBLE_DEVICES` for the server (e.g. `"0,1"`); None inherits."""
    extra_env: dict[str, str] = Field(default_factory=dict)
    """More environment variables for the server (after the resolved ones)."""
    health_path: str = "/health_generate"
    """Readiness endpoint: 200 means a generation went through."""
    check_identity: bool = True
    """Refuse a ready answer that does not come from the process started (see `wrong_server`)."""
    wait_gpu_release: bool = True
    """After stop, wait until NVML shows the server's GPU memory released (no-op without NVML)."""
    gpu_release_timeout_s: float = Field(default=120.0, ge=0)
    """Longest wait for that release."""
    log_tail_lines: int = Field(default=40, ge=1)
    """Lines of server log carried by a `LaunchError`."""
    watched_fields: tuple[str, ...] = ()
    """Fields not requested whose `/server_info` value is recorded in the diff as `resolved` (what
    the server chose for what servetune left to it); the caller names them (`servetune.runner.WATCHED_FIELDS`)."""

    @field_validator("sglang_cmd", mode="before")
    @classmethod
    def _split_cmd(cls, value: Any) -> Any:
        if isinstance(value, str):
            return split_command(value, "--sglang-cmd")
        return value

    @field_validator("run_dir")
    @classmethod
    def _check_run_dir(cls, value: Path | None) -> Path | None:
        problem = dir_problem(value) if value is not None else None
        if problem is not None:
            raise SpecError(f"--run-dir {value} {problem}", help="give --run-dir a directory path you can write")
        return value

    @field_validator("port", mode="before")
    @classmethod
    def _check_port(cls, value: Any) -> Any:
        # a SpecError passes through pydantic: the CLI shows it, naming the option
        if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= 65535:
            raise SpecError(f"--port must be between 1 and 65535, but got {value}", help="e.g. --port 30000")
        return value

    def command_prefix(self) -> list[str]:
        """The command prefix actually used (option, then env, then the default)."""
        if self.sglang_cmd:
            return list(self.sglang_cmd)
        from_env = os.environ.get(SGLANG_CMD_ENV, "").strip()
        if from_env:
            return split_command(from_env, f"${SGLANG_CMD_ENV}")
        return [sys.executable, "-m", DEFAULT_SGLANG_MODULE]


def dir_problem(path: Path) -> str | None:
    """Why the directory `path` cannot be created or written, without creating anything; None when it can."""
    probe = Path(path)
    while not probe.exists():
        if probe.parent == probe:
            return None
        probe = probe.parent
    if not probe.is_dir():
        return "is a file, not a directory" if probe == Path(path) else f"lies under the file {probe}"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"cannot be written: {probe} is read-only"
    if probe != Path(path):
        # permissions do not tell everything (root in /proc, a read-only mount): try, and leave nothing
        import tempfile

        try:
            os.rmdir(tempfile.mkdtemp(prefix=".servetune-probe-", dir=probe))
        except OSError as exc:
            return f"cannot be created in {probe}: {exc.strerror or exc}"
    return None


def split_command(text: str, option: str) -> list[str]:
    """`text` split as a shell would (shlex).

    Raises:
        SpecError: unbalanced quotes or a trailing backslash, naming `option`.
    """
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise SpecError(
            f"{option} {text!r} cannot be split into words: {exc}",
            help="balance the quotes, e.g. --sglang-cmd 'python -m sglang.launch_server'",
        ) from None


def check_command(prefix: Sequence[str]) -> None:
    """Refuse a command prefix that cannot run: empty, a missing program, or `python -m` of a missing module.

    Raises:
        LaunchError: `failure="bad_command"`, saying what to pass instead.
    """
    if not prefix:
        raise LaunchError("the SGLang command prefix is empty", failure="bad_command", help=FAILURE_HELP["bad_command"])
    prog = prefix[0]
    found = (os.path.isfile(prog) and os.access(prog, os.X_OK)) if os.sep in prog else shutil.which(prog) is not None
    if not found:
        raise LaunchError(
            f"cannot run the SGLang command {shlex.join(prefix)!r}: {prog!r} is not an executable file or on PATH",
            failure="bad_command",
            help="pass --sglang-cmd 'python -m sglang.launch_server' (or set SERVETUNE_SGLANG_CMD) "
            "with a program that exists",
        )
    if prog == sys.executable and len(prefix) >= 3 and prefix[1] == "-m":
        module = prefix[2]
        try:
            spec = importlib.util.find_spec(module.split(".")[0])
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise LaunchError(
                f"module {module.split('.')[0]!r} is not installed in {sys.executable}, so `-m {module}` cannot run",
                failure="bad_command",
                help="install SGLang in this Python, or pass --sglang-cmd with the Python or container that has it",
            )


def strip_host_port(argv: Sequence[str]) -> list[str]:
    """`argv` without `--host`/`--port` (the launcher appends its own)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--host", "--port"):
            skip = True
            continue
        if arg.startswith(("--host=", "--port=")):
            continue
        out.append(arg)
    return out


def argv_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in `argv` (`--flag v` or `--flag=v`), or None."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
