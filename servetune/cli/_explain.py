"""Rendering `servetune explain`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servetune.errors import SpecError, UnknownNameError, did_you_mean

_DIFF_HELP = "servetune launch writes it; pass --run the run directory of a launch or managed bench"


def _v(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _rules_for(res, key: str) -> list:
    return [r for r in res.rules.rules if key in r.rule.set]


def explain(res, key: str | None, run: Path | None) -> None:
    """Print the decision chain of `key` (or of every decided key)."""
    keys = [key] if key else sorted(res.config.fields) + sorted(res.config.env)
    diff = _server_diff(run) if run else {}
    skipped = {s.key for s in res.config.skipped}
    if (
        key
        and res.config.get(key) is None
        and key not in res.catalog.fields
        and key not in res.catalog.env
        and key not in skipped
    ):
        guess = did_you_mean(key, list(res.catalog.fields) + list(res.catalog.env))
        raise UnknownNameError(
            f"'{key}' is not an SGLang {res.catalog.sglang_version} field or env var",
            help=f"did you mean '{guess}'?" if guess else "`servetune catalog show VERSION` lists them",
        )
    outcomes = {o.rule_id: o for o in res.config.outcomes}
    for k in keys:
        resolved = res.config.get(k)
        if resolved is None:
            spec = res.catalog.fields.get(k) or res.catalog.env.get(k)
            if spec is None:
                print(f"{k}: SGLang {res.catalog.sglang_version} has no such field or env var; nothing is emitted")
            else:
                print(f"{k}: not set by servetune → SGLang decides at launch (declared default {_v(spec.default)})")
        else:
            print(f"{k} = {_v(resolved.value)}")
            for d in resolved.chain:
                won = "  ← wins" if d is resolved.chain[-1] else "  (replaced)"
                print(f"  {d.layer:<7} {d.source:<44} {d.location or ''}{won}")
                if d.matched:
                    print(
                        "          matched "
                        + " · ".join(
                            f"{c.condition} {'✓' if c.ok else '✗'}"
                            + (f" ({_v(c.actual)})" if c.actual is not None else "")
                            for c in d.matched
                        )
                    )
                if d.reason:
                    print(f"          why     {d.reason}")
        for lr in _rules_for(res, k):
            o = outcomes.get(lr.id)
            if o is None or o.status == "applied":
                continue
            failed = [c.condition for c in o.conditions if not c.ok]
            detail = o.note or ("failed: " + "; ".join(failed) if failed else "")
            print(f"  rule    {lr.id:<44} {o.status} {detail}".rstrip())
        for s in res.config.skipped:
            if s.key == k:
                print(f"  skipped {s.source:<44} {s.reason}")
        if k in diff:
            d = diff[k]
            print(
                f"  sglang  requested={_v(d.get('requested'))} → effective={_v(d.get('effective'))}"
                + ("" if d.get("requested") == d.get("effective") else "  (SGLang's own resolution changed it)")
            )
    for k, d in diff.items():
        if k not in keys and not key:
            print(f"{k}: SGLang chose {_v(d.get('effective'))} (requested {_v(d.get('requested'))})")


def _server_diff(run: Path) -> dict[str, dict]:
    path = run / "server_info_diff.json"
    if not path.is_file():
        raise UnknownNameError(
            f"no server_info_diff.json in run directory {run}",
            help="pass the run directory of a `servetune launch` or managed `servetune bench`",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problem = exc.msg if isinstance(exc, json.JSONDecodeError) else getattr(exc, "strerror", None) or str(exc)
        raise SpecError(f"cannot read {path}: {problem}", help=_DIFF_HELP) from None
    rows = data.get("fields", []) if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise SpecError(
            f"{path} must hold a list of field records (or an object with 'fields': [...])", help=_DIFF_HELP
        )
    return {d["field"]: d for d in rows if isinstance(d, dict) and isinstance(d.get("field"), str)}
