"""Run directories: one per launch/bench/trial, holding what is needed to reproduce and explain it."""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RUNS_DIR_ENV = "SERVETUNE_RUNS_DIR"
"""Where new run directories go when none is given (default `./runs`)."""
REDACTED = "<redacted>"
_SECRET_ENV = re.compile(r"(^HF_TOKEN$|_TOKEN$|_KEY$|API_KEY|SECRET|PASSWORD)", re.IGNORECASE)
_SECRET_FLAG = re.compile(r"^--[a-z0-9-]*(api-key|-key|-token|secret|password)$", re.IGNORECASE)
_counter = itertools.count()


def new_run_dir(base: Path | str, kind: str) -> Path:
    """Create and return a new, unique run directory `base/<kind>-<YYYYmmdd-HHMMSS>-<pid>-<n>`."""
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    while True:
        path = base / f"{kind}-{stamp}-{os.getpid()}-{next(_counter)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path


def default_run_dir(kind: str) -> Path:
    """A new run directory under `$SERVETUNE_RUNS_DIR` (default `./runs`): `new_run_dir(base, kind)`."""
    return new_run_dir(Path(os.environ.get(RUNS_DIR_ENV, "runs")), kind)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` with secrets (HF_TOKEN, *_TOKEN, *_KEY, *API_KEY*, *SECRET*, *PASSWORD*) replaced."""
    return {k: (REDACTED if _SECRET_ENV.search(k) and v else v) for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of `argv` with the values of secret flags (`--api-key V`, `--api-key=V`, `--*-token V`) replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _ = arg.partition("=")
        if _SECRET_FLAG.match(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
                continue
            hide_next = True
        out.append(arg)
    return out


def _plain(obj: Any) -> Any:
    """A JSON/YAML-safe form of pydantic models, dataclasses, paths and containers."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "to_dict"):
        return _plain(obj.to_dict())
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    import dataclasses

    if dataclasses.is_dataclass(obj):
        return _plain(dataclasses.asdict(obj))
    return str(obj)


def _write_yaml(path: Path, data: Any) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True))
    return path


def _write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(_plain(data), indent=2, sort_keys=False) + "\n")
    return path


def write_facts(run_dir: Path, facts: Any) -> Path:
    """`facts.yaml`: hardware, model, workload and deployment facts (a pydantic model or a dict)."""
    return _write_yaml(Path(run_dir) / "facts.yaml", facts)


def write_resolved(run_dir: Path, resolved: Any) -> Path:
    """`resolved.yaml`: the resolved config with provenance.

    Accepts the resolver's `Resolution` (its `.config`, with Decision chains, plus argv/env),
    a `ResolvedConfig`, or a plain dict.
    """
    data: Any = resolved
    if hasattr(resolved, "config") and hasattr(resolved, "argv"):
        data = {"argv": list(resolved.argv()), "env": redact_env(resolved.env()), "config": resolved.config}
    return _write_yaml(Path(run_dir) / "resolved.yaml", data)


def write_argv(run_dir: Path, argv: Sequence[str]) -> Path:
    """`argv.txt`: the full command line, secrets redacted, one shell-quoted line."""
    import shlex

    path = Path(run_dir) / "argv.txt"
    path.write_text(shlex.join(redact_argv(argv)) + "\n")
    return path


def write_env(run_dir: Path, env: Mapping[str, str]) -> Path:
    """`env.json`: the env vars servetune set for the server (not the whole inherited env), redacted."""
    return _write_json(Path(run_dir) / "env.json", redact_env(env))


def write_metrics(run_dir: Path, metrics: Any) -> Path:
    """`metrics.json`: the benchmark's Metrics (or a failure record)."""
    return _write_json(Path(run_dir) / "metrics.json", metrics)


def write_server_info_diff(run_dir: Path, diff: Any) -> Path:
    """`server_info_diff.json`: requested vs effective value per field."""
    return _write_json(Path(run_dir) / "server_info_diff.json", diff)


def write_json(run_dir: Path, name: str, data: Any) -> Path:
    """Any other JSON record of the run (e.g. `server_info.json`, `result.json`)."""
    return _write_json(Path(run_dir) / name, data)
