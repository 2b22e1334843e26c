"""Run Python against one CPU-only SGLang release made by `scripts/setup_sglang_cpu.sh`.

The harness lives in `$SERVETUNE_SGLANG_CPU`, else `<repo>/.cache/sglang-cpu`: one venv, one
`pip --target` directory per release, and a `run VERSION ...` launcher. Stdlib only; SGLang is
never imported in this process.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from servetune.errors import CatalogError, did_you_mean

SETUP_COMMAND = "scripts/setup_sglang_cpu.sh"


def harness_root() -> Path:
    """The harness directory (it may not exist yet)."""
    configured = os.environ.get("SERVETUNE_SGLANG_CPU")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".cache" / "sglang-cpu"


def harness_versions() -> list[str]:
    """SGLang releases that the harness has fully installed, sorted by version."""
    from servetune.catalog import version_key

    root = harness_root()
    if not (root / "run").is_file():
        return []
    found = [p.name for p in root.iterdir() if (p / ".stamp").is_file() and (p / "sglang").is_dir()]
    return sorted(found, key=version_key)


def harness_command(version: str) -> list[str]:
    """The argv prefix that runs the harness Python with SGLang `version` importable.

    Raises:
        CatalogError: the harness or this release is not installed.
    """
    installed = harness_versions()
    if version not in installed:
        where = harness_root()
        if not installed:
            message = f"the CPU-only SGLang harness is not installed at {where}"
        else:
            message = f"SGLang {version} is not in the CPU-only harness at {where} (it has {', '.join(installed)})"
        hint = did_you_mean(version, installed)
        raise CatalogError(
            message,
            help=f"run `SERVETUNE_SGLANG_VERSIONS={version} {SETUP_COMMAND}`"
            + (f", or did you mean {hint!r}?" if hint else ""),
        )
    return [str(harness_root() / "run"), version, "-W", "ignore"]


def run_in_harness(
    version: str, args: list[str], *, input: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run `python <args>` in the harness for `version`; output is captured as text, never raised on."""
    return subprocess.run(
        [*harness_command(version), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
