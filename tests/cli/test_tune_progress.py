"""The tune command's progress bar counts launches and keeps its count when a trial is interrupted."""

from __future__ import annotations

from servetune.tuner.events import (
    BestSoFar,
    Confirmed,
    ConfirmRound,
    ConfirmSkipped,
    Converged,
    LostTrials,
    StudyStarted,
    TrialFinished,
)
from servetune.tuner.progress import TuneProgress as _Progress


def _start(progress: _Progress, done: int = 0) -> None:
    progress.event(
        StudyStarted(
            study="s",
            storage="sqlite:///x.db",
            trials=6,
            space={"a": 1},
            dropped={},
            slots=1,
            requests=384,
            done=done,
        )
    )


def _completed(progress: _Progress) -> float:
    return progress._progress.tasks[0].completed


def test_an_interrupted_trial_leaves_the_count_of_launches(capsys):
    with _Progress(enabled=True) as progress:
        _start(progress)
        progress.event(
            TrialFinished(
                number=3,
                state="COMPLETE",
                values=(20.1,),
                feasible=True,
                source="sampler",
                best=BestSoFar(3, (20.1,)),
                done=3,
                total=6,
            )
        )
        assert _completed(progress) == 3
        # on the H200 the bar read 0/6 here: the interrupted trial's event came without a count
        progress.event(
            TrialFinished(
                number=4,
                state="FAIL",
                source="sampler",
                done=3,
                total=6,
                failure={"class": "interrupted", "message": "stopped by Ctrl-C; a retry was queued"},
            )
        )
        assert _completed(progress) == 3
        progress.event(
            TrialFinished(number=5, state="FAIL", source="local", failure={"class": "crash", "message": "x"})
        )  # no count given
        assert _completed(progress) == 3
    err = " ".join(capsys.readouterr().err.split())  # rich wraps at the console width
    assert "384 requests per trial" in err
    assert "trial 3 sampler ok 20.1" in err
    assert "trial 4 sampler FAIL interrupted" in err
    assert "trial 5 local FAIL crash: x" in err
    assert "3/6" in err


def test_every_event_kind_prints_its_line(capsys):
    """The lines `servetune tune` prints for lost workers, convergence and the confirmation."""
    with _Progress(enabled=True) as progress:
        _start(progress, done=2)
        progress.event(LostTrials((4, 5)))
        progress.event(
            TrialFinished(
                number=6,
                state="COMPLETE",
                source="sampler",
                values=(30.0,),
                feasible=True,
                duplicate_of=2,
                done=2,
                total=6,
            )
        )
        progress.event(TrialFinished(number=7, state="PRUNED", source="local", done=3, total=6))
        progress.event(Converged(reproposals=20, done=3))
        progress.event(ConfirmRound(round=1, rounds=2, trial=6))
        finalist = {"trial": 6, "median": 1.05, "min": 1.01, "max": 1.09, "ratios": [1.01, 1.09]}
        progress.event(Confirmed({"finalists": [finalist], "note": ""}))
        progress.event(Confirmed({"finalists": [{"trial": 7, "median": None}], "note": "the baseline is kept"}))
        progress.event(ConfirmSkipped("the baseline has no measurement (it failed)"))
        assert _completed(progress) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "2 trial(s) already done" in err
    assert "retry queued: trials [4, 5]" in err
    assert "trial 6 sampler ok 30 (same config as trial 2, not relaunched)" in err
    assert "trial 7 local pruned" in err
    assert "stopping after 3 launches: the sampler proposed 20 measured configs in a row" in err
    assert "re-measuring trial 6 (round 1/2)" in err
    assert "trial 6: 1.050x baseline (min 1.010, max 1.090, 2 rounds)" in err
    assert "trial 7:" not in err and "the baseline is kept" in err
    assert "no re-measurement: the baseline has no measurement (it failed)" in err
