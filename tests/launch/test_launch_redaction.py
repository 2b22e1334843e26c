"""Secrets never reach a run directory: env names and argv flags that carry them are redacted."""

from __future__ import annotations

import pytest

from servetune.launch import new_run_dir, redact_argv, redact_env

R = "<redacted>"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--api-key", "sk-1", "--port", "1"], ["--api-key", R, "--port", "1"]),
        (["--api-key=sk-1"], [f"--api-key={R}"]),
        (["--admin-api-key", "a", "--hf-token", "t"], ["--admin-api-key", R, "--hf-token", R]),
        (
            ["--max-total-tokens", "4096", "--tokenizer-path", "x"],
            ["--max-total-tokens", "4096", "--tokenizer-path", "x"],
        ),
        (["--api-key", "--port", "1"], ["--api-key", "--port", "1"]),
        (["python", "-m", "sglang.launch_server"], ["python", "-m", "sglang.launch_server"]),
    ],
)
def test_redact_argv(argv, expected):
    """Values of secret flags are hidden, in both spellings; other flags are untouched."""
    assert redact_argv(argv) == expected


def test_redact_env():
    """HF_TOKEN, *_TOKEN, *_KEY, *API_KEY*, secrets and passwords are hidden; SGLANG_* settings are kept."""
    env = {
        "HF_TOKEN": "hf",
        "GITHUB_TOKEN": "g",
        "AWS_SECRET_ACCESS_KEY": "a",
        "OPENAI_API_KEY_FILE": "f",
        "DB_PASSWORD": "p",
        "SGLANG_VLM_CACHE_SIZE_MB": "0",
        "CUDA_VISIBLE_DEVICES": "0",
        "EMPTY_TOKEN": "",
    }
    assert redact_env(env) == {
        "HF_TOKEN": R,
        "GITHUB_TOKEN": R,
        "AWS_SECRET_ACCESS_KEY": R,
        "OPENAI_API_KEY_FILE": R,
        "DB_PASSWORD": R,
        "SGLANG_VLM_CACHE_SIZE_MB": "0",
        "CUDA_VISIBLE_DEVICES": "0",
        "EMPTY_TOKEN": "",
    }


def test_new_run_dirs_are_unique(tmp_path):
    """Run directories made in the same second by one process are distinct and named by kind."""
    dirs = [new_run_dir(tmp_path, "trial") for _ in range(20)]
    assert len(set(dirs)) == 20 and all(d.is_dir() and d.name.startswith("trial-") for d in dirs)
