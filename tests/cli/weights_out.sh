#!/usr/bin/env bash
# weights_out.sh — `attn forward --weights-out` against numpy and the forward's LSE, drawn by
# attn heatmap, and its size limits (weights_out_cases.py).
# usage: bash weights_out.sh ATTN_BINARY SOURCE_DIR
set -euo pipefail
attn=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$source_dir/tests/cli/weights_out_cases.py" "$attn" "$work"
