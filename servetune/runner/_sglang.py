"""`SglangRunner`: the real runner. A server process started by `servetune.launch`, load from
`servetune.bench`, every file of the run in its run directory."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.runner._base import BaseRunner, HttpServer

if TYPE_CHECKING:
    from servetune.context import Resolution
    from servetune.launch import LaunchOptions, ServerHandle, StartupPhases

__all__ = ["MANAGED_STOP_GRACE_S", "WATCHED_FIELDS", "SglangRunner", "SglangServer"]

WATCHED_FIELDS = (
    "max_running_requests",
    "mem_fraction_static",
    "chunked_prefill_size",
    "cuda_graph_max_bs_decode",
    "schedule_policy",
    "prefill_decode_interval",
    "radix_eviction_policy",
    "mm_feature_transport",
    "mm_preprocess_cache_size_mb",
    "attention_backend",
    "decode_attention_backend",
    "page_size",
    "max_total_tokens",
)
"""Tuning-relevant fields whose `/server_info` value a run records as `resolved` when servetune left
them to the server (`LaunchOptions.watched_fields`): what SGLang chose, for `explain --run` and the tuner."""

MANAGED_STOP_GRACE_S = 1.0
"""Stop grace of a measured server, before SIGKILL to its group. Nothing it was sent is still in flight,
so a graceful drain has nothing to keep, and SGLang's cannot be quick: 0.5.17's tokenizer manager looks
at its SIGTERM flag every 5 s (`sigterm_watchdog`), then asks the schedulers to shut down and waits up
to 15 s; the group's SIGTERM also ends the detokenizer, whose exit starts the crash path's 5 s sleep.
On the H200 each of the 29 measured servers in docs/h200-evidence.tar.xz was SIGKILLed 5 s after
SIGTERM (the device wrapper, `scripts/device/sgl_fast_stop.sh`; stop 5.1-5.2 s) and the next launch
found its GPU memory free; by then
the schedulers had not begun to shut down, so an earlier SIGKILL leaves them in the same state. A
server `servetune launch` serves keeps the full `LaunchOptions.stop_grace_s` (30 s) to drain."""


class SglangServer(HttpServer):
    """A server started by `servetune.launch.start_server`, benchmarked by `servetune.bench`.

    `api_key` is the server's key (the resolution's pinned `api_key`): every benchmark sends it.
    """

    def __init__(
        self, handle: ServerHandle, *, client: str = "auto", model: str | None = None, api_key: str | None = None
    ) -> None:
        from servetune.secrets import Secret

        self.handle = handle
        self.client = client
        self.model = model
        self.api_key = Secret(api_key) if api_key else None
        self.url = handle.url
        self.run_dir = handle.run_dir
        self.startup_s = handle.startup_s
        self.diff = handle.diff
        self.server_info = dict(handle.server_info or {})
        self.stop_s: float | None = None

    @property
    def exit_code(self) -> int | None:
        return self.handle.exit_code

    def stop(self) -> None:
        self.handle.stop(grace_s=min(self.handle.options.stop_grace_s, MANAGED_STOP_GRACE_S))
        self.stop_s = self.handle.stop_s

    def wait_exit(self, timeout_s: float) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.handle.proc.wait(timeout=timeout_s)
        return None

    def log_tail(self) -> str:
        return self.handle.log_tail()

    @property
    def log_path(self) -> Path | None:
        return self.handle.log_path

    def startup_phases(self) -> StartupPhases | None:
        return self.handle.startup_phases()

    def classify_exit(self, code: int) -> str:
        from servetune.launch import classify_failure, read_tail

        if self.handle.stopped_by() is not None:
            return "stopped"
        return classify_failure(code, read_tail(self.handle.log_path, 400))


class SglangRunner(BaseRunner):
    """Measures with real processes: `launch.start_server` then `bench.run_benchmark`.

    Args:
        options: How to start the server (command prefix, timeouts, ...); `run_dir` and
            `cuda_visible_devices` are set per measurement; `watched_fields` left empty
            becomes `WATCHED_FIELDS`.
        client: The benchmark client (`auto`, `builtin`, `sglang`).
        model: The model id to request (default: the server's first).
    """

    server_class: type[SglangServer] = SglangServer
    """What `start` wraps the started process in (a subclass may change how it is benchmarked)."""

    def __init__(self, options: LaunchOptions | None = None, *, client: str = "auto", model: str | None = None):
        from servetune.launch import LaunchOptions

        options = options or LaunchOptions()
        if not options.watched_fields:
            options = options.model_copy(update={"watched_fields": WATCHED_FIELDS})
        self.options = options
        self.client = client
        self.model = model

    def start(self, resolution: Resolution, *, run_dir: Path, gpus: Sequence[str] | None = None) -> SglangServer:
        from servetune.launch import make_dir, start_server, write_facts, write_resolved

        run_dir = Path(run_dir)
        make_dir(run_dir)
        write_facts(run_dir, resolution.facts)
        write_resolved(run_dir, resolution.config)
        update: dict[str, Any] = {"run_dir": run_dir}
        if gpus is not None:
            update["cuda_visible_devices"] = ",".join(gpus)
        options = self.options.model_copy(update=update)
        handle = start_server(resolution.argv(), resolution.env(), resolution.requested(), options)
        return self.server_class(
            handle, client=self.client, model=self.model, api_key=getattr(resolution, "api_key", None)
        )

    def serve(self, resolution: Resolution, *, follow_log: bool = True) -> None:
        """Serve `resolution` in the foreground until Ctrl-C or the server dies (`servetune launch`):
        the runner's launch options and watched fields, no benchmark. The options' `port` must be set."""
        from servetune.launch import run_foreground

        run_foreground(resolution, self.options, follow_log=follow_log)
