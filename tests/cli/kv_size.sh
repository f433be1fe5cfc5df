#!/usr/bin/env bash
# kv_size.sh — `attn kv-size` prints KV-cache sizes that match the formulas (elements per
# token = 2·g·dh for MHA/GQA/MQA, d_c + d_rope for MLA; bytes = elements · element size;
# per layer × context × batch; per model × layers: 80 for Llama-2-70B, 60 for DeepSeek-V2;
# int8 adds one float32 scale per (token, KV head) for K and for V (MLA: K only), fp8 adds
# nothing per token and says its per-head scales apart), with MLA's cache ≥ 7× smaller than MHA's at DeepSeek-V2's sizes; and `attn kv-size`
# rejects bad arguments with exit status 2 and a one-line message naming the option, printing
# nothing on stdout.
# usage: bash kv_size.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# Numbers against the formulas, for three settings of dtype / context / batch.
check_sizes() { # dtype element_bytes context batch [per-token scales: 1]
    local dtype=$1 element_bytes=$2 context=$3 batch=$4 scales=${5:-0}
    "$attn" kv-size --dtype "$dtype" --context "$context" --batch "$batch" > "$work/sizes.txt" \
        2> "$work/sizes.err" || { fail "kv-size $*: exit $? ($(cat "$work/sizes.err"))"; return; }
    python3 - "$work/sizes.txt" "$element_bytes" "$context" "$batch" "$scales" "$dtype" <<'PY' || fail "kv-size $*: numbers"
import re, sys
path, element_bytes, context, batch, scales = sys.argv[1], *map(int, sys.argv[2:6])
dtype = sys.argv[6]
text = open(path).read()
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# label prefix -> (elements per token per layer, layers, stored rows per token: one float32
# scale each under int8 = KV heads for K, and as many for V except MLA, whose value is its key)
expected = {
    "MHA  (Llama-2-70B-like": (2 * 64 * 128, 80, 2 * 64),
    "GQA  (Llama-2-70B,": (2 * 8 * 128, 80, 2 * 8),
    "MQA  (h = 64, g = 1": (2 * 1 * 128, 80, 2 * 1),
    "MLA  (DeepSeek-V2": (512 + 64, 60, 1),
    "MHA  (DeepSeek-V2 without MLA": (128 * (192 + 128), 60, 2 * 128),
}
found = {}
for line in text.splitlines():
    for prefix, (elements, layers, rows) in expected.items():
        if not line.startswith(prefix):
            continue
        numbers = re.findall(r"(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)?(?=\s|%|$)", line.split(")", 1)[1])
        elem, bytes_per_token, scale_bytes = (int(numbers[i][0]) for i in range(3))
        layer_bytes = float(numbers[3][0]) * units[numbers[3][1]]
        model_bytes = float(numbers[4][0]) * units[numbers[4][1]]
        want_token = elements * element_bytes + scales * rows * 4
        want_layer = want_token * context * batch
        assert elem == elements, (prefix, elem, elements)
        assert scale_bytes == scales * rows * 4, (prefix, scale_bytes)
        assert bytes_per_token == want_token, (prefix, bytes_per_token, want_token)
        assert abs(layer_bytes - want_layer) <= 0.006 * want_layer, (prefix, layer_bytes, want_layer)
        assert abs(model_bytes - want_layer * layers) <= 0.006 * want_layer * layers, (prefix, model_bytes)
        found[prefix] = bytes_per_token
assert len(found) == len(expected), ("missing rows", set(expected) - set(found), text)
ratio = found["MHA  (DeepSeek-V2 without MLA"] / found["MLA  (DeepSeek-V2"]
assert ratio >= 7, ratio
llama_ratio = found["MHA  (Llama-2-70B-like"] / found["MLA  (DeepSeek-V2"]
m = re.search(r"(\d+(?:\.\d+)?)x smaller than the same model's MHA", text)
assert m and abs(float(m.group(1)) - ratio) < 0.06, (m and m.group(1), ratio)
m = re.search(r"(\d+(?:\.\d+)?)x smaller than\s+Llama-2-70B-like MHA", text)
assert m and abs(float(m.group(1)) - llama_ratio) < 0.06, (m and m.group(1), llama_ratio)
assert "576 values/token/layer" in text
# the notes on the scales: int8's per token, fp8's per head and layer (2 x Hkv x 4 bytes)
assert ("int8: bytes/tok include one float32 scale per (token, KV head)" in text) == (dtype == "int8")
fp8_note = re.search(r"fp8: plus one float32 scale per KV head.*?\((\d+) B for MHA, (\d+) B for GQA,"
                     r"\s+(\d+) B for MQA, (\d+) B for MLA", text, re.S)
assert bool(fp8_note) == dtype.startswith("fp8"), dtype
if fp8_note:
    assert [int(g) for g in fp8_note.groups()] == [2 * 64 * 4, 2 * 8 * 4, 2 * 1 * 4, 1 * 4], fp8_note.groups()
print(f"kv-size {path}: all rows match; MLA {ratio:.1f}x smaller than DeepSeek-V2 MHA")
PY
}
check_sizes bf16 2 4096 1
check_sizes f32 4 1000 2
check_sizes f16 2 131072 3
check_sizes int8 1 4096 1 1
check_sizes int8 1 32768 2 1
check_sizes fp8_e4m3 1 4096 1
check_sizes fp8_e5m2 1 1000 3

# Argument errors: exit 2, one line naming the problem on stderr, nothing on stdout.
expect_usage_error() { # text-in-message command...
    local text=$1
    shift
    "$@" > "$work/out.txt" 2> "$work/err.txt"
    local status=$?
    [ "$status" -eq 2 ] || fail "'$*' exits $status, expected 2"
    [ ! -s "$work/out.txt" ] || fail "'$*' printed on stdout: $(head -c 200 "$work/out.txt")"
    head -n 1 "$work/err.txt" | grep -qF -- "$text" || fail "'$*': message lacks '$text': $(cat "$work/err.txt")"
}
expect_usage_error "--context 0" "$attn" kv-size --context 0
expect_usage_error "--context abc" "$attn" kv-size --context abc
expect_usage_error "--dtype f8" "$attn" kv-size --dtype f8
expect_usage_error "--dtype q8" "$attn" kv-size --dtype q8
expect_usage_error "--batch 0" "$attn" kv-size --batch 0
expect_usage_error "--bogus" "$attn" kv-size --bogus
expect_usage_error "--context" "$attn" kv-size --context
[ "$failures" -eq 0 ] && echo "kv_size.sh: all checks passed"
exit $((failures > 0))
