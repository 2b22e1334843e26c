"""NVML detection, with a recorder and a replayer of NVML's answers.

`detect()` asks NVML through a small index-based API (`NvmlApi`). `RecordingApi` writes every
answer to a JSON file, and `ReplayApi` answers from such a file: a recording made on a real
GPU machine (tests/fixtures/hardware/nvml/*.json) stands in for NVML in tests, which is the only
part of detection a CPU-only CI cannot run for real.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from servetune.errors import HardwareDetectionError, SourceLocation, SpecError
from servetune.schema.facts import GpuFacts, HardwareProfile

_REPLAY_HELP = (
    "pass a file written by `servetune hardware --record-nvml FILE` (e.g. tests/fixtures/hardware/nvml/h200.json)"
)
_FIX = "pass --gpu NAME (see `servetune hardware --list`) or --hardware FILE to resolve without NVML"


class NvmlApi:
    """The NVML calls detection needs, by device index (real `pynvml` underneath)."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise HardwareDetectionError("NVML bindings are not installed (package nvidia-ml-py)", help=_FIX) from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise HardwareDetectionError(f"NVML is not available on this machine: {exc}", help=_FIX) from None
        self._handles: dict[int, Any] = {}

    def close(self) -> None:
        """Shut NVML down."""
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass

    def _h(self, i: int) -> Any:
        if i not in self._handles:
            self._handles[i] = self._nvml.nvmlDeviceGetHandleByIndex(i)
        return self._handles[i]

    def driver_version(self) -> str:
        """Driver version string."""
        return _text(self._nvml.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        """CUDA driver version as NVML encodes it (e.g. 13000)."""
        return int(self._nvml.nvmlSystemGetCudaDriverVersion())

    def device_count(self) -> int:
        """Number of visible GPUs."""
        return int(self._nvml.nvmlDeviceGetCount())

    def name(self, i: int) -> str:
        """Device name."""
        return _text(self._nvml.nvmlDeviceGetName(self._h(i)))

    def compute_capability(self, i: int) -> list[int]:
        """`[major, minor]`."""
        return list(self._nvml.nvmlDeviceGetCudaComputeCapability(self._h(i)))

    def memory_total(self, i: int) -> int:
        """Total memory in bytes."""
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._h(i)).total)

    def uuid(self, i: int) -> str:
        """Device UUID."""
        return _text(self._nvml.nvmlDeviceGetUUID(self._h(i)))

    def nvlink_active_links(self, i: int) -> int:
        """Active NVLink links (0 when NVLink is absent or not supported)."""
        active = 0
        for link in range(getattr(self._nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if self._nvml.nvmlDeviceGetNvLinkState(self._h(i), link):
                    active += 1
            except self._nvml.NVMLError:
                break
        return active


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_PER_DEVICE = ("name", "compute_capability", "memory_total", "uuid", "nvlink_active_links")


class RecordingApi:
    """Wraps an `NvmlApi` and keeps every answer, to be saved as a replayable JSON file."""

    def __init__(self, api: NvmlApi) -> None:
        self._api = api
        self.answers: dict[str, Any] = {"devices": {}}

    def close(self) -> None:
        """Close the wrapped API."""
        self._api.close()

    def __getattr__(self, attr: str) -> Any:
        fn = getattr(self._api, attr)
        if attr in _PER_DEVICE:

            def per_device(i: int) -> Any:
                value = fn(i)
                self.answers["devices"].setdefault(str(i), {})[attr] = value
                return value

            return per_device

        def system() -> Any:
            value = fn()
            self.answers[attr] = value
            return value

        return system

    def save(self, path: str | Path) -> None:
        """Write the answers as JSON."""
        Path(path).write_text(json.dumps(self.answers, indent=2, sort_keys=True) + "\n", encoding="utf-8")


class ReplayApi:
    """Answers NVML calls from a recording (a stand-in for NVML in tests)."""

    def __init__(self, path: str | Path) -> None:
        try:
            self.answers = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise SpecError(
                f"--replay-nvml {path} is not valid JSON: {exc.msg}",
                location=SourceLocation(str(path), exc.lineno, exc.colno),
                help=_REPLAY_HELP,
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            problem = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise SpecError(f"cannot read --replay-nvml {path}: {problem}", help=_REPLAY_HELP) from None
        if not isinstance(self.answers, dict):
            raise SpecError(
                f"--replay-nvml {path} must hold a JSON object of NVML answers, "
                f"but got a {type(self.answers).__name__}",
                help=_REPLAY_HELP,
            )

    def close(self) -> None:
        """Nothing to close."""

    def __getattr__(self, attr: str) -> Any:
        if attr in _PER_DEVICE:
            return lambda i: self.answers["devices"][str(i)][attr]
        if attr in self.answers:
            return lambda: self.answers[attr]
        raise AttributeError(attr)


def profile_from_api(api: Any, source: str) -> HardwareProfile:
    """Build a `HardwareProfile` from NVML answers (real, recorded or replayed)."""
    count = api.device_count()
    if count < 1:
        raise HardwareDetectionError("NVML reports no GPU on this machine", help=_FIX)
    names = [api.name(i) for i in range(count)]
    caps = [api.compute_capability(i) for i in range(count)]
    totals = [api.memory_total(i) for i in range(count)]
    uuids = [api.uuid(i) for i in range(count)]
    links = [api.nvlink_active_links(i) for i in range(count)]
    name, _ = Counter(names).most_common(1)[0]
    major, minor = caps[names.index(name)]
    cuda = api.cuda_driver_version()
    gpu = GpuFacts(
        name=name,
        arch=f"sm{major}{minor}",
        memory_mib=min(totals) // (1024 * 1024),
        count=count,
        nvlink=any(n > 0 for n in links),
        driver_version=api.driver_version(),
        cuda_driver_version=f"{cuda // 1000}.{(cuda % 1000) // 10}",
    )
    return HardwareProfile(gpu=gpu, source=source, uuids=uuids)


def detect(record_to: str | Path | None = None, replay_from: str | Path | None = None) -> HardwareProfile:
    """Detect GPUs with NVML, optionally recording the answers or replaying a recording.

    Raises:
        HardwareDetectionError: No NVML bindings, no driver, or no GPU.
    """
    api: Any = ReplayApi(replay_from) if replay_from else NvmlApi()
    if record_to:
        api = RecordingApi(api)
    try:
        profile = profile_from_api(api, source=f"replay:{replay_from}" if replay_from else "nvml")
    except (KeyError, AttributeError, TypeError, ValueError, IndexError) as exc:
        if not replay_from:
            raise
        raise SpecError(
            f"--replay-nvml {replay_from} is not a usable NVML recording: missing or wrongly typed answer {exc}",
            help=_REPLAY_HELP,
        ) from None
    finally:
        api.close()
    if record_to:
        try:
            api.save(record_to)
        except OSError as exc:
            raise SpecError(
                f"cannot write --record-nvml {record_to}: {exc.strerror or exc}", help="choose a writable file path"
            ) from None
    return profile


def machine_id(replay_from: str | Path | None = None) -> str | None:
    """This machine's GPUs as one identity (their UUIDs, sorted, comma-joined), or None where NVML cannot
    tell (no bindings, no driver, no GPU): two measurements with one identity ran on the same GPUs.
    `replay_from`: an NVML recording instead of NVML (as `detect`)."""
    try:
        api: Any = ReplayApi(replay_from) if replay_from else NvmlApi()
    except HardwareDetectionError:
        return None
    cannot_tell: tuple[type[BaseException], ...] = (KeyError, AttributeError, TypeError, ValueError, IndexError)
    if isinstance(api, NvmlApi):
        cannot_tell += (api._nvml.NVMLError,)
    try:
        uuids = sorted(api.uuid(i) for i in range(api.device_count()))
    except cannot_tell:
        return None
    finally:
        api.close()
    return ",".join(uuids) or None
