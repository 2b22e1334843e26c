"""Reads only read: `tune report` creates no table or file in a database it did not create, and a
refused command leaves no directory behind."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

STANDIN = f"{sys.executable} -m servetune.testing.standin"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SERVETUNE_RUNS_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "servetune", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tables(path: Path) -> list[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return sorted(r[0] for r in db.execute("select name from sqlite_master where type = 'table'"))


def test_report_on_an_unrelated_sqlite_database_writes_nothing_to_it(tmp_path):
    """An SQLite file of someone else's: exit 1, it holds no Optuna study, and its bytes and tables stay."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("create table mine (x integer)")
        db.execute("insert into mine values (1)")
    before = _digest(other)
    out = _cli("tune", "report", "--storage", "sqlite:///other.db", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "holds no Optuna study" in out.stderr and "nothing was written to it" in out.stderr
    assert _digest(other) == before and _tables(other) == ["mine"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_report_on_an_empty_or_missing_file_creates_nothing(tmp_path):
    """An empty file stays empty; a missing one is not created."""
    (tmp_path / "empty.db").write_bytes(b"")
    out = _cli("tune", "report", "--storage", "sqlite:///empty.db", cwd=tmp_path)
    assert out.returncode == 1 and "holds no Optuna study" in out.stderr, out.stderr
    assert (tmp_path / "empty.db").read_bytes() == b""
    out = _cli("tune", "report", "--storage", "sqlite:///missing.db", cwd=tmp_path)
    assert out.returncode == 1 and "no such SQLite file" in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_report_reads_a_study_without_changing_its_database(tmp_path):
    """A real study's database: the report reads it, and the file's bytes are the same afterwards."""
    from servetune.testing import FakeRunner
    from servetune.tuner import TuneOptions, Tuner

    options = TuneOptions(model="qwen3-8b", gpu="h200", workload="text-chat", trials=3, run_dir=tmp_path / "study",
                          study="s", confirm_rounds=0, requests=64)  # fmt: skip
    Tuner(options, runner=FakeRunner(lambda call: {"completed": call.total, "request_throughput": 9.0})).run()
    db = tmp_path / "study" / "study.db"
    before, tables = _digest(db), _tables(db)
    out = _cli("tune", "report", "--storage", f"sqlite:///{db}", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"study": "s"' in out.stdout
    assert _digest(db) == before and _tables(db) == tables


def test_a_study_writes_into_no_other_programs_sqlite_database(tmp_path):
    """`tune --storage sqlite:///other.db` on a file holding someone else's tables: refused, its bytes and
    tables stay; a new file, or a study's own, is written as before."""
    from servetune.errors import TuningError
    from servetune.testing import FakeRunner
    from servetune.tuner import TuneOptions, Tuner

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("create table mine (x integer)")
    before = _digest(other)

    def options(url):
        return TuneOptions(model="qwen3-8b", gpu="h200", workload="text-chat", trials=1, run_dir=tmp_path / "s",
                           study="s", confirm_rounds=0, requests=64, storage=url)  # fmt: skip

    runner = FakeRunner(lambda call: {"completed": call.total, "request_throughput": 9.0})
    with pytest.raises(TuningError, match="SQLite database of something else") as err:
        Tuner(options(f"sqlite:///{other}"), runner=runner).run()
    assert "mine" in err.value.message and "nothing was written to it" in err.value.message
    assert _digest(other) == before and _tables(other) == ["mine"]
    new = tmp_path / "new.db"
    Tuner(options(f"sqlite:///{new}"), runner=runner).run()
    assert "studies" in _tables(new)
    Tuner(options(f"sqlite:///{new}"), runner=runner).run()  # its own study's file opens again


REFUSED = {
    "tune-storage-scheme": ["tune", "-m", "qwen3-8b", "--gpu", "h200", "--storage", "mysql://x/y"],
    "tune-storage-missing-dir": ["tune", "-m", "qwen3-8b", "--gpu", "h200", "--storage", "sqlite:////nonexistent/x.db"],
    "tune-storage-not-sqlite": ["tune", "-m", "qwen3-8b", "--gpu", "h200", "--storage", "sqlite:///notes.txt"],
    "tune-storage-unreachable": ["tune", "-m", "qwen3-8b", "--gpu", "h200", "--storage", "postgresql://u@127.0.0.1:9/db"],
    "tune-bad-command": ["tune", "-m", "qwen3-8b", "--gpu", "h200", "--sglang-cmd", "/nonexistent/sglang"],
    "tune-bad-space": ["tune", "-m", "qwen3-8b", "--gpu", "h200", "--space-set", "foo=bar"],
    "bench-bad-command": ["bench", "-m", "qwen3-8b", "--gpu", "h200", "-w", "text-chat",
                          "--sglang-cmd", "/nonexistent/x"],
    "capacity-bad-command": ["bench", "-m", "qwen3-8b", "--gpu", "h200", "-w", "text-chat", "--capacity",
                             "--slo", "p99_ttft_ms<=100", "--sglang-cmd", "/nonexistent/x"],
    "compare-bad-command": ["compare", "-m", "qwen3-8b", "--gpu", "h200", "--a-no-rules",
                            "--sglang-cmd", "/nonexistent/x"],
    "launch-bad-command": ["launch", "-m", "qwen3-8b", "--gpu", "h200", "--sglang-cmd", "/nonexistent/x"],
}  # fmt: skip


@pytest.mark.parametrize("args", list(REFUSED.values()), ids=list(REFUSED))
def test_a_refused_command_leaves_no_directory(tmp_path, args):
    """Each refusal exits 1 with an error and leaves the working directory as it was (no runs/, no study dir)."""
    (tmp_path / "notes.txt").write_text("not a database\n")
    if "--sglang-cmd" not in args:
        args = [*args, "--sglang-cmd", STANDIN]
    out = _cli(*args, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "error[" in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
