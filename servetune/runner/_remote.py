"""`RemoteServer`: a server someone else started (`servetune bench --url`), behind the same seam as
a launched one, so a capacity search on it runs the one implementation (`search_server`)."""

from __future__ import annotations

from pathlib import Path

from servetune.runner._base import HttpServer

__all__ = ["RemoteServer"]


class RemoteServer(HttpServer):
    """A running server at `url`: benchmarked by the builtin client, never started or stopped here.

    `log` is its log file, where this machine can read it (`--server-log`): its scheduler lines
    become each step's telemetry. `model` is the model id to request (default: the server's first).
    """

    client = "builtin"

    def __init__(self, url: str, *, run_dir: Path, model: str | None = None, api_key: str | None = None,
                 log: Path | None = None) -> None:  # fmt: skip
        self.url = url
        self.run_dir = Path(run_dir)
        self.model = model
        self.api_key = api_key
        self._log = Path(log) if log is not None else None

    @property
    def exit_code(self) -> int | None:
        return None

    @property
    def log_path(self) -> Path | None:
        return self._log

    def stop(self) -> None:
        """Nothing: the server is not ours."""
