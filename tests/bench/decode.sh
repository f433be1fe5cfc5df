#!/usr/bin/env bash
# decode.sh — `attn-bench decode` rejects bad arguments with exit status 2 and a one-line
# message naming the option, printing nothing on stdout; a tiny run prints its table, whose
# GB/s, read-bandwidth share and ratios follow from its ms per token; `--kernel generic` runs
# (and names) that kernel family.
# usage: bash decode.sh ATTN_BENCH_BINARY SOURCE_DIR
set -uo pipefail
bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

expect_usage_error() { # text-in-message command...
    local text=$1
    shift
    "$@" > "$work/out.txt" 2> "$work/err.txt"
    local status=$?
    [ "$status" -eq 2 ] || fail "'$*' exits $status, expected 2"
    [ ! -s "$work/out.txt" ] || fail "'$*' printed on stdout: $(head -c 200 "$work/out.txt")"
    head -n 1 "$work/err.txt" | grep -qF -- "$text" || fail "'$*': message lacks '$text': $(cat "$work/err.txt")"
}
expect_usage_error "--context 0" "$bench" decode --context 0
expect_usage_error "--threads '0'" "$bench" decode --threads 0
expect_usage_error "--dtype f64" "$bench" decode --dtype f64
expect_usage_error "--max-gib 0" "$bench" decode --max-gib 0
expect_usage_error "--max-gib -1" "$bench" decode --max-gib -1
expect_usage_error "--bogus" "$bench" decode --bogus
expect_usage_error "--threads" "$bench" decode --threads
expect_usage_error "--clock gpu" "$bench" decode --clock gpu
expect_usage_error "--kernel sse" "$bench" decode --kernel sse
expect_usage_error "--kernel" "$bench" decode --kernel

"$bench" decode --help > "$work/help.txt" 2>&1 || fail "bench decode --help exits non-zero"
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
"$bench" decode --context 128 --dtype bf16,int8 --no-mla --threads 1 --clock cpu \
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
"$bench" decode --context 128 --dtype int8 --kv-heads 8 --no-mla --threads 1 \
    --kernel generic > "$work/generic.txt" 2> "$work/generic.err" ||
    fail "bench decode --kernel generic: $(cat "$work/generic.err")"
grep -qE "^int8 Hq=32 Hkv=8 +128 +[0-9.]+ .*  generic 8-bit in place$" "$work/generic.txt" ||
    fail "bench decode --kernel generic: no generic int8 row: $(cat "$work/generic.txt")"

[ "$failures" -eq 0 ] && echo "decode.sh: all checks passed"
exit $((failures > 0))
