#!/usr/bin/env bash
# serve.sh — `attn-bench serve` on a tiny mix prints one row per storage type and part,
# whose tokens/s and KV GB/s follow from its ms/step and the sizes (tokens per step = prefills x
# chunk + the other sequences' decode tokens) for f32, bf16, f16, int8 and both fp8; the
# library-/caller-owned decode lines (bf16 and each 8-bit storage asked for) have finite,
# positive times and ratios; the two varlen lines appear, sized by --varlen-max; --dtype int8
# runs int8 alone;
# --ownership --rounds N --page-size P --kernel K runs only that comparison, N rounds, on pages of
# P with the kernels named in the header; bad arguments exit 2 with a one-line message naming
# the option and nothing on stdout.
# usage: bash serve.sh ATTN_BENCH_BINARY SOURCE_DIR
set -uo pipefail
bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

OMP_NUM_THREADS=2 "$bench" serve --sequences 6 --context 40 300 --prefills 2 --chunk 32 \
    --heads 4 --kv-heads 2 --dim 16 --seconds 0.02 --varlen-max 256 > "$work/out.txt" 2> "$work/err.txt" \
    || fail "tiny run: exit $? ($(cat "$work/err.txt"))"
python3 - "$work/out.txt" <<'PY' || fail "tiny run: numbers"
import math, re, sys
text = open(sys.argv[1]).read()
rows = re.findall(r"^(f32|bf16|f16|int8|fp8_e4m3|fp8_e5m2)\s+(step|decode|prefill)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$",
                  text, re.M)
assert len(rows) == 18, text
tokens = {"step": 2 * 32 + 4, "decode": 4, "prefill": 2 * 32}
for dtype, part, ms, rate, gbs, read, fraction in rows:
    low, high = tokens[part] / ((float(ms) + 0.0005) * 1e-3), tokens[part] / (max(float(ms) - 0.0005, 1e-6) * 1e-3)
    assert low - 1 <= float(rate) <= high + 1, (part, ms, rate, low, high)
    if float(read) > 0:
        # gbs and read are printed to 0.01: the ratio of the printed values may differ by that
        tolerance = 0.005 / float(read) * (1 + float(fraction)) + 0.0006
        assert abs(float(fraction) - float(gbs) / float(read)) <= tolerance, (gbs, read, fraction)
assert text.count("varlen causal prefill") == 2, text
# each varlen line: its ratios follow from its times, the token padding ratio from B, the total
# and the longest, and the work ratios order as the pairs they count (sequences <= key-masked
# padded batch <= whole padded batch)
number = r"([\d.]+)"
varlen = re.findall(r"^varlen causal prefill, (\d+) sequences of \d+\.\.\d+ tokens, Hkv \d+ \((\d+) in all, longest (\d+)\): "
                    rf"varlen {number} ms, one call per sequence {number} ms \(varlen / separate = {number}\), "
                    rf"padded batch with lengths {number} ms \(padded / varlen = {number}\), "
                    rf"padded batch with a key mask {number} ms \(padded / varlen = {number}; its allowed pairs / the sequences' = {number}\), "
                    rf"padded batch computing every tile {number} ms \(padded / varlen = {number}; padding ratio of the work, "
                    rf"causal pairs of B x max / of the sequences = {number}, of the tokens = {number}\); "
                    rf"varlen on 1 thread {number} ms \(speedup of 2 threads {number}\)$", text, re.M)
assert len(varlen) == 2, text
assert re.search(r"^varlen causal prefill, 8 sequences of 16\.\.256 tokens", text, re.M), text
assert re.search(r"^varlen causal prefill, 64 sequences of 16\.\.32 tokens", text, re.M), text
for line in varlen:
    B, total, longest = (int(x) for x in line[:3])
    t = [float(x) for x in line[3:]]
    varlen_ms, separate, r_sep, lengths_ms, r_lengths, masked_ms, r_masked, masked_pairs, every_ms, r_every, work, tokens, one, speedup = t
    def close(ratio, a, b):  # times printed to 0.01 ms, ratios to 0.01 or 0.001
        return abs(ratio - a / b) <= 0.006 + 0.01 / b * (1 + a / b)
    assert close(r_sep, varlen_ms, separate) and close(r_lengths, lengths_ms, varlen_ms), line
    assert close(r_masked, masked_ms, varlen_ms) and close(r_every, every_ms, varlen_ms), line
    assert close(speedup, one, varlen_ms), line
    assert abs(tokens - B * longest / total) <= 0.006, line
    assert 1 <= masked_pairs <= work + 0.01 and tokens <= work + 0.01, line
# library- vs caller-owned decode: bf16 and each 8-bit storage, every time finite and > 0
owned = re.findall(r"^decode, (\S+), 6 sequences, same pages, (\d+) alternated rounds: library-owned ([\d.]+) ms; "
                   r"caller-owned \[page, slot, head, D\] ([\d.]+) ms \(caller / library = ([\d.]+|nan|inf)\); "
                   r"caller-owned \[head, page, slot, D\] ([\d.]+) ms \(caller / library = ([\d.]+|nan|inf)\)$",
                   text, re.M)
assert [o[0] for o in owned] == ["bf16", "int8", "fp8_e4m3", "fp8_e5m2"], text
for dtype, rounds, library, token_major, ratio1, head_major, ratio2 in owned:
    assert 5 <= int(rounds) <= 400, (dtype, rounds)
    # each ratio is the median of the rounds' ratios, not the ratio of the median times (which
    # a few slow rounds can move by 3x on this tiny mix under the sanitizers): only its range
    for ms, ratio in ((library, None), (token_major, ratio1), (head_major, ratio2)):
        assert math.isfinite(float(ms)) and float(ms) >= 0, (dtype, ms)
        if ratio is not None:
            assert math.isfinite(float(ratio)) and float(ratio) > 0, (dtype, ratio)
PY

# --dtype int8 alone: its step rows and the bf16 and int8 ownership lines only
OMP_NUM_THREADS=2 "$bench" serve --sequences 3 --context 20 60 --prefills 1 --chunk 8 \
    --heads 2 --kv-heads 1 --dim 8 --seconds 0.01 --dtype int8 > "$work/int8.txt" 2> "$work/err.txt" \
    || fail "int8 run: exit $? ($(cat "$work/err.txt"))"
python3 - "$work/int8.txt" <<'PY' || fail "int8 run: rows"
import re, sys
text = open(sys.argv[1]).read()
assert len(re.findall(r"^int8\s+(step|decode|prefill)\s", text, re.M)) == 3, text
assert not re.search(r"^(f32|bf16|f16|fp8_e4m3|fp8_e5m2)\s+step", text, re.M), text
assert re.findall(r"^decode, (\S+), 3 sequences, same pages, \d+ alternated", text, re.M) == ["bf16", "int8"], text
PY

# --ownership: the comparison alone, exactly --rounds rounds, pages and kernels as asked
OMP_NUM_THREADS=2 "$bench" serve --sequences 3 --context 20 60 --prefills 1 --chunk 8 \
    --heads 2 --kv-heads 1 --dim 8 --dtype f16 --ownership --rounds 3 --page-size 8 --kernel generic \
    > "$work/own.txt" 2> "$work/err.txt" || fail "ownership run: exit $? ($(cat "$work/err.txt"))"
python3 - "$work/own.txt" <<'PY' || fail "ownership run: lines"
import re, sys
text = open(sys.argv[1]).read()
assert re.search(r"^attn-bench serve: .*pages of 8, .*kernels generic$", text, re.M), text
assert not re.search(r"^(f32|bf16|f16|int8|fp8_e4m3|fp8_e5m2)\s+step", text, re.M), text
assert "varlen" not in text, text
assert re.findall(r"^decode, (\S+), 3 sequences, same pages, (\d+) alternated", text, re.M) == [("f16", "3")], text
PY

expect_usage_error() { # what needle option-words...
    local what=$1 needle=$2; shift 2
    "$bench" serve "$@" > "$work/stdout.txt" 2> "$work/stderr.txt"
    local status=$?
    [ "$status" -eq 2 ] || fail "$what: exit $status, expected 2"
    [ -s "$work/stdout.txt" ] && fail "$what: printed on stdout"
    [ "$(wc -l < "$work/stderr.txt")" -ge 1 ] || fail "$what: no message"
    grep -q -- "$needle" "$work/stderr.txt" || fail "$what: message does not name $needle: $(cat "$work/stderr.txt")"
}
expect_usage_error "unknown dtype" --dtype --dtype int4
expect_usage_error "unknown option" --frobnicate --frobnicate
expect_usage_error "prefills >= sequences" --prefills --sequences 4 --prefills 4
expect_usage_error "Hq not a multiple of Hkv" --kv-heads --heads 6 --kv-heads 4
expect_usage_error "zero rounds" "--rounds (1 .. 400).*rounds 0" --rounds 0
expect_usage_error "too many rounds" "rounds 401" --rounds 401
expect_usage_error "zero page size" "--page-size (1 .. 65536).*page size 0" --page-size 0
expect_usage_error "unknown kernel" "--kernel 'sse9'" --kernel sse9
expect_usage_error "varlen batches too short" "--varlen-max (128 .. 65536)" --varlen-max 64

[ "$failures" -eq 0 ] && echo "bench_serve: all passed"
exit "$failures"
