"""Wait, between two launches on a GPU, until NVML shows the previous server's memory released."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable

log = logging.getLogger("servetune.launch")
_nvml_state: dict[str, object] = {}


def _nvml():
    """The initialised pynvml module, or None when NVML is unavailable (remembered once decided)."""
    if "module" in _nvml_state:
        return _nvml_state["module"]
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        log.debug("NVML unavailable (%s); GPU memory release is not awaited", exc)
        _nvml_state["module"] = None
        return None
    _nvml_state["module"] = pynvml
    return pynvml


def gpu_memory_used_mib(devices: Iterable[int] | None = None) -> dict[int, float] | None:
    """Used memory per GPU index in MiB, or None without NVML."""
    nv = _nvml()
    if nv is None:
        return None
    indices = list(devices) if devices is not None else list(range(nv.nvmlDeviceGetCount()))
    return {i: nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i)).used / 2**20 for i in indices}


def _gpu_pids(nv, index: int) -> set[int]:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    try:
        return {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)}
    except nv.NVMLError:
        return set()


def wait_gpu_memory_released(
    pids: Iterable[int] = (),
    devices: Iterable[int] | None = None,
    *,
    baseline_mib: dict[int, float] | None = None,
    slack_mib: float = 1024.0,
    timeout_s: float = 120.0,
    poll_s: float = 0.25,
) -> bool:
    """Wait until none of `pids` holds GPU memory and used memory is back near `baseline_mib`.

    A no-op returning True (with a debug note) when NVML is unavailable, e.g. on CI.

    Args:
        pids: Processes of the stopped server (NVML may report host pids inside containers, so
            the memory check below is what decides there).
        devices: GPU indices to watch (NVML order); None = all.
        baseline_mib: Used MiB per GPU measured before the launch; None skips the memory check.
        slack_mib: Tolerance over the baseline.
        timeout_s: Give up after this long.
        poll_s: Poll period.

    Returns:
        True when released, False on timeout (the caller decides whether that is fatal).
    """
    nv = _nvml()
    if nv is None:
        return True
    indices = list(devices) if devices is not None else list(range(nv.nvmlDeviceGetCount()))
    wanted = set(pids)
    deadline = time.monotonic() + timeout_s
    while True:
        busy = any(wanted & _gpu_pids(nv, i) for i in indices)
        if not busy and baseline_mib:
            used = gpu_memory_used_mib(indices) or {}
            busy = any(used.get(i, 0.0) > baseline_mib.get(i, 0.0) + slack_mib for i in indices)
        if not busy:
            return True
        if time.monotonic() >= deadline:
            log.warning(
                "GPU memory not released after %.0f s (pids %s, devices %s)", timeout_s, sorted(wanted), indices
            )
            return False
        time.sleep(poll_s)


def visible_gpu_indices(cuda_visible_devices: str | None) -> list[int] | None:
    """The NVML indices a server may use, from its CUDA_VISIBLE_DEVICES (else this process's), so
    parallel trials on other GPUs do not hold up this one's release; None (all) when not integers."""
    visible = cuda_visible_devices if cuda_visible_devices is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return None
    try:
        return [int(x) for x in visible.split(",") if x.strip()]
    except ValueError:
        return None
