"""SGLang version numbers and windows (`>=0.5.10,<0.6`), without extra dependencies."""

from __future__ import annotations

import re

_SPEC = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9a-z.]*)\s*$")


def version_key(version: str) -> tuple:
    """Sortable key: `0.5.23` → (0, 5, 23); `0.5.10rc1` → (0, 5, 10, -1, 1)."""
    parts: list = []
    for piece in str(version).split("."):
        m = re.match(r"^(\d+)(?:(a|b|rc|post|dev)(\d*))?", piece)
        if not m:
            raise ValueError(f"not a version: {version!r}")
        parts.append(int(m.group(1)))
        if m.group(2):
            parts.extend([{"dev": -3, "a": -2, "b": -1, "rc": -1, "post": 1}[m.group(2)], int(m.group(3) or 0)])
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


def parse_specifier(spec: str) -> list[tuple[str, tuple]]:
    """Parse `>=0.5.10,<0.6` into `[(op, key), ...]`; raises ValueError when malformed."""
    clauses = []
    for clause in spec.split(","):
        m = _SPEC.match(clause)
        if not m:
            raise ValueError(f"version window must look like '>=0.5.10,<0.6', but got {spec!r}")
        clauses.append((m.group(1), version_key(m.group(2))))
    return clauses


def in_window(version: str, spec: str | None) -> bool:
    """True when `version` satisfies every clause of `spec` (None = any version)."""
    if not spec:
        return True
    key = version_key(version)
    ops = {">=": key.__ge__, "<=": key.__le__, "==": key.__eq__, "!=": key.__ne__, ">": key.__gt__, "<": key.__lt__}
    return all(ops[op](other) for op, other in parse_specifier(spec))
