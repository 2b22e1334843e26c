"""Requests per trial: `--requests`, else the workload's `tune_requests`, else its `requests`;
fixed for the life of a study (a resume with another length is refused)."""

from __future__ import annotations

import pytest

from servetune.errors import TuningError
from servetune.testing import FakeRunner
from servetune.tuner import TuneOptions, Tuner
from tests.tuner.conftest import WORKLOAD


@pytest.fixture
def measured(tmp_path, monkeypatch) -> FakeRunner:
    """Stands in for launch + benchmark (`FakeRunner`); its calls record the requests each trial asked for."""
    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "space.yaml").write_text("tune:\n  chunked_prefill_size: {choice: [2048, 8192]}\n")
    runner: FakeRunner

    def fake_measure(call):
        return {"comparable_request_throughput": 100.0 + len(runner.calls), "completed": call.requests}

    runner = FakeRunner(fake_measure)
    return runner


def _tuner(tmp_path, workload: str, runner: FakeRunner, **kw) -> Tuner:
    (tmp_path / "w.yaml").write_text(workload)
    return Tuner(
        TuneOptions(
            model="qwen3-8b",
            gpu="h200",
            workload=str(tmp_path / "w.yaml"),
            space_file=str(tmp_path / "space.yaml"),
            trials=2,
            seed=0,
            confirm_rounds=0,
            prune=False,
            run_dir=tmp_path / "study",
            **kw,
        ),
        runner=runner,
    )


@pytest.mark.parametrize(
    ("extra", "options", "expected"),
    [
        ("", {}, 128),  # the workload's requests
        ("tune_requests: 768\n", {}, 768),  # its tune_requests
        ("tune_requests: 768\n", {"requests": 256}, 256),  # --requests wins
    ],
)
def test_requests_per_trial(tmp_path, measured, extra, options, expected):
    tuner = _tuner(tmp_path, WORKLOAD + extra, measured, **options)
    tuner.run()
    assert [call.requests for call in measured.calls] == [expected, expected]
    assert tuner.study.user_attrs["servetune"]["requests"] == expected


def test_a_study_resumed_with_another_trial_length_is_refused(tmp_path, measured):
    _tuner(tmp_path, WORKLOAD, measured).run()
    with pytest.raises(TuningError, match="128 vs 256 requests per trial"):
        _tuner(tmp_path, WORKLOAD, measured, requests=256).prepare()
    _tuner(tmp_path, WORKLOAD, measured, requests=128).prepare()  # the same length, given explicitly: fine
