"""The settings commands hand to the layers below them, each field declared with its option
(`servetune.options`): the capacity search's (`CapacityOptions`) and a study's (`TuneOptions`, which
takes the resolve options, `servetune.context.ResolveOptions`, and the capacity search's). Light on
purpose: the CLI builds its commands from these at start (no tuner, runner, launcher or optuna import).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from servetune.context import ResolveOptions
from servetune.errors import SpecError
from servetune.limits import MAX_REQUESTS
from servetune.options import CLIENT, OBJECTIVE, RUN_DIR, SGLANG_CMD, SLO, STARTUP_TIMEOUT, opt, requests_opt

__all__ = [
    "CAPACITY_PANEL",
    "DEFAULT_WORKLOAD",
    "STORAGE",
    "STUDY_NAME",
    "CapacityOptions",
    "TuneOptions",
    "parse_duration",
    "parse_gpu_ids",
]

DEFAULT_WORKLOAD = "text-chat"
"""The workload a study or a comparison measures when none is given."""
_DURATION = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>s|m|h|)\s*$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """`90`, `90s`, `30m`, `1.5h` as seconds (positive)."""
    m = _DURATION.match(text or "")
    if m is None or float(m["n"]) <= 0:
        raise SpecError(
            f"cannot read the time budget {text!r}", help="write seconds or a unit: --budget 1800, 30m, 1.5h"
        )
    return float(m["n"]) * _UNITS[m["unit"]]


def parse_gpu_ids(text: str | None, option: str = "--gpus") -> tuple[str, ...]:
    """GPU ids from `0,1,2,3` (empty when `text` is None or empty).

    Raises:
        SpecError: an id that is not a non-negative integer, or one given twice.
    """
    if not text:
        return ()
    ids = tuple(part.strip() for part in text.split(","))
    bad = [i for i in ids if not i.isdigit()]
    if bad:
        raise SpecError(
            f"{option} takes GPU ids (non-negative integers), but got {', '.join(repr(b) for b in bad)}",
            help=f"e.g. {option} 0,1,2,3 (`nvidia-smi -L` lists them)",
        )
    if len(set(ids)) != len(ids):
        raise SpecError(f"{option} names a GPU twice: {text!r}", help=f"e.g. {option} 0,1,2,3")
    return ids


CAPACITY_PANEL = "Capacity search"
"""The `--help` panel of the capacity options."""


@dataclass(kw_only=True)
class CapacityOptions:
    """The capacity search's options, as `bench --capacity`, `compare` and `tune --objective capacity`
    take them (`servetune.runner.CapacitySearch.from_options` turns them into a search for a workload)."""

    start_rate: Annotated[
        float | None,
        opt(
            "--start-rate", min=0.001, panel=CAPACITY_PANEL,
            help="First rate of the capacity search (req/s; default: the workload's request_rate, else 4). A "
            "tuning study's later trials start at the incumbent's capacity.",
        ),
    ] = None  # fmt: skip
    resolution: Annotated[
        float,
        opt(
            "--resolution", min=0.01, max=1.0, panel=CAPACITY_PANEL,
            help="Stop bisecting when the highest met and lowest missed rates are this close (relative); the "
            "backlog test flags growth of half this share of the rate.",
        ),
    ] = 0.05  # fmt: skip
    bracket_factor: Annotated[
        float,
        opt(
            "--bracket-factor", min=1.01, panel=CAPACITY_PANEL,
            help="The capacity search steps up (after a met step) or down by this factor until it has a bracket, "
            "then bisects. 2 from a guess; about 1.25 from a capacity measured before (a relaunch): on simulated "
            "servers a quarter fewer seconds of arrivals.",
        ),
    ] = 2.0  # fmt: skip
    step_seconds: Annotated[
        float,
        opt(
            "--step-seconds", min=1.0, panel=CAPACITY_PANEL,
            help="Longest run of one capacity step (s): a step stops at its verdict, and at this length an open one "
            "is undecided (not met). Lengthened at low rates to reach the requests a verdict needs.",
        ),
    ] = 120.0  # fmt: skip
    confidence: Annotated[
        float,
        opt(
            "--confidence", min=0.5, max=0.999, panel=CAPACITY_PANEL,
            help="Confidence of each step's SLO verdicts (a sequential binomial test). A p99 SLO is met at 95% after "
            "433 judged requests with none over (685 with one, 882 with two), at 99% after 622; p90 at 95% after 41. "
            "A soak, judged once at its end, is met after 299 (473 with one, 628 with two; 459 at 99%).",
        ),
    ] = 0.95  # fmt: skip
    cluster_seconds: Annotated[
        float,
        opt(
            "--cluster-seconds", min=0.0, panel=CAPACITY_PANEL,
            help="Requests over a bound that arrived within the same span of this many seconds count as one burst: "
            "a percentile verdict divides its counts by their design effect, so one stall does not decide a step "
            "alone. 0: every request counted as independent.",
        ),
    ] = 5.0  # fmt: skip
    step_warmup_seconds: Annotated[
        float,
        opt(
            "--step-warmup-seconds", min=0.0, panel=CAPACITY_PANEL,
            help="Seconds of arrivals at each step's start that no verdict judges (the server fills its batch).",
        ),
    ] = 5.0  # fmt: skip
    soak_horizon: Annotated[
        float,
        opt(
            "--soak-horizon", min=1.0, panel=CAPACITY_PANEL,
            help="The backlog test extrapolates requests in flight and queueing delay to this many seconds after a "
            "step's start: a step whose queue would break the TTFT bound by then is missed.",
        ),
    ] = 300.0  # fmt: skip
    backlog_seconds: Annotated[
        float,
        opt(
            "--backlog-seconds", min=1.0, panel=CAPACITY_PANEL,
            help="Seconds of judged arrivals before the backlog test first decides (a shorter window reads an "
            "arrival burst as a backlog); a step is met no sooner.",
        ),
    ] = 30.0  # fmt: skip
    warmup_wave: Annotated[
        int,
        opt(
            "--warmup-wave", min=0, panel=CAPACITY_PANEL,
            help="Requests sent all at once after each launch, before the first step, and judged by nothing "
            "(kernels compile and caches fill on first use); 0: none.",
        ),
    ] = 64  # fmt: skip


SEARCH, STUDY, RUN = "Search", "Study and storage", "Running trials"
STORAGE = opt(
    "--storage", panel=STUDY,
    help="The study's Optuna RDB URL (sqlite:///tune.db, postgresql://...). tune: default SQLite in the run dir "
    "(runs/tune/<study>/study.db); tune report: the storage a study used, read only.",
)  # fmt: skip
STUDY_NAME = opt(
    "--study", panel=STUDY,
    help="Study name (tune: same name + storage = resume; tune report: optional when the storage holds one study).",
)  # fmt: skip
"""The `--help` panels of the study's own options."""


@dataclass(kw_only=True)
class TuneOptions(CapacityOptions, ResolveOptions):
    """Everything a study takes: the resolve options, the capacity search's, and these."""

    trials: Annotated[
        int,
        opt(
            "--trials", min=1, panel=SEARCH,
            help="Launches in the study (baselines included; shared by all workers). A config proposed again is "
            "reused, not launched or counted; 20 such trials in a row end the study.",
        ),
    ] = 20  # fmt: skip
    objective: Annotated[str, OBJECTIVE] = "throughput"
    slos: Annotated[tuple[str, ...], SLO] = ()
    space_file: Annotated[
        str | None,
        opt(
            "--space", panel=SEARCH,
            help="A YAML file with a tune: block, or a shipped space (capacity-vlm, multimodal, text); replaces "
            "the default space.",
        ),
    ] = None  # fmt: skip
    space_sets: Annotated[
        tuple[str, ...],
        opt(
            "--space-set", panel=SEARCH,
            help="Add or replace one dimension: 'max_running_requests=int(32,512,log)', "
            "'schedule_policy=choice(fcfs,lpm)'.",
        ),
    ] = ()  # fmt: skip
    sampler: Annotated[str, opt("--sampler", panel=SEARCH, help="tpe or random.")] = "tpe"
    seed: Annotated[int | None, opt("--seed", panel=SEARCH, help="Sampler seed.")] = 0
    local_trials: Annotated[
        int | None,
        opt(
            "--local-trials", min=0, panel=SEARCH,
            help="TPE: trials that first try one-field changes of the best config so far (default: two per "
            "searched field, at most a quarter of --trials; 0: off).",
        ),
    ] = None  # fmt: skip
    budget_s: Annotated[
        float | None,
        opt(
            "--budget", panel=SEARCH, cli_type=str, parse=parse_duration,
            help="Time budget of this run (90s, 30m, 1.5h): stop launching trials once the next one (the median "
            "so far) and the confirmation (its rounds and soaks) no longer fit, then confirm.",
        ),
    ] = None  # fmt: skip
    model_seed: Annotated[
        bool,
        opt(
            "--model-seed/--no-model-seed", panel=SEARCH,
            help="Capacity studies: model the server from the baselines' searches (decode time against the running "
            "batch, prefill stalls, its queue and KV use), narrow the space where it shows a field cannot bind, "
            "and make the model's best running limit and graph size the first sampled trial.",
        ),
    ] = True  # fmt: skip
    prune: Annotated[
        bool,
        opt(
            "--prune/--no-prune", panel=SEARCH,
            help="Stop clearly worse trials early (a throughput trial at its checkpoints, a capacity trial at its "
            "screening step); --no-prune runs every benchmark to the end.",
        ),
    ] = True  # fmt: skip
    confirm_rounds: Annotated[
        int,
        opt(
            "--confirm", min=0, panel=SEARCH,
            help="Rounds of re-measuring the finalists interleaved with the baseline (0: off).",
        ),
    ] = 2  # fmt: skip
    finalists: Annotated[
        int,
        opt(
            "--finalists", min=1, panel=SEARCH,
            help="Finalists confirmed at most, best first: each is re-measured against the baseline until one is "
            "confirmed better (adopted); none better keeps the baseline.",
        ),
    ] = 3  # fmt: skip
    confirm_step_seconds: Annotated[
        float | None,
        opt(
            "--confirm-step-seconds", min=1.0, panel=CAPACITY_PANEL,
            help="Longest run of a step in the confirmation's capacity searches (default: --step-seconds).",
        ),
    ] = None  # fmt: skip
    confirm_soak_seconds: Annotated[
        float,
        opt(
            "--confirm-soak-seconds", min=0.0, panel=CAPACITY_PANEL,
            help="After the confirmation rounds of a capacity study, soak the winner at its confirmed capacity (one "
            "--resolution lower if that does not hold) and the baseline at the rate the winner held, for this many "
            "seconds each (fresh launches; 0: none).",
        ),
    ] = 300.0  # fmt: skip
    storage: Annotated[str | None, STORAGE] = None
    study: Annotated[str | None, STUDY_NAME] = None
    run_dir: Annotated[Path | None, RUN_DIR] = None
    gpus: Annotated[
        tuple[str, ...],
        opt(
            "--gpus", panel=RUN, cli_type=str, parse=parse_gpu_ids,
            help="GPU ids for parallel trials, e.g. 0,1,2,3 (one set of tp GPUs per trial).",
        ),
    ] = ()  # fmt: skip
    requests: Annotated[int | None, requests_opt(MAX_REQUESTS)] = None
    sglang_cmd: Annotated[str | None, SGLANG_CMD] = None
    client: Annotated[str, CLIENT] = "auto"
    startup_timeout_s: Annotated[float | None, STARTUP_TIMEOUT] = None
    n_startup_trials: int = 2  # the two enqueued baselines (see _sampler.TPE_SETUP)
    enqueue_baselines: bool = True

    @property
    def workload_or_default(self) -> str:
        """The workload the study measures: `--workload`, else `DEFAULT_WORKLOAD`."""
        return self.workload or DEFAULT_WORKLOAD
