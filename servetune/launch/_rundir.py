"""Run directories: one per launch/bench/trial, holding what is needed to reproduce and explain it.

Every file written here passes through `servetune.secrets.redact` (the JSON/YAML writers, argv.txt,
env.json) and the server's log is written through a redacting copy (`RedactedLog`), so a secret
registered by the resolution (`api_key`, an `*_TOKEN` env var) never reaches a run directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import select
import termios
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servetune.errors import SpecError
from servetune.secrets import REDACTED, is_secret_name, redact, redactor

RUNS_DIR_ENV = "SERVETUNE_RUNS_DIR"
"""Where new run directories go when none is given (default `./runs`)."""
_SECRET_FLAG = re.compile(r"^--[a-z0-9-]*(api-key|-key|-token|secret|password)$", re.IGNORECASE)
_counter = itertools.count()


def make_dir(path: Path | str, what: str = "run directory") -> Path:
    """`mkdir -p path`; a path that cannot be made is a `SpecError` naming it and the reason."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(
            f"cannot create the {what} {path}: {exc.strerror or exc}",
            help=f"give it a path in a directory you can write (--run-dir, or ${RUNS_DIR_ENV} for the default)",
        ) from None
    return path


def new_run_dir(base: Path | str, kind: str, what: str = "runs directory") -> Path:
    """Create and return a new, unique run directory `base/<kind>-<YYYYmmdd-HHMMSS>-<pid>-<n>`.

    Raises:
        SpecError: `base` or the new directory cannot be created (naming `what`).
    """
    base = make_dir(base, what)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    while True:
        path = base / f"{kind}-{stamp}-{os.getpid()}-{next(_counter)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise SpecError(f"cannot create a run directory in the {what} {base}: {exc.strerror or exc}") from None
        return path


def runs_root() -> Path:
    """Where run directories go when none is given: `$SERVETUNE_RUNS_DIR`, default `./runs`."""
    return Path(os.environ.get(RUNS_DIR_ENV) or "runs")


def default_run_dir(kind: str) -> Path:
    """A new run directory under `runs_root()`: `new_run_dir(base, kind)`."""
    what = f"runs directory (${RUNS_DIR_ENV})" if os.environ.get(RUNS_DIR_ENV) else "runs directory"
    return new_run_dir(runs_root(), kind, what)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` with secrets (HF_TOKEN, *_TOKEN, *_KEY, *API_KEY*, *SECRET*, *PASSWORD*) replaced."""
    return {k: (REDACTED if is_secret_name(k) and v else redact(v)) for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of `argv` with the values of secret flags (`--api-key V`, `--api-key=V`, `--*-token V`) and
    every registered secret replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = redact(arg)
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

    path.write_text(yaml.safe_dump(redact(_plain(data)), sort_keys=False, allow_unicode=True))
    return path


def _write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(redact(_plain(data)), indent=2, sort_keys=False) + "\n")
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


class RedactedLog:
    """`server.log` written through a redacting copy: the server writes into a pipe (`fd`), and a
    thread appends what it reads, line by line and redacted, to the file.

    A copy rather than rewriting the file at stop: the log is followed live (`servetune launch`),
    read for failure tails while the server runs, and must hold no secret even when servetune is
    killed before it could rewrite anything. Lines end at `\\n` or `\\r`; a line without an end is
    held back (up to 1 MiB) so that a secret is never split across two writes.
    """

    _MAX_PENDING = 1 << 20

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._read_fd, self.fd = os.pipe()
        self._file = open(self.path, "ab")  # noqa: SIM115 (closed by the copy thread)
        self._busy = False
        self._thread = threading.Thread(target=self._copy, name="servetune-server-log", daemon=True)
        self._thread.start()

    def close_writer(self) -> None:
        """Close this process's write end (after the server started with it): EOF comes when the server's
        processes are gone."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def flush(self, timeout_s: float = 2.0) -> None:
        """Wait until what the server has written so far is in the file (or `timeout_s` passed)."""
        deadline = time.monotonic() + timeout_s
        while self._thread.is_alive() and time.monotonic() < deadline:
            if not self._busy and self._pending() == 0:
                return
            time.sleep(0.005)

    def close(self, timeout_s: float = 5.0) -> None:
        """Close the write end and wait for the copy to reach EOF (the server's group must be gone)."""
        self.close_writer()
        self._thread.join(timeout_s)

    def _pending(self) -> int:
        try:
            return int.from_bytes(fcntl.ioctl(self._read_fd, termios.FIONREAD, b"\0\0\0\0"), "little")
        except OSError:
            return 0

    def _copy(self) -> None:
        held = b""
        try:
            while True:
                ready, _, _ = select.select([self._read_fd], [], [], 0.5)
                if not ready:
                    continue
                self._busy = True
                chunk = os.read(self._read_fd, 65536)
                if not chunk:
                    break
                held += chunk
                cut = max(held.rfind(b"\n"), held.rfind(b"\r")) + 1
                if cut == 0 and len(held) > self._MAX_PENDING:
                    cut = len(held)
                if cut:
                    self._file.write(redactor.redact_bytes(held[:cut]))
                    self._file.flush()
                    held = held[cut:]
                self._busy = False
            if held:
                self._file.write(redactor.redact_bytes(held))
        finally:
            self._busy = False
            self._file.close()
            os.close(self._read_fd)
