"""`FakeRunner`: a runner with no process, for unit tests of what sits above the Runner seam.

It stands in for launch + benchmark: where `SglangRunner` starts an SGLang server and drives a
workload against it over HTTP, `FakeRunner` calls a function of the resolved config and returns
its figures as the measurement. Everything above the seam (the tuner's resolve, dedupe, pruning,
failure handling, telling the study) runs for real.

    from servetune.testing import FakeRunner

    def score(call):                      # a FakeCall: resolution, workload, requests, ...
        mrr = call.values.get("max_running_requests") or 64
        return {"comparable_request_throughput": float(mrr), "completed": call.requests}

    runner = FakeRunner(score)
    Tuner(options, runner=runner).run()
    len(runner.calls)                     # launches

For capacity searches (`servetune.runner.measure_capacity`), the function may return the step's
per-request records (a list of `RequestRecord`, or a `SimulatedRun` with the scheduler's records,
e.g. from a `servetune.testing.simulated` server): the server's `bench` replays them through the
step's judge, as the builtin client would have seen them, and returns the metrics of what had
finished; the scheduler records up to the decision are the step's telemetry (`telemetry_since`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from servetune.bench.metrics import Snapshot
from servetune.errors import BenchError
from servetune.runner import BaseRunner, BaseServer, Failure, Measurement, OnProgress, RunTimings, ShouldStop

if TYPE_CHECKING:
    from servetune.bench.slo import LatencySlo
    from servetune.bench.verdict import StepJudge
    from servetune.context import Resolution
    from servetune.runner import RunawayGuard
    from servetune.schema.workload import Workload

__all__ = ["FakeCall", "FakeRunner", "FakeServer"]


@dataclass(frozen=True)
class FakeCall:
    """One measurement the fake was asked for."""

    resolution: Resolution
    workload: Workload | None
    run_dir: Path
    requests: int | None
    """The `requests` argument as given (None: the workload's own count)."""
    gpus: tuple[str, ...] | None = None
    guard: RunawayGuard | None = None
    """The runaway guard the caller passed (its deadlines say what reference it used)."""
    slos: tuple[LatencySlo, ...] = ()
    """The latency SLOs the run is judged against."""

    @property
    def values(self) -> dict[str, Any]:
        """The decided server fields, `{field: value}` (plus `model_path`): `Resolution.requested()`."""
        return self.resolution.requested()

    @property
    def argv(self) -> list[str]:
        """The launch flags (`Resolution.argv()`)."""
        return list(self.resolution.argv())

    @property
    def env(self) -> dict[str, str]:
        """The launch's env vars (`Resolution.env()`)."""
        return dict(self.resolution.env())

    @property
    def total(self) -> int:
        """Requests the benchmark would send: `requests`, else the workload's."""
        if self.requests:
            return self.requests
        return self.workload.requests if self.workload is not None else 0


Outcome = Union[Mapping[str, Any], Failure, Any]
"""What the fake's function returns: flat metrics, a `Failure`, or (for a server's `bench`) a `Metrics`."""


class FakeRunner(BaseRunner):
    """A `BaseRunner` whose measurement is `measure_fn(call)`: no process, no port, no files.

    Args:
        measure_fn: `FakeCall -> metrics | Failure`. Metrics are a flat mapping as the builtin
            client reports them (`completed`, `comparable_request_throughput`, ...). A `Failure`
            comes back as the measurement's failure (e.g. `Failure(cls="oom", stage="start")`).
        progress: Emulate the builtin client's progress calls: `should_stop(done, snapshot)` (and
            `on_progress`) every `requests // 50` completions, at the end of the first wave
            (`max_concurrency`) and at the end, so pruning is exercised. True: the snapshot's
            metrics are the final ones with `completed=done`; a function `(call, done) -> metrics`
            gives them. A True `should_stop` ends the run with the partial metrics and
            `stopped_early=True`. False (default): `should_stop` is never called.
        server_info: `FakeCall -> dict`, what `/server_info` would report (default {}).
        files: Write each run's record as the real runner and client do (`record`'s JSON files, and a
            simulated step's `workload.json`, `metrics.json` and `requests.jsonl`), so a stopped
            capacity search can be resumed from its directory. False (default): nothing is written.
        machine: What `machine()` answers (`machine_id`): the identity of the machine the fake's servers
            "run on"; None (the default): it cannot tell, as without NVML. Set `machine_id` to move a study
            between machines.

    Attributes:
        calls: Every `FakeCall`, in order (thread-safe: the tuner's slots may call at once).
    """

    def __init__(
        self,
        measure_fn: Callable[[FakeCall], Outcome],
        *,
        progress: bool | Callable[[FakeCall, int], Mapping[str, Any]] = False,
        server_info: Callable[[FakeCall], dict[str, Any]] | None = None,
        files: bool = False,
        machine: str | None = None,
    ) -> None:
        self.measure_fn = measure_fn
        self.machine_id = machine
        self.progress = progress
        self.server_info = server_info
        self.files = files
        self.calls: list[FakeCall] = []
        self._lock = threading.Lock()

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
        """The function's figures (or failure) as a `Measurement`; nothing is started or written.

        A `guard` wraps `should_stop` as the real runner's does (its clock is real time, so it
        fires only for a function that takes that long); when it fires the failure is `too_slow`."""
        call = self._record(resolution, workload, run_dir, requests, gpus, guard, slos)
        out = self.measure_fn(call)
        if isinstance(out, Failure):
            return Measurement(failure=out, run_dir=run_dir, timings=RunTimings())
        if guard is not None:
            should_stop = guard.wrap(should_stop)
        metrics = self._drive(call, dict(out), on_progress, should_stop)
        info = self.server_info(call) if self.server_info is not None else {}
        failure = Failure(cls="too_slow", stage="bench", message=guard.reason) if guard and guard.fired else None
        return Measurement(
            metrics=metrics, failure=failure, server_info=info, run_dir=run_dir, timings=RunTimings(startup_s=0.0)
        )

    def start(self, resolution: Resolution, *, run_dir: Path, gpus: Sequence[str] | None = None) -> FakeServer:
        """A `FakeServer` for `resolution` (it always starts); the function is called once per
        `bench`, with that benchmark's workload and requests."""
        probe = FakeCall(resolution, None, Path(run_dir), None, tuple(gpus) if gpus is not None else None)
        info = self.server_info(probe) if self.server_info is not None else {}
        return FakeServer(self, resolution, Path(run_dir), gpus, info)

    def machine(self) -> str | None:
        """`machine_id`: no NVML is asked."""
        return self.machine_id

    def record(self, run_dir: Path, name: str, data: Any) -> None:
        """Writes nothing unless `files`: the fake keeps its record in `calls`."""
        if self.files:
            super().record(run_dir, name, data)

    def _record(self, resolution, workload, run_dir, requests, gpus, guard=None, slos=()) -> FakeCall:
        gpus = tuple(gpus) if gpus is not None else None
        call = FakeCall(resolution, workload, Path(run_dir), requests, gpus, guard, tuple(slos))
        with self._lock:
            self.calls.append(call)
        return call

    def _drive(
        self,
        call: FakeCall,
        final: dict[str, Any],
        on_progress: OnProgress | None,
        should_stop: ShouldStop | None,
    ) -> dict[str, Any]:
        """The builtin client's progress points, as `servetune.bench._builtin` calls them."""
        if not self.progress or (on_progress is None and should_stop is None):
            return final
        total = call.total
        every = max(1, total // 50)
        wave = call.workload.max_concurrency if call.workload is not None else None
        for done in range(1, total + 1):
            if done % every and done not in (total, wave):
                continue
            partial = dict(self.progress(call, done)) if callable(self.progress) else {**final, "completed": done}
            view = Snapshot(done, lambda partial=partial: partial)
            if on_progress is not None:
                on_progress(done, total, view)
            if should_stop is not None and done < total and should_stop(done, view):
                return {**partial, "stopped_early": True}
        return final


class FakeServer(BaseServer):
    """What `FakeRunner.start` returns: `bench` calls the runner's function (a `Failure` from it
    raises `BenchError`); `stop` ends it."""

    def __init__(self, runner: FakeRunner, resolution: Resolution, run_dir: Path, gpus, server_info) -> None:
        self.runner = runner
        self.resolution = resolution
        self.run_dir = run_dir
        self.gpus = gpus
        self.url = "fake://"
        self.startup_s = 0.0
        self.server_info = dict(server_info)
        self._stopped = False
        self._telemetry: list[dict[str, Any]] = []

    @property
    def exit_code(self) -> int | None:
        return 0 if self._stopped else None

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
        call = self.runner._record(self.resolution, workload, run_dir or self.run_dir, requests, self.gpus, slos=slos)
        out = self.runner.measure_fn(call)
        if isinstance(out, Failure):  # a started server: the benchmark is what failed
            raise BenchError(out.message)
        from servetune.testing.simulated import SimulatedRun

        if isinstance(out, list):
            out = SimulatedRun(out, [])
        if isinstance(out, SimulatedRun):  # a step's records: judged as the builtin client would have
            return self._replay(out, workload, slos, judge, run_dir if self.runner.files else None)
        if not isinstance(out, Mapping):  # a `Metrics`: as the builtin client returns it
            return out
        return self.runner._drive(call, dict(out), on_progress, should_stop)

    def _replay(
        self, run, workload: Workload, slos: Sequence[LatencySlo], judge: StepJudge | None, run_dir: Path | None
    ) -> Any:
        """A simulated step's records, as the builtin client would have seen them up to the judge's
        decision, and its scheduler records (SGLang's lines, `ts` on this bench's clock) kept for
        `telemetry_since`; in `run_dir` (when given) the files the client writes."""
        import time

        from servetune.bench._builtin import write_requests
        from servetune.bench.verdict import replay
        from servetune.testing.simulated import measure

        started = time.time()
        seen, until = run.records, math.inf
        if judge is not None:
            verdict, seen = replay(run.records, judge)
            until = verdict.at_s
        self._telemetry += [{**{k: v for k, v in t.items() if k != "t"}, "ts": started + t["t"]}
                            for t in run.telemetry if t["t"] <= until]  # fmt: skip
        metrics = measure(seen, slos, workload.request_rate or 0.0)
        metrics = metrics.model_copy(update={"started_at": started}) if metrics is not None else None
        if run_dir is not None and metrics is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "workload.json").write_text(workload.model_dump_json(indent=2) + "\n", encoding="utf-8")
            (run_dir / "metrics.json").write_text(metrics.model_dump_json(indent=2) + "\n", encoding="utf-8")
            write_requests(run_dir / "requests.jsonl", list(seen))
        return metrics

    def telemetry_mark(self) -> int | None:
        return len(self._telemetry)

    def telemetry_since(self, mark: int | None) -> list[dict[str, Any]]:
        return list(self._telemetry[mark or 0 :])

    def stop(self) -> None:
        self._stopped = True
