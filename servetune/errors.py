"""The error hierarchy: every error servetune raises for something a user got wrong or the world
broke is a `ServetuneError` defined here (other modules re-export, never define, them).

The CLI renders a `ServetuneError` as a message (never a traceback) and exits 1.
Exit codes: 0 ok, 1 user error (`ServetuneError`), 2 usage (click), 3 bug, 130 SIGINT, 143 SIGTERM
(`servetune.interrupts`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "BenchError",
    "CatalogError",
    "ConflictError",
    "HardwareDetectionError",
    "LaunchError",
    "RequireViolation",
    "ServetuneError",
    "SourceLocation",
    "SpecError",
    "TuningError",
    "UnknownNameError",
    "did_you_mean",
]


@dataclass(frozen=True)
class SourceLocation:
    """A position in a data file, 1-based, as editors show it."""

    path: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return self.path
        if self.column is None:
            return f"{self.path}:{self.line}"
        return f"{self.path}:{self.line}:{self.column}"


class ServetuneError(Exception):
    """Base of every user-facing error; the CLI prints it and exits 1."""

    code = "error"

    def __init__(
        self,
        message: str,
        *,
        location: SourceLocation | None = None,
        key_path: str | None = None,
        help: str | None = None,
        notes: Iterable[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.key_path = key_path
        self.help = help
        self.notes = tuple(notes)

    def render(self) -> str:
        """The full message: `error[code]: what`, where, the key path, help and notes."""
        lines = [f"error[{self.code}]: {self.message}"]
        if self.location is not None:
            lines.append(f"  --> {self.location}")
        if self.key_path:
            lines.append(f"   = at key: {self.key_path}")
        if self.help:
            lines.append(f"   = help: {self.help}")
        lines.extend(f"   = note: {note}" for note in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


class SpecError(ServetuneError):
    """A rule, preset, workload, hardware or search-space file (or CLI value) is invalid."""

    code = "invalid-spec"


class UnknownNameError(SpecError):
    """A name (field, env var, GPU, model, workload, preset, version) is not known."""

    code = "unknown-name"


class ConflictError(ServetuneError):
    """Two decisions of one layer disagree, a resolution cycle, or a pin breaks a `require` rule."""

    code = "conflict"


class RequireViolation(ConflictError):
    """A tuner trial (or preset) breaks a `require` rule: such a config is never launched."""

    code = "require-violation"


class HardwareDetectionError(ServetuneError):
    """NVML is missing or failed; suggests `--gpu` or `--hardware`."""

    code = "hardware-detection"


class CatalogError(ServetuneError):
    """The SGLang field catalog is missing, or cannot be generated."""

    code = "catalog"


class LaunchError(ServetuneError):
    """SGLang failed to start or serve; carries the failure class and the log tail."""

    code = "launch"

    def __init__(
        self, message: str, *, failure: str = "crash", log_tail: str = "", exit_code: int | None = None, **kwargs
    ) -> None:
        notes = list(kwargs.pop("notes", ()))
        if log_tail:
            notes.append("log tail:\n" + log_tail.rstrip())
        super().__init__(message, notes=notes, **kwargs)
        self.failure = failure
        self.log_tail = log_tail
        self.exit_code = exit_code


class BenchError(ServetuneError):
    """The benchmark could not run or produced no usable measurement."""

    code = "bench"


class TuningError(ServetuneError):
    """Study-level failure: storage mismatch, failure rate exceeded, nothing feasible."""

    code = "tuning"


def did_you_mean(name: str, options: Iterable[str], n: int = 1) -> str | None:
    """The closest spelling among `options`, or None when nothing is close."""
    matches = difflib.get_close_matches(name, list(options), n=n, cutoff=0.6)
    return matches[0] if matches else None
