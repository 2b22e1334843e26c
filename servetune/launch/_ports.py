"""Port reservation that is safe under parallel launches, in one process and across processes.

A port is ours when two things hold at once:

1. a *reservation*: an exclusive `flock` on `<tmp>/servetune-ports-<uid>/<port>.lock`. flock
   locks belong to the open file description, so two threads of one process conflict exactly
   like two processes do; the lock is released by the kernel if the holder dies (no stale
   reservations after kill -9);
2. a *bind check*: nothing listens there (a socket with SO_REUSEADDR, as uvicorn uses, binds it).

Candidates are drawn at random (from the OS's entropy, so forked workers do not repeat each
other) from ports below the kernel's ephemeral range, which outgoing connections never take.
The reservation is held until the server has stopped, so the port is not handed out again
while the server may still be bound to it. Releasing it removes the lock file, while still holding
the lock; so a launcher that opened the file before the removal finds, once it holds the lock,
that the path no longer names its file, and starts over on a fresh one.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import socket
import tempfile
from pathlib import Path

from servetune.errors import LaunchError
from servetune.launch._failures import FAILURE_HELP
from servetune.launch._http import http_get

_RNG = random.SystemRandom()
DEFAULT_RANGE = (20000, 32767)


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"servetune-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def port_is_free(host: str, port: int) -> bool:
    """True when a server could bind `host:port` now (nothing listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _candidate_range() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return DEFAULT_RANGE
    if lo > 11000:
        return 10000, lo - 1
    return hi + 1, 65535


def _names_file(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


class PortReservation:
    """An exclusive claim on one port among servetune launchers; release it after the server stops."""

    def __init__(self, port: int, fd: int, path: Path | None = None) -> None:
        self.port = port
        self._fd: int | None = fd
        self._path = path

    @classmethod
    def try_acquire(cls, port: int) -> PortReservation | None:
        """The reservation, or None when another launcher (thread or process) holds it."""
        path = _lock_dir() / f"{port}.lock"
        for _ in range(10):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    return None
                raise
            if _names_file(path, fd):
                return cls(port, fd, path)
            os.close(fd)  # the holder released and removed it between our open and our lock
        return None

    def release(self) -> None:
        """Give the port back and remove its lock file (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._path is not None and _names_file(self._path, fd):
                self._path.unlink()
        except OSError:
            pass
        finally:
            os.close(fd)

    @property
    def lock_path(self) -> Path | None:
        """The lock file (removed on release)."""
        return self._path

    @property
    def held(self) -> bool:
        """Whether this reservation is still held."""
        return self._fd is not None


def remove_stale_lock(port: int) -> bool:
    """Remove the lock file of `port` if no launcher holds it (one killed while holding it leaves it).

    Returns:
        Whether a lock file was removed.
    """
    res = PortReservation.try_acquire(port)
    if res is None:
        return False
    res.release()
    return True


def reserve_free_port(host: str, attempts: int = 200) -> PortReservation:
    """Reserve a random port that no launcher holds and nothing listens on.

    Raises:
        OSError: when no candidate was free after `attempts` tries.
    """
    lo, hi = _candidate_range()
    for _ in range(attempts):
        port = _RNG.randint(lo, hi)
        res = PortReservation.try_acquire(port)
        if res is None:
            continue
        if port_is_free(host, port):
            return res
        res.release()
    raise OSError(f"no free port found on {host} in {lo}-{hi} after {attempts} tries")


def reserve_launch_port(host: str, port: int | None) -> tuple[PortReservation, int]:
    """The port a launch will use, reserved: a free one when `port` is None, else `port` if nothing holds it.

    Raises:
        LaunchError: `failure="port_in_use"`: no free port, or `port` is reserved by another
            servetune launch or already bound (what answers there is named when it says).
    """
    if port is None:
        try:
            res = reserve_free_port(host)
        except OSError as exc:
            raise LaunchError(str(exc), failure="port_in_use", help=FAILURE_HELP["port_in_use"]) from None
        return res, res.port
    held = PortReservation.try_acquire(port)
    if held is None:
        raise LaunchError(
            f"port {port} is reserved by another servetune launch in progress",
            failure="port_in_use",
            help=FAILURE_HELP["port_in_use"],
        )
    if not port_is_free(host, port):
        held.release()
        notes = []
        got = http_get(host, port, "/server_info", timeout=0.5)
        if got is not None and got[0] == 200:
            try:
                info = json.loads(got[1])
                notes.append(
                    f"it answers /server_info: model_path={info.get('model_path')!r}, version={info.get('version')!r}, "
                    f"pid={info.get('pid', 'not reported')}"
                )
            except ValueError:
                pass
        raise LaunchError(
            f"port {port} on {host} is already in use; servetune will not start a second server there "
            "nor talk to one it did not start",
            failure="port_in_use",
            help=FAILURE_HELP["port_in_use"],
            notes=notes,
        )
    return held, port
