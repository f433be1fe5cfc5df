#!/usr/bin/env bash
# profile.sh — `attn-bench forward --profile`: after the timing table, one row per head dim of
# where a forward tile step's cycles go; the step is the sum of its phases (S = Q·Kᵀ, softmax,
# rescale, P·V), the FMA bound is D / (the registry's lanes) cycles per pair, and "bound / step"
# is their ratio; a profile of two head dims prints two rows.
# usage: bash profile.sh ATTN_BENCH_BINARY SOURCE_DIR
set -uo pipefail
bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

"$bench" forward --t 256 --d 32,64 --heads 2 --groups 1 --masks none --threads 1 --repeats 1 \
    --profile --peak-gflops 100 > "$work/out.txt" 2> "$work/err.txt" ||
    fail "forward --profile: exit $? ($(cat "$work/err.txt"))"
python3 - "$work/out.txt" <<'PY' || fail "forward --profile: $(cat "$work/out.txt")"
import re, sys
text = open(sys.argv[1]).read()
head = re.search(r"One forward tile step \((\d+) query rows x (\d+) keys, (\w+) kernels, one thread\)", text)
assert head, "no profile heading"
lanes = {"generic": None, "avx2": 8, "avx512": 16}.get(head.group(3))
rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| "
                  r"([\d.]+) \| (\d+)% \| (\d+) \|$", text, re.M)
assert [int(r[0]) for r in rows] == [32, 64], rows
for d, scores, softmax, rescale, values, step, bound, ratio, packing in rows:
    phases = [float(x) for x in (scores, softmax, rescale, values)]
    step, bound = float(step), float(bound)
    assert all(p >= 0 for p in phases) and step > 0 and int(packing) > 0, rows
    assert abs(sum(phases) - step) <= 0.03, (phases, step)          # printed to 0.01
    if lanes is not None:
        assert bound == int(d) / lanes, (d, bound, lanes)
    assert abs(int(ratio) - 100 * bound / step) <= 1, (ratio, bound, step)
PY

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "profile: all passed"
