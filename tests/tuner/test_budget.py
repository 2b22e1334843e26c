"""`tune --budget`: durations, and a study that stops launching once the next trial and the
confirmation would not fit (on the FakeRunner: a budget spent by the baselines alone)."""

from __future__ import annotations

import pytest

from benchmarks.study_model import study_options
from servetune.errors import SpecError
from servetune.testing.simulated import standin_runner
from servetune.tuner import Tuner
from servetune.tuner._budget import parse_duration
from servetune.tuner.events import BudgetSpent


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("1.5h", 5400.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "30 minutes", "1d", "m"])
def test_bad_durations_say_how_to_write_one(text):
    with pytest.raises(SpecError, match="cannot read the time budget") as info:
        parse_duration(text)
    assert "30m" in info.value.help


def _study(tmp_path, **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    options = study_options(tmp_path, **{"trials": 8, "confirm_rounds": 1, **kw})
    events: list = []
    tuner = Tuner(options, runner=standin_runner(input_tokens=128, output_tokens=128, images=1),
                  on_event=events.append)  # fmt: skip
    return tuner, tuner.run(), events


def test_a_budget_spent_by_the_baselines_stops_launching_and_still_confirms(tmp_path):
    """With a budget below what the baselines took, no sampled trial is launched: the study says so once
    (with its estimates) and goes on to the confirmation, which was budgeted for."""
    tuner, result, events = _study(tmp_path, budget_s=0.001)
    spent = [e for e in events if isinstance(e, BudgetSpent)]
    # the two baselines ran (one launch: --no-rules makes them one config, measured once)
    assert len(spent) == 1 and spent[0].done == 1 and spent[0].trial_s > 0 and spent[0].confirmation_s > 0
    sources = [t.user_attrs.get("source") for t in tuner.study.get_trials(deepcopy=False)]
    assert "sampler" not in sources and "local" not in sources
    assert result.confirmation is not None or any(e.__class__.__name__ == "ConfirmSkipped" for e in events)


def test_without_a_budget_every_trial_runs_and_each_records_where_its_time_went(tmp_path):
    tuner, result, events = _study(tmp_path / "free", trials=4, confirm_rounds=0)
    assert not any(isinstance(e, BudgetSpent) for e in events)
    timed = [t for t in result.trials if t.timing.get("total_s")]
    assert len(timed) >= 3
    for t in timed:
        split = t.timing["screening_s"] + t.timing["search_s"] + t.timing["soak_s"]
        assert split == pytest.approx(t.timing["bench_s"], rel=0.2, abs=0.05)
        if t.source in ("rules", "defaults"):
            assert t.timing["screening_s"] == 0.0  # a baseline is searched, not screened
    assert result.trial_time()["search_s"] is not None
