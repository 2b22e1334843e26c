"""Is the server answering on our port the one we started? (An old server left on the port is not.)"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from servetune.launch._failures import describe_exit
from servetune.launch._proc import in_group, listener_inodes, listener_pids, pids_holding, started_by

__all__ = ["identity_problems"]

log = logging.getLogger("servetune.launch")


def identity_problems(
    *,
    exit_code: int | None,
    pgid: int,
    pids: Sequence[int],
    port: int,
    created: float,
    server_info: Mapping[str, Any],
    requested: Mapping[str, Any],
) -> list[str]:
    """What says that the server answering on `port` is not our process group (empty: it is ours).

    A listener outside our group that started *after* our server is accepted: with a container
    or `srun` prefix the port is held by a proxy, or a process outside our group that our command
    created; an old server left from an earlier run always started before ours.

    Args:
        exit_code: Our process's exit status (None while it runs).
        pgid: Our server's process group.
        pids: Our server's pid and its descendants.
        port: The port we started it on.
        created: Our server's start time (epoch seconds).
        server_info: The `/server_info` answer.
        requested: The requested fields (`model_path` is compared).
    """
    problems: list[str] = []
    if exit_code is not None:
        problems.append(f"our process has exited ({describe_exit(exit_code)}) yet the port answers")
    inodes = listener_inodes(port)
    if inodes and not pids_holding(pids, inodes):
        others = sorted(listener_pids(port) or [])
        older = [pid for pid in others if started_by(pid, created)]
        if older:
            problems.append(
                f"port {port} is held by pid(s) {older}, outside our process group {pgid} "
                "and started no later than our server"
            )
        else:
            log.info(
                "port %d is held by pid(s) %s outside group %d but started after it (a container proxy?); accepted",
                port,
                others or "unknown",
                pgid,
            )
    pid = server_info.get("pid")
    if isinstance(pid, int) and not in_group(pid, pgid) and started_by(pid, created):
        problems.append(
            f"/server_info reports pid {pid}, outside our process group {pgid} and started no later than our server"
        )
    if "port" in server_info and str(server_info["port"]) != str(port):
        problems.append(f"/server_info reports port {server_info['port']}, expected {port}")
    want_model = requested.get("model_path")
    if want_model is not None and "model_path" in server_info and str(server_info["model_path"]) != str(want_model):
        problems.append(f"/server_info reports model_path {server_info['model_path']!r}, expected {want_model!r}")
    return problems
