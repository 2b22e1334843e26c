"""`servetune catalog list|show|sync` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import run_cli


def test_list_shows_every_version_with_counts():
    """One line per snapshot, with field and env-var counts; the newest is the default here."""
    done = run_cli("catalog", "list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["0.5.10", "0.5.17", "0.5.23"]
    assert "fields" in lines[0] and "env vars" in lines[0]


def test_show_one_field_explains_flag_type_and_config_file_support():
    """`show VERSION FIELD` prints the entry; a BooleanOptional field is argv-only."""
    done = run_cli("catalog", "show", "0.5.23", "mm_enable_dp_encoder")
    assert done.returncode == 0, done.stderr
    assert "--mm-enable-dp-encoder / --no-mm-enable-dp-encoder" in done.stdout
    assert "--config YAML: no (argv only)" in done.stdout


def test_show_finds_a_field_by_a_deprecated_flag():
    """In 0.5.17, `--cuda-graph-max-bs` is an alias of `cuda_graph_max_bs_decode`."""
    done = run_cli("catalog", "show", "0.5.17", "--json", "--", "--cuda-graph-max-bs")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "cuda_graph_max_bs_decode"


def test_show_an_env_var_as_json():
    """Env vars are shown with their SGLang type and default."""
    done = run_cli("catalog", "show", "0.5.23", "SGLANG_MM_FEATURE_CACHE_MB", "--json")
    assert json.loads(done.stdout) == {"default": 1024, "name": "SGLANG_MM_FEATURE_CACHE_MB", "type": "int"}


def test_unknown_names_exit_1_with_a_suggestion():
    """A user error is a message and exit code 1, not a traceback."""
    done = run_cli("catalog", "show", "0.5.23", "radix_eviction")
    assert done.returncode == 1
    assert "did you mean 'radix_eviction_policy'?" in done.stderr
    assert "Traceback" not in done.stderr


def test_sync_without_sglang_says_how_to_get_it(tmp_path):
    """`sync` with a Python that lacks SGLang fails with exit 1 and the setup hint."""
    done = run_cli("catalog", "sync", "--python", sys.executable, "--out", str(tmp_path))
    if done.returncode == 0:
        return  # this interpreter has SGLang installed; nothing to check here
    assert done.returncode == 1
    assert "cannot import sglang" in done.stderr
    assert "scripts/setup_sglang_cpu.sh" in done.stderr
    assert not list(tmp_path.iterdir())


def test_the_catalog_commands_import_nothing_heavy():
    """Listing catalogs loads neither sglang, torch nor optuna."""
    code = (
        "import sys; from servetune.cli import app; "
        "from servetune.cli._run import run_app; run_app(app, ['catalog', 'list']); "
        "print(' '.join(sorted(m for m in sys.modules "
        "if m.split('.')[0] in {'sglang', 'torch', 'optuna', 'pynvml', 'triton'})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == ""


def test_show_prints_a_checked_range():
    from typer.testing import CliRunner

    from servetune.cli import app

    out = CliRunner().invoke(app, ["catalog", "show", "0.5.23", "chunked_prefill_size"])
    assert out.exit_code == 0, out.output
    line = "range       -1 or >= 1  (tokens per prefill chunk; -1 turns chunking off; checked by servetune)"
    assert line in out.output
    plain = CliRunner().invoke(app, ["catalog", "show", "0.5.23", "radix_eviction_policy"])
    assert "range" not in plain.output
