"""Requested vs effective: what the server's own resolution did to each requested field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from servetune.secrets import REDACTED, redact

FieldStatus = Literal["same", "changed", "resolved", "missing"]


class FieldDiff(BaseModel):
    """One field: what servetune asked for and what the server reports on `/server_info`."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    field: str
    """SGLang field name, verbatim."""
    requested: Any = None
    """The value servetune passed (None: left to the server)."""
    effective: Any = None
    """The value on `/server_info` (None when absent there)."""
    status: FieldStatus
    """`same`; `changed` (the server replaced a requested value); `resolved` (not requested, the
    server chose `effective`); `missing` (the server does not report the field)."""


class ServerInfoDiff(BaseModel):
    """Per-field requested vs effective values, as recorded after a launch."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    fields: list[FieldDiff]
    """Every requested field, in request order."""

    @property
    def changed(self) -> list[FieldDiff]:
        """The fields whose effective value differs from a requested (non-None) value."""
        return [f for f in self.fields if f.status == "changed"]

    def by_field(self) -> dict[str, FieldDiff]:
        """The entries keyed by field name."""
        return {f.field: f for f in self.fields}

    def render(self) -> str:
        """A short table for terminals: changed and resolved fields first."""
        order = {"changed": 0, "resolved": 1, "missing": 2, "same": 3}
        rows = sorted(self.fields, key=lambda f: order[f.status])
        if not rows:
            return "server_info: nothing requested to compare"
        width = max(len(f.field) for f in rows)
        lines = [f"{'field'.ljust(width)}  {'status':8}  requested -> effective"]
        lines += [f"{f.field.ljust(width)}  {f.status:8}  {f.requested!r} -> {f.effective!r}" for f in rows]
        return redact("\n".join(lines))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(b, str) and str(a).lower() == b.lower())
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, (int, float)) and isinstance(b, str) or isinstance(a, str) and isinstance(b, (int, float)):
        return str(a) == str(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def diff_server_info(requested: Mapping[str, Any], server_info: Mapping[str, Any]) -> ServerInfoDiff:
    """Compare requested fields with `/server_info`; SGLANG_* env names are skipped (not reported there).

    Secret values (`servetune.secrets`) are recorded as `<redacted>`; a secret the server reports
    hidden (`<redacted>`, as SGLang's `/server_info` may) counts as `same`.
    """
    rows: list[FieldDiff] = []
    for name, want in requested.items():
        if name.startswith("SGLANG_"):
            continue
        if name not in server_info:
            rows.append(FieldDiff(field=name, requested=redact(want), status="missing"))
            continue
        got = server_info[name]
        shown_want, shown_got = redact(want), redact(got)
        if want is None:
            status: FieldStatus = "resolved"
        elif shown_want != want and shown_got in (REDACTED, shown_want):
            status = "same"
        else:
            status = "same" if _same(want, got) else "changed"
        rows.append(FieldDiff(field=name, requested=shown_want, effective=shown_got, status=status))
    return ServerInfoDiff(fields=rows)
