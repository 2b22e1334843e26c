"""The slot workers of one process: each asks the study for a trial (under one lock), runs it in
its GPU slot and repeats until the launch budget is spent or the sampler only re-proposes
measured configs. With several slots each worker is a thread; Ctrl-C stops them all."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servetune import interrupts
from servetune.tuner import _budget, _local, _model, _storage
from servetune.tuner._evaluate import Slot
from servetune.tuner._trial import TrialDriver, launches
from servetune.tuner.events import BudgetSpent, Converged, ModelFitted

if TYPE_CHECKING:
    from servetune.runner import BaseRunner
    from servetune.tuner._setup import StudySetup

MAX_REPROPOSALS = 20
"""Trials in a row whose config was measured before (reused, not launched) after which a study
stops: the sampler keeps proposing what it has measured (converged, or the space is used up).
Such trials do not count towards `--trials`, which counts launches."""


class SlotWorkers:
    """Runs the study's trials in its slots until the budget is spent, converged, or stopped.

    Args:
        setup: The prepared study.
        runner: Measures each trial (launch + benchmark).
        on_event: Receives the trial and `Converged` events.
        stop: Set on Ctrl-C, or by a caller to end the study after the running trials.
    """

    def __init__(
        self, setup: StudySetup, runner: BaseRunner, *, on_event: Callable[[Any], None], stop: threading.Event
    ) -> None:
        self.s = setup
        self.on_event = on_event
        self.stop = stop
        self.lock = threading.Lock()
        self.local_budget = _local.study_budget(setup)
        self.driver = TrialDriver(
            setup, runner, on_event=on_event, stop=stop, lock=self.lock, local_budget=self.local_budget
        )
        self._converged = False
        self._spent = False
        self.started = time.monotonic()
        self._error: BaseException | None = None

    def run(self) -> None:
        """One worker per slot (threads when more than one); returns when all have stopped."""
        slots = self.s.slots
        if len(slots) == 1:
            self._work(slots[0])
            return
        threads = [threading.Thread(target=self._guarded, args=(slot,), name=f"slot-{slot.index}") for slot in slots]
        for th in threads:
            th.start()
        try:
            # a signal raised inside join() marks a thread that still runs as stopped (CPython gh-90882), and the
            # process would then exit under it: the main thread waits shielded and raises the interrupt itself
            with interrupts.shielded(deliver=False):
                while any(th.is_alive() for th in threads) and interrupts.requested() is None:
                    for th in threads:
                        th.join(timeout=0.2)
            signum = interrupts.requested()
            if signum is not None:
                raise interrupts.Interrupted(signum)
        except KeyboardInterrupt:
            self.stop.set()
            with interrupts.shielded(deliver=False):
                for th in threads:
                    th.join()
            raise
        if self._error is not None:
            raise self._error

    def _guarded(self, slot: Slot) -> None:
        try:
            self._work(slot)
        except BaseException as exc:
            self._error = exc
            self.stop.set()

    def _work(self, slot: Slot) -> None:
        study = self.s.study
        while not self.stop.is_set():
            with self.lock:
                _storage.fail_lost_trials(study, self.s.storage)
                trials = study.get_trials(deepcopy=False)
                if launches(trials) >= self.s.options.trials:
                    return
                room, est = _budget.fits(self.s, trials, time.monotonic() - self.started)
                if not room:
                    if not self._spent:  # said once, though every slot's worker stops here
                        self._spent = True
                        done = launches(trials, running=False)
                        self.on_event(BudgetSpent(time.monotonic() - self.started, self.s.options.budget_s,
                                                  est["trial_s"], est["confirmation_s"], done))  # fmt: skip
                    return
                if self.driver.reproposals >= MAX_REPROPOSALS:
                    if not self._converged:  # said once, though every slot's worker stops here
                        self._converged = True
                        done = launches(study.get_trials(deepcopy=False), running=False)
                        self.on_event(Converged(reproposals=self.driver.reproposals, done=done))
                    return
                fitted = _model.update(self.s, trials)  # once the baselines ran: the server model, its seed
                if fitted is not None:
                    self.on_event(ModelFitted(fitted))
                _local.enqueue_neighbour(self.s, study.get_trials(deepcopy=False), self.local_budget)
                with warnings.catch_warnings():
                    # "heartbeat is meant for optimize()": we beat ourselves
                    warnings.simplefilter("ignore", UserWarning)
                    trial = study.ask()
                trial.set_user_attr("worker", {**_storage.worker_identity(), "slot": slot.index})
            with _storage.Heartbeat(self.s.storage, _storage.trial_id(self.s.storage, study, trial.number)):
                try:
                    self.driver.run(trial, slot)
                except KeyboardInterrupt:
                    self.driver.interrupted(trial)
                    raise
            if self.stop.is_set():
                return
