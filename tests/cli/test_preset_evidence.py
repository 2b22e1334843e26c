"""A preset measured for another model, GPU or SGLang release than the target warns with both sides;
a parallel layout a trial cannot fit is never launched."""

from __future__ import annotations

import pytest

from servetune.cli import app
from servetune.cli._run import run_app

TUNED = (
    "name: tuned-vl\nsummary: s\n"
    "made_for: {gpu: NVIDIA H200, gpu_count: 1, model: qwen3-vl-8b-instruct, workload: single-image-stream, "
    "sglang_version: 0.5.17}\n"
    "set:\n  max_running_requests: 48\n"
)


def _resolve(capsys, *args: str) -> tuple[int, str]:
    code = run_app(app, ["resolve", "-f", "args", *args])
    return code, capsys.readouterr().err


def test_a_preset_made_elsewhere_warns_naming_both(tmp_path, capsys):
    """Qwen3-VL-8B on an H200 with 0.5.17, applied to qwen3-8b on an L4 with 0.5.23: exit 0, one warning
    with what it was made for and what this launch is."""
    (tmp_path / "tuned.yaml").write_text(TUNED)
    code, err = _resolve(
        capsys, "-m", "qwen3-8b", "--gpu", "l4", "--sglang-version", "0.5.23", "-p", str(tmp_path / "tuned.yaml")
    )
    assert code == 0, err
    assert err.strip() == (
        "warning: preset 'tuned-vl' was made for model qwen3-vl-8b-instruct, gpu NVIDIA H200, SGLang 0.5.17; "
        "this launch is for model qwen3-8b, gpu NVIDIA L4, SGLang 0.5.23: its values were measured elsewhere and "
        "may not carry over (re-tune with `servetune tune`)"
    )


@pytest.mark.parametrize("model", ["qwen3-vl-8b-instruct", "Qwen/Qwen3-VL-8B-Instruct"])
def test_a_preset_made_for_the_target_says_nothing(tmp_path, capsys, model):
    """The same model (bundled name or HF id), GPU and release: no warning; only a release differing names it."""
    (tmp_path / "tuned.yaml").write_text(TUNED)
    code, err = _resolve(
        capsys, "-m", model, "--gpu", "h200", "--sglang-version", "0.5.17", "-p", str(tmp_path / "tuned.yaml")
    )
    assert code == 0 and err == ""
    code, err = _resolve(
        capsys, "-m", model, "--gpu", "h200", "--sglang-version", "0.5.23", "-p", str(tmp_path / "tuned.yaml")
    )
    assert code == 0 and "made for SGLang 0.5.17; this launch is for SGLang 0.5.23" in err and "model" not in err


def test_a_trial_beyond_the_gpus_is_a_require_violation():
    """A tuner trial with tp_size x dp_size beyond the node's GPUs raises RequireViolation (never launched)."""
    from servetune.context import Context
    from servetune.errors import RequireViolation

    ctx = Context.build("qwen3-8b", gpu="h200:4")
    ctx.resolve({"tp_size": 2, "dp_size": 2})  # fits: 4 GPUs
    with pytest.raises(RequireViolation, match="needs 8 GPUs, but the target has 4"):
        ctx.resolve({"tp_size": 4, "dp_size": 2})
    ctx.resolve({"tp_size": 4, "dp_size": 2, "enable_dp_attention": True})  # DP attention shares the TP GPUs
