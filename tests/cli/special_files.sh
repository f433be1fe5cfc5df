#!/usr/bin/env bash
# special_files.sh — the tool never hangs on, nor reads without bound from, an argument that
# is not a regular file, and its file errors give the reason: `attn inspect` of /dev/zero and
# of a FIFO with no writer, a FIFO as forward's --q (.npy) and as a safetensors input, and
# `heatmap --labels` given a folder each fail at once (exit 1, one line naming the path and
# what it is); a picture that cannot be written says why. Every run is bounded by `timeout`:
# a hang fails the test (exit 124) instead of holding it.
# usage: bash special_files.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passed=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# expect_error NAME PATTERN COMMAND...: exit 1 within 15 s, one line on stderr matching
# PATTERN, nothing on stdout.
expect_error() {
    local name=$1 pattern=$2
    shift 2
    timeout 15 "$@" > "$work/out" 2> "$work/err" < /dev/null
    local status=$?
    if [ "$status" -eq 124 ]; then fail "$name: still running after 15 s"; return; fi
    if [ "$status" -ne 1 ]; then fail "$name: exit $status, expected 1 ($(head -c 300 "$work/err"))"; return; fi
    if [ "$(wc -l < "$work/err")" -ne 1 ]; then fail "$name: $(wc -l < "$work/err") lines on stderr"; return; fi
    if ! grep -qE -- "$pattern" "$work/err"; then fail "$name: '$(cat "$work/err")' does not match '$pattern'"; return; fi
    if [ -s "$work/out" ]; then fail "$name: printed on stdout"; return; fi
    passed=$((passed + 1))
}

mkfifo "$work/fifo.npy" "$work/fifo.safetensors"
if [ -r /dev/zero ]; then
    expect_error "inspect /dev/zero" "^attn inspect: /dev/zero: a character device, not a regular file" \
        "$attn" inspect /dev/zero
fi
expect_error "inspect FIFO" "^attn inspect: $work/fifo.npy: a FIFO, not a regular file" \
    "$attn" inspect "$work/fifo.npy"
expect_error "inspect FIFO .safetensors" "fifo.safetensors: a FIFO, not a regular file" \
    "$attn" inspect "$work/fifo.safetensors"

python3 - "$work" <<'PY' || fail "writing the .npy inputs"
import sys
import numpy as np
work = sys.argv[1]
np.save(f"{work}/q.npy", np.ones((1, 4, 2, 8), np.float32))
np.save(f"{work}/w.npy", np.eye(3, dtype=np.float32))
PY
expect_error "forward --q FIFO" "--q .*fifo.npy: a FIFO, not a regular file" \
    "$attn" forward --q "$work/fifo.npy" --k "$work/q.npy" --v "$work/q.npy" --out "$work/o.npy"
expect_error "forward --k FIFO safetensors" "--k .*fifo.safetensors: a FIFO, not a regular file" \
    "$attn" forward --q "$work/q.npy" --k "$work/fifo.safetensors:k" --v "$work/q.npy" \
    --out "$work/o.npy"
[ -e "$work/o.npy" ] && fail "forward wrote its output after an input error"

mkdir "$work/labels"
expect_error "heatmap --labels DIR" "--labels .*labels: a folder, not a regular file" \
    "$attn" heatmap --weights "$work/w.npy" --labels "$work/labels" --out "$work/h.png"
expect_error "heatmap into a missing folder" "cannot write the picture \(No such file or directory\)" \
    "$attn" heatmap --weights "$work/w.npy" --out "$work/missing/h.png"

echo "special_files: $passed passed, $failures failed"
echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
