"""The resolve/explain/rules/presets/hardware/schema commands, end to end through the CLI."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from servetune.cli import app
from servetune.cli._run import run_app

BASE = ["--model", "qwen3-vl-8b-instruct", "--gpu", "h200", "--sglang-version", "0.5.23"]


def _run(capsys, *args):
    code = run_app(app, list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_resolve_table_shows_launch_line_env_and_decisions(capsys):
    """The default output is the launch line with env vars, then one row per decision."""
    code, out, err = _run(capsys, "resolve", *BASE)
    assert code == 0, err
    assert "SGLANG_VLM_CACHE_SIZE_MB=0 python -m sglang.launch_server" in out.replace(
        "SGLANG_USE_IPC_POOL_HANDLE_CACHE=1 ", ""
    )
    assert "--mm-feature-transport cuda_ipc" in out
    assert "qwen3-vl-hopper-prefill-decode-interval" in out


def test_resolve_json_has_argv_env_and_decisions(capsys):
    """--format json: argv (model path first), env strings, decisions with field/value/layer/source/location/reason."""
    code, out, _ = _run(capsys, "resolve", *BASE, "--set", "max_running_requests=512", "--format", "json")
    data = json.loads(out)
    assert code == 0
    assert data["argv"][:2] == ["--model-path", "Qwen/Qwen3-VL-8B-Instruct"]
    assert data["env"]["SGLANG_MM_FEATURE_CACHE_MB"] == "3072"
    assert all(isinstance(v, str) for v in data["env"].values())
    by_field = {d["field"]: d for d in data["decisions"]}
    d = by_field["cuda_graph_max_bs_decode"]
    assert (d["value"], d["layer"], d["source"]) == (512, "rule", "qwen3-vl-hopper-decode-graph-to-running-limit")
    assert d["location"].startswith("servetune/data/rules/qwen3_vl_hopper.yaml:") and d["reason"]
    assert by_field["max_running_requests"]["layer"] == "pin"


def test_args_shell_and_env_formats_agree(capsys):
    """args, shell and env print the same launch."""
    _, args, _ = _run(capsys, "resolve", *BASE, "--format", "args")
    _, shell, _ = _run(capsys, "resolve", *BASE, "--format", "shell")
    _, env, _ = _run(capsys, "resolve", *BASE, "--format", "env")
    argv = shlex.split(args)
    words = shlex.split(shell.replace("\\\n", " "))
    assert words[-len(argv) :] == argv
    assert "export SGLANG_VLM_CACHE_SIZE_MB=0" in env.splitlines()


def test_yaml_format_is_sglang_config_with_dash_keys(capsys, tmp_path):
    """--format yaml writes SGLang's --config file: dash keys; list and --x/--no-x fields stay on argv."""
    out_file = tmp_path / "c.yaml"
    code, _, err = _run(
        capsys,
        "resolve",
        *BASE,
        "--set",
        "cuda_graph_bs_decode=1,2,4",
        "--set",
        "mm_enable_dp_encoder=true",
        "--format",
        "yaml",
        "--out",
        str(out_file),
    )
    assert code == 0, err
    text = out_file.read_text()
    data = yaml.safe_load(text)
    assert data["model-path"] == "Qwen/Qwen3-VL-8B-Instruct"
    assert data["radix-eviction-policy"] == "priority"
    assert all("_" not in k for k in data)
    assert "cuda-graph-bs-decode" not in data and "mm-enable-dp-encoder" not in data
    assert "--cuda-graph-bs-decode 1 2 4" in text and "--mm-enable-dp-encoder" in text.splitlines()[1]


def test_explain_shows_chain_with_replaced_layer(capsys):
    """explain FIELD: each layer with its source and location, and which one won."""
    code, out, _ = _run(capsys, "explain", "radix_eviction_policy", *BASE, "--set", "radix_eviction_policy=lru")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "radix_eviction_policy = lru"
    assert "qwen3-vl-hopper-priority-radix-eviction" in lines[1] and "(replaced)" in lines[1]
    assert any(line.strip().startswith("pin") and "← wins" in line for line in lines)


def test_explain_says_why_a_rule_did_not_match(capsys):
    """explain of an unset field lists the rules that could set it and the condition that failed."""
    code, out, _ = _run(capsys, "explain", "mm_feature_transport", *BASE, "--nnodes", "2")
    assert code == 0
    assert "not set by servetune" in out
    assert "qwen3-vl-hopper-cuda-ipc-transport" in out and "deployment.nnodes == 1" in out


def test_rules_list_show_lint(capsys):
    """rules list names every rule; show prints why and location; lint finds no error in the built-ins."""
    code, out, _ = _run(capsys, "rules", "list")
    assert code == 0 and "qwen3-vl-hopper-cuda-ipc-transport" in out
    code, out, _ = _run(capsys, "rules", "show", "qwen3-vl-hopper-large-ipc-pool")
    assert code == 0 and "why:" in out and "SGLANG_MM_FEATURE_CACHE_MB: 3072" in out and "qwen3_vl_hopper.yaml:" in out
    code, out, _ = _run(capsys, "rules", "lint", "--json")
    report = json.loads(out)
    assert code == 0 and report["errors"] == [] and report["combinations"] > 100
    assert all(n > 0 for n in report["matches"].values())


def test_rules_lint_reports_a_rule_that_never_matches(capsys, tmp_path):
    """lint warns about a rule no bundled GPU can match."""
    f = tmp_path / "r.yaml"
    f.write_text(
        "rules:\n  - id: huge-gpu\n    summary: s\n    why: w\n    when: {gpu.memory_mib: {gte: 10000000}}\n"
        "    set: {stream_interval: 4}\n"
    )
    code, out, _ = _run(capsys, "rules", "lint", "--rules", str(f))
    assert code == 0
    assert "warning: rule 'huge-gpu'" in out and "never matches" in out


def test_presets_list_and_show(capsys):
    """Shipped presets are listed and shown."""
    code, out, _ = _run(capsys, "presets", "list")
    assert code == 0 and "multimodal-high-concurrency" in out
    code, out, _ = _run(capsys, "presets", "show", "multimodal-high-concurrency", "--json")
    assert json.loads(out)["set"] == {"max_running_requests": 512}


def test_preset_layer_sits_between_rules_and_pins(capsys):
    """--preset values beat rules and lose to --set."""
    code, out, _ = _run(capsys, "resolve", *BASE, "--preset", "multimodal-high-concurrency", "--format", "json")
    by_field = {d["field"]: d for d in json.loads(out)["decisions"]}
    assert by_field["max_running_requests"]["layer"] == "preset"
    assert by_field["SGLANG_MM_FEATURE_CACHE_MB"]["value"] == 3072
    code, out, _ = _run(
        capsys,
        "resolve",
        *BASE,
        "--preset",
        "multimodal-high-concurrency",
        "--set",
        "max_running_requests=128",
        "--format",
        "json",
    )
    by_field = {d["field"]: d for d in json.loads(out)["decisions"]}
    assert by_field["max_running_requests"]["value"] == 128 and "SGLANG_MM_FEATURE_CACHE_MB" not in by_field


def test_hardware_named_profile_json(capsys):
    """hardware --gpu prints a named profile that --hardware accepts back."""
    code, out, _ = _run(capsys, "hardware", "--gpu", "h100-sxm:8", "--json")
    assert code == 0 and json.loads(out)["gpu"]["count"] == 8


@pytest.mark.parametrize("what", ["rules", "preset", "workload", "hardware", "space"])
def test_schema_command(capsys, what):
    """schema prints a JSON Schema."""
    code, out, _ = _run(capsys, "schema", what)
    assert code == 0 and json.loads(out)["type"] == "object"


def test_generated_docs_are_current():
    """docs/rules.md, docs/presets.md and docs/schema/*.json match the data (python scripts/gen_docs.py)."""
    from tests.conftest import load_script

    gen = load_script("scripts/gen_docs.py")
    stale = [str(p) for p, text in gen.outputs().items() if not p.exists() or p.read_text() != text]
    assert not stale, f"run python scripts/gen_docs.py: {stale}"


def test_usage_errors_exit_2_and_user_errors_exit_1(capsys):
    """Exit codes: 2 for usage (unknown option, missing option), 1 for a user error."""
    assert _run(capsys, "resolve")[0] == 2
    assert _run(capsys, "catalog", "list", "--bogus")[0] == 2
    assert _run(capsys, "resolve", "--model", "nope-model", "--gpu", "h200")[0] == 1


def test_explain_run_shows_what_sglang_changed(capsys, tmp_path):
    """explain --run RUN_DIR adds requested -> effective from a launch's /server_info (stand-in server)."""

    from servetune.api import resolve_launch
    from servetune.launch import LaunchOptions, start_server
    from servetune.runner import WATCHED_FIELDS
    from servetune.testing import standin_command

    res = resolve_launch("qwen3-vl-8b-instruct", gpu="h200", sglang_version="0.5.23", sets=["max_running_requests=16"])
    with start_server(
        res.argv(),
        res.env(),
        res.requested(),
        LaunchOptions(sglang_cmd=standin_command(), run_dir=tmp_path, watched_fields=WATCHED_FIELDS),
    ):
        pass
    code, out, err = _run(
        capsys, "explain", "mm_feature_transport", *BASE, "--set", "max_running_requests=16", "--run", str(tmp_path)
    )
    assert code == 0, err
    assert "sglang  requested=cuda_ipc → effective=cuda_ipc" in out
    code, out, _ = _run(capsys, "explain", *BASE, "--set", "max_running_requests=16", "--run", str(tmp_path))
    assert "chunked_prefill_size: SGLang chose 8192 (requested None)" in out
