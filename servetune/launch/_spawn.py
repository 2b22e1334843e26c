"""Start a server under its guard (`_guard.py`), so that it never outlives this process."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = ["GUARD_PATH", "ORPHAN_GRACE_S", "GuardError", "spawn_guarded"]

GUARD_PATH = Path(__file__).with_name("_guard.py")
ORPHAN_GRACE_S = 3.0
"""Seconds between SIGTERM and SIGKILL when the guard stops a server servetune left: nobody waits
for its in-flight requests, and the GPU is freed sooner."""
_REPORT_TIMEOUT_S = 60.0


class GuardError(OSError):
    """The guard could not start the command (its message says why)."""


def spawn_guarded(
    command: Sequence[str],
    env: Mapping[str, str],
    log: IO[bytes],
    *,
    grace_s: float = ORPHAN_GRACE_S,
    lock_path: Path | None = None,
) -> tuple[subprocess.Popen, int]:
    """Start `command` under a guard; return the guard's Popen and the server's pid.

    The server leads its own process group (a new session, as `start_new_session=True` gives); the
    guard, in a session of its own, is its parent and mirrors its exit status, so `proc.wait()`
    and `proc.returncode` read as the server's. When this process dies, by any signal, the guard
    stops the server's group (and removes `lock_path`, the port reservation this process held).

    Raises:
        GuardError: the command could not be executed (missing program, permission).
        OSError: the guard itself could not be started.
    """
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                str(GUARD_PATH),
                "--parent",
                str(os.getpid()),
                "--status-fd",
                str(write_fd),
                "--grace",
                f"{grace_s:g}",
                *(["--lock", str(lock_path)] if lock_path else []),
                "--",
                *command,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
            pass_fds=(write_fd,),
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    try:
        line = _read_report(read_fd, proc)
    except BaseException:
        _stop_guard(proc, grace_s)
        raise
    finally:
        os.close(read_fd)
    kind, _, rest = line.partition(" ")
    if kind == "pid" and rest.strip().isdigit():
        return proc, int(rest)
    proc.wait()
    raise GuardError(rest.strip() or f"the guard exited ({proc.returncode}) before starting the server")


def _stop_guard(proc: subprocess.Popen, grace_s: float) -> None:
    """Interrupted before the guard reported: SIGTERM makes it stop whatever it started, then it exits."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s + 5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _read_report(fd: int, proc: subprocess.Popen) -> str:
    """The guard's one status line; '' when it exited without one."""
    buf = b""
    deadline = time.monotonic() + _REPORT_TIMEOUT_S
    while b"\n" not in buf and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 512)
            if not chunk:
                break
            buf += chunk
        elif proc.poll() is not None:
            # a forked sibling may still hold a copy of the write end: EOF would never come
            with contextlib.suppress(OSError):
                buf += os.read(fd, 512) if select.select([fd], [], [], 0)[0] else b""
            break
    return buf.decode(errors="replace").partition("\n")[0]
