"""Pruning: stop a trial only when it is clearly worse than the best finished trial, on enough data.

The benchmark reports partial metrics as requests complete. The tuner asks the pruner on a
fixed grid of completed requests (`checkpoints`: every twelfth of the measured requests), so
trials are compared at equal progress, and only once the partial steady window holds at least
one full wave of completions (`window_ready`: `steady_completed >= concurrency`, `MIN_WINDOW_WAVES`);
before that the window is ramp-up (on the H200, the old median pruner stopped trials whose window
held 5-9 completions). While requests are still being sent, the builtin client's partial window
counts whole waves from the end of the first one (`bench.windows.steady_window`, `sending=True`),
so the first window decision comes after two waves of completions. On the stand-in, the trials that ran to
the end read 98-100% of their full-run throughput there; half a wave read 60-64% (a window that ends
inside a burst of completions), so the gate stays at one wave.

One decision comes earlier, for throughput objectives: at the moment the first wave completes
(`concurrency` completions), on the whole run's rate so far, a trial below `FIRST_WAVE_MARGIN`
(40%) of the best finished trial's figure at that moment stops (`Checkpoints(first_wave=True)`).
That figure is rougher (a server that runs fewer requests at once than the client sends reads as
low as half its steady rate there), hence the lower bar; it stops the clearly hopeless configs
after one wave instead of two.

At each such checkpoint `BestRelativePruner` stops a trial whose partial value is worse than a
margin x the best value that a *finished* (COMPLETE) trial reported at the same checkpoint
(capped at that trial's finished value, `BestRelativePruner.reference`). The margin grows with
the data behind the partial value (`PRUNE_MARGINS`): 45% of the best while the window holds one
wave, 60% at two, 70% from three waves on. A real server's throughput swings from wave to wave (on
the H200 the 3B's waves of 64 image requests took 2.4-4.0 s, mostly in time to first token): for
SGLang 0.5.17 and one config run 20 times (docs/h200-results.md section 6), the partial value at
the first decision read 56-136% of the same run's finished figure; the stand-in's 85-102%. The
baselines (`source` rules/defaults) are never pruned, so the reference exists from the first
sampled trial on. A pruned trial is stored PRUNED with its partial metrics; it is never a score
and never the best.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.pruners import BasePruner
from optuna.trial import TrialState

PRUNE_MARGINS: tuple[tuple[float, float], ...] = ((1.0, 0.45), (2.0, 0.6), (3.0, 0.7))
"""(waves of completions in the steady window, margin from then on): prune below 45% of the best
finished trial at the same step while the window holds one wave, below 60% at two, below 70% from
three on (maximize; minimize: above best/margin). On the H200, 20 runs of one config read at least
52%, 69% and 75% of the best of their batch's finished figures with one, two and three waves in
the window (docs/h200-results.md section 6); 85%, the single margin before, would have pruned 7
of the 20 at the first decision."""
FIRST_WAVE_MARGIN = 0.4
"""The margin of the one decision before the steady window opens: at the moment the first wave of
a closed loop completes (`concurrency` completions), on the whole run's rate so far. That rate
is biased low for a server that runs fewer requests at once than the client sends (its first
`concurrency` completions take two batches when the limit is just under it: down to half the
steady rate). On the H200, 22 runs of SGLang (docs/h200-results.md section 8,
scripts/device/first_wave.py) read 0.52-1.07 of the pruner's reference there, the 0.52-0.68 ones
with max_running_requests 48, 56 or 60 against 64 in flight. 40% stays under that floor, so only
a config below 40% of the best stops after one wave."""
CHECKPOINTS_PER_RUN = 12
MIN_WINDOW_WAVES = 1.0
"""Waves (x concurrency) of completions the partial steady window must hold before the first decision."""
MIN_WINDOW_COMPLETIONS = 32
"""Floor for a gate below one wave: never fewer completions than this (or a full wave, if smaller)."""
PROTECTED_SOURCES = ("rules", "defaults")


def checkpoints(requests: int, per_run: int = CHECKPOINTS_PER_RUN) -> list[int]:
    """Completed-request counts at which the pruner may decide: k/per_run of the run, k < per_run."""
    return sorted({max(1, round(requests * k / per_run)) for k in range(1, per_run)} - {requests})


def window_needs(concurrency: int | None, waves: float | None = None) -> int:
    """Completions the partial steady window must hold before the pruner decides: `waves` (default
    `MIN_WINDOW_WAVES`) x concurrency, and below one wave never fewer than `MIN_WINDOW_COMPLETIONS`
    (or the full wave when that is smaller)."""
    import math

    conc = max(1, int(concurrency or 1))
    waves = MIN_WINDOW_WAVES if waves is None else waves
    return max(1, math.ceil(waves * conc), min(conc, MIN_WINDOW_COMPLETIONS))


def window_ready(partial: Mapping[str, Any], concurrency: int | None, waves: float | None = None) -> bool:
    """True once the partial steady window holds `window_needs(concurrency, waves)` completions."""
    return int(partial.get("steady_completed") or 0) >= window_needs(concurrency, waves)


class Checkpoints:
    """Which partial results of one trial go to the pruner: the first report at or after each
    grid step, and only once the steady window holds a full wave; `due` gives the step to report
    it under (the grid step, so trials compare at equal progress), or None.

    `first_wave`: also the report at exactly `concurrency` completions, the end of the first
    wave, before any steady window (its figure is the whole run's rate so far; judged with
    `FIRST_WAVE_MARGIN`). For figures that grow with speed (throughputs) only: a latency
    percentile of the ramp-up wave says little about the steady state."""

    def __init__(self, requests: int, concurrency: int | None, *, first_wave: bool = False) -> None:
        self.grid = checkpoints(requests)
        self.concurrency = concurrency
        self.first_wave = concurrency if first_wave and concurrency and concurrency < requests else None

    def due(self, step: int, partial: Mapping[str, Any]) -> int | None:
        if self.first_wave is not None and step >= self.first_wave:
            at, self.first_wave = self.first_wave, None
            if step == at and not partial.get("steady_completed"):
                self.grid = [c for c in self.grid if c > step]
                return at
        if not self.grid or step < self.grid[0]:
            return None
        checkpoint = max(c for c in self.grid if c <= step)
        self.grid = [c for c in self.grid if c > step]
        return checkpoint if window_ready(partial, self.concurrency) else None


class BestRelativePruner(BasePruner):
    """Prune a trial whose value at a step is worse than the margin for that step x the best
    COMPLETE trial's value at that same step; never a baseline, never without a finished reference.

    `margins`: one margin for every step, or (waves in the window, margin) pairs (`PRUNE_MARGINS`),
    where a step of `s` completions has `(s - concurrency) // concurrency` whole waves in the
    window (the first wave is ramp-up). Without a concurrency (open-loop load) the first margin holds.
    """

    def __init__(
        self,
        margins: float | Sequence[tuple[float, float]] = PRUNE_MARGINS,
        *,
        concurrency: int | None = None,
        first_wave_margin: float = FIRST_WAVE_MARGIN,
        protected_sources: tuple[str, ...] = PROTECTED_SOURCES,
    ) -> None:
        schedule = [(0.0, margins)] if isinstance(margins, (int, float)) else sorted((float(w), m) for w, m in margins)
        if not schedule:
            raise ValueError("margins must not be empty")
        for m in (*(m for _, m in schedule), first_wave_margin):
            if not 0.0 < m <= 1.0:
                raise ValueError(f"a margin must be in (0, 1], got {m}")
        self.schedule = schedule
        self.first_wave_margin = first_wave_margin
        self.concurrency = concurrency
        self.protected_sources = protected_sources

    def margin(self, step: int) -> float:
        """The margin at `step` completions: `first_wave_margin` before the window holds a whole
        wave (the first-wave decision, `Checkpoints`), else the last schedule entry whose waves the
        window holds."""
        if not self.concurrency:
            return self.schedule[0][1]
        if step < 2 * self.concurrency:
            return self.first_wave_margin
        waves = max(0, step - self.concurrency) // self.concurrency
        return next((m for w, m in reversed(self.schedule) if waves >= w), self.schedule[0][1])

    def reference(self, study: optuna.Study, step: int) -> float | None:
        """The best value a finished trial reported at `step`, each capped at that trial's
        finished value (None: none reported at `step`). Early partial values of a batched server
        swing with where the window ends between bursts (on the H200: 90-136% of the full run at
        the first decision); the best of them is the most inflated one, and comparing against it
        would prune configs as good as the best. A partial value below the finished one is kept,
        so a bias that all trials share at that step still cancels."""
        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        values = [
            (min if maximize else max)(t.intermediate_values[step], t.value)
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if step in t.intermediate_values and t.value is not None
        ]
        if not values:
            return None
        return max(values) if maximize else min(values)

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if trial.user_attrs.get("source") in self.protected_sources:
            return False
        step = trial.last_step
        if step is None:
            return False
        value = trial.intermediate_values[step]
        best = self.reference(study, step)
        if best is None:
            return False
        margin = self.margin(step)
        if study.direction == optuna.study.StudyDirection.MAXIMIZE:
            return value < margin * best
        return value > best / margin
