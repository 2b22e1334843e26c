"""SGLang's real parser, through the oracle: flags that differ between releases."""

from __future__ import annotations

import pytest

from tests.sglang.oracle import OracleError, parse_argvs

MODEL = ["--model-path", "Qwen/Qwen3-VL-8B-Instruct"]


def test_the_removed_cuda_graph_max_bs_flag_is_an_ambiguous_prefix_in_0_5_23():
    """0.5.23 rejects `--cuda-graph-max-bs` and parses `--cuda-graph-max-bs-decode`."""
    old, new = parse_argvs("0.5.23", [[*MODEL, "--cuda-graph-max-bs", "256"], [*MODEL, "--cuda-graph-max-bs-decode", "256"]])
    assert not old["ok"]
    assert old["error"] == (
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )
    assert new["ok"] and new["values"]["cuda_graph_max_bs_decode"] == 256


def test_older_releases_spell_the_decode_graph_limit_differently():
    """0.5.17 keeps `--cuda-graph-max-bs` as an alias of the decode field; 0.5.10 has its own field."""
    [v17] = parse_argvs("0.5.17", [[*MODEL, "--cuda-graph-max-bs", "256", "--tp-size", "2"]])
    [v10] = parse_argvs("0.5.10", [[*MODEL, "--cuda-graph-max-bs", "256", "--tp-size", "2"]])
    assert v17["ok"] and v17["values"]["cuda_graph_max_bs_decode"] == 256
    assert v10["ok"] and v10["values"]["cuda_graph_max_bs"] == 256
    assert v17["values"]["tp_size"] == v10["values"]["tp_size"] == 2


def test_an_explicit_radix_policy_is_recorded_as_explicit():
    """`prepare_server_args` marks `--radix-eviction-policy` as user-set; leaving it out does not."""
    explicit, implicit = parse_argvs("0.5.23", [[*MODEL, "--radix-eviction-policy", "lru"], MODEL])
    assert explicit["values"]["_radix_eviction_policy_explicitly_set"] is True
    assert implicit["values"]["_radix_eviction_policy_explicitly_set"] is False
    assert implicit["values"]["radix_eviction_policy"] == "lru"


def test_choices_are_enforced_with_argparse_message():
    """An invalid choice comes back as argparse's message."""
    [bad] = parse_argvs("0.5.23", [[*MODEL, "--mm-feature-transport", "shm"]])
    assert bad == {
        "ok": False,
        "error": "argument --mm-feature-transport: invalid choice: 'shm' (choose from 'cpu', 'cuda_ipc', 'cuda_vmm')",
        "values": {},
    }


@pytest.mark.parametrize(("key", "ok"), [("radix-eviction-policy: priority", True), ("mm-enable-dp-encoder: true", False)])
def test_config_yaml_accepts_only_single_value_options(tmp_path, key, ok):
    """SGLang's `--config` YAML rejects a BooleanOptionalAction field, as the catalog records."""
    config = tmp_path / "server.yaml"
    config.write_text(key + "\n", encoding="utf-8")
    [answer] = parse_argvs("0.5.23", [[*MODEL, "--config", str(config)]])
    assert answer["ok"] is ok
    if not ok:
        assert answer["error"] == "ValueError: Unsupported config option 'mm_enable_dp_encoder' with action 'BooleanOptionalAction'"


def test_a_missing_release_is_a_clear_error():
    """Asking for a release the harness lacks names the setup command."""
    from servetune.errors import CatalogError

    with pytest.raises(CatalogError, match="not in the CPU-only harness"):
        parse_argvs("0.4.0", [MODEL])
    assert issubclass(OracleError, RuntimeError)
