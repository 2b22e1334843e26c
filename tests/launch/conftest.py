"""Fixtures for launcher tests: the stand-in server started through the same path as SGLang."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from launch_helpers import STANDIN_CMD

from servetune.launch import LaunchOptions


@pytest.fixture
def make_options(tmp_path: Path) -> Callable[..., LaunchOptions]:
    """LaunchOptions for the stand-in: short timeouts, a fresh run dir, knobs as `knobs={"HANG": "1"}`."""
    counter = iter(range(1000))

    def make(knobs: dict[str, str] | None = None, **kw) -> LaunchOptions:
        extra = {f"SERVETUNE_STANDIN_{k}": str(v) for k, v in (knobs or {}).items()}
        extra.update(kw.pop("extra_env", {}))
        kw.setdefault("run_dir", tmp_path / f"run{next(counter)}")
        kw.setdefault("startup_timeout_s", 20.0)
        kw.setdefault("stop_grace_s", 3.0)
        kw.setdefault("wait_gpu_release", False)
        kw.setdefault("sglang_cmd", STANDIN_CMD)
        return LaunchOptions(extra_env=extra, **kw)

    return make
