"""Several `servetune tune` processes share one study in a real PostgreSQL server.

The server comes from `SERVETUNE_TEST_POSTGRES_URL` (scripts/test.sh starts it with
scripts/postgres.sh); without it, this test starts one itself with the same script.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.tuner.conftest import load_trials, tune_argv

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def postgres_url() -> str:
    url = os.environ.get("SERVETUNE_TEST_POSTGRES_URL")
    if url:
        return url
    try:
        out = subprocess.run(
            [str(ROOT / "scripts" / "postgres.sh"), "start"], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no PostgreSQL: {exc}")
    if out.returncode != 0:
        pytest.skip(f"scripts/postgres.sh start failed: {out.stderr[-500:]}")
    return out.stdout.strip().splitlines()[-1]


def test_two_workers_share_one_study_without_losing_or_repeating_a_trial(
    postgres_url, tune_env, workload_file, space_file, tmp_path
):
    pytest.importorskip("psycopg2")
    study = f"pg-workers-{uuid.uuid4().hex[:8]}"
    trials = 6
    procs = []
    for worker in range(2):
        argv = tune_argv(
            workload_file,
            space_file,
            tmp_path / f"w{worker}",
            "--storage",
            postgres_url,
            "--study",
            study,
            "--confirm",
            "0",
            trials=trials,
        )
        procs.append(subprocess.Popen(argv, env=tune_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    from servetune.tuner._storage import open_storage

    rows = load_trials(open_storage(postgres_url), study)
    numbers = [t.number for t in rows]
    assert numbers == list(range(len(rows)))
    assert not [t for t in rows if t.state.name in ("RUNNING", "WAITING")], "a trial was left unfinished"
    counted = [
        t
        for t in rows
        if (t.state.name != "FAIL" or t.user_attrs["failure"]["class"] != "worker_lost")
        and "duplicate_of" not in t.user_attrs
    ]  # --trials counts launches
    assert trials <= len(counted) <= trials + 1  # a worker may ask while the other tells the last one
    sources = [t.user_attrs.get("source") for t in rows]
    assert sources.count("rules") == 1 and sources.count("defaults") == 1
    pids = {t.user_attrs["worker"]["pid"] for t in rows}
    assert len(pids) == 2, "both workers should have run trials"
    run_dirs = [t.user_attrs["run_dir"] for t in rows]
    assert len(set(run_dirs)) == len(run_dirs)
    for t in rows:
        launched = "duplicate_of" not in t.user_attrs and t.user_attrs.get("failure", {}).get("class") != "require"
        if launched:
            assert (Path(t.user_attrs["run_dir"]) / "argv.txt").exists(), t.number
