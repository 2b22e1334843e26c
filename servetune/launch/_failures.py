"""Classify why a server failed, from its exit status and its log."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Literal

FailureClass = Literal[
    "oom",
    "crash",
    "startup_timeout",
    "port_in_use",
    "bad_command",
    "wrong_server",
    "bench_error",
    "interrupted",
    "stopped",
]
"""Every failure class a launch or a measurement (`servetune.runner`) can end in."""

OOM_MARKERS = (
    "CUDA out of memory",
    "OutOfMemoryError",
    "Not enough memory",
    "CUDA error: out of memory",
    "cudaErrorMemoryAllocation",
    "RuntimeError: Not enough memory",
)
PORT_MARKERS = ("Address already in use", "address already in use", "[Errno 98]")
BAD_COMMAND_MARKERS = (
    "No module named",
    "unrecognized arguments:",
    "error: argument",
    "command not found",
    "ambiguous option",
)

FAILURE_PHRASE = {
    "oom": "out of GPU memory (oom)",
    "crash": "crashed (crash)",
    "port_in_use": "its port is taken (port_in_use)",
    "bad_command": "the command or its flags were rejected (bad_command)",
    "stopped": "stopped from outside (stopped)",
}
"""How a `LaunchError` message names the class of a server that exited."""
FAILURE_HELP = {
    "oom": "the GPU ran out of memory: lower --mem-fraction-static, max_running_requests or the CUDA-graph "
    "batch size, and check that no other process holds GPU memory (nvidia-smi)",
    "crash": "the server exited; the full log is in the run directory",
    "startup_timeout": "the server did not become ready in time: raise the start-up timeout "
    "(first starts compile kernels and capture CUDA graphs), or read the log for a stall",
    "port_in_use": "another process is bound to that port: pick another --port, or omit it in managed "
    "mode to get a free one",
    "bad_command": "check the command prefix (--sglang-cmd or SERVETUNE_SGLANG_CMD) and the SGLang flags; "
    "the command run is in argv.txt in the run directory",
    "wrong_server": "a server that servetune did not start answers on that port (often one left from an "
    "earlier run): stop it, or use another port",
}
"""What to do about each failure class (the `help` of its `LaunchError`)."""

EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
EXIT_USAGE = 2


def classify_failure(exit_code: int | None, log_text: str) -> FailureClass:
    """The failure class of a server that exited (or never served), from its exit status and log.

    Args:
        exit_code: The process's exit status (negative for a signal), or None when it still runs.
        log_text: Its log, or the tail of it; the markers are searched in the last 64 KiB.

    Returns:
        `oom` when a CUDA/host out-of-memory marker is present, `port_in_use` for a bind error,
        `bad_command` for a missing program/module or a rejected command line, else `crash`.
    """
    tail = log_text[-65536:]
    if any(m in tail for m in OOM_MARKERS):
        return "oom"
    if any(m in tail for m in PORT_MARKERS):
        return "port_in_use"
    if exit_code in (EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE):
        return "bad_command"
    if any(m in tail for m in BAD_COMMAND_MARKERS) or (exit_code == EXIT_USAGE and "usage:" in tail):
        return "bad_command"
    return "crash"


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""A server that died of one of these was told to stop (a user's `kill`, `servetune stop`), not crashed."""


def is_stop(exit_code: int | None, log_text: str) -> bool:
    """Whether a server's exit reads as a stop it was asked for: exit status 0, or death by SIGTERM,
    SIGINT or SIGHUP (as itself or through its guard, 128 + the signal too), and no out-of-memory,
    port or command marker in its log."""
    if exit_code is None or classify_failure(exit_code, log_text) != "crash":
        return False
    return exit_code == 0 or -exit_code in STOP_SIGNALS or exit_code - 128 in STOP_SIGNALS


def read_tail(path: Path, lines: int = 40, max_bytes: int = 65536) -> str:
    """The last `lines` lines of a log file ('' when it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def describe_exit(exit_code: int | None) -> str:
    """'exit status 1' or 'killed by signal 9 (SIGKILL)'."""
    if exit_code is None:
        return "still running"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = "?"
        return f"killed by signal {-exit_code} ({name})"
    return f"exit status {exit_code}"
