#!/usr/bin/env bash
# kv_size.sh — `attn kv-size` prints KV-cache sizes that match the formulas (elements per
# token = 2·g·dh for MHA/GQA/MQA, d_c + d_rope for MLA; bytes = elements · element size;
# per layer × context × batch; per model × layers: 80 for Llama-2-70B, 60 for DeepSeek-V2;
# int8 adds one float32 scale per (token, KV head) for K and for V (MLA: K only), fp8 adds
# nothing per token and says its per-head scales apart), with MLA's cache ≥ 7× smaller than MHA's at DeepSeek-V2's sizes; and `attn kv-size` /
# `attn bench decode` reject bad arguments with exit status 2 and a one-line message naming
# the option, printing nothing on stdout. A tiny `attn bench decode` run prints its table,
# and `--kernel generic` runs (and names) that kernel family.
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
expect_usage_error "--context 0" "$attn" bench decode --context 0
expect_usage_error "--threads 0" "$attn" bench decode --threads 0
expect_usage_error "--dtype f64" "$attn" bench decode --dtype f64
expect_usage_error "--max-gib 0" "$attn" bench decode --max-gib 0
expect_usage_error "--max-gib -1" "$attn" bench decode --max-gib -1
expect_usage_error "--bogus" "$attn" bench decode --bogus
expect_usage_error "--threads" "$attn" bench decode --threads
expect_usage_error "--clock gpu" "$attn" bench decode --clock gpu
expect_usage_error "--kernel sse" "$attn" bench decode --kernel sse
expect_usage_error "--kernel" "$attn" bench decode --kernel

"$attn" bench decode --help > "$work/help.txt" 2>&1 || fail "bench decode --help exits non-zero"
grep -qF -- "--max-gib" "$work/help.txt" || fail "bench decode --help lacks its options"

# A tiny run: the bandwidth line, then one row per Hkv and storage type: tokens/s, ms/token,
# K/V GB/s, the read bandwidth measured for that configuration, their ratio, tokens/s against
# the bf16 row of the same configuration, and the kernels that ran (registry and
# attn_decode_kernel_path).
# In the ASan build, LeakSanitizer's own tracer (clang 14) crashes at exit on this command while
# scanning the dynamic TLS of a module OpenMP loads at run time ("Tracer caught signal 11", a
# fatal error of the sanitizer, not a finding); leak checking is off for this one call only
# (ASAN_OPTIONS is ignored by the other builds, and the release build checks this run in full).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
"$attn" bench decode --context 128 --dtype bf16,int8 --no-mla --threads 1 --clock cpu \
    > "$work/bench.txt" 2> "$work/bench.err" || fail "bench decode tiny run: $(cat "$work/bench.err")"
grep -qF "CPU-time clock" "$work/bench.txt" || fail "--clock cpu not reported"
grep -qE "measured read bandwidth: [0-9.]+ GB/s" "$work/bench.txt" || fail "no bandwidth line"
for kv in 32 8 1; do
    grep -qE "^bf16 Hq=32 Hkv=$kv +128 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+% +1\.00x  [a-z0-9_]+ (bf16 tiles|bf16 in place|fp32 large group|fp32 rows)$" \
        "$work/bench.txt" ||
        fail "bench decode lacks the bf16 Hkv=$kv row: $(cat "$work/bench.txt")"
    grep -qE "^int8 Hq=32 Hkv=$kv +128 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+% +[0-9.]+x  [a-z0-9_]+ (int8 tiles|int8 tile scores|8-bit in place)$" \
        "$work/bench.txt" ||
        fail "bench decode lacks the int8 Hkv=$kv row: $(cat "$work/bench.txt")"
done
python3 - "$work/bench.txt" <<'PY' || fail "bench decode: GB/s or ratio do not follow from ms/token"
import re, sys
checked = 0
bf16_tokens = {}
for line in open(sys.argv[1]):
    m = re.match(r"(bf16|int8) Hq=32 Hkv=(\d+) +(\d+) +(\S+) +(\S+) +(\S+) +(\S+) +(\d+)% +(\S+)x  \S+ [a-z0-9 -]+$", line)  # kernels: "8-bit in place" too
    if not m:
        continue
    dtype, kv, context = m.group(1), int(m.group(2)), int(m.group(3))
    tokens_per_s, ms, gbs, read, percent, ratio = (float(m.group(i)) for i in range(4, 10))
    # Hkv x L x (Dk + Dv) x element size, and int8's fp32 scale per token and head for K and V
    bytes_per_step = kv * context * ((128 + 128) * 2 if dtype == "bf16" else (128 + 128) + 2 * 4)
    # the bf16 row of a configuration comes first; the ratio is the tokens/s of the two
    # (printed to 0.01 from the unrounded times: allow the rounding of both numbers)
    if dtype == "bf16":
        assert ratio == 1.0, line
        bf16_tokens[kv] = tokens_per_s
    else:
        expected = tokens_per_s / bf16_tokens[kv]
        slack = 0.006 + expected * (0.05 / tokens_per_s + 0.05 / bf16_tokens[kv])
        assert abs(ratio - expected) <= slack, (line, expected)
    # ms has 3 decimals, tokens/s 1 decimal
    assert abs(tokens_per_s * ms / 1e3 - 1) <= 0.0005 / ms + 0.05 / tokens_per_s + 0.001, line
    assert abs(gbs - bytes_per_step * tokens_per_s / 1e9) <= 0.05 + 0.001 * gbs, line
    # gbs and read are printed to 0.05 and percent to 0.5: check the interval they allow
    # (slow runs, e.g. under sanitizers, print small numbers with large relative rounding).
    low = 100 * max(gbs - 0.05, 0) / (read + 0.05) - 0.5
    high = 100 * (gbs + 0.05) / (read - 0.05) + 0.5 if read > 0.05 else float("inf")
    assert low <= percent <= high, line
    checked += 1
assert checked == 6, "rows checked: %d" % checked
PY
# --kernel K runs every decode step on that family, and the last column names it (generic:
# every build and CPU has it).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
"$attn" bench decode --context 128 --dtype int8 --kv-heads 8 --no-mla --threads 1 \
    --kernel generic > "$work/generic.txt" 2> "$work/generic.err" ||
    fail "bench decode --kernel generic: $(cat "$work/generic.err")"
grep -qE "^int8 Hq=32 Hkv=8 +128 +[0-9.]+ .*  generic 8-bit in place$" "$work/generic.txt" ||
    fail "bench decode --kernel generic: no generic int8 row: $(cat "$work/generic.txt")"

[ "$failures" -eq 0 ] && echo "kv_size.sh: all checks passed"
exit $((failures > 0))
