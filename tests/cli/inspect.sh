#!/usr/bin/env bash
# inspect.sh — `attn inspect` on weight files written by hand (inspect_cases.py: the
# safetensors layout built with struct/json, independent of attn's writer): Llama (GQA,
# BF16) as a sharded checkpoint (2 shards + model.safetensors.index.json, by folder and by
# index) with 10 kB of metadata, Qwen2, BERT, GPT-2, DeepSeek-V2-Lite MLA, attn's own layer
# file, a .npy array; each listing checked (names, dtypes, shapes, bytes, metadata, the
# layers recognised and their families), and malformed inputs failing with exit 1 and a
# message naming the file and the problem.
# usage: bash inspect.sh ATTN_BINARY SOURCE_DIR
set -euo pipefail
attn=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$source_dir/tests/cli/inspect_cases.py" "$attn" "$work"
