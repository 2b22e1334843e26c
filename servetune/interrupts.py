"""One interrupt path for every command: SIGINT and SIGTERM, to the process or to its group.

The CLI installs the handler for the length of a command (`installed()`). The first signal

1. records the signal (`requested()`),
2. calls every `on_interrupt` callback: a benchmark running its event loop cancels its own tasks
   (thread-safely; a loop in a worker thread is woken the same way),
3. raises `Interrupted` in the main thread, unless a callback answered that the main thread's
   running code raises it itself once it has cleaned up (the builtin client in the main thread),
   or the main thread is inside `shielded()` (stopping a server), which raises it on the way out.

A second signal forces: the force hooks run (`servetune.launch` SIGKILLs the process groups of the
servers this process started, by their recorded ids) and the process exits at once with 128 + the
signal. A signal ignored when the command started (a background job of a non-interactive shell has
SIGINT ignored) stays ignored, as POSIX tools do.

Stdlib only: every layer may use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

__all__ = [
    "SIGNALS",
    "Interrupted",
    "add_force_hook",
    "check",
    "installed",
    "mark_delivered",
    "mark_reported",
    "on_interrupt",
    "record",
    "reported",
    "requested",
    "shielded",
    "signal_name",
]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals a command stops on: exit status 130 (SIGINT) or 143 (SIGTERM)."""


class Interrupted(KeyboardInterrupt):
    """A command was stopped by SIGINT or SIGTERM; a `KeyboardInterrupt`, so every clean-up written
    for Ctrl-C runs for both.

    Attributes:
        signum: The signal.
        partial: What was measured before it came (a benchmark's partial `Metrics`), or None.
        reported: The command has printed its one line about it (the CLI prints a generic one if not).
    """

    def __init__(self, signum: int, partial: object = None) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum
        self.partial = partial
        self.reported = False

    @property
    def exit_code(self) -> int:
        """128 + the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


def record(exc: BaseException, stage: str) -> dict[str, object]:
    """What a run directory records of an interrupt (`"interrupted": {...}`): the signal, the exit
    status it gives, the stage it stopped, and when (a plain KeyboardInterrupt counts as SIGINT)."""
    signum = getattr(exc, "signum", signal.SIGINT)
    return {
        "signal": signal_name(signum),
        "exit_code": 128 + signum,
        "stage": stage,
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def signal_name(signum: int) -> str:
    """`SIGINT`, `SIGTERM`, ... for a signal number."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class _State:
    def __init__(self) -> None:
        self.signum: int | None = None
        self.delivered = False
        self.reported = False
        self.active = False
        self.shield_depth = 0
        self.callbacks: dict[int, Callable[[int], bool]] = {}
        self.force_hooks: list[Callable[[], None]] = []
        self.lock = threading.Lock()


_STATE = _State()


def requested() -> int | None:
    """The signal of a pending interrupt of this command, else None."""
    return _STATE.signum


def check() -> None:
    """Raise `Interrupted` for a signal that came and has not been raised yet."""
    signum = _STATE.signum
    if signum is not None and not _STATE.delivered:
        _STATE.delivered = True
        raise Interrupted(signum)


def mark_reported() -> None:
    """The command has printed its one line about the pending interrupt (the CLI prints none then)."""
    _STATE.reported = True


def reported() -> bool:
    """Whether the command has printed its line about the pending interrupt."""
    return _STATE.reported


def mark_delivered() -> None:
    """Whoever raises `Interrupted` for the pending signal itself (a benchmark that stopped) says so,
    so that no second one is raised for it."""
    _STATE.delivered = True


def add_force_hook(hook: Callable[[], None]) -> None:
    """Run `hook` at a second signal, before the process exits (it must be quick and never raise)."""
    if hook not in _STATE.force_hooks:
        _STATE.force_hooks.append(hook)


@contextlib.contextmanager
def on_interrupt(callback: Callable[[int], bool]) -> Iterator[None]:
    """While the block runs, a first signal calls `callback(signum)` (in the main thread, from the
    signal handler: it must only set flags or wake a loop). It returns True when the main thread's
    running code raises `Interrupted` itself once it has stopped; False when the handler should."""
    key = id(callback)
    with _STATE.lock:
        _STATE.callbacks[key] = callback
    pending = _STATE.signum
    try:
        if pending is not None:  # the signal came before the block: act on it at once
            callback(pending)
        yield
    finally:
        with _STATE.lock:
            _STATE.callbacks.pop(key, None)


@contextlib.contextmanager
def shielded(*, deliver: bool = True) -> Iterator[None]:
    """A block the first signal does not break into (stopping a server, writing its record); the
    signal is raised as `Interrupted` when the block ends (`deliver`), or left to a later `check()`.
    A second signal still forces."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        _STATE.shield_depth += 1
    try:
        yield
    finally:
        if main:
            _STATE.shield_depth -= 1
    if deliver and main and _STATE.shield_depth == 0 and _STATE.active:
        check()


def _handle(signum: int, frame: object) -> None:
    state = _STATE
    if state.signum is not None:
        _force(signum)
        return
    state.signum = signum
    with state.lock:
        callbacks = list(state.callbacks.values())
    deferred = False
    for callback in callbacks:
        try:
            deferred = bool(callback(signum)) or deferred
        except Exception:
            pass
    if deferred or state.shield_depth > 0:
        return
    state.delivered = True
    raise Interrupted(signum)


def _force(signum: int) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"\nsecond {signal_name(signum)}: killing what this command started and exiting now\n".encode())
    for hook in list(_STATE.force_hooks):
        with contextlib.suppress(BaseException):
            hook()
    os._exit(128 + signum)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as above while the block runs (from the main thread; elsewhere a
    no-op); the previous handlers and a fresh state come back after it."""
    if threading.current_thread() is not threading.main_thread() or _STATE.active:
        yield
        return
    previous = {}
    for sig in SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN:
            continue
        previous[sig] = current
        signal.signal(sig, _handle)
    _STATE.active = True
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        _STATE.active = False
        _STATE.signum = None
        _STATE.delivered = False
        _STATE.reported = False
        _STATE.shield_depth = 0
