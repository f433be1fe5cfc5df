#!/usr/bin/env bash
# forward_dtype.sh — `attn forward --dtype f32|bf16|f16` on float32 and float16 .npy inputs:
# O's file type (float16 for f16, float32 otherwise), O against a float64 computation in numpy
# on the same rounded inputs within the bf16 / fp16 bound (docs/precision.md: 2u of max |v|
# plus fp32 terms), LSE float32; a float16 input with --dtype f32 is widened exactly; an input
# that does not fit float16 and an unknown --dtype fail with one line naming the file / value.
# usage: bash forward_dtype.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

python3 - <<'PY'
import numpy as np
r = np.random.default_rng(7)
f = lambda *s: r.standard_normal(s).astype(np.float32)
np.save("q.npy", f(2, 17, 4, 24)); np.save("k.npy", f(2, 33, 2, 24)); np.save("v.npy", f(2, 33, 2, 20))
np.save("q16.npy", np.load("q.npy").astype(np.float16))
np.save("v_big.npy", np.load("v.npy") * np.float32(1e5))
PY
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$attn" forward --q q.npy --k k.npy --v v.npy --out o_f32.npy --lse lse_f32.npy || fail "f32 run"
for dtype in bf16 f16; do
    "$attn" forward --q q.npy --k k.npy --v v.npy --out "o_$dtype.npy" --lse "lse_$dtype.npy" \
        --dtype "$dtype" || fail "$dtype run"
done
"$attn" forward --q q16.npy --k k.npy --v v.npy --out o_q16.npy || fail "float16 input, f32"

python3 - <<'PY' || failures=$((failures + 1))
import sys
import numpy as np
try:
    import ml_dtypes
    bf16 = ml_dtypes.bfloat16
except ImportError:
    bf16 = None

def reference(q, k, v):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k = np.repeat(k, group, axis=2); v = np.repeat(v, group, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(q.shape[3])
    m = s.max(-1, keepdims=True); p = np.exp(s - m); l = p.sum(-1, keepdims=True)
    return np.einsum("bhij,bjhd->bihd", p / l, v), (m + np.log(l))[..., 0]

q, k, v = (np.load(n) for n in ("q.npy", "k.npy", "v.npy"))
bad = []
o32 = np.load("o_f32.npy")
if o32.dtype != np.float32: bad.append("f32 O dtype %s" % o32.dtype)
for name, dtype, out_type, unit in (("f16", np.float16, np.float16, 2.0 ** -11),
                                    ("bf16", bf16, np.float32, 2.0 ** -8)):
    o = np.load("o_%s.npy" % name); lse = np.load("lse_%s.npy" % name)
    if o.dtype != out_type: bad.append("%s O dtype %s" % (name, o.dtype))
    if lse.dtype != np.float32: bad.append("%s LSE dtype %s" % (name, lse.dtype))
    if dtype is None: continue  # no ml_dtypes: types checked only
    rq, rk, rv = (x.astype(dtype).astype(np.float32) for x in (q, k, v))
    expected, expected_lse = reference(rq, rk, rv)
    bound = np.abs(rv).max() * (2 * unit + 1e-4)
    error = np.abs(o.astype(np.float64) - expected).max()
    if not error <= bound: bad.append("%s O error %.3g > %.3g" % (name, error, bound))
    if not np.abs(lse - expected_lse).max() <= 1e-4: bad.append("%s LSE error" % name)
    if not np.array_equal(o.astype(np.float32), o.astype(dtype).astype(np.float32)):
        bad.append("%s O holds values that are not %s" % (name, name))
widened = np.load("o_q16.npy")
rq = q.astype(np.float16).astype(np.float32)
expected, _ = reference(rq, k, v)
if not np.abs(widened - expected).max() <= 1e-5: bad.append("float16 input widened for f32")
for line in bad: print("FAIL:", line)
sys.exit(1 if bad else 0)
PY

"$attn" forward --q q.npy --k k.npy --v v_big.npy --out x.npy --dtype f16 2> err.txt
code=$?
if [ "$code" -ne 1 ] || [ "$(wc -l < err.txt)" -ne 1 ] || ! grep -q "v_big.npy.*does not fit float16" err.txt \
    || [ -e x.npy ]; then
    fail "value beyond float16: exit $code, $(cat err.txt)"
fi
"$attn" forward --q q.npy --k k.npy --v v.npy --out x.npy --dtype f8 2> err.txt
code=$?
if [ "$code" -ne 2 ] || ! grep -q -- "--dtype 'f8'" err.txt; then fail "--dtype f8: exit $code"; fi

echo "forward_dtype: $failures failure(s)"
[ "$failures" -eq 0 ]
