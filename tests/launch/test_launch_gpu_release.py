"""Waiting for GPU memory between launches: NVML when present, a no-op without it."""

from __future__ import annotations

import types

import pytest

from servetune.launch import _gpu


class FakeNvml:
    """Just enough of pynvml: one GPU whose process list and used memory drain over polls."""

    NVMLError = RuntimeError

    def __init__(self, polls_busy: int) -> None:
        self.polls = 0
        self.polls_busy = polls_busy

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self.polls += 1
        return [types.SimpleNamespace(pid=4242)] if self.polls <= self.polls_busy else []

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(used=(70_000 if self.polls <= self.polls_busy + 1 else 500) * 2**20)


@pytest.fixture
def fake_nvml(monkeypatch):
    def install(polls_busy: int) -> FakeNvml:
        fake = FakeNvml(polls_busy)
        monkeypatch.setitem(_gpu._nvml_state, "module", fake)
        return fake

    return install


def test_without_nvml_the_wait_is_a_no_op(monkeypatch):
    """No NVML (CI): returns True at once."""
    monkeypatch.setitem(_gpu._nvml_state, "module", None)
    assert _gpu.wait_gpu_memory_released([1], timeout_s=0.01) is True
    assert _gpu.gpu_memory_used_mib() is None


def test_waits_until_the_pids_are_gone_and_memory_is_back_to_baseline(fake_nvml):
    """Busy for 3 polls, then the memory drains one poll later: released, after ≥ 4 polls."""
    fake = fake_nvml(polls_busy=3)
    assert _gpu.wait_gpu_memory_released([4242], baseline_mib={0: 400.0}, poll_s=0.001, timeout_s=5) is True
    assert fake.polls >= 4


def test_a_gpu_that_stays_busy_times_out_with_false(fake_nvml):
    """Memory never released: False after the timeout (the caller decides what that means)."""
    fake_nvml(polls_busy=10**9)
    assert _gpu.wait_gpu_memory_released([4242], poll_s=0.001, timeout_s=0.05) is False
