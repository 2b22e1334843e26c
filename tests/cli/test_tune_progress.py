"""The tune command's progress bar counts launches and keeps its count when a trial is interrupted."""

from __future__ import annotations

from servetune.cli.tune import _Progress


def _start(progress: _Progress, done: int = 0) -> None:
    progress.event(
        "start",
        {
            "study": "s",
            "storage": "sqlite:///x.db",
            "trials": 6,
            "space": {"a": 1},
            "dropped": {},
            "slots": 1,
            "requests": 384,
            "done": done,
        },
    )


def _completed(progress: _Progress) -> float:
    return progress._progress.tasks[0].completed


def test_an_interrupted_trial_leaves_the_count_of_launches(capsys):
    with _Progress(enabled=True) as progress:
        _start(progress)
        progress.event(
            "trial",
            {
                "number": 3,
                "state": "COMPLETE",
                "values": [20.1],
                "feasible": True,
                "source": "sampler",
                "best": {"number": 3, "values": [20.1]},
                "done": 3,
                "total": 6,
            },
        )
        assert _completed(progress) == 3
        # on the H200 the bar read 0/6 here: the interrupted trial's event came without a count
        progress.event(
            "trial",
            {
                "number": 4,
                "state": "FAIL",
                "source": "sampler",
                "done": 3,
                "total": 6,
                "failure": {"class": "interrupted", "message": "stopped by Ctrl-C; a retry was queued"},
            },
        )
        assert _completed(progress) == 3
        progress.event(
            "trial", {"number": 5, "state": "FAIL", "failure": {"class": "crash", "message": "x"}}
        )  # no count given
        assert _completed(progress) == 3
    err = " ".join(capsys.readouterr().err.split())  # rich wraps at the console width
    assert "384 requests per trial" in err
    assert "trial 4 sampler FAIL interrupted" in err
    assert "3/6" in err
