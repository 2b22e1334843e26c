#!/usr/bin/env bash
# Build the CPU-only SGLang harness used by `servetune catalog sync` and tests/sglang/.
#
#   .cache/sglang-cpu/venv/        one venv: CPU torch 2.13.0 and the light deps SGLang imports
#   .cache/sglang-cpu/<version>/   `pip install --no-deps --target` of sglang==<version>, plus the
#                                  release's own pins of transformers, tokenizers, openai, xgrammar
#                                  and apache-tvm-ffi (their versions differ between releases)
#   .cache/sglang-cpu/stubs/       stand-ins for triton and torchvision (servetune/catalog/_import_stub.py)
#   .cache/sglang-cpu/run          `run <version> script.py args...` runs the venv's Python on one release
#
# Idempotent: stamp files hold a hash of what built each part, so a re-run is a no-op.
# Environment: PYTHON (default python3), SERVETUNE_SGLANG_CPU (the cache dir),
# SERVETUNE_SGLANG_VERSIONS (default "0.5.23 0.5.17 0.5.10").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${SERVETUNE_SGLANG_CPU:-$ROOT/.cache/sglang-cpu}"
VERSIONS="${SERVETUNE_SGLANG_VERSIONS:-0.5.23 0.5.17 0.5.10}"
PYTHON="${PYTHON:-python3}"
STUB_SRC="$ROOT/servetune/catalog/_import_stub.py"
TORCH_VERSION="2.13.0"
# Light, version-independent modules that SGLang's server_args and arg_groups import at module top.
VENV_DEPS=(
  "torch==$TORCH_VERSION" numpy orjson psutil pybase64 requests packaging pillow starlette msgspec
  pydantic pyzmq tqdm IPython aiohttp "huggingface_hub>=1.31,<2" safetensors regex pyyaml httpx
  anyio distro jiter sniffio partial_json_parser dill sentencepiece typing_extensions
)
# Imported at parse time too, but each release pins its own version: installed next to sglang.
PER_RELEASE=(transformers tokenizers openai xgrammar apache-tvm-ffi)

say() { printf '[setup_sglang_cpu] %s\n' "$*"; }
# Bump LAYOUT when the way a part is built changes, so that existing caches are rebuilt.
LAYOUT=1
fingerprint() { printf '%s\n' "layout=$LAYOUT" "$@" | sha256sum | cut -c1-16; }
PIP_QUIET=(--quiet --disable-pip-version-check --no-input)
pip_target() {
  # pip --target, without dependencies; the console scripts it writes are never run here.
  local target="$1"
  shift
  "$DEST/venv/bin/pip" install "${PIP_QUIET[@]}" --no-deps --target "$target" "$@"
  rm -rf "$target/bin"
}

start=$SECONDS
mkdir -p "$DEST"
py_version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

# 1. The shared venv.
venv_stamp="$(fingerprint "$py_version" "${VENV_DEPS[@]}")"
if [[ "$(cat "$DEST/venv/.stamp" 2>/dev/null)" != "$venv_stamp" ]]; then
  say "creating $DEST/venv with $PYTHON ($py_version), torch $TORCH_VERSION (CPU) and ${#VENV_DEPS[@]} light deps"
  rm -rf "$DEST/venv"
  "$PYTHON" -m venv "$DEST/venv"
  "$DEST/venv/bin/pip" install "${PIP_QUIET[@]}" "${VENV_DEPS[@]}"
  if "$DEST/venv/bin/python" -c 'import triton' 2>/dev/null || "$DEST/venv/bin/python" -c 'import torchvision' 2>/dev/null; then
    say "error: the venv got a real triton/torchvision, which the stubs must stand in for" >&2
    exit 1
  fi
  echo "$venv_stamp" >"$DEST/venv/.stamp"
else
  say "venv up to date ($DEST/venv)"
fi

# 2. Stubs for modules SGLang imports but never runs on this path.
mkdir -p "$DEST/stubs"
for name in triton torchvision; do
  mkdir -p "$DEST/stubs/$name"
  cmp -s "$STUB_SRC" "$DEST/stubs/$name/__init__.py" || cp "$STUB_SRC" "$DEST/stubs/$name/__init__.py"
done

# 3. One --target install per release.
release_pins() {
  # PER_RELEASE requirements as the installed release declares them (sglang's METADATA).
  "$DEST/venv/bin/python" - "$1" "${PER_RELEASE[@]}" <<'PY'
import importlib.metadata as md, sys
from packaging.requirements import Requirement
target, names = sys.argv[1], sys.argv[2:]
dist = next(md.distributions(path=[target], name="sglang"))
for line in dist.requires or []:
    req = Requirement(line)
    if req.name.lower() in names and (req.marker is None or req.marker.evaluate({"extra": ""})):
        print(req)
PY
}
tokenizers_of_transformers() {
  # The tokenizers range that the installed transformers checks at import.
  sed -n 's/.*"tokenizers": "\([^"]*\)".*/\1/p' "$1/transformers/dependency_versions_table.py"
}

for version in $VERSIONS; do
  target="$DEST/$version"
  stamp="$(fingerprint "$venv_stamp" "$version" "${PER_RELEASE[@]}")"
  if [[ "$(cat "$target/.stamp" 2>/dev/null)" == "$stamp" ]]; then
    say "sglang $version up to date ($target)"
    continue
  fi
  say "installing sglang==$version (--no-deps) into $target"
  rm -rf "$target"
  pip_target "$target" "sglang==$version"
  mapfile -t pins < <(release_pins "$target")
  say "  its pins: ${pins[*]}"
  pip_target "$target" "${pins[@]}"
  if [[ " ${pins[*]} " != *" tokenizers"* && -d "$target/transformers" ]]; then
    spec="$(tokenizers_of_transformers "$target")"
    say "  tokenizers as its transformers requires: $spec"
    pip_target "$target" "$spec"
  fi
  echo "$stamp" >"$target/.stamp"
done

# 4. The runner.
cat >"$DEST/run.new" <<'SH'
#!/usr/bin/env bash
# Usage: run VERSION [python args...]: the harness venv's Python with one SGLang release importable.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${1:?usage: run VERSION [python args...]}"
shift
if [[ ! -f "$here/$version/.stamp" ]]; then
  echo "sglang $version is not in $here; run scripts/setup_sglang_cpu.sh (SERVETUNE_SGLANG_VERSIONS=\"$version\")" >&2
  exit 2
fi
PYTHONPATH="$here/$version:$here/stubs" PYTHONNOUSERSITE=1 exec "$here/venv/bin/python" "$@"
SH
chmod +x "$DEST/run.new"
mv "$DEST/run.new" "$DEST/run"

# 5. Smoke test, once per set of builds: each release builds its parser.
ready_stamp="$(fingerprint "$venv_stamp" $VERSIONS "$(cat "$STUB_SRC")")"
if [[ "$(cat "$DEST/.ready" 2>/dev/null)" == "$ready_stamp" ]]; then
  say "up to date in $((SECONDS - start)) s: $DEST/run <version> script.py  (versions: $VERSIONS)"
  exit 0
fi
for version in $VERSIONS; do
  "$DEST/run" "$version" -W ignore -c \
    'import sglang.srt.server_args as s, argparse; p = argparse.ArgumentParser(); s.ServerArgs.add_cli_args(p)' \
    || { say "error: sglang $version does not import in the harness; see the trace above" >&2; exit 1; }
done
echo "$ready_stamp" >"$DEST/.ready"
say "ready in $((SECONDS - start)) s: $DEST/run <version> script.py  (versions: $VERSIONS)"
