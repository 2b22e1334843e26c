"""A planted API key, a planted env secret and an HF token in the environment reach no artefact of
launch, managed bench, tune (with `--out`), tune report or runs: not a run directory file, not the
study database (its bytes and its attributes), not the preset, not a command's stdout or stderr.
The stand-in enforces the key (401 without it), so the bench and tune runs succeeding also shows
that the benchmark client sends the pinned key."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.tuner.conftest import SPACE, WORKLOAD, load_trials, tune_argv

STANDIN = f"{sys.executable} -m servetune.testing.standin"
API_KEY = "PLANTED-SECRET-123"
ENV_SECRET = "PLANTED-S3-SECRET-456"
HF_TOKEN = "hf_PLANTEDtoken789xyz"
PLANTED = (API_KEY, ENV_SECRET, HF_TOKEN)
PINS = ["--set", f"api_key={API_KEY}", "--env", f"SGLANG_S3_SECRET_ACCESS_KEY={ENV_SECRET}"]
SERVETUNE = [sys.executable, "-m", "servetune"]
BASE = ["--model", "qwen3-8b", "--gpu", "h200", "--sglang-cmd", STANDIN]


def _post(url: str, key: str | None) -> int:
    """The status of a one-token completion request sent with `key` (or none)."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    body = json.dumps({"prompt": "hello", "max_tokens": 1}).encode()
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _run(argv: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv[3]} failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return done


def _launch(tmp_path: Path, env: dict[str, str], outputs: dict[str, str]) -> None:
    """`servetune launch` until it serves; the key is enforced, `runs` lists it; then Ctrl-C."""
    from servetune.launch import reserve_free_port

    reservation = reserve_free_port("127.0.0.1")
    port = reservation.port
    reservation.release()
    argv = [*SERVETUNE, "launch", *BASE, *PINS, "--port", str(port), "--run-dir", str(tmp_path / "launch")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("serving;"):
                break
        assert lines and lines[-1].startswith("serving;"), "".join(lines) + proc.stderr.read()
        url = f"http://127.0.0.1:{port}/v1/completions"
        assert _post(url, None) == 401
        assert _post(url, "wrong-key") == 401
        assert _post(url, API_KEY) == 200
        for args in (["runs"], ["runs", "--json"]):
            done = _run([*SERVETUNE, *args, "--runs-dir", str(tmp_path)], env)
            assert str(port) in done.stdout
            outputs[" ".join(args)] = done.stdout + done.stderr
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    outputs["launch"] = "".join(lines) + out + err
    stdout = "".join(lines) + out  # the log follower may print the server's lines after "serving;"
    assert "--api-key '<redacted>'" in stdout or "--api-key <redacted>" in stdout, stdout
    assert "SGLANG_S3_SECRET_ACCESS_KEY='<redacted>'" in stdout or "SGLANG_S3_SECRET_ACCESS_KEY=<redacted>" in stdout
    assert '"api_key": "<redacted>"' in stdout, "the stand-in's server_args line, copied from server.log"


@pytest.mark.timeout(600)
def test_planted_secrets_reach_no_artefact(tmp_path):
    """Zero hits for every planted value over every file and captured output; `<redacted>` where it was."""
    env = dict(os.environ, SERVETUNE_RUNS_DIR=str(tmp_path / "runs"), HF_TOKEN=HF_TOKEN)
    env["SERVETUNE_STANDIN_TIME_SCALE"] = "0.5"
    for name in ("SERVETUNE_SGLANG_CMD", "SERVETUNE_STANDIN_CRASH_AFTER", "OPENAI_API_KEY"):
        env.pop(name, None)
    workload, space = tmp_path / "tuner-test.yaml", tmp_path / "space.yaml"
    workload.write_text(WORKLOAD)
    space.write_text(SPACE)
    outputs: dict[str, str] = {}

    _launch(tmp_path, env, outputs)

    bench_dir = tmp_path / "bench"
    done = _run(
        [*SERVETUNE, "bench", *BASE, *PINS, "--workload", str(workload), "--run-dir", str(bench_dir), "--json"], env
    )
    outputs["bench"] = done.stdout + done.stderr
    assert json.loads(done.stdout)["metrics"]["completed"] > 0, "the builtin client sent the pinned key"

    tune_dir, preset = tmp_path / "tune", tmp_path / "best.yaml"
    argv = tune_argv(workload, space, tune_dir, *PINS, "--confirm", "0", "--out", str(preset), "--json", trials=2)
    done = _run(argv, env, timeout=300)
    outputs["tune"] = done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["best"] is not None, "a feasible trial: the benchmark client sent the pinned key"
    (db,) = tune_dir.rglob("study.db")
    storage = f"sqlite:///{db}"
    for args in (["--json"], [], ["--out", str(tmp_path / "again.yaml")]):
        done = _run([*SERVETUNE, "tune", "report", "--storage", storage, *args], env)
        outputs[f"report {args}"] = done.stdout + done.stderr

    import optuna

    (name,) = optuna.study.get_all_study_names(storage)
    trials = load_trials(storage, name)
    study = optuna.load_study(study_name=name, storage=storage)
    attrs = json.dumps(
        {
            "study": [study.user_attrs, study._storage.get_study_system_attrs(study._study_id)],
            "trials": [[t.user_attrs, t.system_attrs] for t in trials],
        },
        default=str,
    )
    assert '"--api-key", "<redacted>"' in attrs
    assert '"SGLANG_S3_SECRET_ACCESS_KEY": "<redacted>"' in attrs
    assert "api_key=<redacted>" in attrs, "the pins study attribute"

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"argv.txt", "env.json", "resolved.yaml", "server.log", "server_info.json", "result.json"} <= {
        p.name for p in files
    }
    hits = [
        f"{p.relative_to(tmp_path)}: {value}" for p in files for value in PLANTED if value.encode() in p.read_bytes()
    ]
    hits += [f"{name} output: {value}" for name, text in outputs.items() for value in PLANTED if value in text]
    hits += [f"study attributes: {value}" for value in PLANTED if value in attrs]
    assert hits == []
    for path in (
        *bench_dir.rglob("argv.txt"),
        *bench_dir.rglob("server.log"),
        *tune_dir.rglob("resolved.yaml"),
        *(tmp_path / "launch").rglob("server_info_diff.json"),
        preset,
    ):
        assert "<redacted>" in path.read_text(), path
