#!/bin/bash
# Here (not on the device): builds what a device call carries, where this checkout lacks it, and says whether the
# call's working tree fits the 64 MiB carry:
#   .sgl/  SGLang 0.5.17's lean bundle (BUNDLE_SH, default ../shared/tools/sglang-h200/build_bundle.sh; ~3 min)
#   .whl/  the Python 3.12 wheels servetune needs that the device image lacks (README.md, "What travels")
#     bash scripts/device/carry.sh
# A new checkout has neither (both are ignored by git).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE_SH=${BUNDLE_SH:-../shared/tools/sglang-h200/build_bundle.sh}
if [ ! -f .sgl/sgl-0.5.17-lean.tar.xz ]; then
  echo "== .sgl: building the SGLang 0.5.17 lean bundle"
  bash "$BUNDLE_SH" .sgl
fi
WHEELS=(optuna==5.0.0 alembic==1.20.1 sqlalchemy==2.1.9 mako==1.4.3 colorlog==6.12.0 typing-extensions==4.16.0)
if [ "$(ls .whl/*.whl 2>/dev/null | wc -l)" -lt ${#WHEELS[@]} ]; then
  echo "== .whl: ${WHEELS[*]}"
  mkdir -p .whl
  # pure-Python wheels only (SQLAlchemy's too): the device runs CPython 3.12, this machine may not
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform any -d .whl "${WHEELS[@]}"
fi
# the call carries the tracked tree, .sgl and .whl; docs/h200-evidence.tar.xz is moved out for device calls
tree=$(git ls-files -z | grep -zv '^docs/h200-evidence.tar.xz$' | xargs -0 du -cb | tail -1 | cut -f1)
total=$(( tree + $(du -sb .sgl | cut -f1) + $(du -sb .whl | cut -f1) ))
echo "carry: $(( total / 1024 / 1024 )) MiB of 64 (.sgl $(du -sh .sgl | cut -f1), .whl $(du -sh .whl | cut -f1)," \
  "tree without docs/h200-evidence.tar.xz $(( tree / 1024 / 1024 )) MiB)"
[ "$total" -lt $(( 64 * 1024 * 1024 )) ] || { echo "over 64 MiB: recompress the bundle (README.md, 'The carry')"; exit 1; }
