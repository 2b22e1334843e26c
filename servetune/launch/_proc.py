"""Process introspection: process groups, descendants, start times, and who listens on a port (/proc)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "any_running",
    "create_time",
    "descendants",
    "group_alive",
    "in_group",
    "listener_inodes",
    "listener_pids",
    "pids_holding",
    "signal_group",
    "start_ticks",
    "started_by",
]


def create_time(pid: int) -> float:
    """The process's start time (epoch seconds); now when it cannot be read."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return time.time()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, an
    exact identity (a reused pid starts later); None when the process is gone or /proc does not tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    try:
        # fields[0] is field 3 (state): a zombie has exited and is no longer a server
        return None if fields[0] == "Z" else int(fields[19])
    except (IndexError, ValueError):
        return None


def started_by(pid: int, when: float) -> bool:
    """Whether `pid` is a process on this host that started no later than `when` (epoch seconds)."""
    import psutil

    try:
        return psutil.Process(pid).create_time() <= when
    except psutil.Error:
        return False


def in_group(pid: int, pgid: int) -> bool:
    """Whether `pid` is the leader or a member of process group `pgid`."""
    try:
        return pid == pgid or os.getpgid(pid) == pgid
    except (ProcessLookupError, PermissionError):
        return False


def descendants(pid: int) -> list[Any]:
    """The psutil processes below `pid` (children, recursively); [] when it is gone."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def any_running(procs: Sequence[Any]) -> bool:
    """Whether any of these psutil processes still runs (zombies do not count)."""
    import psutil

    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is alive (zombies waiting for a reaper do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    import psutil

    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to process group `pgid` (one we started); a group already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def listener_inodes(port: int) -> set[str] | None:
    """Socket inodes listening on `port` from /proc/net/tcp{,6}; None where /proc does not tell."""
    inodes: set[str] = set()
    found_table = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        found_table = True
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes if found_table else None


def pids_holding(pids: Sequence[int], inodes: set[str]) -> bool:
    """Whether one of `pids` has one of these socket inodes open."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
            except OSError:
                continue
    return False


def listener_pids(port: int) -> set[int] | None:
    """Pids listening on `port` (a full scan: only used to name a foreign listener), or None."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    pids = {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    return pids or None
