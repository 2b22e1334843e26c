"""Typing values against the SGLang catalog: what a rule, preset, pin or trial may set, and how an env
value is written. Below rules and render, which both use it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from servetune.catalog.ranges import check_range
from servetune.errors import UnknownNameError, did_you_mean
from servetune.schema.catalog import Catalog, EnvSpec, FieldSpec

__all__ = [
    "coerce_env",
    "coerce_field",
    "env_text",
    "is_env_name",
    "rejected_by_every_release",
    "unknown_key_error",
    "value_help",
]

_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}


def is_env_name(key: str) -> bool:
    """`SGLANG_*` (and other upper-case names) are env vars; lower-case names are fields."""
    return key.upper() == key and not key.islower()


def _scalar(kind: str, value: Any, from_text: bool) -> Any:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if from_text and isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError(f"expected true or false, but got {value!r}")
    if kind == "int":
        if isinstance(value, bool):
            raise ValueError(f"expected an integer, but got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ValueError(f"expected an integer, but got {value!r}")
    if kind == "float":
        if isinstance(value, bool):
            raise ValueError(f"expected a number, but got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ValueError(f"expected a number, but got {value!r}")
    if kind == "json":
        if isinstance(value, str) and from_text:
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f"expected JSON, but got {value!r}") from None
        return value
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a single value, but got {value!r}")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def coerce_field(spec: FieldSpec, value: Any, *, from_text: bool = False) -> Any:
    """Check and convert `value` for SGLang field `spec` (raises ValueError with the fix)."""
    if value is None:
        raise ValueError("null is not a value: leave the field out to let SGLang decide")
    kind = "bool" if spec.action in ("store_true", "store_false", "boolean_optional") else spec.type
    if spec.nargs in ("+", "*") or (isinstance(spec.nargs, int) and spec.nargs > 1):
        items = value
        if from_text and isinstance(value, str):
            text = value.strip()
            items = json.loads(text) if text.startswith("[") else [v for v in text.replace(",", " ").split() if v]
        if not isinstance(items, list):
            items = [items]
        out = [_scalar(kind, v, from_text or isinstance(v, str)) for v in items]
        _check_choices(spec, out)
        return out
    out = _scalar(kind, value, from_text)
    _check_choices(spec, [out])
    check_range(spec.name, out)
    return out


def _check_choices(spec: FieldSpec, values: Iterable[Any]) -> None:
    if not spec.choices:
        return
    allowed = [str(c) for c in spec.choices]
    for v in values:
        if str(v) not in allowed:
            guess = did_you_mean(str(v), allowed)
            hint = f"; did you mean '{guess}'?" if guess else ""
            raise ValueError(f"{v!r} is not one of {spec.choices}{hint}")


def coerce_env(spec: EnvSpec | None, value: Any, *, from_text: bool = False) -> Any:
    """Check and convert an env-var value (any string for vars the catalog does not type)."""
    if value is None:
        raise ValueError("null is not a value: leave the variable out")
    if spec is None or spec.type in ("str", "any"):
        return _scalar("str", value, True) if not isinstance(value, (bool, int, float)) else value
    return _scalar(spec.type, value, from_text or isinstance(value, str))


def env_text(value: Any) -> str:
    """How an env value is written into the environment (`true` → `1`)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, float) and value.is_integer():
        return str(value)
    return str(value)


def unknown_key_error(key: str, catalog: Catalog, *, what: str) -> UnknownNameError:
    """'X is not an SGLang <version> field' with a did-you-mean."""
    if is_env_name(key):
        options = list(catalog.env)
        noun = "environment variable"
    else:
        options = list(catalog.fields)
        noun = "field"
    guess = did_you_mean(key, options)
    return UnknownNameError(
        f"'{key}' is not an SGLang {catalog.sglang_version} {noun} ({what})",
        help=f"did you mean '{guess}'?" if guess else f"`servetune catalog show {catalog.sglang_version}` lists them",
        notes=[f"fields come from servetune/data/catalog/{catalog.sglang_version}.json"],
    )


def rejected_by_every_release(key: str, value: Any, catalogs: Iterable[Catalog]) -> str | None:
    """Why `value` for `key` (a field or `SGLANG_*` env var) is accepted by no release in `catalogs`
    (the newest release's reason), else None. A key no release has is not judged here (the caller
    names it), and a value some release takes is left to the resolver, which skips it with a note
    for a release that does not."""
    reason = None
    for catalog in sorted(catalogs, key=lambda c: _version_key(c.sglang_version), reverse=True):
        env = is_env_name(key)
        if (env and key not in catalog.env and key.startswith("SGLANG_")) or (not env and key not in catalog.fields):
            continue
        try:
            if env:
                coerce_env(catalog.env.get(key), value)
            else:
                coerce_field(catalog.fields[key], value)
        except ValueError as exc:
            reason = reason or str(exc)
            continue
        return None
    return reason


def value_help(catalog: Catalog, key: str) -> str | None:
    """`--max-running-requests takes an integer >= 1`: what a field takes, for an error's help."""
    from servetune.catalog.ranges import value_range

    spec = catalog.fields.get(key)
    if spec is None:
        return None
    if spec.choices:
        return f"{spec.flag} takes one of: {', '.join(map(str, spec.choices))}"
    noun = {"int": "an integer", "float": "a number", "bool": "true or false", "json": "JSON"}.get(
        spec.type, "a string"
    )
    bounds = value_range(key)
    return f"{spec.flag} takes {noun}" + (f" {bounds.text()}" if bounds is not None else "")


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))
