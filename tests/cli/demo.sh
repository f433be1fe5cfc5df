#!/usr/bin/env bash
# demo.sh — `attn demo` runs with no arguments in about a second, prints the notes' 5x5
# masked-softmax example with the notes' rounded weights, the parameter counts and the KV-cache
# sizes, and writes labelled heat maps (PNG, or SVG with --svg) to the folder it names, with
# the tokens, the weights in the cells, a title and a colour bar; `attn demo --help` documents
# its options; an unusable --out is a one-line error.
# usage: bash demo.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
source_dir=$2
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

# Default folder ./attn-demo with readable PNGs: valid files of a size that shows a 5x5 map
# clearly, token labels beside and below the map, the weights in the cells, a title, a colour
# bar; the notes' causal example's yellow cell (row 我, weight 1.00) is where it should be.
maps=$(ls "$work"/attn-demo/*.png 2>/dev/null | wc -l)
[ "$maps" -ge 8 ] || fail "expected at least 8 heat maps in ./attn-demo, found $maps"
[ -s "$work/attn-demo/07_mha_layer.png" ] || fail "no picture of both heads of the layer"
PYTHONPATH="$source_dir/tests/cli" python3 - "$work"/attn-demo <<'PY' || fail "the demo's heat maps are not readable pictures"
import os, sys
from pictures import INK, MASKED, VIRIDIS_HIGH, VIRIDIS_LOW, Png, bounding_box
folder = sys.argv[1]
for name in sorted(os.listdir(folder)):
    png = Png(os.path.join(folder, name))
    assert png.width >= 400 and png.height >= 350, (name, png.width, png.height)
png = Png(os.path.join(folder, "04_causal_notes_example.png"))
# (left of the colour bar and the "masked" legend beside it)
cells = [p for p in png.where(VIRIDIS_LOW, 6) + png.where(VIRIDIS_HIGH, 6) if p[0] < png.width - 100]
x0, y0, x1, y1 = bounding_box(cells)
cell = (x1 - x0) / 5
assert 40 <= cell <= 100 and abs((y1 - y0) - (x1 - x0)) <= 2, (x0, y0, x1, y1)
assert png.pixel(int(x0 + 0.1 * cell), int(y0 + 0.1 * cell)) == VIRIDIS_HIGH, "cell (我, 我)"
# (我, 喜欢) is masked (hatched grey); (机制, 机制) is allowed with weight 0.00 (purple).
masked = png.dominant((int(x0 + 1.1 * cell), int(y0 + 0.1 * cell), int(x0 + 1.9 * cell), int(y0 + 0.9 * cell)))
assert masked == MASKED, f"cell (我, 喜欢) is {masked}, not the masked grey"
tiny = png.dominant((int(x0 + 4.05 * cell), int(y0 + 4.05 * cell), int(x0 + 4.3 * cell), int(y0 + 4.3 * cell)))
assert all(abs(a - b) <= 4 for a, b in zip(tiny, VIRIDIS_LOW)), f"cell (机制, 机制) is {tiny}, not purple"
for what, box, least in (("row labels", (0, y0, x0 - 2, y1), 150),
                         ("column labels", (x0, y1 + 2, x1, png.height), 150),
                         ("title", (0, 0, png.width, y0 - 2), 300),
                         ("values", (x0, y0, x1, y1), 50),
                         ("colour-bar ticks", (x1 + 30, y0, png.width, y1), 100)):
    found = len(png.where(INK, 40, box))
    assert found >= least, f"{what}: {found} ink pixels"
grid = Png(os.path.join(folder, "07_mha_layer.png"))
assert grid.width > 1.6 * png.width - 100, ("two heads side by side", grid.width, png.width)
print("the demo's heat maps are labelled pictures")
PY
grep -qF "attn-demo/04_causal_notes_example.png" "$work/demo.txt" || fail "demo does not name its heat-map paths"

# --out chooses the folder (created, nested); --no-heatmaps writes nothing.
"$attn" demo --out "$work/nested/maps" > /dev/null 2>&1 || fail "attn demo --out failed"
[ -s "$work/nested/maps/01_self_attention.png" ] || fail "--out did not receive the heat maps"
# --svg: the same pictures as SVG, their titles naming layer and head, the tokens as text.
"$attn" demo --svg --out "$work/svg" > /dev/null 2>&1 || fail "attn demo --svg failed"
PYTHONPATH="$source_dir/tests/cli" python3 - "$work/svg" <<'PY' || fail "the demo's SVGs are not labelled"
import os, sys
from pictures import read_svg
names = sorted(os.listdir(sys.argv[1]))
assert len(names) >= 8 and all(n.endswith(".svg") for n in names), names
_, title, desc, glyphs = read_svg(os.path.join(sys.argv[1], "02_single_head.svg"))
assert "layer 1" in title and "head 1" in title, title
assert all(t in desc for t in ["我", "喜欢", "学", "注意力", "机制"]), desc
assert glyphs >= 60, glyphs
PY
(cd "$work" && mkdir empty && cd empty && "$attn" demo --no-heatmaps > /dev/null) || fail "--no-heatmaps failed"
[ -z "$(ls -A "$work/empty")" ] || fail "--no-heatmaps wrote files"

# Errors: one line, non-zero.
touch "$work/a-file"
"$attn" demo --out "$work/a-file/maps" > /dev/null 2> "$work/err.txt" && fail "--out under a file succeeded"
[ "$(wc -l < "$work/err.txt")" -eq 1 ] && grep -qF "a-file" "$work/err.txt" || fail "bad --out message: $(cat "$work/err.txt")"
"$attn" demo --bogus > /dev/null 2> "$work/err.txt" && fail "unknown option accepted"
grep -qF -- "'--bogus'" "$work/err.txt" || fail "unknown option message: $(cat "$work/err.txt")"

"$attn" demo --help > "$work/help.txt" || fail "attn demo --help exits non-zero"
for option in --out --svg --no-heatmaps; do
    grep -qE -- "^  $option " "$work/help.txt" || fail "attn demo --help lacks $option"
done

[ "$failures" -eq 0 ] || { echo "$failures failures"; exit 1; }
echo "demo behaves"
