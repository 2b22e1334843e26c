"""Hardware facts: NVML answers recorded on the lent H200 replayed through the real detection code,
named profiles, saved profiles, and the error without NVML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servetune import hardware as hw
from servetune.errors import HardwareDetectionError, UnknownNameError
from servetune.hardware import _nvml

NVML_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "hardware" / "nvml"
RECORDINGS = sorted(NVML_DIR.glob("*.json"))


def test_an_h200_recording_is_present():
    """The NVML answers recorded on the real H200 are kept as a fixture."""
    assert any("h200" in p.name for p in RECORDINGS), f"no H200 recording in {NVML_DIR}"


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_recorded_nvml_answers_give_a_profile(path):
    """Replaying a real recording through the detector gives the facts SGLang would see."""
    profile = hw.detect(replay_from=path)
    answers = json.loads(path.read_text())
    g = profile.gpu
    assert g.count == answers["device_count"]
    assert g.name == answers["devices"]["0"]["name"]
    major, minor = answers["devices"]["0"]["compute_capability"]
    assert g.arch == f"sm{major}{minor}"
    assert g.memory_mib == min(d["memory_total"] for d in answers["devices"].values()) // 2**20
    if "h200" in path.name:
        assert (g.arch, g.memory_mib) == ("sm90", 143771)
        assert g.driver_version and g.cuda_driver_version


def test_recording_round_trips(tmp_path):
    """Recording while replaying writes the same answers back."""
    src = RECORDINGS[0]
    out = tmp_path / "again.json"
    a = hw.detect(replay_from=src, record_to=out)
    b = hw.detect(replay_from=out)
    assert a.gpu == b.gpu


def test_saved_profile_loads_back(tmp_path):
    """`--save` output is a profile `--hardware` accepts."""
    profile = hw.named_profile("h100-sxm:8")
    hw.save_profile(profile, tmp_path / "p.yaml")
    assert hw.load_profile(tmp_path / "p.yaml") == profile


def test_named_profiles_are_case_insensitive_and_take_a_count():
    """`--gpu H100-SXM:4` works."""
    p = hw.named_profile("H100-SXM:4")
    assert (p.gpu.arch, p.gpu.count, p.gpu.memory_mib) == ("sm90", 4, 81559)
    for name in ("h100-sxm", "h100-pcie", "h200", "h20", "a100-80gb", "a100-40gb", "l40s", "l4", "b200", "gb200"):
        assert hw.named_profile(name).gpu.count >= 1


def test_unknown_gpu_suggests_a_name():
    """A misspelt GPU name lists the known ones."""
    with pytest.raises(UnknownNameError) as info:
        hw.named_profile("h2000")
    assert "did you mean 'h200'" in info.value.help


def test_without_nvml_detection_points_to_gpu_and_hardware():
    """On a machine without the NVIDIA driver, detection fails with a message, not a traceback."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has NVML")
    except Exception:
        pass
    with pytest.raises(HardwareDetectionError) as info:
        _nvml.detect()
    assert "--gpu" in info.value.help and "--hardware" in info.value.help
    proc = subprocess.run([sys.executable, "-m", "servetune", "hardware"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error[hardware-detection]: NVML is not available on this machine")


def test_the_machine_id_is_its_gpus_uuids_and_none_where_nvml_cannot_tell(tmp_path):
    """`machine_id`: the H200 recording's one UUID; two GPUs sorted and joined, in whatever order NVML lists
    them; a recording without UUIDs and a machine without the driver give None (cannot tell), not an error."""
    h200 = NVML_DIR / "h200.json"
    answers = json.loads(h200.read_text())
    assert hw.machine_id(replay_from=h200) == answers["devices"]["0"]["uuid"]
    two = {**answers, "device_count": 2, "devices": {"0": {**answers["devices"]["0"], "uuid": "GPU-b"},
                                                     "1": {**answers["devices"]["0"], "uuid": "GPU-a"}}}  # fmt: skip
    (tmp_path / "two.json").write_text(json.dumps(two))
    assert hw.machine_id(replay_from=tmp_path / "two.json") == "GPU-a,GPU-b"
    del two["devices"]["1"]["uuid"]
    (tmp_path / "broken.json").write_text(json.dumps(two))
    assert hw.machine_id(replay_from=tmp_path / "broken.json") is None
    try:
        _nvml.NvmlApi().close()
    except HardwareDetectionError:
        assert hw.machine_id() is None  # no driver here: the confirmation cannot tell machines apart
    else:
        assert hw.machine_id()  # a GPU machine: its own UUIDs


@pytest.mark.gpu
def test_real_nvml_detection():
    """On a GPU machine (the device tool), real NVML detection works."""
    pytest.importorskip("pynvml")
    try:
        profile = hw.detect()
    except HardwareDetectionError:
        pytest.skip("no NVIDIA driver here")
    assert profile.gpu.count >= 1 and profile.gpu.memory_mib > 0
