"""Helpers for launcher tests: the stand-in command, process-group checks."""

from __future__ import annotations

import os
import sys
import time

STANDIN_CMD = [sys.executable, "-m", "servetune.testing.standin"]
MODEL = "standin/tiny-vlm"


def group_gone(pgid: int, timeout: float = 5.0) -> bool:
    """True once no live (non-zombie) process is left in process group `pgid`."""
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
            alive = [
                p
                for p in psutil.process_iter(["status"])
                if _pgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE
            ]
        except ProcessLookupError:
            alive = []
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
