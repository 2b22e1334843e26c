"""`RemoteServer`: a server someone else started (`servetune bench --url`), behind the same seam as
a launched one, so a capacity search on it runs the one implementation (`search_server`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.runner._base import BaseServer, OnProgress, ShouldStop

if TYPE_CHECKING:
    from servetune.bench.slo import LatencySlo
    from servetune.bench.verdict import StepJudge
    from servetune.schema.workload import Workload

__all__ = ["RemoteServer"]


class RemoteServer(BaseServer):
    """A running server at `url`: benchmarked by the builtin client, never started or stopped here.

    `log` is its log file, where this machine can read it (`--server-log`): its scheduler lines
    become each step's telemetry. `model` is the model id to request (default: the server's first).
    """

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

    def bench(
        self,
        workload: Workload,
        *,
        requests: int | None = None,
        run_dir: Path | None = None,
        on_progress: OnProgress | None = None,
        should_stop: ShouldStop | None = None,
        slos: Sequence[LatencySlo] = (),
        judge: StepJudge | None = None,
        nonce: bytes | None = None,
    ) -> Any:
        from servetune.bench import run_benchmark

        return run_benchmark(
            self.url, workload, requests=requests, run_dir=run_dir, client="builtin", model=self.model,
            on_progress=on_progress, should_stop=should_stop, slos=slos, api_key=self.api_key, judge=judge,
            nonce=nonce,
        )  # fmt: skip

    def stop(self) -> None:
        """Nothing: the server is not ours."""
