#!/usr/bin/env bash
# safetensors.sh — `attn forward` / `attn backward` with tensors in safetensors files
# (FILE.safetensors[:NAME]; F32, BF16, F16 in, the computation's dtype out): the same results
# as the .npy path bitwise, within the dtype's bound of a float64 reference, outputs read back
# by the `safetensors` package, and the error table (safetensors_cases.py).
# Python: $ATTN_TEST_PYTHON, else the test venv of scripts/python-venv.sh (build/venv, which has
# safetensors and ml_dtypes), else python3 (numpy only: outputs are then read by the script's
# own struct/json reader, which it says).
# usage: bash safetensors.sh ATTN_BINARY SOURCE_DIR
set -euo pipefail
attn=$1
source_dir=$2
python=${ATTN_TEST_PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  [ -x "$source_dir/build/venv/bin/python" ] && python="$source_dir/build/venv/bin/python"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" "$source_dir/tests/cli/safetensors_cases.py" "$attn" "$work"
