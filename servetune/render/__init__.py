"""Emitters: a resolved config as SGLang argv, a shell line, env lines, SGLang's `--config`
YAML, or JSON. Every flag comes from the target version's catalog."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from servetune.catalog.values import env_text
from servetune.schema.catalog import Catalog, FieldSpec
from servetune.schema.decision import ResolvedConfig

LAUNCH_PREFIX = ["python", "-m", "sglang.launch_server"]

__all__ = [
    "LAUNCH_PREFIX",
    "field_args",
    "render_argv",
    "render_config_yaml",
    "render_env",
    "render_env_lines",
    "render_shell",
]


def field_args(spec: FieldSpec, value: Any) -> list[str]:
    """The CLI tokens that give field `spec` the value `value` (empty when that is the switch's off state)."""
    if spec.action == "store_true":
        return [spec.flag] if value else []
    if spec.action == "store_false":
        return [] if value else [spec.flag]
    if spec.action == "boolean_optional":
        return [spec.flag] if value else ["--no-" + spec.flag[2:]]
    if isinstance(value, list) and spec.nargs is not None:
        return [spec.flag, *(_text(v) for v in value)]
    return [spec.flag, _text(value)]


def _text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_argv(config: ResolvedConfig, catalog: Catalog, model_path: str) -> list[str]:
    """Flags after `python -m sglang.launch_server`, `--model-path` first, then fields by name."""
    argv = [catalog.fields["model_path"].flag if "model_path" in catalog.fields else "--model-path", model_path]
    for name, resolved in sorted(config.fields.items()):
        if name == "model_path":
            continue
        argv.extend(field_args(catalog.fields[name], resolved.value))
    return argv


def render_env(config: ResolvedConfig) -> dict[str, str]:
    """`{NAME: text}` of the resolved env vars."""
    return {name: env_text(r.value) for name, r in sorted(config.env.items())}


def render_env_lines(env: dict[str, str]) -> str:
    """`export NAME=value` lines, shell-quoted."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def render_shell(argv: list[str], env: dict[str, str], prefix: list[str] | None = None) -> str:
    """One shell command, env assignments first, quoted, continued over lines."""
    words = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    words.extend(shlex.quote(w) for w in (prefix or LAUNCH_PREFIX))
    lines = [" ".join(words)]
    i = 0
    while i < len(argv):
        group = [argv[i]]
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            group.append(argv[i])
            i += 1
        lines.append("    " + " ".join(shlex.quote(w) for w in group))
    return " \\\n".join(lines) + "\n"


def render_config_yaml(config: ResolvedConfig, catalog: Catalog, model_path: str) -> tuple[str, list[str]]:
    """SGLang's own `--config` file (dash keys) and the argv that must stay on the command line.

    SGLang's config merger accepts only store and store_true options with single values, so
    list, JSON and `--x/--no-x` fields stay on argv.
    """
    data: dict[str, Any] = {"model-path": model_path}
    rest: list[str] = []
    for name, resolved in sorted(config.fields.items()):
        if name == "model_path":
            continue
        spec = catalog.fields[name]
        value = resolved.value
        if spec.config_file_ok and spec.action in ("store", "store_true") and not isinstance(value, (list, dict)):
            if spec.action == "store_true" and not value:
                continue
            data[spec.flag[2:]] = value
        else:
            rest.extend(field_args(spec, value))
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    return text, rest
