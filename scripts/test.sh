#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, checks lint, format and the import
# contracts (ruff, lint-imports: [tool.importlinter] in pyproject.toml), then runs all tests:
#   - a virtualenv (.venv) with servetune and its dev extras (ruff and import-linter among them),
#   - CPU-only SGLang 0.5.23 / 0.5.17 / 0.5.10 for the real-parser and differential tests
#     (scripts/setup_sglang_cpu.sh, cached under .cache/sglang-cpu),
#   - a throwaway PostgreSQL server for the multi-worker tuner test (scripts/postgres.sh).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k rules -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PY" -m venv .venv
fi
echo "== installing servetune[dev]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]"
echo "== ruff check, ruff format --check, lint-imports"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports --no-cache
echo "== CPU-only SGLang for parser and oracle tests"
bash scripts/setup_sglang_cpu.sh
if [ -f scripts/postgres.sh ]; then
  echo "== PostgreSQL for the multi-worker tuner test"
  SERVETUNE_TEST_POSTGRES_URL=$(bash scripts/postgres.sh start)
  export SERVETUNE_TEST_POSTGRES_URL
  trap 'bash scripts/postgres.sh stop >/dev/null 2>&1 || true' EXIT
fi
echo "== pytest"
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"   # the slowest 25: CI has 90 minutes
