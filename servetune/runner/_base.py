"""The Runner seam: one measurement (launch, benchmark, run-directory record, stop) behind one call.

`BaseRunner.measure` is the template every caller uses (`servetune bench`, the tuner's trials
and confirmation rounds); a runner supplies `start`, which returns a `BaseServer` that can run
the benchmark and be stopped. Failures come back as data (`Measurement.failure`), never raised,
except SIGINT/SIGTERM (`servetune.interrupts.Interrupted`), which stops the server, records `interrupted`
and the partial metrics in `result.json`, and propagates.

Implementations: `SglangRunner` (real processes: `servetune.launch` + `servetune.bench`), the
stand-in runner in `servetune.testing` (the same, with the stand-in server's command), and
`servetune.testing.FakeRunner` for unit tests (no process, metrics from a function).
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from servetune import interrupts
from servetune.errors import BenchError, LaunchError, ServetuneError
from servetune.launch import StartupPhases

if TYPE_CHECKING:
    from servetune.bench.slo import LatencySlo
    from servetune.bench.verdict import StepJudge
    from servetune.context import Resolution
    from servetune.runner._guard import RunawayGuard
    from servetune.schema.workload import Workload

__all__ = [
    "BaseRunner",
    "BaseServer",
    "Failure",
    "HttpServer",
    "Measurement",
    "OnProgress",
    "RunTimings",
    "ShouldStop",
]

ShouldStop = Callable[[int, Any], bool]
"""`should_stop(done, snapshot) -> bool`: True ends the benchmark early (pruning, Ctrl-C). `snapshot` is a
`servetune.bench.metrics.Snapshot` (its `metrics()` computed only when called), or None during a judged
step (a capacity step or a soak: its judge decides it)."""
OnProgress = Callable[[int, int, Any], None]
"""`on_progress(done, total, snapshot)`: called as requests complete (every 1/50 of the run with a
`Snapshot`, and at least every second in between with None; always None during a judged step)."""


class Failure(BaseModel):
    """Why a measurement has no score."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    cls: str
    """oom, crash, startup_timeout, port_in_use, bad_command, wrong_server, bench_error, error, too_slow,
    stopped (told to stop from outside: `servetune stop`, a user's SIGTERM)."""
    message: str = ""
    """What went wrong and what to do."""
    stage: str | None = None
    """Where it failed: `start` or `bench` (None when not from a launch)."""
    log_tail: str = ""
    """The last lines of the server log."""
    exit_code: int | None = None
    """The server's exit status when it died."""


class RunTimings(BaseModel):
    """Where a measurement's wall time went, in seconds."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    startup_s: float | None = None
    """Process start until ready and verified (None if it never got there)."""
    startup_phases: StartupPhases | None = None
    """Where the start-up went, from the server's log (`servetune.launch.StartupPhases`)."""
    bench_s: float | None = None
    """The benchmark call(s), as seen by the runner."""
    stop_s: float | None = None
    """SIGTERM until the process group was gone."""
    total_s: float = 0.0
    """The whole measurement."""


class Measurement(BaseModel):
    """What one launch + benchmark produced: metrics, or a classified failure."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, arbitrary_types_allowed=True)

    metrics: Any = None
    """The benchmark's `Metrics` (a flat mapping from a fake runner); partial when `stopped_early`."""
    failure: Failure | None = None
    """Set when the launch or the benchmark failed."""
    diff: Any = None
    """Requested vs effective fields from `/server_info` (`ServerInfoDiff`)."""
    server_info: dict[str, Any] = {}
    """The raw `/server_info` answer."""
    timings: RunTimings = RunTimings()
    """Start-up, benchmark, stop and total seconds."""
    run_dir: Path | None = None
    """The run directory (server.log, argv.txt, env.json, metrics.json, result.json)."""
    url: str | None = None
    """The server's base URL while it ran."""
    capacity: Any = None
    """A capacity measurement's result (`servetune.bench.capacity.Capacity`), else None."""
    soaks: list[Any] = []
    """A soak measurement's soaks (`servetune.bench.capacity.SoakResult`; more than one where it stepped
    down, `soak_server` with `tries`)."""

    @property
    def soak(self) -> Any:
        """The soak that decided a soak measurement (its last), else None."""
        return self.soaks[-1] if self.soaks else None

    @property
    def ok(self) -> bool:
        """True when the benchmark produced metrics and the server stayed up throughout."""
        return self.failure is None and any(x is not None for x in (self.metrics, self.capacity, self.soak))

    @property
    def stopped_early(self) -> bool:
        """True when `should_stop` ended the benchmark (pruned or interrupted)."""
        m = self.metrics
        if m is None:
            return False
        return bool(m.get("stopped_early") if isinstance(m, dict) else getattr(m, "stopped_early", False))


class BaseServer(ABC):
    """A started server a runner measures: benchmark it (possibly several times), then stop it."""

    url: str
    run_dir: Path
    startup_s: float | None = None
    stop_s: float | None = None
    diff: Any = None
    server_info: dict[str, Any] = {}

    @property
    @abstractmethod
    def exit_code(self) -> int | None:
        """The server's exit status once it has exited, else None."""

    @property
    def alive(self) -> bool:
        """True while the server process runs."""
        return self.exit_code is None

    @abstractmethod
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
        """Drive `workload` against the server and return its metrics (judged against `slos`); a
        capacity step's `judge` ends the run at its decision (`judge.last` holds it), `nonce` seeds
        the images.

        Raises:
            BenchError: The benchmark could not run (unreachable server, every request failed).
        """

    @abstractmethod
    def stop(self) -> None:
        """Stop the server (idempotent)."""

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait up to `timeout_s` for the exit status (after a benchmark error); None if still running."""
        return self.exit_code

    def log_tail(self) -> str:
        """The last lines of the server log."""
        return ""

    @property
    def log_path(self) -> Path | None:
        """The server's log file, where there is one to read (its scheduler lines are telemetry)."""
        return None

    def telemetry_mark(self) -> int | None:
        """Where the server's scheduler lines stand now (its log's size), so `telemetry_since` reads
        what a step adds; None where there is no log to read."""
        path = self.log_path
        if path is None:
            return None
        try:
            return Path(path).stat().st_size
        except OSError:
            return 0

    def telemetry_since(self, mark: int | None) -> list[dict[str, Any]]:
        """SGLang's scheduler records written since `mark` (`launch.parse_scheduler_line`: `ts` in
        epoch seconds), none without a log."""
        path = self.log_path
        if path is None or mark is None:
            return []
        from servetune.launch import read_scheduler_lines

        return read_scheduler_lines(Path(path), mark)[0]

    def startup_phases(self) -> StartupPhases | None:
        """Where its start-up went (`servetune.launch.StartupPhases`), where the server's log tells."""
        return None

    def classify_exit(self, code: int) -> str:
        """The failure class of an exit during the benchmark (`oom` under load, `stopped` when told to
        stop from outside, else `crash`)."""
        return "crash"

    def __enter__(self) -> BaseServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpServer(BaseServer):
    """A server reached over HTTP at `url` and benchmarked by `servetune.bench` with `client` (a launched
    SGLang server, or one someone else started), sending `api_key` and requesting `model`."""

    client: str = "auto"
    model: str | None = None
    api_key: Any = None

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
            self.url, workload, requests=requests, run_dir=run_dir, client=self.client, model=self.model,
            on_progress=on_progress, should_stop=should_stop, slos=slos, api_key=self.api_key, judge=judge,
            nonce=nonce,
        )  # fmt: skip


BENCH_ERROR_EXIT_GRACE_S = 3.0
"""After a benchmark error, how long to wait for the server's exit status before calling it `bench_error`:
a dying server closes its connections first and exits a moment later (CI once filed a crash as bench_error)."""


class BaseRunner(ABC):
    """Owns one measurement: start a server for a resolution, benchmark it, record, stop."""

    @abstractmethod
    def start(self, resolution: Resolution, *, run_dir: Path, gpus: Sequence[str] | None = None) -> BaseServer:
        """Start a server for `resolution` and wait until it serves.

        Raises:
            LaunchError: It could not start (classified: oom, crash, startup_timeout, ...);
                nothing is left running.
        """

    def machine(self) -> str | None:
        """The identity of the machine this runner's servers run on (its GPUs' UUIDs through NVML, asked
        once), or None where it cannot tell: a capacity confirmation resumed on another machine re-measures
        the winner there before it soaks (an absolute rate does not travel between machines)."""
        if not hasattr(self, "_machine"):
            from servetune.hardware import machine_id

            self._machine = machine_id()
        return self._machine

    def same_machine(self, run_dir: Path) -> bool:
        """Whether the launch recorded in `run_dir` (its `machine.json`) ran on this runner's machine; where
        either side cannot tell (no NVML, a run recorded before machines were), True."""
        try:
            there = json.loads((Path(run_dir) / "machine.json").read_text(encoding="utf-8"))["machine"]
        except (OSError, ValueError, KeyError, TypeError):
            return True
        here = self.machine()
        return here is None or there is None or there == here

    def record(self, run_dir: Path, name: str, data: Any) -> None:
        """Write one JSON file of the run's record (`result.json`, `metrics.json`, ...)."""
        from servetune.launch import write_json

        Path(run_dir).mkdir(parents=True, exist_ok=True)
        write_json(run_dir, name, data)

    def measure(
        self,
        resolution: Resolution,
        workload: Workload,
        *,
        run_dir: Path,
        requests: int | None = None,
        gpus: Sequence[str] | None = None,
        on_progress: OnProgress | None = None,
        should_stop: ShouldStop | None = None,
        guard: RunawayGuard | None = None,
        slos: Sequence[LatencySlo] = (),
    ) -> Measurement:
        """Start, benchmark once, stop; failures are data (`Measurement.failure`).

        `guard` stops a run that misses its deadlines (`too_slow`, partial metrics kept); `slos`
        are judged on the run (`Metrics.slo`: verdicts, goodput).

        A server that dies during the benchmark is `oom` when its log shows an out-of-memory
        marker, else `crash`; a benchmark error with the server alive is `bench_error`; a
        `ServetuneError` that is not about the config (bad options, bad workload) is `error`.
        SIGINT/SIGTERM stop the server, record `interrupted` with the partial metrics, and propagate.
        """

        def bench(server: BaseServer, timings: RunTimings) -> tuple[Any, Failure | None, dict[str, Any]]:
            metrics, failure = self._bench(
                server, workload, requests, run_dir, on_progress, should_stop, timings, guard=guard, slos=slos
            )
            return metrics, failure, {}

        return self.session(resolution, run_dir=run_dir, gpus=gpus, body=bench)

    def session(
        self,
        resolution: Resolution,
        *,
        run_dir: Path,
        gpus: Sequence[str] | None,
        body: Callable[[BaseServer, RunTimings], tuple[Any, Failure | None, dict[str, Any]]],
    ) -> Measurement:
        """Start a server, run `body(server, timings)` against it, stop it, record the outcome.

        `body` returns (metrics, failure, more `Measurement` fields); a start failure is recorded
        without calling it (a `LaunchError` with its class, exit status and log tail; any other
        `ServetuneError` as `error`). SIGINT/SIGTERM (`Interrupted`) stop the server, record `interrupted`
        in `result.json` with what was measured, and propagate.
        """
        t0 = time.monotonic()
        timings = RunTimings()
        try:
            server = self.start(resolution, run_dir=run_dir, gpus=gpus)
        except KeyboardInterrupt as exc:
            timings.total_s = time.monotonic() - t0
            self._record_interrupted(run_dir, exc, "start", timings)
            raise
        except LaunchError as exc:
            timings.total_s = time.monotonic() - t0
            failure = Failure(
                cls=exc.failure,
                stage="start",
                message=exc.message,
                log_tail=exc.log_tail,
                exit_code=exc.exit_code,
            )
            return self._finish(Measurement(failure=failure, timings=timings, run_dir=run_dir))
        except ServetuneError as exc:
            timings.total_s = time.monotonic() - t0
            failure = Failure(cls="error", stage="start", message=exc.message, log_tail="\n".join(exc.notes))
            return self._finish(Measurement(failure=failure, timings=timings, run_dir=run_dir))
        timings.startup_s = server.startup_s
        timings.startup_phases = server.startup_phases()
        self.record(run_dir, "machine.json", {"machine": self.machine()})  # what a resume checks (`same_machine`)
        try:
            metrics, failure, extra = body(server, timings)
        except KeyboardInterrupt as exc:
            with interrupts.shielded():
                server.stop()
                timings.stop_s = server.stop_s
                timings.total_s = time.monotonic() - t0
                self._record_interrupted(run_dir, exc, "bench", timings, url=server.url)
            raise
        finally:
            with interrupts.shielded(deliver=False):
                server.stop()
            timings.stop_s = server.stop_s
            timings.total_s = time.monotonic() - t0
        out = Measurement(
            metrics=metrics,
            failure=failure,
            diff=server.diff,
            server_info=dict(server.server_info or {}),
            timings=timings,
            run_dir=run_dir,
            url=server.url,
            **extra,
        )
        self._finish(out)
        interrupts.check()  # a signal while the server stopped: the measurement is recorded whole first
        return out

    def _bench(
        self,
        server: BaseServer,
        workload: Workload,
        requests: int | None,
        run_dir: Path,
        on_progress: OnProgress | None,
        should_stop: ShouldStop | None,
        timings: RunTimings,
        *,
        guard: RunawayGuard | None = None,
        slos: Sequence[LatencySlo] = (),
        judge: StepJudge | None = None,
        nonce: bytes | None = None,
    ) -> tuple[Any, Failure | None]:
        """Run one benchmark on a started server; (metrics, None) or (partial metrics or None, failure)."""
        if guard is not None:
            should_stop = guard.wrap(should_stop)

        def stop_now(done: int, partial: Any) -> bool:
            return not server.alive or bool(should_stop(done, partial))

        t = time.monotonic()
        metrics = None
        bench_error: ServetuneError | None = None
        try:
            metrics = server.bench(
                workload,
                requests=requests,
                run_dir=run_dir,
                on_progress=on_progress,
                should_stop=stop_now if should_stop is not None else None,
                **({"slos": tuple(slos)} if slos else {}),
                **({"judge": judge, "nonce": nonce} if judge is not None else {}),
            )
        except BenchError as exc:
            bench_error = exc
        except ServetuneError as exc:  # a bad workload or option: not a property of the config
            timings.bench_s = time.monotonic() - t
            return None, Failure(cls="error", stage="bench", message=exc.message, log_tail="\n".join(exc.notes))
        finally:
            timings.bench_s = time.monotonic() - t
        code = server.exit_code
        if code is None and bench_error is not None:
            code = server.wait_exit(BENCH_ERROR_EXIT_GRACE_S)
        if code is not None:
            cls = server.classify_exit(code)
            what = {"oom": "ran out of memory under load", "stopped": "was stopped from outside"}.get(cls, "died")
            message = f"the server {what} during the benchmark (exit status {code})"
            return metrics, Failure(cls=cls, stage="bench", message=message, log_tail=server.log_tail(), exit_code=code)
        if bench_error is not None:
            return None, Failure(
                cls="bench_error", stage="bench", message=bench_error.message, log_tail=server.log_tail()
            )
        if guard is not None and guard.fired:
            return metrics, Failure(cls="too_slow", stage="bench", message=guard.reason)
        return metrics, None

    def _record_interrupted(
        self, run_dir: Path | None, exc: BaseException, stage: str, timings: RunTimings, url: str | None = None
    ) -> None:
        """An interrupted measurement's record: `result.json` says `interrupted` (the signal, the stage)
        and holds what was measured before it (`metrics`: the partial benchmark, or None);
        `metrics.json` holds those partial metrics."""
        if run_dir is None or not Path(run_dir).is_dir():
            return
        partial = getattr(exc, "partial", None)
        dumped = partial.model_dump(mode="json") if hasattr(partial, "model_dump") else partial
        record = {
            "ok": False,
            "interrupted": interrupts.record(exc, stage),
            "metrics": dumped,
            "timings": timings.model_dump(mode="json"),
            "run_dir": str(run_dir),
            "url": url,
        }
        steps = Path(run_dir) / "steps"
        if steps.is_dir():
            record["steps"] = sorted(p.name for p in steps.iterdir() if p.is_dir())
        if dumped is not None:
            self.record(Path(run_dir), "metrics.json", dumped)
        self.record(Path(run_dir), "result.json", record)

    def _finish(self, result: Measurement) -> Measurement:
        """Record `metrics.json` and `result.json` in the run directory (the layout `launch` used before)."""
        if result.run_dir is not None:
            f = result.failure
            summary: dict[str, Any] = {"ok": result.ok}
            if f is None:
                self.record(result.run_dir, "metrics.json", result.metrics)
            else:
                summary.update(
                    failure=f.cls, stage=f.stage, message=f.message, log_tail=f.log_tail, exit_code=f.exit_code
                )
                self.record(
                    result.run_dir,
                    "metrics.json",
                    {"failure": f.cls, "stage": f.stage, "message": f.message, "exit_code": f.exit_code},
                )
            dumped = result.model_dump(mode="json", exclude={"server_info", "failure"})
            self.record(result.run_dir, "result.json", {**summary, **dumped})
        return result
