"""Pins mean what they say: fields the launcher sets are refused with the option to use, env names are
validated, and secret pins are registered so that nothing writes them."""

from __future__ import annotations

import pytest

from servetune.context import Context
from servetune.errors import SpecError
from servetune.secrets import REDACTED, redact_text

BUILD = {"gpu": "h200", "sglang_version": "0.5.23"}


@pytest.mark.parametrize(
    ("pin", "message", "hint"),
    [
        ("model_path=/other", "--set model_path cannot be pinned: the model is chosen with --model", "--model PATH"),
        ("host=0.0.0.0", "--set host cannot be pinned: the launcher sets --host itself", "--host ADDR"),
        ("port=31000", "--set port cannot be pinned: the launcher sets --port itself", "--port N"),
    ],
)
def test_fields_the_launcher_sets_are_refused(pin, message, hint):
    """`--set model_path/host/port` would not be what the server runs with: refused, naming the option."""
    with pytest.raises(SpecError) as info:
        Context.build("qwen3-8b", sets=[pin], **BUILD)
    assert info.value.message.startswith(message)
    assert hint in (info.value.help or "")


@pytest.mark.parametrize(
    ("env", "hint"),
    [
        ("SGLANG FOO=1", "did you mean --env"),
        ("SGLANG_X;rm=1", "did you mean --env"),
        ("SGLANG_VLM_CACHE SIZE_MB=0", "did you mean --env SGLANG_VLM_CACHE_SIZE_MB=...?"),
        ("$(touch x)=1", "--env"),
    ],
)
def test_env_names_outside_the_shell_alphabet_are_refused(env, hint):
    """A name that is not `^[A-Z_][A-Z0-9_]*$` would break the shell line: refused with --env named."""
    with pytest.raises(SpecError) as info:
        Context.build("qwen3-8b", envs=[env], **BUILD)
    assert info.value.message.startswith("--env takes an environment variable name (A-Z, 0-9 and _ only), but got")
    assert hint in (info.value.help or "")


def test_unknown_sglang_env_names_get_a_did_you_mean():
    """A well-formed but unknown SGLANG_* name is refused against the catalog, with a suggestion."""
    ctx = Context.build("qwen3-8b", envs=["SGLANG_VLM_CACHE_SIZE_M=0"], **BUILD)
    with pytest.raises(Exception, match="SGLANG_VLM_CACHE_SIZE_MB"):
        ctx.resolve()


def test_other_env_names_and_a_known_one_are_accepted():
    """NCCL_DEBUG (not SGLang's) and a catalog SGLANG_* name resolve into the env."""
    res = Context.build("qwen3-8b", envs=["NCCL_DEBUG=INFO", "SGLANG_VLM_CACHE_SIZE_MB=0"], **BUILD).resolve()
    assert res.env() == {"NCCL_DEBUG": "INFO", "SGLANG_VLM_CACHE_SIZE_MB": "0"}


def test_secret_pins_and_ambient_tokens_are_registered(monkeypatch):
    """A pinned api_key, a secret env pin and HF_TOKEN from the environment are hidden from then on;
    the argv still carries the real key (the server needs it), and `Resolution.api_key` gives it to the bench."""
    monkeypatch.setenv("HF_TOKEN", "hf_ambient_token_2718")
    res = Context.build(
        "qwen3-8b",
        sets=["api_key=pin-secret-1618"],
        envs=["SGLANG_S3_SECRET_ACCESS_KEY=s3-secret-1414"],
        **BUILD,
    ).resolve()
    assert res.api_key == "pin-secret-1618" and "pin-secret-1618" in res.argv()
    text = f"{res.argv()} {res.env()} hf_ambient_token_2718"
    assert redact_text(text) == f"['--model-path', 'Qwen/Qwen3-8B', '--api-key', '{REDACTED}'] " + (
        f"{{'SGLANG_S3_SECRET_ACCESS_KEY': '{REDACTED}'}} {REDACTED}"
    )


def test_a_resolution_without_a_key_has_none():
    """No pinned api_key: the bench sends none (or `$OPENAI_API_KEY`)."""
    assert Context.build("qwen3-8b", **BUILD).resolve().api_key is None
