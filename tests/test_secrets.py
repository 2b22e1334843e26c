"""Secrets are a type: registered values and URL passwords become `<redacted>` wherever they are written;
the catalog marks credential fields; pins mean what they say."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import BaseModel

from servetune.secrets import REDACTED, Redactor, Secret, is_secret_field, is_secret_name, redactor


def test_registered_values_are_replaced_inside_nested_data():
    """Strings inside dicts (keys and values), lists, tuples and pydantic dumps are redacted; types kept."""

    class Record(BaseModel):
        argv: list[str]
        note: str

    r = Redactor()
    r.register("sk-live-0123")
    data = {
        "argv": ["--api-key", "sk-live-0123", "--port", "1"],
        "pair": ("x", "Bearer sk-live-0123"),
        "sk-live-0123": 4,
        "model": Record(argv=["--api-key=sk-live-0123"], note="ok"),
    }
    assert r.redact(data) == {
        "argv": ["--api-key", REDACTED, "--port", "1"],
        "pair": ("x", f"Bearer {REDACTED}"),
        REDACTED: 4,
        "model": {"argv": [f"--api-key={REDACTED}"], "note": "ok"},
    }


def test_url_quoted_spelling_is_redacted_too():
    """A secret with URL-special characters is also hidden in its percent-encoded form."""
    r = Redactor()
    r.register("p@ss/w0rd!")
    assert r.redact_text("a=p%40ss%2Fw0rd%21 b=p@ss/w0rd!") == f"a={REDACTED} b={REDACTED}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://u:PLANTED@host/db", f"postgresql://u:{REDACTED}@host/db"),
        (
            "storage postgresql+psycopg2://optuna:s3cr3t@10.0.0.1:5432/st ok",
            f"storage postgresql+psycopg2://optuna:{REDACTED}@10.0.0.1:5432/st ok",
        ),
        ("https://user@example.com/x", "https://user@example.com/x"),
        ("http://127.0.0.1:30000/v1", "http://127.0.0.1:30000/v1"),
    ],
)
def test_url_passwords_are_redacted_without_registration(text, expected):
    """`scheme://user:pass@host` loses its password; URLs without one are untouched."""
    assert Redactor().redact_text(text) == expected


@pytest.mark.parametrize("value", ["abc", "true", "False", "auto", "", "   ", 1234, None, REDACTED])
def test_values_that_cannot_be_credentials_are_not_registered(value):
    """Short values, switch words and non-strings would mangle unrelated text: refused."""
    r = Redactor()
    assert not r.register(value)
    assert r.redact_text("true auto abc 1234 x") == "true auto abc 1234 x"


def test_redact_bytes_passes_non_utf8_through():
    """Log bytes that are not UTF-8 survive; the secret inside them does not."""
    r = Redactor()
    r.register("tok-98765")
    assert r.redact_bytes(b"\xff\xfe tok-98765\n") == b"\xff\xfe " + REDACTED.encode() + b"\n"


def test_secret_registers_itself_and_hides_its_repr():
    """`Secret` is the value for use (str) but never shows in a repr."""
    key = Secret("sk-repr-4242")
    assert key == "sk-repr-4242" and f"Bearer {key}" == "Bearer sk-repr-4242"
    assert "sk-repr-4242" not in repr(key) and "sk-repr-4242" not in repr({"k": key})
    assert redactor.redact_text("x sk-repr-4242") == f"x {REDACTED}"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("GITHUB_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("SGLANG_S3_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("SGLANG_VLM_CACHE_SIZE_MB", False),
        ("CUDA_VISIBLE_DEVICES", False),
        ("SGLANG_TEST_STUCK_TOKENIZER", False),
    ],
)
def test_secret_env_names(name, secret):
    """HF_TOKEN, *_TOKEN, *_KEY, *API_KEY*, *SECRET*, *PASSWORD* carry credentials; other names do not."""
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("admin_api_key", True),
        ("ssl_keyfile_password", True),
        ("ssl_keyfile", False),
        ("max_total_tokens", False),
        ("speculative_token_map", False),
        ("tokenizer_path", False),
    ],
)
def test_secret_field_names(name, secret):
    """Credential fields by name; token counts, paths and maps are not credentials."""
    assert is_secret_field(name) is secret


def test_catalog_marks_credential_fields_and_keeps_snapshots_unchanged():
    """0.5.23's api_key, admin_api_key, ssl_keyfile_password and text-typed secret env vars are marked;
    a switch named *_KEY is not; the mark is not written back into the snapshot."""
    from servetune.catalog import dump_catalog, load_catalog, secret_names

    catalog = load_catalog("0.5.23")
    names = secret_names(catalog)
    assert {"api_key", "admin_api_key", "ssl_keyfile_password", "SGLANG_S3_SECRET_ACCESS_KEY"} <= names
    assert "SGLANG_LOG_DECODE_GRAPH_KEY" not in names and "ssl_keyfile" not in names
    assert not catalog.fields["max_running_requests"].secret
    assert '"secret"' not in dump_catalog(catalog)


def test_server_log_copy_redacts_lines_and_writes_held_back_tails(tmp_path):
    """A child writing to `RedactedLog.fd` (a secret split across two writes, a last line without a
    newline) leaves a file with every line, and no secret."""
    from servetune.launch._rundir import RedactedLog

    redactor.register("log-secret-777")
    log = RedactedLog(tmp_path / "server.log")
    code = (
        "import os,time\n"
        "os.write(1, b'start api_key=log-sec'); time.sleep(0.2); os.write(1, b'ret-777 end\\n')\n"
        "os.write(1, b'progress 50%\\rprogress 100%\\r'); os.write(1, b'last log-secret-777')\n"
    )
    try:
        subprocess.run([sys.executable, "-c", code], stdout=log.fd, check=True)
    finally:
        log.close()
    text = (tmp_path / "server.log").read_bytes().decode()
    assert "log-secret-777" not in text and "log-sec" not in text
    assert text == f"start api_key={REDACTED} end\nprogress 50%\rprogress 100%\rlast {REDACTED}"


def test_server_info_diff_hides_secrets_and_counts_a_hidden_key_as_same():
    """The requested api_key is recorded and rendered as `<redacted>`; a server that reports it hidden
    (as the stand-in and SGLang may) has not changed it."""
    from servetune.launch import diff_server_info

    redactor.register("diff-secret-31415")
    diff = diff_server_info({"api_key": "diff-secret-31415", "page_size": 16}, {"api_key": REDACTED, "page_size": 1})
    rows = diff.by_field()
    assert (rows["api_key"].requested, rows["api_key"].status) == (REDACTED, "same")
    assert rows["page_size"].status == "changed"
    assert "diff-secret-31415" not in diff.render() and "diff-secret-31415" not in diff.model_dump_json()


def test_builtin_client_sends_the_pinned_key_before_openai_api_key(monkeypatch):
    """The server's pinned key wins over `$OPENAI_API_KEY`, which remains the default."""
    from servetune.bench._probe import auth_headers

    monkeypatch.setenv("OPENAI_API_KEY", "from-env-key")
    assert auth_headers("pinned-key") == {"Authorization": "Bearer pinned-key"}
    assert auth_headers() == {"Authorization": "Bearer from-env-key"}
    monkeypatch.delenv("OPENAI_API_KEY")
    assert auth_headers() == {}
