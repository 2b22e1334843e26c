#!/bin/bash
# Here (not on the device): put a clean copy of a commit's servetune into .sgl/src for the next device call.
#   bash scripts/device/snapshot.sh [REV]     (default HEAD)
set -euo pipefail
rev=${1:-HEAD}
rm -rf .sgl/src && mkdir -p .sgl/src
git archive "$rev" servetune pyproject.toml | tar x -C .sgl/src
git rev-parse --short "$rev" > .sgl/src/COMMIT
echo "snapshot $(cat .sgl/src/COMMIT) -> .sgl/src ($(du -sh .sgl/src | cut -f1))"
