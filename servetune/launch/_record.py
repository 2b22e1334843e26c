"""Who a server is: `server.json` in its run directory, finding live servers again, and stopping them.

A server is ours only when what runs now matches what was recorded at start: the leader's pid,
its start time in clock ticks (a reused pid starts later) and its process group; a process of
the group that outlived its leader must carry the server's `SERVETUNE_SERVER_ID` in its
environment. Nothing is ever found by name or by port.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from servetune.launch._ports import remove_stale_lock
from servetune.launch._proc import create_time, start_ticks

__all__ = [
    "RECORD_NAME",
    "STOP_REQUEST_NAME",
    "read_stop_request",
    "SERVER_ID_ENV",
    "LiveServer",
    "ServerRecord",
    "find_servers",
    "live_server",
    "new_server_id",
    "read_server_record",
    "stop_recorded_server",
    "write_server_record",
]

RECORD_NAME = "server.json"
STOP_REQUEST_NAME = "stop-requested.json"
"""Written by `stop_recorded_server` before its first signal: the servetune that owns the server then
reports a stop, not a crash (`servetune launch` exits 0)."""
SERVER_ID_ENV = "SERVETUNE_SERVER_ID"
"""Set in the server's environment (inherited by its workers): how a process left in its group is known as ours."""


class ServerRecord(BaseModel):
    """The identity of a started server, written to `server.json` when it starts."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    server_id: str
    """Random id, also in the server's environment as `SERVETUNE_SERVER_ID`."""
    pid: int
    """The server process (the command run), the leader of its process group."""
    pgid: int
    """Its process group (equal to `pid`: servers start in a new session)."""
    start_ticks: int | None
    """The server's start time in clock ticks since boot (/proc/PID/stat), with `pid` its exact identity."""
    create_time: float
    """The server's start time (epoch seconds)."""
    guard_pid: int | None = None
    """The guard between servetune and the server (`_guard.py`), which stops it when servetune dies."""
    host: str
    """Address it binds."""
    port: int
    """Port it serves on."""
    model: str | None = None
    """`--model-path` of its command line."""
    argv_sha256: str
    """SHA-256 of the command line (secrets redacted, as in argv.txt)."""
    servetune_pid: int
    """The servetune process that started it."""
    servetune_start_ticks: int | None
    """That process's start time in clock ticks since boot."""
    started_at: float
    """When the launch started (epoch seconds)."""


ServerState = Literal["running", "orphan"]


class LiveServer(BaseModel):
    """A recorded server that still runs."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    run_dir: Path
    """Its run directory."""
    record: ServerRecord
    """What was recorded when it started."""
    pids: list[int]
    """Its live processes that match the record (the leader first when it lives)."""
    leader_alive: bool
    """Whether the leader itself still runs (else only processes of its group that outlived it)."""
    state: ServerState
    """`running` while the servetune that started it lives; `orphan` when that process is gone."""

    @property
    def age_s(self) -> float:
        """Seconds since the server started."""
        return max(0.0, time.time() - self.record.create_time)


def new_server_id() -> str:
    """A fresh server id (for `SERVETUNE_SERVER_ID`)."""
    return uuid.uuid4().hex


def write_server_record(
    run_dir: Path,
    *,
    server_id: str,
    pid: int,
    guard_pid: int | None,
    host: str,
    port: int,
    argv: Sequence[str],
    model: str | None,
    started_at: float,
) -> ServerRecord:
    """Record the identity of a just-started server in `run_dir/server.json` (and its pid in `server.pid`)."""
    from servetune.launch._rundir import redact_argv

    me = os.getpid()
    record = ServerRecord(
        server_id=server_id,
        pid=pid,
        pgid=pid,
        start_ticks=start_ticks(pid),
        create_time=create_time(pid),
        guard_pid=guard_pid,
        host=host,
        port=port,
        model=model,
        argv_sha256=hashlib.sha256("\0".join(redact_argv(argv)).encode()).hexdigest(),
        servetune_pid=me,
        servetune_start_ticks=start_ticks(me),
        started_at=started_at,
    )
    tmp = run_dir / f".{RECORD_NAME}.tmp"
    tmp.write_text(record.model_dump_json(indent=2) + "\n")
    tmp.replace(run_dir / RECORD_NAME)
    (run_dir / "server.pid").write_text(f"{pid}\n")
    return record


def read_server_record(run_dir: Path) -> ServerRecord | None:
    """The record in `run_dir/server.json`, or None when there is none (or it does not parse)."""
    try:
        return ServerRecord.model_validate(json.loads((Path(run_dir) / RECORD_NAME).read_text()))
    except (OSError, ValueError):
        return None


def _same_process(pid: int, ticks: int | None) -> bool:
    return ticks is not None and start_ticks(pid) == ticks


def _leader_matches(record: ServerRecord) -> bool:
    if record.pid != record.pgid or not _same_process(record.pid, record.start_ticks):
        return False
    try:
        return os.getpgid(record.pid) == record.pgid
    except OSError:
        return False


def _carries_id(pid: int, server_id: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{SERVER_ID_ENV}={server_id}".encode() in environ.split(b"\0")


def _group_members(record: ServerRecord) -> list[int]:
    """Live processes of the recorded group that carry the server's id (its leader may be gone)."""
    try:
        os.killpg(record.pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    import psutil

    members = []
    for proc in psutil.process_iter():
        try:
            if (
                proc.pid != record.pid
                and os.getpgid(proc.pid) == record.pgid
                and start_ticks(proc.pid) is not None
                and _carries_id(proc.pid, record.server_id)
            ):
                members.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return members


def live_server(run_dir: Path, record: ServerRecord | None = None) -> LiveServer | None:
    """The server recorded in `run_dir`, if any process of it still runs; None otherwise."""
    record = record or read_server_record(run_dir)
    if record is None:
        return None
    leader = _leader_matches(record)
    members = _group_members(record)
    if not leader and not members:
        return None
    owner_alive = _same_process(record.servetune_pid, record.servetune_start_ticks)
    return LiveServer(
        run_dir=Path(run_dir),
        record=record,
        pids=[record.pid, *members] if leader else members,
        leader_alive=leader,
        state="running" if owner_alive else "orphan",
    )


def _record_dirs(root: Path) -> Iterator[Path]:
    if (root / RECORD_NAME).is_file():
        yield root
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if RECORD_NAME in filenames and Path(dirpath) != root:
            yield Path(dirpath)


def find_servers(root: Path) -> list[LiveServer]:
    """Every live server recorded under `root` (searched recursively: launches, bench runs, tune trials)."""
    found = []
    for run_dir in _record_dirs(Path(root)):
        server = live_server(run_dir)
        if server is not None:
            found.append(server)
    return sorted(found, key=lambda s: s.record.create_time)


def _signal_server(server: LiveServer, sig: int) -> None:
    if server.leader_alive:
        try:
            os.killpg(server.record.pgid, sig)
        except ProcessLookupError:
            pass
        return
    for pid in server.pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_recorded_server(run_dir: Path, grace_s: float = 10.0) -> LiveServer | None:
    """Stop the server recorded in `run_dir` if it still runs and is ours: SIGTERM, `grace_s`, SIGKILL.

    The identity is checked before each signal, so a process that took a recorded pid since is never
    signalled.

    Returns:
        The server as it was found, or None when nothing of it was running.
    """
    found = live_server(run_dir)
    if found is None:
        return None
    _write_stop_request(run_dir, found.record)
    _signal_server(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if live_server(run_dir, found.record) is None:
            break
        time.sleep(0.05)
    now = live_server(run_dir, found.record)
    if now is not None:
        _signal_server(now, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while live_server(run_dir, found.record) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if found.state == "orphan":
        remove_stale_lock(found.record.port)
    return found


def _write_stop_request(run_dir: Path, record: ServerRecord) -> None:
    """Say who stops the server (`STOP_REQUEST_NAME`), for its owner to read; best effort (a run
    directory this user cannot write still gets its server stopped)."""
    data = {"server_id": record.server_id, "by": "servetune stop", "pid": os.getpid(), "at": time.time()}
    try:
        tmp = run_dir / f".{STOP_REQUEST_NAME}.tmp"
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(run_dir / STOP_REQUEST_NAME)
    except OSError:
        pass


def read_stop_request(run_dir: Path, server_id: str) -> dict | None:
    """The stop request `servetune stop` left for the server `server_id` (a stale one from an earlier
    server of the same run directory does not count), else None."""
    try:
        data = json.loads((run_dir / STOP_REQUEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("server_id") == server_id else None
