"""Secrets are a type, not a list of call sites: values that carry a credential are registered once,
and every writer servetune has (run directories, the captured server log, study attributes, presets,
reports, stdout) passes what it writes through `redact`.

    from servetune.secrets import redact, register
    register("sk-live-123")                      # a pinned api_key, an HF_TOKEN from the environment
    redact({"argv": ["--api-key", "sk-live-123"]})   # {'argv': ['--api-key', '<redacted>']}
    redact("postgresql://u:pw@db/optuna")        # 'postgresql://u:<redacted>@db/optuna'

Which names carry credentials: SGLang fields by `is_secret_field` (the catalog marks them, as
`FieldSpec.secret`), environment variables by `is_secret_name`. This module imports only the
stdlib: every layer may use it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "REDACTED",
    "Redactor",
    "Secret",
    "is_secret_field",
    "is_secret_name",
    "redact",
    "redact_text",
    "redactor",
    "register",
    "register_env",
]

REDACTED = "<redacted>"
"""What a secret is replaced with."""
MIN_LENGTH = 4
"""Shorter values are not registered: replacing them would mangle unrelated text."""
AMBIENT_MIN_LENGTH = 8
"""Values of secret-looking variables found in the process environment (not pinned by the user) must be
at least this long: names like `*_KEY` also match settings whose short values are not credentials."""

_NOT_SECRETS = frozenset({"true", "false", "none", "null", "auto", "default"})
_SECRET_ENV = re.compile(r"(^HF_TOKEN$|_TOKEN$|_KEY$|API_KEY|SECRET|PASSWORD|PASSWD)", re.IGNORECASE)
_SECRET_FIELD = re.compile(r"(^api_key$|_api_key$|_token$|password|passwd|secret)")
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@]*:)(?P<pw>[^\s/@]+)(?P<at>@)")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable carries a credential: HF_TOKEN, *_TOKEN, *_KEY, *API_KEY*,
    *SECRET*, *PASSWORD* (case-insensitive)."""
    return bool(_SECRET_ENV.search(name))


def is_secret_field(name: str) -> bool:
    """Whether an SGLang server field carries a credential: `api_key`, `admin_api_key`, `*_token`,
    `*password*` (`ssl_keyfile_password`), `*secret*`. The catalog marks these (`FieldSpec.secret`)."""
    return bool(_SECRET_FIELD.search(name))


class Secret(str):
    """A string that is a credential: creating one registers it with the process's `redactor`, and its
    `repr` never shows it (so a debug print or a traceback's locals do not either)."""

    def __new__(cls, value: str) -> Secret:
        obj = super().__new__(cls, value)
        redactor.register(value)
        return obj

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"


class Redactor:
    """A set of secret values and the replacement of each of them, wherever it appears, by `<redacted>`."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and value in self._values

    def register(self, value: Any, *, min_length: int = MIN_LENGTH) -> bool:
        """Add `value` (and its URL-quoted spelling) to the secrets; returns whether it was added.

        Values shorter than `min_length` and words like `true`/`auto` are refused: replacing them
        everywhere would mangle unrelated text, and they cannot be credentials.
        """
        if not isinstance(value, str):
            return False
        value = value.strip()
        if len(value) < min_length or value.lower() in _NOT_SECRETS or value == REDACTED:
            return False
        spellings = {value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)}
        with self._lock:
            if spellings <= self._values:
                return True
            self._values |= spellings
            ordered = sorted(self._values, key=len, reverse=True)  # the longest spelling wins an overlap
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
        return True

    def clear(self) -> None:
        """Forget every registered value (tests)."""
        with self._lock:
            self._values.clear()
            self._pattern = None

    def redact_text(self, text: str) -> str:
        """`text` with every registered value, and every URL's password, replaced by `<redacted>`."""
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(REDACTED, text)
        if "://" in text:
            text = _URL_PASSWORD.sub(lambda m: m["head"] + REDACTED + m["at"], text)
        return text

    def redact_bytes(self, data: bytes) -> bytes:
        """`redact_text` for bytes (a log); bytes that are not UTF-8 pass through unchanged."""
        text = data.decode("utf-8", errors="surrogateescape")
        return self.redact_text(text).encode("utf-8", errors="surrogateescape")

    def redact(self, obj: Any) -> Any:
        """A copy of `obj` with secrets replaced inside every string, recursively.

        Dicts (keys and values), lists, tuples and sets keep their type; pydantic models and
        dataclasses become their redacted JSON-able dump; other objects are returned unchanged.
        """
        if isinstance(obj, str):
            return self.redact_text(obj)
        if isinstance(obj, Mapping):
            return {self.redact(k): self.redact(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple, set, frozenset)):
            items = [self.redact(v) for v in obj]
            if isinstance(obj, list):
                return items
            return tuple(items) if isinstance(obj, tuple) else type(obj)(items)
        if hasattr(obj, "model_dump") and not isinstance(obj, type):
            return self.redact(obj.model_dump(mode="json"))
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return self.redact(dataclasses.asdict(obj))
        return obj


redactor = Redactor()
"""The process-wide redactor every writer uses."""


def register(value: Any, *, min_length: int = MIN_LENGTH) -> bool:
    """Register a secret value with the process-wide redactor (see `Redactor.register`)."""
    return redactor.register(value, min_length=min_length)


def redact(obj: Any) -> Any:
    """`obj` with every registered secret (and URL password) replaced (see `Redactor.redact`)."""
    return redactor.redact(obj)


def redact_text(text: str) -> str:
    """`text` with every registered secret (and URL password) replaced."""
    return redactor.redact_text(text)


def register_env(environ: Mapping[str, str] | None = None, *, names: Iterable[str] | None = None) -> list[str]:
    """Register the values of secret-looking variables (`is_secret_name`) of `environ` (default: this
    process's environment); returns the names registered. Values shorter than `AMBIENT_MIN_LENGTH`
    are skipped (see there)."""
    env = os.environ if environ is None else environ
    done = []
    for name in names if names is not None else list(env):
        value = env.get(name)
        if value and is_secret_name(name) and register(value, min_length=AMBIENT_MIN_LENGTH):
            done.append(name)
    return done
