"""`Tuner`: one worker process of a study: set up once, run the slot workers, confirm, read back.

    from servetune.tuner import TuneOptions, Tuner
    tuner = Tuner(TuneOptions(model="qwen3-8b", gpu="h200", workload="text-chat", trials=20))
    result = tuner.run()          # TuneResult: best, baseline, trials, confirmation

The first trials are the rule-resolved config (`source=rules`) and SGLang's own defaults
(`source=defaults`), enqueued so every study measures the baseline. Failures (OOM, crash,
start-up timeout, bench error, a broken `require` rule) are FAIL trials with the class and
the log tail in `user_attrs["failure"]`; a config whose hash matches a failed one is not
launched again. Several processes may share one study through an RDB URL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servetune.tuner._options import TuneOptions
from servetune.tuner._result import TuneResult, load_result
from servetune.tuner.events import StudyStarted, TuneEvent

if TYPE_CHECKING:
    from servetune.context import Resolution
    from servetune.runner import BaseRunner
    from servetune.tuner._setup import StudySetup


class Tuner:
    """One worker process of a study (it may run several GPU slots in threads).

    Args:
        options: What to tune and how.
        runner: Measures every trial and confirmation round (launch + benchmark); default an
            `SglangRunner` with `options.sglang_cmd`, `options.startup_timeout_s` and `options.client`.
            Tests pass `servetune.testing.FakeRunner`.
        on_event: Receives each `servetune.tuner.events` event as the study runs.
    """

    def __init__(
        self,
        options: TuneOptions,
        *,
        runner: BaseRunner | None = None,
        on_event: Callable[[TuneEvent], None] | None = None,
    ) -> None:
        self.o = options
        self.runner = runner if runner is not None else _default_runner(options)
        self.on_event: Callable[[TuneEvent], None] = on_event or (lambda event: None)
        self.setup: StudySetup | None = None
        self.confirming = False
        """Whether `run` has gone on to its confirmation (what an interrupt stopped: no trial is running)."""
        self._stop = threading.Event()

    def prepare(self) -> None:
        """Read everything once (`Context`), build and check the space, open or create the study."""
        from servetune.tuner._setup import prepare

        self.setup = prepare(self.o, on_event=self.on_event)

    def run(self) -> TuneResult:
        """Run trials until the study holds `trials` launches, then re-measure the finalists."""
        from servetune.tuner._trial import launches
        from servetune.tuner._worker import SlotWorkers

        if self.setup is None:
            self.prepare()
        s = self._setup
        workers = SlotWorkers(s, self.runner, on_event=self.on_event, stop=self._stop)
        self.on_event(
            StudyStarted(
                study=s.study_name,
                storage=s.storage_url,
                trials=self.o.trials,
                space=s.space.as_dict(),
                dropped=dict(s.space.dropped),
                slots=len(s.slots),
                requests=s.requests,
                done=launches(s.study.get_trials(deepcopy=False), running=False),
                measure=_measure(s),
            )
        )
        workers.run()
        if self.o.confirm_rounds > 0:
            self.confirming = True
            self.confirm()
        return self.result()

    def stop(self) -> None:
        """End the study after the running trials (as Ctrl-C between trials: `run` returns)."""
        self._stop.set()

    def confirm(self) -> dict[str, Any] | None:
        """Re-measure the finalists interleaved with the rules baseline (B F1 .. Fk, repeated)."""
        from servetune.tuner._confirm import confirm

        return confirm(self._setup, self.runner, on_event=self.on_event, stop=self._stop)

    def result(self) -> TuneResult:
        """The study read back from storage (what `tune report` shows)."""
        return load_result(self._setup.study, self._setup.storage_url)

    def resolve(self, layer: dict[str, Any], *, use_rules: bool | None = None) -> Resolution:
        """A launch from the study's `Context` with `layer` at the tuner layer (pure: reads nothing).

        `use_rules` None follows `--no-rules`; False is SGLang's own defaults (the `defaults` baseline)."""
        return self._setup.ctx.resolve(layer or None, use_rules=use_rules)

    @property
    def local_budget(self) -> int:
        """Trials of the local phase this study runs (0 for random search and Pareto studies)."""
        from servetune.tuner._local import study_budget

        return study_budget(self._setup)

    # the prepared study, for callers and tests
    study = property(lambda self: self._setup.study, doc="The Optuna study.")
    study_name = property(lambda self: self._setup.study_name, doc="The study's name.")
    storage_url = property(lambda self: self._setup.storage_url, doc="The study's storage URL.")
    space = property(lambda self: self._setup.space, doc="The searched space (`ResolvedSpace`).")
    workload = property(lambda self: self._setup.workload, doc="The workload each trial runs.")
    run_dir = property(lambda self: self._setup.run_dir, doc="Trial logs and the default SQLite file.")
    requests = property(lambda self: self._setup.requests, doc="Measured requests per trial.")

    @property
    def _setup(self) -> StudySetup:
        if self.setup is None:
            raise AttributeError("the study is not prepared yet: call Tuner.prepare() or Tuner.run()")
        return self.setup


def _default_runner(o: TuneOptions) -> BaseRunner:
    from servetune.launch import LaunchOptions
    from servetune.runner import SglangRunner

    launch: dict[str, Any] = {}
    if o.sglang_cmd:
        launch["sglang_cmd"] = o.sglang_cmd
    if o.startup_timeout_s:
        launch["startup_timeout_s"] = o.startup_timeout_s
    return SglangRunner(LaunchOptions(**launch), client=o.client)


def _measure(s: StudySetup) -> str:
    """What one trial measures, for the study's first line."""
    if s.search is None or s.confirm_search is None:
        return f"{s.requests} requests per trial"
    text = (
        f"a certified capacity search per trial from {s.search.start_rate:g} req/s, steps up to "
        f"{s.search.step_s:g} s at {s.search.confidence:.0%} confidence"
    )
    if s.options.confirm_rounds > 0:
        text += f" (confirmation: steps up to {s.confirm_search.step_s:g} s"
        soak = s.options.confirm_soak_seconds
        text += f", then {soak:g} s soaks)" if soak > 0 else ")"
    return text
