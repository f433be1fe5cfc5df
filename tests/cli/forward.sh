#!/usr/bin/env bash
# forward.sh — `attn forward` against an independent float64 numpy computation for a table of
# option sets (forward_cases.py): shapes, GQA, causal alignments, window, mask, bias, ALiBi,
# soft-cap, padded lengths, global tokens, patterns, block layouts, threads and kernels.
# usage: bash forward.sh ATTN_BINARY SOURCE_DIR
set -euo pipefail
attn=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$source_dir/tests/cli/forward_cases.py" "$attn" "$work"
