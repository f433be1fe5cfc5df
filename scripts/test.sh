#!/usr/bin/env bash
# test.sh — the second of the README's two set-up commands, and exactly what CI runs
# (.ci/run): installs what is missing, builds attn in ./build and runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
