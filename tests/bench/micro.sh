#!/usr/bin/env bash
# micro.sh — the micro-benchmarks of attn-bench: a tiny `lowp-kernels` run prints its tile, the
# kernels it timed, and GFLOP/s of Q·Kᵀ and P·V (fp32 and bf16 tiles) that follow from the
# microseconds per call and the sizes (2 · rows · keys · dim flops); `instruction-rates` either
# prints one row per instruction the CPU has (the fp32 FMA first) or, without AVX-512F, says
# so in one line with exit status 2; `decode-steps` gives the same output from the library's
# pages and a token-major view of them; bad arguments exit 2 with a one-line message.
# usage: bash micro.sh ATTN_BENCH_BINARY SOURCE_DIR
set -uo pipefail
bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

"$bench" lowp-kernels 16 64 32 1 > "$work/lowp.txt" 2> "$work/err.txt" ||
    fail "lowp-kernels 16 64 32 1: exit $? ($(cat "$work/err.txt"))"
python3 - "$work/lowp.txt" <<'PY' || fail "lowp-kernels: numbers: $(cat "$work/lowp.txt")"
import re, sys
text = open(sys.argv[1]).read()
assert re.search(r"^tile: 16 rows x 64 keys, D = 32; one thread; best of 1 rounds$", text, re.M), text
rates = re.search(r"Q·K\^T fp32 +([\d.]+) +bf16 +([\d.]+) .*P·V fp32 +([\d.]+) +bf16 +([\d.]+)", text)
times = re.search(r"Q·K\^T fp32 ([\d.]+), Q·K\^T bf16 tiles ([\d.]+), P·V fp32 ([\d.]+), P·V bf16 tiles ([\d.]+)", text)
assert rates and times, text
flops = 2 * 16 * 64 * 32
for rate, us in zip(map(float, rates.groups()), map(float, times.groups())):
    # GFLOP/s printed to 0.1, microseconds to 0.01
    low, high = flops / ((us + 0.005) * 1e3), flops / (max(us - 0.005, 1e-9) * 1e3)
    assert low - 0.05 <= rate <= high + 0.05, (rate, us, low, high)
PY

"$bench" instruction-rates 1 > "$work/rates.txt" 2> "$work/err.txt"
status=$?
if [ "$status" -eq 0 ]; then
    grep -qiE "fma" "$work/rates.txt" || fail "instruction-rates: no FMA row: $(head -c 300 "$work/rates.txt")"
elif [ "$status" -eq 2 ]; then
    grep -qx "attn-bench instruction-rates: this CPU has no AVX-512F" "$work/err.txt" ||
        fail "instruction-rates: exit 2 without the AVX-512 message: $(cat "$work/err.txt")"
else
    fail "instruction-rates 1: exit $status ($(cat "$work/err.txt"))"
fi
"$bench" instruction-rates 0 > "$work/out.txt" 2> "$work/err.txt"
[ $? -eq 2 ] && [ ! -s "$work/out.txt" ] && [ "$(wc -l < "$work/err.txt")" -eq 1 ] ||
    fail "instruction-rates 0: expected exit 2 and one line: $(cat "$work/err.txt")"

for arguments in "0 64 32" "16 64" "16 64 32 0" "16 64 32 1 gpu"; do
    # shellcheck disable=SC2086
    "$bench" lowp-kernels $arguments > "$work/out.txt" 2> "$work/err.txt"
    [ $? -eq 2 ] && [ ! -s "$work/out.txt" ] && [ "$(wc -l < "$work/err.txt")" -eq 1 ] ||
        fail "lowp-kernels $arguments: expected exit 2 and one line: $(cat "$work/err.txt")"
done

# decode-steps: the same output from the library's pages and from the token-major view of the
# same tokens (int8 with its row scales, bf16), and one-line refusals
for dtype in int8 bf16; do
    library=$("$bench" decode-steps --dtype $dtype --kv-heads 4 --heads 8 --context 300 --steps 2)
    token_major=$("$bench" decode-steps --dtype $dtype --kv-heads 4 --heads 8 --context 300 \
        --steps 2 --token-major)
    [ "${library##*o\[0\] = }" = "${token_major##*o\[0\] = }" ] &&
        [[ "$library" =~ ^2\ decode\ steps,\ $dtype\ cache,\ Hq\ 8,\ Hkv\ 4,\ context\ 300:\ o\[0\]\ =\ -?[0-9]+\.[0-9]{6}$ ]] ||
        fail "decode-steps $dtype: library '$library', token-major '$token_major'"
done
for arguments in "--dtype q4" "--heads 6 --kv-heads 4" "--kv-heads 1 --token-major" "--steps"; do
    # shellcheck disable=SC2086
    "$bench" decode-steps $arguments > "$work/out.txt" 2> "$work/err.txt"
    [ $? -eq 2 ] && [ ! -s "$work/out.txt" ] && [ "$(wc -l < "$work/err.txt")" -eq 1 ] ||
        fail "decode-steps $arguments: expected exit 2 and one line: $(cat "$work/err.txt")"
done

[ "$failures" -eq 0 ] && echo "micro.sh: all checks passed"
exit $((failures > 0))
