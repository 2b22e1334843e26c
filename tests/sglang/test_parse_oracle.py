"""SGLang's real parser, through the oracle: flags that differ between releases.

All argvs of one release go through one SGLang process (the `parsed` fixture)."""

from __future__ import annotations

import pytest

from tests.sglang.oracle import OracleError, parse_argvs

MODEL = ["--model-path", "Qwen/Qwen3-VL-8B-Instruct"]
ARGVS = {
    "0.5.23": {
        "old-max-bs": [*MODEL, "--cuda-graph-max-bs", "256"],
        "decode-max-bs": [*MODEL, "--cuda-graph-max-bs-decode", "256"],
        "explicit-lru": [*MODEL, "--radix-eviction-policy", "lru"],
        "plain": MODEL,
        "bad-choice": [*MODEL, "--mm-feature-transport", "shm"],
        "yaml-single-value": [*MODEL, "--config", "{tmp}/single.yaml"],
        "yaml-boolean-optional": [*MODEL, "--config", "{tmp}/optional.yaml"],
    },
    "0.5.17": {"old-max-bs": [*MODEL, "--cuda-graph-max-bs", "256", "--tp-size", "2"]},
    "0.5.10": {"old-max-bs": [*MODEL, "--cuda-graph-max-bs", "256", "--tp-size", "2"]},
}


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict:
    """`{(version, case): answer}` for every argv in ARGVS."""
    tmp = tmp_path_factory.mktemp("sglang-config")
    (tmp / "single.yaml").write_text("radix-eviction-policy: priority\n", encoding="utf-8")
    (tmp / "optional.yaml").write_text("mm-enable-dp-encoder: true\n", encoding="utf-8")
    answers = {}
    for version, cases in ARGVS.items():
        argvs = [[arg.format(tmp=tmp) for arg in argv] for argv in cases.values()]
        answers.update(zip([(version, case) for case in cases], parse_argvs(version, argvs)))
    return answers


def test_the_removed_cuda_graph_max_bs_flag_is_an_ambiguous_prefix_in_0_5_23(parsed):
    """0.5.23 rejects `--cuda-graph-max-bs` and parses `--cuda-graph-max-bs-decode`."""
    old, new = parsed["0.5.23", "old-max-bs"], parsed["0.5.23", "decode-max-bs"]
    assert not old["ok"]
    assert old["error"] == (
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )
    assert new["ok"] and new["values"]["cuda_graph_max_bs_decode"] == 256


def test_older_releases_spell_the_decode_graph_limit_differently(parsed):
    """0.5.17 keeps `--cuda-graph-max-bs` as an alias of the decode field; 0.5.10 has its own field."""
    v17, v10 = parsed["0.5.17", "old-max-bs"], parsed["0.5.10", "old-max-bs"]
    assert v17["ok"] and v17["values"]["cuda_graph_max_bs_decode"] == 256
    assert v10["ok"] and v10["values"]["cuda_graph_max_bs"] == 256
    assert v17["values"]["tp_size"] == v10["values"]["tp_size"] == 2


def test_an_explicit_radix_policy_is_recorded_as_explicit(parsed):
    """`prepare_server_args` marks `--radix-eviction-policy` as user-set; leaving it out does not."""
    explicit, implicit = parsed["0.5.23", "explicit-lru"], parsed["0.5.23", "plain"]
    assert explicit["values"]["_radix_eviction_policy_explicitly_set"] is True
    assert implicit["values"]["_radix_eviction_policy_explicitly_set"] is False
    assert implicit["values"]["radix_eviction_policy"] == "lru"


def test_choices_are_enforced_with_argparse_message(parsed):
    """An invalid choice comes back as argparse's message."""
    assert parsed["0.5.23", "bad-choice"] == {
        "ok": False,
        "error": "argument --mm-feature-transport: invalid choice: 'shm' (choose from 'cpu', 'cuda_ipc', 'cuda_vmm')",
        "values": {},
    }


def test_config_yaml_accepts_only_single_value_options(parsed):
    """SGLang's `--config` YAML takes a store field and rejects a BooleanOptionalAction one."""
    single, optional = parsed["0.5.23", "yaml-single-value"], parsed["0.5.23", "yaml-boolean-optional"]
    assert single["ok"] and single["values"]["radix_eviction_policy"] == "priority"
    assert (
        optional["error"]
        == "ValueError: Unsupported config option 'mm_enable_dp_encoder' with action 'BooleanOptionalAction'"
    )


def test_a_missing_release_is_a_clear_error():
    """Asking for a release the harness lacks names the setup command, before any subprocess."""
    from servetune.errors import CatalogError

    with pytest.raises(CatalogError, match="not in the CPU-only harness"):
        parse_argvs("0.4.0", [MODEL])
    assert issubclass(OracleError, RuntimeError)
