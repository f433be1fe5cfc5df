#!/usr/bin/env bash
# dropout.sh — `attn forward` / `attn backward` with --dropout, --dropout-seed, --dropout-offset
# against numpy in float64 with the mask drawn by an independent numpy Philox-4x32-10 (the
# counter and key of docs/attention-math.md §9.6): O within 2e-5, dV = (M ∘ P)ᵀ dO within 1e-4;
# the same seed twice gives the same bytes, another seed another O; a bad probability is a
# one-line usage error.
# usage: bash dropout.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

python3 - <<'PY'
import numpy as np
r = np.random.default_rng(11)
f = lambda *s: r.standard_normal(s).astype(np.float32)
np.save("q.npy", f(2, 9, 4, 8)); np.save("k.npy", f(2, 13, 2, 8)); np.save("v.npy", f(2, 13, 2, 8))
np.save("do.npy", f(2, 9, 4, 8))
PY
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
options=(--causal bottom-right --dropout 0.3 --dropout-seed 18446744073709551557 --dropout-offset 6)

"$attn" forward --q q.npy --k k.npy --v v.npy --out o.npy "${options[@]}" || fail "forward"
"$attn" forward --q q.npy --k k.npy --v v.npy --out o2.npy "${options[@]}" || fail "forward again"
cmp -s o.npy o2.npy || fail "the same seed gives other bytes"
"$attn" forward --q q.npy --k k.npy --v v.npy --out o3.npy --causal bottom-right --dropout 0.3 \
    --dropout-seed 7 || fail "forward, seed 7"
cmp -s o.npy o3.npy && fail "another seed gives the same output"
"$attn" backward --q q.npy --k k.npy --v v.npy --do do.npy --dq dq.npy --dk dk.npy --dv dv.npy \
    "${options[@]}" || fail "backward"

python3 - <<'PY' || failures=$((failures + 1))
import sys
import numpy as np

M = 0xFFFFFFFF
def philox(c, key):
    """Philox-4x32-10 of counters c (4 arrays of uint64 holding 32-bit words), key (k0, k1)."""
    c0, c1, c2, c3 = c
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M, p1 & M, ((p0 >> 32) ^ c3 ^ k1) & M, p0 & M
        k0, k1 = (k0 + 0x9E3779B9) & M, (k1 + 0xBB67AE85) & M
    return np.stack([c0, c1, c2, c3])

def keep(B, H, Tq, Tk, p, seed, offset):
    b, h, i, j = np.meshgrid(*(np.arange(n, dtype=np.uint64) for n in (B, H, Tq, Tk)), indexing="ij")
    position = np.uint64(offset) + j // np.uint64(4)
    words = philox((position & M, position >> np.uint64(32), i, b * np.uint64(H) + h),
                   (seed & M, seed >> 32))
    draw = np.take_along_axis(words, (j % np.uint64(4)).astype(np.int64)[None], 0)[0]
    return draw >= np.uint64(int(p * 2**32))

q, k, v, do = (np.load(f"{n}.npy").astype(np.float64) for n in ("q", "k", "v", "do"))
p = np.float64(np.float32(0.3))
z = keep(2, 4, 9, 13, p, 18446744073709551557, 6)
kk, vv = np.repeat(k, 2, axis=2), np.repeat(v, 2, axis=2)
x = np.einsum("bihd,bjhd->bhij", q, kk) / np.sqrt(8)
x = np.where(np.tril(np.ones((9, 13), bool), 13 - 9), x, -np.inf)
P = np.exp(x - x.max(-1, keepdims=True))
P /= P.sum(-1, keepdims=True)
want = np.einsum("bhij,bjhd->bihd", P * z / (1 - p), vv)
error = np.abs(np.load("o.npy") - want).max()
dv = np.einsum("bhij,bihd->bjhd", P * z / (1 - p), do).reshape(2, 13, 2, 2, 8).sum(3)
dv_error = np.abs(np.load("dv.npy") - dv).max()
print(f"O error {error:.2g}, dV error {dv_error:.2g}, kept {z.mean():.3f}")
sys.exit(0 if error < 2e-5 and dv_error < 1e-4 and 0.5 < z.mean() < 0.9 else 1)
PY

"$attn" forward --q q.npy --k k.npy --v v.npy --out bad.npy --dropout 1 2> err.txt
status=$?
[ "$status" -eq 2 ] && [ "$(wc -l < err.txt)" -eq 1 ] && grep -q -- "--dropout '1'" err.txt ||
    fail "--dropout 1: exit $status, $(cat err.txt)"
[ -e bad.npy ] && fail "--dropout 1 wrote an output"

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "dropout: all passed"
