#!/usr/bin/env bash
# demo.sh — the first of the README's two set-up commands: installs what is missing, builds
# attn in ./build and runs the main job, `attn demo`, on its embedded example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target attn_cli >/dev/null
./build/attn demo "$@"
