#!/usr/bin/env bash
# small.sh — `attn-bench small` prints one row per Tk asked for, each with positive times
# of one thread, the default call and --threads N, and a GFLOP/s that follows from the one-thread
# time and the sizes (4 Tq Hq Tk D flops); without --threads the N column is absent; a bad
# option exits 2 with one line naming it and nothing on stdout.
# usage: bash small.sh ATTN_BENCH_BINARY SOURCE_DIR
set -uo pipefail
bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

"$bench" small --tq 2 --heads 4 --kv-heads 2 --d 16 --lengths 16,40 --threads 2 --rounds 3 \
    > "$work/out.txt" 2> "$work/err.txt" || fail "run: exit $? ($(cat "$work/err.txt"))"
python3 - "$work/out.txt" 4 <<'PY' || fail "with --threads: numbers"
import re, sys
text = open(sys.argv[1]).read()
columns = int(sys.argv[2])
rows = re.findall(r"^\| (\d+) \|((?: [\d.]+ \|)+)$", text, re.M)
assert [int(r[0]) for r in rows] == [16, 40], text
for length, rest in rows:
    values = [float(x) for x in rest.replace("|", " ").split()]
    assert len(values) == columns, (values, text)
    assert all(v > 0 for v in values), values
    one_thread_us, gflops = values[0], values[-1]
    flops = 4 * 2 * 4 * int(length) * 16
    # printed to 0.1: the rate follows from the rounded time within that rounding
    low, high = flops / ((one_thread_us + 0.05) * 1e3), flops / ((one_thread_us - 0.05) * 1e3)
    assert low - 0.05 <= gflops <= high + 0.05, (length, one_thread_us, gflops, low, high)
assert "2 threads (us)" in text, text
PY
"$bench" small --heads 4 --kv-heads 2 --d 16 --lengths 16 --rounds 1 > "$work/out2.txt" \
    2> "$work/err2.txt" || fail "default run: exit $?"
python3 - "$work/out2.txt" <<'PY' || fail "without --threads: two time columns"
import re, sys
text = open(sys.argv[1]).read()
rows = re.findall(r"^\| 16 \|((?: [\d.]+ \|)+)$", text, re.M)
assert len(rows) == 1 and len(rows[0].replace("|", " ").split()) == 3, text
assert "threads (us)" not in text, text
PY
for bad in "--lengths 0" "--heads 6 --kv-heads 4" "--rounds x" "--nope" "--threads 1025"; do
    # shellcheck disable=SC2086
    "$bench" small $bad > "$work/bad.txt" 2> "$work/bad_err.txt"
    status=$?
    [ "$status" -eq 2 ] || fail "'$bad': exit $status, expected 2"
    [ ! -s "$work/bad.txt" ] || fail "'$bad': printed on stdout"
    [ "$(wc -l < "$work/bad_err.txt")" -eq 1 ] || fail "'$bad': not one line: $(cat "$work/bad_err.txt")"
done
if [ "$failures" -eq 0 ]; then echo "bench_small: all checks passed"; fi
exit $((failures > 0))
