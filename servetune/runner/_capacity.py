"""A capacity measurement on one server: a warm-up wave, then the capacity search's steps
(`servetune.bench.capacity`), each a guarded benchmark with its own run directory, then an optional
soak. One implementation for a server servetune launched (`measure_capacity`, `measure_soak`) and
one you started (`search_server` on a `RemoteServer`).

A run directory holds `capacity.json` (the search, every step's verdict), `steps/NN-RATE/` per step
(`workload.json`, `metrics.json`, `requests.jsonl` with every arrival, `verdict.json`, and, where the
server's log can be read, `telemetry.jsonl`: SGLang's own scheduler lines during the step), the
warm-up wave in `steps/00-warmup/`, the soaks after a search in `soaks/NN-RATE/` (`soak_down`), and a
standalone soak in `soak/`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.runner._base import BaseRunner, BaseServer, Failure, Measurement, RunTimings
from servetune.runner._guard import RunawayGuard

if TYPE_CHECKING:
    from servetune.bench.capacity import Capacity, CapacityStep, RunSoak, SoakResult, StepOutcome, StepPlan
    from servetune.bench.servermodel import StepProfile
    from servetune.bench.slo import LatencySlo
    from servetune.bench.stalls import Stalls
    from servetune.bench.verdict import StepRules
    from servetune.context import Resolution
    from servetune.schema.workload import Workload
    from servetune.settings import CapacityOptions

__all__ = [
    "CapacitySearch",
    "measure_capacity",
    "measure_soak",
    "search_server",
    "soak_server",
    "step_workload",
]


DEFAULT_START_RATE = 4.0
"""A capacity search's first rate (req/s) when neither the option nor the workload gives one."""


@dataclass(frozen=True)
class CapacitySearch:
    """How a capacity search runs (`servetune.bench.capacity.find_capacity` and `StepRules`)."""

    start_rate: float = DEFAULT_START_RATE
    """First rate tried (req/s)."""
    resolution: float = 0.05
    """Stop bisecting when the bracket's ends are within this relative distance."""
    bracket: float = 2.0
    """The factor the search steps up or down by from its start until it has a bracket (`find_capacity`)."""
    step_s: float = 120.0
    """A step's longest run (s): it stops earlier once its verdict is decided."""
    confidence: float = 0.95
    """Confidence of every step's SLO decisions."""
    warmup_s: float = 5.0
    """Seconds of arrivals at each step's start that no verdict judges."""
    cluster_s: float = 5.0
    """Arrival spans a percentile verdict clusters its over-bound count by (s; 0: requests independent)."""
    horizon_s: float = 300.0
    """The backlog test extrapolates to this many seconds after a step's start."""
    backlog_s: float = 30.0
    """Seconds of judged arrivals before the backlog test first decides."""
    wave: int = 64
    """Requests of the warm-up wave after each launch (all at once, closed loop, not judged); 0: none."""
    min_rate: float = 0.05
    """Lowest rate tried."""
    max_rate: float = 10_000.0
    """Highest rate tried."""
    max_steps: int = 24
    """Steps at most."""
    seed: int = 0
    """The search's sequence seed: configs compared with one seed meet the same arrivals, prompts and
    images at each step (a confirmation round or compare round uses its round number)."""
    soak_s: float = 0.0
    """After the search, a soak at the capacity found for this many seconds (0: none)."""
    soak_tries: int = 4
    """Soaks at most after a search: each one not met is followed by one a resolution lower."""

    @classmethod
    def from_options(cls, options: CapacityOptions, workload: Workload, **more: Any) -> CapacitySearch:
        """The search the capacity options describe for `workload` (start: the option, the workload's rate,
        else 4 req/s); `more`: the fields no option sets (`seed`, `soak_s`, ...)."""
        return cls.for_workload(
            workload, start_rate=options.start_rate, resolution=options.resolution, bracket=options.bracket_factor,
            step_s=options.step_seconds,
            confidence=options.confidence, warmup_s=options.step_warmup_seconds, horizon_s=options.soak_horizon,
            backlog_s=options.backlog_seconds, wave=options.warmup_wave, cluster_s=options.cluster_seconds, **more,
        )  # fmt: skip

    @classmethod
    def for_workload(cls, workload: Workload, *, start_rate: float | None = None, **fields: Any) -> CapacitySearch:
        """The search for `workload`: it starts at `start_rate`, else the workload's `request_rate`, else 4 req/s."""
        return cls(start_rate=start_rate or workload.request_rate or DEFAULT_START_RATE, **fields)

    def rules(self) -> StepRules:
        """How each step is judged."""
        from servetune.bench.verdict import StepRules

        return StepRules.at_resolution(
            self.resolution, confidence=self.confidence, warmup_s=self.warmup_s, horizon_s=self.horizon_s,
            cluster_s=self.cluster_s, backlog_s=self.backlog_s,
        )  # fmt: skip

    def settings(self) -> dict[str, Any]:
        """`find_capacity` keyword arguments."""
        return {
            "start_rate": self.start_rate,
            "rules": self.rules(),
            "resolution": self.resolution,
            "bracket": self.bracket,
            "step_s": self.step_s,
            "min_rate": self.min_rate,
            "max_rate": self.max_rate,
            "max_steps": self.max_steps,
            "seed": self.seed,
        }

    def record(self) -> dict[str, Any]:
        """The settings as stored with a result (a study refuses to resume under others)."""
        out = dataclasses.asdict(self)
        out.pop("seed")
        if not self.soak_s:
            out.pop("soak_tries")  # changes nothing without a soak (and studies stored before it resume)
        if self.bracket == 2.0:
            out.pop("bracket")  # the factor before it was an option: studies stored before it resume
        return out


def step_workload(workload: Workload, rate: float, requests: int, seed: int) -> Workload:
    """The workload of one step: Poisson arrivals at `rate`, open loop, no warm-up requests, its
    prompts, lengths and arrival gaps drawn from `seed`."""
    return workload.model_copy(
        update={"request_rate": rate, "max_concurrency": None, "requests": requests, "warmup_requests": 0, "seed": seed}
    )


def image_nonce(seed: int) -> bytes:
    """The image nonce of a step seeded `seed`: the same images for every config at that step."""
    return hashlib.sha256(f"servetune-images:{seed}".encode()).digest()[:16]


class _StepFailed(Exception):
    def __init__(self, failure: Failure, metrics: Any) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.metrics = metrics


class _Steps:
    """Runs steps on one started server: a directory each, the runaway guard, the server's telemetry."""

    def __init__(
        self,
        runner: BaseRunner,
        server: BaseServer,
        workload: Workload,
        slos: Sequence[LatencySlo],
        run_dir: Path,
        timings: RunTimings,
        stop: Callable[[], bool] | None,
        resume: Path | None = None,
    ) -> None:
        self.runner, self.server, self.workload, self.slos = runner, server, workload, tuple(slos)
        self.run_dir, self.timings, self.stop = Path(run_dir), timings, stop
        if resume is not None and (Path(resume).resolve() == self.run_dir.resolve() or not runner.same_machine(resume)):
            resume = None  # a step measured on another machine is not this machine's (a rate does not travel)
        self.resume = Path(resume) if resume is not None else None
        """An interrupted search's run directory: its finished steps are kept, up to the first it lacks."""

    def _halt(self, done: int, partial: Any) -> bool:
        return bool(self.stop and self.stop())

    def warm(self, wave: int) -> None:
        """The warm-up wave: `wave` requests at once, closed loop, judged by nothing."""
        if wave <= 0:
            return
        wl = self.workload.model_copy(
            update={"request_rate": None, "max_concurrency": wave, "requests": wave, "warmup_requests": 0}
        )
        metrics, failure = self.runner._bench(
            self.server, wl, wave, self.run_dir / "steps" / "00-warmup", None, self._halt, self.timings,
            nonce=image_nonce(-1), judge=None,
        )  # fmt: skip
        if failure is not None:
            raise _StepFailed(failure, metrics)
        self._interrupted()

    def run(self, plan: StepPlan, step_dir: Path) -> StepOutcome:
        """One step of `plan` in `step_dir`, or the interrupted search's same step where it finished
        (`resumed`; once one step runs here, none after it is taken from there)."""
        from servetune.bench.capacity import StepOutcome

        if self.resume is not None:
            kept = self.resumed(plan, self.resume / Path(step_dir).relative_to(self.run_dir), step_dir)
            if kept is not None:
                return kept
            self.resume = None
        wl = step_workload(self.workload, plan.rate, plan.requests, plan.seed)
        guard = RunawayGuard.from_rate(plan.rate, requests=plan.requests, concurrency=None)
        mark = self.server.telemetry_mark()
        metrics, failure = self.runner._bench(
            self.server, wl, plan.requests, step_dir, None, self._halt, self.timings, guard=guard, slos=self.slos,
            judge=plan.judge, nonce=image_nonce(plan.seed),
        )  # fmt: skip
        telemetry = self._telemetry(step_dir, mark, metrics)
        if failure is not None:
            raise _StepFailed(failure, metrics)
        self._interrupted()
        verdict = plan.judge.last
        if verdict is None:  # a server whose bench never asked the judge (a fake returning bare metrics)
            verdict = plan.judge.close([], 0.0)
        self.runner.record(step_dir, "verdict.json", verdict.model_dump(mode="json"))
        return StepOutcome(
            verdict=verdict, metrics=metrics, run_dir=str(step_dir), profile=self._profile(plan, telemetry)
        )

    def resumed(self, plan: StepPlan, prior: Path, step_dir: Path) -> StepOutcome | None:
        """The step `plan` as the interrupted search finished it in `prior` (copied into `step_dir`), or
        None where it did not: no verdict there (the step it was stopped in), or another rate or sequence."""
        import json
        import shutil

        from servetune.bench._builtin import load_requests
        from servetune.bench.capacity import StepOutcome
        from servetune.bench.schema import Metrics
        from servetune.bench.verdict import StepVerdict
        from servetune.launch import read_telemetry

        try:
            planned = json.loads((prior / "workload.json").read_text(encoding="utf-8"))
            same = planned.get("seed") == plan.seed and abs(float(planned["request_rate"]) / plan.rate - 1.0) < 1e-9
            if not same or not (prior / "verdict.json").is_file():
                return None
            verdict = StepVerdict.model_validate_json((prior / "verdict.json").read_text(encoding="utf-8"))
            metrics = Metrics.model_validate_json((prior / "metrics.json").read_text(encoding="utf-8"))
            records = load_requests(prior / "requests.jsonl")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        telemetry = read_telemetry(prior / "telemetry.jsonl")
        shutil.copytree(prior, step_dir, dirs_exist_ok=True)
        return StepOutcome(
            verdict=verdict, metrics=metrics, run_dir=str(step_dir), resumed_from=str(prior),
            profile=self._profile(plan, telemetry, records),
        )  # fmt: skip

    def soaker(self, search: CapacitySearch, seconds: float, *, alone: bool = False) -> RunSoak:
        """`run_soak(rate, index)` on this server (`soak_steps`): soak `index` of `seconds` at `rate`, met
        only at its end (it stops early only when missed), lengthened where the rate is too low for a
        verdict in `seconds` (`soak_plan`), on sequence `soak_seed(search.seed, index)`, in
        `soaks/NN-RATE/` (`alone`: a single soak, in `soak/`)."""
        from servetune.bench.capacity import SoakResult, soak_plan, soak_seed

        def run(rate: float, index: int) -> SoakResult:
            plan = soak_plan(self.slos, search.rules(), rate=rate, seconds=seconds,
                             seed=soak_seed(search.seed, index), index=index + 1)  # fmt: skip
            t = time.monotonic()
            where = self.run_dir / ("soak" if alone else f"soaks/{plan.index:02d}-{rate:.4g}")
            out = self.run(plan, where)
            return SoakResult.of(out, rate=rate, bench_s=time.monotonic() - t, index=plan.index, seconds=plan.max_s,
                                 seed=plan.seed, stalls=_stalls([(plan.index, where, None, out.verdict.at_s)],
                                                                self.slos, plan.judge.rules.warmup_s))  # fmt: skip

        return run

    def _interrupted(self) -> None:
        if self.stop and self.stop():
            raise KeyboardInterrupt

    def _telemetry(self, step_dir: Path, mark: int | None, metrics: Any) -> list[dict[str, Any]]:
        """SGLang's scheduler lines written during the step, as `telemetry.jsonl` (times `t` from its
        first send); the records, with `t`."""
        started = getattr(metrics, "started_at", None)
        if mark is None or started is None:
            return []
        from servetune.launch import timed_records, write_telemetry

        lines = self.server.telemetry_since(mark)
        if not lines:
            return []
        step_dir.mkdir(parents=True, exist_ok=True)
        write_telemetry(step_dir / "telemetry.jsonl", lines, started)
        return timed_records(lines, started)

    def _profile(
        self, plan: StepPlan, telemetry: list[dict[str, Any]], records: Sequence[Any] | None = None
    ) -> StepProfile | None:
        """The step condensed for the server model: every arrival the judge saw (or `records`, a kept
        step's), and the telemetry."""
        from servetune.bench.servermodel import profile_step, server_limits

        graph = server_limits(self.server.server_info or {})["graph"]
        seen = plan.judge.records if records is None else records
        return profile_step(seen, plan.rate, warmup_s=plan.judge.rules.warmup_s, telemetry=telemetry, graph_bs=graph)


def search_server(
    runner: BaseRunner,
    server: BaseServer,
    workload: Workload,
    slos: Sequence[LatencySlo],
    *,
    run_dir: Path,
    search: CapacitySearch,
    timings: RunTimings | None = None,
    floor: float | None = None,
    on_step: Callable[[CapacityStep], None] | None = None,
    stop: Callable[[], bool] | None = None,
    resume: Path | None = None,
) -> tuple[Capacity | None, Failure | None, Any]:
    """The warm-up wave, the search and (`search.soak_s`) its soaks (`soak_down`), on a started server.

    Returns (capacity, failure, the metrics of the last met step at the capacity); a step that errors
    or a server that dies ends it with that failure. `capacity.json` is written to `run_dir` when the
    search ends and again after its soaks; an interrupt in the soaks carries the search's `Capacity` as
    its `searched`. `resume`: the run directory of the same search stopped
    part-way (on an earlier launch of the same config); the steps it finished are kept as they were
    measured (`CapacityStep.resumed_from`), and the search goes on from the first it lacks. The warm-up
    wave runs on this server all the same.
    """
    from servetune.bench.capacity import find_capacity, soak_down

    timings = timings if timings is not None else RunTimings()
    steps = _Steps(runner, server, workload, slos, Path(run_dir), timings, stop, resume)
    metrics_at: dict[int, Any] = {}

    def run_step(plan: StepPlan) -> StepOutcome:
        out = steps.run(plan, Path(run_dir) / "steps" / f"{plan.index:02d}-{plan.rate:.4g}")
        metrics_at[plan.index] = out.metrics
        return out

    t = time.monotonic()
    try:
        steps.warm(search.wave)
        capacity = find_capacity(run_step, slos, floor=floor, on_step=on_step, **search.settings())
        capacity = _with_engine_clock(capacity, search.rules().warmup_s)
        if search.soak_s > 0:
            # the search's result before its soaks: a soak cut part-way (Ctrl-C, a job's time limit) keeps it,
            # on disk and on the interrupt (`searched`, for the CLI's line)
            _record_capacity(runner, run_dir, capacity, search)
            try:
                capacity = soak_down(
                    steps.soaker(search, search.soak_s), capacity, tries=search.soak_tries, min_rate=search.min_rate
                )
            except KeyboardInterrupt as exc:
                exc.searched = capacity  # type: ignore[attr-defined]
                raise
    except _StepFailed as exc:
        return None, exc.failure, None
    finally:
        timings.bench_s = time.monotonic() - t
    _record_capacity(runner, run_dir, capacity, search)
    at = next((s for s in reversed(capacity.steps) if s.met and s.rate == capacity.request_rate), None)
    return capacity, None, metrics_at.get(at.index) if at else None


def _with_engine_clock(capacity: Capacity, warmup_s: float = 5.0) -> Capacity:
    """`capacity` with what SGLang's own lines say of the search's steps: what a decode step and a prefill
    cost by its clock (`engineclock.engine_clock`, from each step's `telemetry.jsonl`; None where the log was
    unreadable) and when its front end held arrivals from the scheduler (`_stalls`, judging from `warmup_s`)."""
    from servetune.bench.engineclock import engine_clock
    from servetune.bench.slo import parse_slos
    from servetune.launch import read_telemetry

    steps = [(s.index, Path(s.run_dir), read_telemetry(Path(s.run_dir) / "telemetry.jsonl"), s.at_s)
             for s in capacity.steps if s.run_dir]  # fmt: skip
    engine = engine_clock(tele for _, _, tele, _ in steps)
    stalls = _stalls(steps, parse_slos(capacity.slos), warmup_s)
    return capacity.model_copy(update={"engine": engine, "stalls": stalls})


def _stalls(
    steps: Sequence[tuple[int, Path, list[dict[str, Any]] | None, float | None]],
    slos: Sequence[LatencySlo],
    warmup_s: float,
) -> Stalls | None:
    """The front-end stalls of `steps` (index, step directory, its telemetry if read already, when its verdict
    ended it), from each one's `telemetry.jsonl` and `requests.jsonl`, with the requests over `slos` that lived
    near one (`stalls.search_stalls`); None where no step has SGLang's lines."""
    from servetune.bench._builtin import load_requests
    from servetune.bench.stalls import search_stalls
    from servetune.launch import read_telemetry

    def records(d: Path) -> list:
        try:
            return load_requests(d / "requests.jsonl")
        except (OSError, ValueError, TypeError):
            return []

    read = (
        (i, tele if tele is not None else read_telemetry(d / "telemetry.jsonl"), records(d), ended)
        for i, d, tele, ended in steps
    )
    return search_stalls(read, slos=slos, warmup_s=warmup_s)


def _record_capacity(runner: BaseRunner, run_dir: Path, capacity: Capacity, search: CapacitySearch) -> None:
    runner.record(Path(run_dir), "capacity.json", {**capacity.model_dump(mode="json"), "search": search.record()})


def measure_capacity(
    runner: BaseRunner,
    resolution: Resolution,
    workload: Workload,
    slos: Sequence[LatencySlo],
    *,
    run_dir: Path,
    search: CapacitySearch | None = None,
    gpus: Sequence[str] | None = None,
    floor: float | None = None,
    on_step: Callable[[CapacityStep], None] | None = None,
    stop: Callable[[], bool] | None = None,
    resume: Path | None = None,
) -> Measurement:
    """Launch once and find the highest rate that meets every SLO (`search_server`, which `resume`
    continues); failures are data.

    A server that dies or a step that errors ends the search with that failure (`oom`, `crash`,
    `bench_error`); a step far slower than its arrivals allow is `too_slow` (its guard's deadline:
    the step's own arrival time, `RUNAWAY_FACTOR` over). `floor` (the incumbent's capacity) cuts a
    config that misses there. `Measurement.capacity` holds the result and `metrics` the metrics of
    the met step at the capacity rate.
    """
    search = search or CapacitySearch()

    def body(server: BaseServer, timings: RunTimings) -> tuple[Any, Failure | None, dict[str, Any]]:
        capacity, failure, metrics = search_server(
            runner, server, workload, slos, run_dir=run_dir, search=search, timings=timings, floor=floor,
            on_step=on_step, stop=stop, resume=resume,
        )  # fmt: skip
        return metrics, failure, {"capacity": capacity} if capacity is not None else {}

    return runner.session(resolution, run_dir=run_dir, gpus=gpus, body=body)


def soak_server(
    runner: BaseRunner,
    server: BaseServer,
    workload: Workload,
    slos: Sequence[LatencySlo],
    *,
    rate: float,
    seconds: float,
    run_dir: Path,
    search: CapacitySearch,
    tries: int = 1,
    timings: RunTimings | None = None,
    stop: Callable[[], bool] | None = None,
    resume: Path | None = None,
) -> tuple[list[SoakResult], Failure | None]:
    """The warm-up wave and a soak at `rate` for `seconds` on a started server: one long step judged
    by the same rules as a capacity step, met only at its end. With `tries` > 1, a soak not met is
    followed by one a resolution lower (`soak_steps`), each in `soaks/NN-RATE/`. Returns every soak
    (the last decides); `soak.json` (the last, with `soaks`) is written to `run_dir`. `resume`: the run
    directory of the same soaks stopped part-way (on an earlier launch); the soaks it finished are kept as
    they were measured (`resumed_from`) and the next one runs here, as a search's steps are kept."""
    from servetune.bench.capacity import soak_steps

    timings = timings if timings is not None else RunTimings()
    steps = _Steps(runner, server, workload, slos, Path(run_dir), timings, stop, resume)
    t = time.monotonic()
    try:
        steps.warm(search.wave)
        run_soak = steps.soaker(search, seconds, alone=tries == 1)
        soaks = soak_steps(run_soak, rate, resolution=search.resolution, tries=tries, min_rate=search.min_rate)
    except _StepFailed as exc:
        return [], exc.failure
    finally:
        timings.bench_s = time.monotonic() - t
    record = {**soaks[-1].model_dump(mode="json"), "search": search.record()}
    if tries > 1:
        record["soaks"] = [x.model_dump(mode="json") for x in soaks]
    runner.record(Path(run_dir), "soak.json", record)
    return soaks, None


def measure_soak(
    runner: BaseRunner,
    resolution: Resolution,
    workload: Workload,
    slos: Sequence[LatencySlo],
    *,
    rate: float,
    seconds: float,
    run_dir: Path,
    search: CapacitySearch | None = None,
    tries: int = 1,
    gpus: Sequence[str] | None = None,
    stop: Callable[[], bool] | None = None,
    resume: Path | None = None,
) -> Measurement:
    """Launch once and soak at `rate` for `seconds` (`soak_server`, with `tries`, which `resume`
    continues); `Measurement.soak` holds the last soak and `Measurement.soaks` every one."""
    search = search or CapacitySearch()

    def body(server: BaseServer, timings: RunTimings) -> tuple[Any, Failure | None, dict[str, Any]]:
        soaks, failure = soak_server(
            runner, server, workload, slos, rate=rate, seconds=seconds, run_dir=run_dir, search=search,
            tries=tries, timings=timings, stop=stop, resume=resume,
        )  # fmt: skip
        return None, failure, {"soaks": soaks}

    return runner.session(resolution, run_dir=run_dir, gpus=gpus, body=body)
