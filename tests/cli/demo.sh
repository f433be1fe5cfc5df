#!/usr/bin/env bash
# demo.sh — `attn demo` runs with no arguments in about a second, prints the notes' 5x5
# masked-softmax example with the notes' rounded weights, the parameter counts and the KV-cache
# sizes, and writes valid heat-map PNGs to the folder it names; `attn demo --help` documents
# its options; an unusable --out is a one-line error.
# usage: bash demo.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

start=$(date +%s%N)
(cd "$work" && "$attn" demo > demo.txt 2> demo.err) || fail "attn demo exits non-zero: $(cat "$work/demo.err")"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "attn demo took ${elapsed_ms} ms"
[ "$elapsed_ms" -lt 5000 ] || fail "attn demo took ${elapsed_ms} ms (about a second expected)"
[ ! -s "$work/demo.err" ] || fail "attn demo wrote to stderr: $(cat "$work/demo.err")"

# The notes' masked softmax, rounded to 2 decimals: rows 1-4 exactly as the notes print them,
# row 5 as exact rounding gives it (the notes adjust it to sum to 1: see the demo's remark).
for row in "| 1.00 0.00 0.00 0.00 0.00" "| 0.60 0.40 0.00 0.00 0.00" "| 0.07 0.08 0.85 0.00 0.00" \
           "| 0.04 0.57 0.19 0.21 0.00" "| 0.87 0.10 0.01 0.02 0.00" "| 0.86 0.10 0.01 0.02 0.01"; do
    grep -qF -- "$row" "$work/demo.txt" || fail "demo output lacks the masked-softmax row '$row'"
done
for text in "我" "喜欢" "注意力" "机制" "[5 x 4]" "[5 x 5]" "1,048,576" "786,432" "576 elements" \
            "Q7, Q8 -> K4, V4" "max |difference| = 0" "0.98     0.05     0.11     0.01"; do
    grep -qF -- "$text" "$work/demo.txt" || fail "demo output lacks '$text'"
done

# Default folder ./attn-demo with valid PNGs: magic, IHDR, a size that shows a 5x5 map clearly.
maps=$(ls "$work"/attn-demo/*.png 2>/dev/null | wc -l)
[ "$maps" -ge 5 ] || fail "expected at least 5 heat maps in ./attn-demo, found $maps"
python3 - "$work"/attn-demo/*.png <<'PY' || fail "a heat map is not a valid, large enough PNG"
import struct, sys, zlib
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 200 and height >= 200, (path, width, height)
    # Decompress the image data: a real, complete PNG stream.
    chunks, position = b"", 8
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        if kind == b"IDAT":
            chunks += data[position + 8:position + 8 + length]
        position += 12 + length
    raw = zlib.decompress(chunks)
    assert len(raw) == height * (1 + 3 * width), path
print(f"{len(sys.argv) - 1} heat maps are valid PNGs")
PY
grep -qF "attn-demo/04_causal_notes_example.png" "$work/demo.txt" || fail "demo does not name its heat-map paths"

# --out chooses the folder (created, nested); --no-heatmaps writes nothing.
"$attn" demo --out "$work/nested/maps" > /dev/null 2>&1 || fail "attn demo --out failed"
[ -s "$work/nested/maps/01_self_attention.png" ] || fail "--out did not receive the heat maps"
(cd "$work" && mkdir empty && cd empty && "$attn" demo --no-heatmaps > /dev/null) || fail "--no-heatmaps failed"
[ -z "$(ls -A "$work/empty")" ] || fail "--no-heatmaps wrote files"

# Errors: one line, non-zero.
touch "$work/a-file"
"$attn" demo --out "$work/a-file/maps" > /dev/null 2> "$work/err.txt" && fail "--out under a file succeeded"
[ "$(wc -l < "$work/err.txt")" -eq 1 ] && grep -qF "a-file" "$work/err.txt" || fail "bad --out message: $(cat "$work/err.txt")"
"$attn" demo --bogus > /dev/null 2> "$work/err.txt" && fail "unknown option accepted"
grep -qF -- "'--bogus'" "$work/err.txt" || fail "unknown option message: $(cat "$work/err.txt")"

"$attn" demo --help > "$work/help.txt" || fail "attn demo --help exits non-zero"
for option in --out --no-heatmaps; do
    grep -qE -- "^  $option " "$work/help.txt" || fail "attn demo --help lacks $option"
done

[ "$failures" -eq 0 ] || { echo "$failures failures"; exit 1; }
echo "demo behaves"
