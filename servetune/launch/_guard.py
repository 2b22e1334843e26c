"""The guard: a small process between servetune and its server, so that no server outlives servetune.

Run by `start_server` as `python -I -S _guard.py --parent PID --status-fd FD --grace S -- CMD...`
(by path, stdlib only: it starts in milliseconds and imports nothing of servetune). It

1. starts CMD in a new session (the server leads its own process group, as before) with
   `PR_SET_PDEATHSIG=SIGKILL`, which is safe here because the guard is single-threaded: the
   signal is tied to the forking *thread*, so it could not be set on a server that a servetune
   worker thread forks (the thread's exit would kill the server);
2. writes the server's pid (or why it could not start) to FD, then closes it;
3. waits until the server exits, or until servetune is gone (the guard's parent pid changes: a
   child is re-parented when its parent *process* dies, not when the forking thread exits), or
   until the guard itself gets SIGTERM/SIGHUP/SIGINT. In the last two cases the server's group
   gets SIGTERM, `--grace` seconds, then SIGKILL;
4. after stopping a server servetune left, removes the port's lock file (`--lock`) if nobody holds it;
5. exits as the server did (same exit code, or killed by the same signal), so servetune reads the
   server's exit status from the guard.

Only the guard's own child's process group is ever signalled.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import os
import resource
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.2


_STOPPED_BY: list[int] = []


def _on_signal(signum: int, frame: object) -> None:
    _STOPPED_BY.append(signum)


def _die_with_parent(guard_pid: int) -> None:
    """In the child, before exec: SIGKILL when the guard dies (also if it died before this ran)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != guard_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_group(child: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the server's group, wait up to `grace_s` for the leader and the group, then SIGKILL."""
    _killpg(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        child.poll()
        if child.returncode is not None and not _group_alive(child.pid):
            break
        time.sleep(0.05)
    _killpg(child.pid, signal.SIGKILL)
    child.wait()


def _exit_like(returncode: int) -> None:
    """Leave with the server's status: its exit code, or death by the signal that killed it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # the log is a pipe to servetune, which may be gone
            pass
    if returncode >= 0:
        os._exit(returncode)
    sig = -returncode
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def _remove_lock(path: str) -> None:
    """Remove the port's lock file that servetune could not (it died holding it), if nobody holds it now."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        st, mine = os.stat(path), os.fstat(fd)
        if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)


def _report(fd: int, line: str) -> None:
    try:
        os.write(fd, line.encode() + b"\n")
        os.close(fd)
    except OSError:
        pass


def _parent_gone(parent: int) -> bool:
    return os.getppid() != parent


def _watch(child: subprocess.Popen, parent: int, wakeup: int) -> str:
    """Block until the server exits ("exited"), servetune is gone ("orphaned") or the guard is told to stop."""
    poller = select.poll()
    poller.register(wakeup, select.POLLIN)
    parent_fd = None
    for pid in (parent, child.pid):
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            continue
        poller.register(fd, select.POLLIN)
        parent_fd = fd if pid == parent else parent_fd
    # a pidfd wakes the poll when its process exits; the timeout is the fallback for kernels without them
    timeout_ms = 1000 if parent_fd is not None else int(POLL_S * 1000)
    while True:
        if child.poll() is not None:
            return "exited"
        if _STOPPED_BY:
            return "stopped"
        if _parent_gone(parent):
            return "orphaned"
        if any(fd == parent_fd for fd, _ in poller.poll(timeout_ms)):
            return "orphaned"


def main(argv: list[str] | None = None) -> None:
    """Start the command, watch servetune, and stop the command's group when servetune is gone."""
    parser = argparse.ArgumentParser(prog="servetune-guard")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--status-fd", type=int, required=True)
    parser.add_argument("--grace", type=float, default=3.0)
    parser.add_argument("--lock", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    if _parent_gone(args.parent):
        _report(args.status_fd, "error servetune exited before its server started")
        os._exit(1)
    guard_pid = os.getpid()
    try:
        child = subprocess.Popen(
            command,
            start_new_session=True,
            preexec_fn=lambda: _die_with_parent(guard_pid),
            close_fds=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        _report(args.status_fd, f"error {getattr(exc, 'strerror', None) or exc}")
        os._exit(127)
    _report(args.status_fd, f"pid {child.pid}")
    why = _watch(child, args.parent, wake_r)
    if why == "orphaned":
        try:
            print(f"servetune guard: servetune (pid {args.parent}) is gone; stopping the server", flush=True)
        except OSError:  # stdout is servetune's log pipe: nobody reads it any more
            pass
    if why != "exited":
        _stop_group(child, args.grace)
    code = child.wait()
    if args.lock and _parent_gone(args.parent):
        _remove_lock(args.lock)
    _exit_like(code)


if __name__ == "__main__":
    main()
