"""`servetune launch`: resolve, start SGLang in the foreground, follow its log, stop it on Ctrl-C."""

from __future__ import annotations

import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from servetune import interrupts
from servetune.errors import LaunchError
from servetune.launch._options import LaunchOptions
from servetune.launch._rundir import (
    default_run_dir,
    make_dir,
    redact_argv,
    redact_env,
    write_facts,
    write_json,
    write_resolved,
)
from servetune.launch._server import ServerHandle, check_launch, start_server
from servetune.secrets import redact_text


class LogFollower:
    """Copies new lines of a log file to a stream until stopped (tail -f in a thread)."""

    def __init__(self, path: Path, out: TextIO, prefix: str = "") -> None:
        self.path = path
        self.out = out
        self.prefix = prefix
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="servetune-log-follower", daemon=True)

    def start(self) -> LogFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        pos = 0
        buf = b""
        while True:
            stopping = self._stop.is_set()
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
            except FileNotFoundError:
                chunk = b""
            pos += len(chunk)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self.out.write(self.prefix + redact_text(line.decode("utf-8", errors="replace")) + "\n")
            self.out.flush()
            if stopping:
                return
            self._stop.wait(0.1)


def shell_line(prefix: Sequence[str], argv: Sequence[str], env: dict[str, str]) -> str:
    """The launch as one copy-pasteable shell line (secrets redacted)."""
    assigns = [f"{k}={shlex.quote(v)}" for k, v in redact_env(env).items()]
    return " ".join([*assigns, shlex.join(redact_argv([*prefix, *argv]))])


def run_foreground(res: Any, options: LaunchOptions, *, follow_log: bool = True) -> None:
    """Serve `res` (a `Resolution`) until SIGINT or SIGTERM (`servetune.interrupts.Interrupted`, exit 130
    or 143; `result.json` records `interrupted`), until the server is stopped from outside (`servetune
    stop`, a user's SIGTERM to it: a normal return, exit 0, `result.json` says `stopped`) or until it
    dies (a classified `LaunchError`, exit 1); the server is stopped either way (a second signal kills
    its group at once).

    Args:
        res: The resolution (`Context.resolve()`): argv, env, requested fields, facts, config.
        options: How to start it; `run_dir` None makes a new one (kind `launch`), `port` must be set.
        follow_log: Copy the server log to stdout as it grows.
    """
    argv, env, requested = list(res.argv()), dict(res.env()), dict(res.requested())
    check_launch(options)
    run_dir = Path(options.run_dir) if options.run_dir else default_run_dir("launch")
    make_dir(run_dir)
    write_facts(run_dir, getattr(res, "facts", {}))
    write_resolved(run_dir, res)
    options = options.model_copy(update={"run_dir": run_dir})
    shown = [*argv, "--host", options.host, "--port", str(options.port)]
    print(shell_line(options.command_prefix(), shown, env), flush=True)
    print(f"run directory: {run_dir}", flush=True)
    follower = LogFollower(run_dir / "server.log", sys.stdout, prefix="[server] ").start() if follow_log else None
    handle: ServerHandle | None = None
    started = time.monotonic()
    outside = False
    try:
        handle = start_server(argv, env, requested, options)
        print(f"ready: {handle.url} (pid {handle.pid}, started in {handle.startup_s:.1f} s)", flush=True)
        print(handle.diff.render(), flush=True)
        print("serving; Ctrl-C stops the server", flush=True)
        while True:
            handle.check_alive()
            time.sleep(0.5)
    except LaunchError as exc:
        if exc.failure != "stopped":
            raise
        outside = True
        print(f"{exc.message}; log: {run_dir / 'server.log'}", file=sys.stderr, flush=True)
        write_json(run_dir, "result.json", {"ended": "stopped", "message": exc.message, "exit_code": exc.exit_code,
                                            "served_s": round(time.monotonic() - started, 3)})  # fmt: skip
        return
    except KeyboardInterrupt as exc:
        name = interrupts.signal_name(getattr(exc, "signum", signal.SIGINT))
        print(
            f"\ninterrupted by {name}: stopping the server (a second {name} kills it now); "
            "serve it again with the same command",
            file=sys.stderr,
            flush=True,
        )
        exc.reported = True  # type: ignore[attr-defined]
        interrupts.mark_reported()
        write_json(run_dir, "result.json", {"ended": "interrupted", "interrupted": interrupts.record(exc, "serve"),
                                            "served_s": round(time.monotonic() - started, 3)})  # fmt: skip
        raise
    finally:
        if handle is not None:
            handle.stop()
            if not outside:
                print(
                    f"server stopped ({handle.stop_s or 0:.1f} s); log: {handle.log_path}", file=sys.stderr, flush=True
                )
        if follower is not None:
            follower.stop()
