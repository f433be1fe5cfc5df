#!/usr/bin/env bash
# forward_errors.sh — every way to call `attn forward` wrongly: it must exit non-zero, print
# exactly one line on stderr that names the file or option and the bad value, and write no
# output file (an existing output file stays byte for byte as it was; no temporary is left).
# usage: bash forward_errors.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

python3 - <<'PY'
import numpy as np
r = np.random.default_rng(1)
f = lambda *s: r.standard_normal(s).astype(np.float32)
np.save("q.npy", f(2, 5, 4, 8)); np.save("k.npy", f(2, 6, 2, 8)); np.save("v.npy", f(2, 6, 2, 3))
np.save("q64.npy", f(2, 5, 4, 8).astype(np.float64)); np.save("q3.npy", f(5, 4, 8))
np.save("qfortran.npy", np.asfortranarray(f(2, 5, 4, 8)))
np.save("k_tk7.npy", f(2, 7, 2, 8)); np.save("k_h3.npy", f(2, 6, 3, 8))
np.save("v_h3.npy", f(2, 6, 3, 3)); np.save("k_dk7.npy", f(2, 6, 2, 7))
np.save("mask_bad.npy", np.ones((5, 5), dtype=bool)); np.save("mask_f32.npy", np.ones((5, 6), np.float32))
np.save("bias_f64.npy", np.zeros((5, 6))); np.save("mask_row_empty.npy", np.arange(6)[None, :] < np.array([1, 1, 0, 1, 1])[:, None])
np.save("qlen_bad.npy", np.array([5, 9], dtype=np.int32)); np.save("qlen_i64.npy", np.array([5, 5]))
np.save("slopes_bad.npy", np.ones(3, np.float32))
data = open("q.npy", "rb").read(); open("q_truncated.npy", "wb").write(data[:-7])
PY

base=(--q q.npy --k k.npy --v v.npy)
failures=0
printf 'previous output\n' > keep.npy

# expect_error DESCRIPTION EXPECTED_TEXT ARGS...: runs attn forward with --out/--lse given in ARGS.
expect_error() {
    local description=$1 expected=$2
    shift 2
    "$attn" forward "$@" > stdout.txt 2> stderr.txt
    local code=$? lines
    lines=$(wc -l < stderr.txt)
    local problem=""
    [ "$code" -ne 0 ] || problem="exit code 0"
    [ "$lines" -eq 1 ] || problem="$problem; $lines stderr lines"
    grep -qF -- "$expected" stderr.txt || problem="$problem; message lacks '$expected'"
    [ ! -e o.npy ] && [ ! -e lse.npy ] || problem="$problem; an output file was written"
    cmp -s keep.npy <(printf 'previous output\n') || problem="$problem; keep.npy was changed"
    if ls | grep -q -e '\.partial-' -e '\.tmp-'; then problem="$problem; temporary file left"; fi
    if [ -n "$problem" ]; then
        echo "FAIL $description: $problem: $(cat stderr.txt)"
        failures=$((failures + 1))
    else
        echo "ok   $description (exit $code): $(cat stderr.txt)"
    fi
    rm -f o.npy lse.npy
}

out=(--out o.npy --lse lse.npy)
expect_error "missing --q" "missing --q" --k k.npy --v v.npy "${out[@]}"
expect_error "missing --out" "missing --out" "${base[@]}"
expect_error "unknown option" "'--frobnicate'" "${base[@]}" "${out[@]}" --frobnicate
expect_error "option without value" "--scale needs a value" "${base[@]}" "${out[@]}" --scale
expect_error "missing file" "nope.npy" --q nope.npy --k k.npy --v v.npy "${out[@]}"
expect_error "float64 Q" "q64.npy: dtype float64, expected float32" --q q64.npy --k k.npy --v v.npy "${out[@]}"
expect_error "rank-3 Q" "q3.npy: shape [5, 4, 8] has rank 3" --q q3.npy --k k.npy --v v.npy "${out[@]}"
expect_error "Fortran-ordered Q" "qfortran.npy: fortran_order = True" --q qfortran.npy --k k.npy --v v.npy "${out[@]}"
expect_error "truncated Q" "q_truncated.npy: truncated data" --q q_truncated.npy --k k.npy --v v.npy "${out[@]}"
expect_error "K and V disagree on Tk" "--v v.npy: [B, Tk, Hkv]" --q q.npy --k k_tk7.npy --v v.npy "${out[@]}"
expect_error "Hq not a multiple of Hkv" "Hq = 4 is not a multiple of Hkv = 3" --q q.npy --k k_h3.npy --v v_h3.npy "${out[@]}"
expect_error "Dk differs" "Dk = 7" --q q.npy --k k_dk7.npy --v v.npy "${out[@]}"
expect_error "mask shape" "--mask mask_bad.npy: shape [5, 5] does not broadcast" "${base[@]}" "${out[@]}" --mask mask_bad.npy
expect_error "float mask" "--mask mask_f32.npy: dtype float32, expected bool" "${base[@]}" "${out[@]}" --mask mask_f32.npy
expect_error "float64 bias" "--bias bias_f64.npy: dtype float64, expected float32" "${base[@]}" "${out[@]}" --bias bias_f64.npy
expect_error "window below -1" "--window '-2,0'" "${base[@]}" "${out[@]}" --window -2,0
expect_error "window not a pair" "--window '3'" "${base[@]}" "${out[@]}" --window 3
expect_error "window without alignment" "--window needs an alignment because Tq = 5 != Tk = 6" "${base[@]}" "${out[@]}" --window 2,0
expect_error "zero scale" "--scale '0'" "${base[@]}" "${out[@]}" --scale 0
expect_error "NaN scale" "--scale 'nan'" "${base[@]}" "${out[@]}" --scale nan
expect_error "infinite scale" "--scale 'inf'" "${base[@]}" "${out[@]}" --scale inf
expect_error "negative softcap" "--softcap '-1'" "${base[@]}" "${out[@]}" --softcap -1
expect_error "bad causal alignment" "--causal 'sideways'" "${base[@]}" "${out[@]}" --causal sideways
expect_error "bad empty-rows policy" "--empty-rows 'skip'" "${base[@]}" "${out[@]}" --empty-rows skip
expect_error "zero threads" "--threads '0'" "${base[@]}" "${out[@]}" --threads 0
expect_error "bad kernel" "--kernel 'cuda'" "${base[@]}" "${out[@]}" --kernel cuda
expect_error "bad pattern" "--pattern 'fixed:2,3'" "${base[@]}" "${out[@]}" --pattern fixed:2,3
expect_error "bad global tokens" "--global-tokens '1,-2'" "${base[@]}" "${out[@]}" --global-tokens 1,-2
expect_error "bad memory limit" "--memory-limit '12X'" "${base[@]}" "${out[@]}" --memory-limit 12X
expect_error "block layout without size" "--block-layout needs --block-size" "${base[@]}" "${out[@]}" --block-layout mask_bad.npy
expect_error "query length out of range" "--query-lengths qlen_bad.npy: entry 1 = 9" "${base[@]}" "${out[@]}" --query-lengths qlen_bad.npy
expect_error "int64 lengths" "qlen_i64.npy: dtype int64, expected int32" "${base[@]}" "${out[@]}" --query-lengths qlen_i64.npy
expect_error "ALiBi slopes of the wrong length" "--alibi-slopes slopes_bad.npy: shape [3], expected [4]" "${base[@]}" "${out[@]}" --alibi-slopes slopes_bad.npy --causal bottom-right
expect_error "empty row under the default policy" "2" "${base[@]}" "${out[@]}" --mask mask_row_empty.npy
expect_error "same file for --out and --lse" "the same file as --out" "${base[@]}" --out o.npy --lse o.npy
expect_error "output folder missing" "no-such-dir/o.npy" "${base[@]}" --out no-such-dir/o.npy --lse lse.npy
expect_error "LSE folder missing (O must not appear)" "no-such-dir/lse.npy" "${base[@]}" --out o.npy --lse no-such-dir/lse.npy
expect_error "existing output kept on error" "--scale 'x'" "${base[@]}" --out keep.npy --scale x

# The empty-row message must name (b, h, i) — the library's wording, checked loosely.
"$attn" forward "${base[@]}" --out o.npy --mask mask_row_empty.npy 2> stderr.txt
if ! grep -qiE 'empty|no allowed' stderr.txt; then
    echo "FAIL empty-row message does not say the row is empty: $(cat stderr.txt)"
    failures=$((failures + 1))
fi

# Help documents every option.
"$attn" forward --help > help.txt || { echo "FAIL attn forward --help exits non-zero"; failures=$((failures + 1)); }
for option in --q --k --v --out --lse --scale --causal --align --window --mask --bias --alibi \
    --alibi-slopes --softcap --empty-rows --threads --query-lengths --key-lengths \
    --global-tokens --pattern --block-layout --block-size --query-positions --key-positions \
    --kernel --memory-limit; do
    grep -qE -- "^  $option " help.txt || { echo "FAIL attn forward --help lacks $option"; failures=$((failures + 1)); }
done

# A correct call after all that succeeds and writes both files.
"$attn" forward "${base[@]}" --out o.npy --lse lse.npy || { echo "FAIL a valid call failed"; failures=$((failures + 1)); }
[ -s o.npy ] && [ -s lse.npy ] || { echo "FAIL valid call wrote no output"; failures=$((failures + 1)); }

if [ "$failures" -ne 0 ]; then
    echo "$failures failures"
    exit 1
fi
echo "all forward error cases behave"
