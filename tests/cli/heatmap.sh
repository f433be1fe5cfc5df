#!/usr/bin/env bash
# heatmap.sh — `attn heatmap`: labelled PNG and SVG heat maps checked pixel by pixel and as
# XML, masked cells, head grids, safetensors weights, and its errors (heatmap_cases.py).
# usage: bash heatmap.sh ATTN_BINARY SOURCE_DIR
set -euo pipefail
attn=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$source_dir/tests/cli/heatmap_cases.py" "$attn" "$work"
