"""What a study reports as it runs: one frozen dataclass per kind, passed to `Tuner(on_event=...)`.

    def on_event(event: TuneEvent) -> None:
        if isinstance(event, TrialFinished):
            print(event.number, event.state, event.values)

    Tuner(options, on_event=on_event).run()

Events arrive from the slot workers' threads (several with `--gpus`); a callback that keeps state
must be safe to call from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

__all__ = [
    "BestSoFar",
    "BudgetSpent",
    "ConfirmResumed",
    "ConfirmRound",
    "ConfirmSkipped",
    "ConfirmUnpaired",
    "Confirmed",
    "Converged",
    "LostTrials",
    "ModelFitted",
    "StudyStarted",
    "TrialFinished",
    "TrialStarted",
    "TuneEvent",
    "VoidRetries",
]


@dataclass(frozen=True)
class StudyStarted:
    """The study is open and the workers are about to ask for trials."""

    study: str
    storage: str
    """The storage URL (may hold a password: redact before printing)."""
    trials: int
    """The launch budget (`--trials`)."""
    space: dict[str, Any]
    """The searched dimensions, as stored in the study's metadata."""
    dropped: dict[str, str]
    """Dimensions left out of the space, with why."""
    slots: int
    """Parallel trial slots (GPU sets)."""
    requests: int
    """Measured requests per trial (a throughput study)."""
    done: int
    """Launches the study already holds (a resume)."""
    measure: str = ""
    """What one trial measures, in words (`N requests per trial`, or a capacity study's search)."""


@dataclass(frozen=True)
class LostTrials:
    """Trials whose worker died were marked failed and a retry of each was queued."""

    trials: tuple[int, ...]


@dataclass(frozen=True)
class VoidRetries:
    """Trials whose retry launched another config than theirs (a study from before retries kept the
    fields left to SGLang) were queued again: what their retry measured was not their config."""

    trials: tuple[int, ...]


@dataclass(frozen=True)
class TrialStarted:
    """A trial was asked for and is about to be resolved and launched."""

    number: int
    source: str
    """rules, defaults, local or sampler."""
    params: dict[str, Any]
    slot: int


@dataclass(frozen=True)
class BestSoFar:
    """The best feasible trial when an event was sent."""

    number: int
    values: tuple[float, ...]


@dataclass(frozen=True)
class TrialFinished:
    """A trial ended: COMPLETE, PRUNED or FAIL (an interrupted one too)."""

    number: int
    state: str
    source: str
    """rules, defaults, local or sampler."""
    values: tuple[float, ...] | None = None
    failure: dict[str, Any] | None = None
    """The failure record (`class`, `message`, `log_tail`) of a FAIL trial."""
    feasible: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    duplicate_of: int | None = None
    """The trial whose outcome was reused (the config was not launched again)."""
    best: BestSoFar | None = None
    done: int | None = None
    """Launches that count towards the budget (None: not known at this point)."""
    total: int | None = None
    """The launch budget."""


@dataclass(frozen=True)
class Converged:
    """The study stops early: the sampler kept proposing configs measured before."""

    reproposals: int
    done: int


@dataclass(frozen=True)
class ModelFitted:
    """A capacity study fitted its server model on a baseline (`tuner._model`): the record stored."""

    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BudgetSpent:
    """The study stops launching: the next trial and the confirmation would not fit `--budget`."""

    elapsed_s: float
    budget_s: float
    trial_s: float
    confirmation_s: float
    done: int


@dataclass(frozen=True)
class ConfirmRound:
    """A finalist or the baseline is about to be re-measured."""

    round: int
    rounds: int
    trial: int


@dataclass(frozen=True)
class ConfirmUnpaired:
    """The baseline's round ran on another machine than its finalist's round runs on: measured again here
    (a rate does not travel between machines), the earlier one kept."""

    trial: int
    round: int
    there: str
    here: str | None


@dataclass(frozen=True)
class ConfirmResumed:
    """A confirmation an earlier run left unfinished goes on: its measurements taken so far are reused."""

    measured: int
    run_dir: str


@dataclass(frozen=True)
class ConfirmSkipped:
    """No re-measurement, and why."""

    why: str


@dataclass(frozen=True)
class Confirmed:
    """The re-measurement is done; `record` is what the study stores as `confirmation`."""

    record: dict[str, Any]

    @property
    def finalists(self) -> list[dict[str, Any]]:
        """Per finalist: trial, values, failures, ratios to the baseline and their median/min/max/stdev."""
        return list(self.record.get("finalists") or [])

    @property
    def note(self) -> str:
        """Set when no finalist beat the baseline."""
        return str(self.record.get("note") or "")


TuneEvent = Union[
    StudyStarted,
    LostTrials,
    VoidRetries,
    TrialStarted,
    TrialFinished,
    Converged,
    BudgetSpent,
    ConfirmRound,
    ConfirmResumed,
    ConfirmUnpaired,
    ConfirmSkipped,
    Confirmed,
    ModelFitted,
]
"""Any event a study sends."""
