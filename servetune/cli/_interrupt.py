"""The one line a command prints when SIGINT or SIGTERM stops it (`servetune.interrupts`)."""

from __future__ import annotations

import signal
import sys

from servetune.interrupts import mark_reported, signal_name


def report_interrupt(exc: BaseException, what: str, resume: str) -> None:
    """`interrupted by SIGINT: WHAT; RESUME` on stderr, once; the CLI then exits 130 (143 for SIGTERM)."""
    if getattr(exc, "reported", False):
        return
    name = signal_name(getattr(exc, "signum", signal.SIGINT))
    print(f"interrupted by {name}: {what}; {resume}", file=sys.stderr, flush=True)
    exc.reported = True  # type: ignore[attr-defined]
    mark_reported()
