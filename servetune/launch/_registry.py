"""The servers this process started and still runs: stopped at exit, on SIGTERM/SIGHUP, never by a fork.

Also `reap_orphan_server`: a server whose parent died by SIGKILL and whose guard could not stop it
is found again from its run directory, by its recorded identity, and killed.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shlex
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune import interrupts
from servetune.launch._proc import signal_group

if TYPE_CHECKING:
    from servetune.launch._server import ServerHandle

__all__ = ["install_signal_handlers", "reap_orphan_server", "track", "untrack"]

log = logging.getLogger("servetune.launch")

_LIVE: set[ServerHandle] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False
_HANDLER_OWNER = [os.getpid()]


def track(handle: ServerHandle) -> None:
    """Register a started server, to be stopped if this process exits or is told to."""
    with _LIVE_LOCK:
        _LIVE.add(handle)


def untrack(handle: ServerHandle) -> None:
    """Forget a stopped server."""
    with _LIVE_LOCK:
        _LIVE.discard(handle)


def _stop_all_live() -> None:
    with _LIVE_LOCK:
        handles = list(_LIVE)
    for handle in handles:
        try:
            handle.stop()
        except Exception:
            log.exception("stopping %s at exit failed", handle)


def _kill_all_live() -> None:
    """At a second Ctrl-C (`servetune.interrupts`): SIGKILL the group of every server this process
    started, by its recorded id, without waiting (called from a signal handler: no lock is taken)."""
    for handle in list(_LIVE):
        with contextlib.suppress(Exception):
            signal_group(handle.pgid, signal.SIGKILL)


def _exit_on_signal(signum: int, frame: Any) -> None:
    if os.getpid() != _HANDLER_OWNER[0]:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise SystemExit(128 + signum)


def _forget_servers_in_child() -> None:
    """A forked child (multiprocessing worker) owns none of its parent's servers: it forgets them,
    gets a fresh lock (another thread may have held the parent's at the fork), and gets the default
    SIGTERM/SIGHUP back. A Python-level handler runs only between bytecodes, so a worker blocked
    in C (a pool worker waiting on its queue) would not die of `Pool.terminate()`'s SIGTERM."""
    global _HANDLERS_INSTALLED, _LIVE_LOCK
    _LIVE.clear()
    _LIVE_LOCK = threading.Lock()
    if _HANDLERS_INSTALLED:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is _exit_on_signal:
                # not the main thread: keep the handler (it re-raises the default)
                with contextlib.suppress(ValueError):
                    signal.signal(sig, signal.SIG_DFL)
    _HANDLERS_INSTALLED = False


def install_signal_handlers() -> None:
    """Make SIGTERM/SIGHUP of this process unwind (SystemExit), so servers are stopped on the way out.

    Only replaces default handlers and only from the main thread; a forked child (e.g. a
    multiprocessing worker) that inherits them gets the default action. Ctrl-C (SIGINT) already
    raises KeyboardInterrupt. Together with the `atexit` hook, nothing started is left behind;
    after SIGKILL of this process, each server's guard (`_guard.py`) stops its group.
    """
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    _HANDLER_OWNER[0] = os.getpid()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _exit_on_signal)
    _HANDLERS_INSTALLED = True


atexit.register(_stop_all_live)
interrupts.add_force_hook(_kill_all_live)
os.register_at_fork(after_in_child=_forget_servers_in_child)


def reap_orphan_server(run_dir: Path) -> int | None:
    """Kill the server a dead parent left running (its group keeps the GPU and the port).

    The guard normally stops such a server within seconds; this is for one whose guard could not
    (killed too) or that was started before servers had one. Only a server whose identity matches
    `run_dir/server.json` (pid, start time, process group) is ours. A run directory without
    `server.json` falls back to `server.pid`: that process must lead its own process group and
    run with the `--port` of `run_dir/argv.txt`. Its group gets SIGKILL.

    Returns:
        The pid whose group was killed, or None when nothing of ours was running.
    """
    from servetune.launch._record import read_server_record, stop_recorded_server

    if read_server_record(run_dir) is not None:
        found = stop_recorded_server(run_dir, grace_s=0.0)
        return found.record.pid if found is not None else None
    import psutil

    try:
        pid = int((run_dir / "server.pid").read_text().strip())
        argv = shlex.split((run_dir / "argv.txt").read_text())
        cmdline = psutil.Process(pid).cmdline()
        leads_group = os.getpgid(pid) == pid
    except (OSError, ValueError, psutil.Error):
        return None
    port = _flag(argv, "--port")
    if port is None or _flag(cmdline, "--port") != port or not leads_group:
        return None
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return pid


def _flag(argv: list[str], flag: str) -> str | None:
    i = argv.index(flag) if flag in argv else -1
    return argv[i + 1] if 0 <= i < len(argv) - 1 else None
