"""Fixtures for runner tests: a real resolution, and the stand-in runner (real processes, no GPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servetune.launch import LaunchOptions
from servetune.testing import StandinRunner


@pytest.fixture(scope="session")
def resolution():
    """The rules' launch of qwen3-8b on one H200 (SGLang 0.5.23), with one pinned field."""
    from servetune.context import Context

    ctx = Context.build("qwen3-8b", gpu="h200", sglang_version="0.5.23", sets=["cuda_graph_max_bs_decode=64"])
    return ctx.resolve()


@pytest.fixture(scope="session")
def workload():
    """text-chat without its warm-up traffic (the tests count requests)."""
    from servetune.bench import load_workload

    return load_workload("text-chat").model_copy(update={"warmup_requests": 0})


@pytest.fixture
def make_runner() -> Callable[..., StandinRunner]:
    """A `StandinRunner` with short timeouts; stand-in knobs as `knobs={"OOM_AFTER": 3}`."""

    def make(knobs: dict[str, object] | None = None, *, server_class=None, **kw) -> StandinRunner:
        extra = {f"SERVETUNE_STANDIN_{k}": str(v) for k, v in (knobs or {}).items()}
        kw.setdefault("startup_timeout_s", 20.0)
        kw.setdefault("stop_grace_s", 3.0)
        kw.setdefault("wait_gpu_release", False)
        runner = StandinRunner(LaunchOptions(extra_env=extra, **kw), client="builtin")
        if server_class is not None:
            runner.server_class = server_class
        return runner

    return make
