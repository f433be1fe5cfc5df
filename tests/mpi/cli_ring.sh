#!/usr/bin/env bash
# cli_ring.sh — end-to-end check of `attn ring` under mpiexec: on random .npy inputs (GQA,
# T = 29, not a multiple of any P used), the gathered O and LSE equal `attn forward` on the
# same files within 1e-5 for every layout and for 2, 3 and 4 processes, causal, windowed and
# full attention; the same with Q, K, V read from a safetensors file and O, LSE written into one
# (F32, checked with struct/json); --dtype bf16 and f16 (inputs .npy and BF16 safetensors, O as
# .npy and as BF16/F16 safetensors) against `attn forward --dtype` on the same files
# (check_typed.py below: one ulp of the rounded fp32 result, the forward's P-rounding bound,
# LSE within 1e-5), and the bf16 ring is not the f32 one; errors (a K file that disagrees with
# Q, T < P, an input beyond fp16, an unknown --dtype) exit with 1 or 2 on every rank, say why
# in one line and write no output.
# usage: bash cli_ring.sh ATTN_BINARY SOURCE_DIR MPIEXEC [MPIEXEC FLAGS...]
set -euo pipefail
attn=$1
shift 2
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

python3 - <<'EOF'
import numpy as np
rng = np.random.default_rng(6)
B, T, Hq, Hkv, D = 2, 29, 4, 2, 16
for name, heads in (("q", Hq), ("k", Hkv), ("v", Hkv)):
    np.save(f"{name}.npy", rng.standard_normal((B, T, heads, D)).astype(np.float32))
np.save("k_wrong.npy", rng.standard_normal((B, T, Hkv, D + 1)).astype(np.float32))
np.save("q_short.npy", rng.standard_normal((B, 2, Hq, D)).astype(np.float32))
# q, k, v as F32 tensors of one safetensors file (by hand: 8-byte length, JSON, data), and
# q, k, v once more as BF16 (converted to --dtype like attn forward does)
import json, struct
def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, dtype, blob, shape in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob); offset += len(blob)
    text = json.dumps(header).encode(); text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
arrays = {n: np.load(f"{n}.npy") for n in ("q", "k", "v")}
write("qkv.safetensors", [(n, "F32", a.astype("<f4").tobytes(), a.shape) for n, a in arrays.items()])
bf16 = {n: (a.view(np.uint32) >> 16).astype("<u2").tobytes() for n, a in arrays.items()}
write("qkv_bf16.safetensors", [(n, "BF16", bf16[n], a.shape) for n, a in arrays.items()])
big = arrays["q"].copy(); big[0, 0, 0, 0] = 70000.0  # beyond fp16
np.save("q_big.npy", big)
EOF

compare() { # compare EXPECTED ACTUAL LABEL
  python3 - "$1" "$2" "$3" <<'EOF'
import sys
import numpy as np
expected, actual = np.load(sys.argv[1]), np.load(sys.argv[2])
error = float(np.max(np.abs(expected - actual) / (1 + np.abs(expected))))
print(f"{sys.argv[3]}: shape {actual.shape}, max relative error {error:.2e}")
sys.exit(0 if expected.shape == actual.shape and error <= 1e-5 else 1)
EOF
}

failures=0
# (processes, layout, masking): every layout and process count, causal, windowed and full.
runs=(
  "2 contiguous --causal bottom-right"
  "3 zigzag --causal bottom-right"
  "4 striped --causal bottom-right"
  "4 zigzag --causal bottom-right --window 5,-1"
  "3 contiguous --window 4,3"
  "3 striped"
)
for run in "${runs[@]}"; do
  read -r processes layout masking <<< "$run"
  label="np=$processes layout=$layout masking='$masking'"
  rm -f ring_o.npy ring_lse.npy
  # shellcheck disable=SC2086
  "$attn" forward --q q.npy --k k.npy --v v.npy --out single_o.npy --lse single_lse.npy $masking
  # shellcheck disable=SC2086
  if ! "${mpiexec[@]}" -np "$processes" "$attn" ring --q q.npy --k k.npy --v v.npy \
       --out ring_o.npy --lse ring_lse.npy --layout "$layout" $masking; then
    echo "FAIL: attn ring failed ($label)"; failures=$((failures + 1)); continue
  fi
  compare single_o.npy ring_o.npy "O $label" || { echo "FAIL: O ($label)"; failures=$((failures + 1)); }
  compare single_lse.npy ring_lse.npy "LSE $label" || { echo "FAIL: LSE ($label)"; failures=$((failures + 1)); }
done

# safetensors in and out: the same O and LSE as `attn forward` on the .npy files
rm -f ring.safetensors
"$attn" forward --q q.npy --k k.npy --v v.npy --out single_o.npy --lse single_lse.npy --causal bottom-right
if "${mpiexec[@]}" -np 3 "$attn" ring --q qkv.safetensors --k qkv.safetensors:k --v qkv.safetensors \
     --out ring.safetensors --lse ring.safetensors:lse --causal bottom-right; then
  python3 - <<'EOF' || { echo "FAIL: ring safetensors output"; failures=$((failures + 1)); }
import json, struct, sys
import numpy as np
data = open("ring.safetensors", "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
bad = sorted(header) != ["lse", "o"]
for name, single in (("o", "single_o.npy"), ("lse", "single_lse.npy")):
    entry, expected = header[name], np.load(single)
    begin, end = entry["data_offsets"]
    actual = np.frombuffer(data[8 + n + begin:8 + n + end], "<f4").reshape(entry["shape"])
    error = float(np.max(np.abs(expected - actual) / (1 + np.abs(expected))))
    print(f"safetensors {name}: {entry['dtype']} {entry['shape']}, max relative error {error:.2e}")
    bad |= entry["dtype"] != "F32" or actual.shape != expected.shape or not error <= 1e-5
sys.exit(1 if bad else 0)
EOF
else
  echo "FAIL: attn ring on safetensors failed"; failures=$((failures + 1))
fi

# --dtype: the ring in bf16 / f16 on the same files as `attn forward --dtype` (inputs rounded
# nearest-even by both). check_typed.py holds the ring to what docs/precision.md says of each:
#  a) the ring's O is the fp32 ring's O rounded once: within one 16-bit ulp of `attn forward
#     --dtype f32` on the inputs rounded by numpy, itself rounded by numpy;
#  b) against `attn forward --dtype D` (which rounds P to D before P·V) within that forward's
#     bound 2u(|O| + max|V|) + 1e-5, u = 2^-8 (bf16) or 2^-11 (f16); LSE within 1e-5;
#  c) O as .npy (float32 holding bf16 values, or float16) and as a safetensors BF16/F16 tensor
#     hold the same values; LSE is F32.
cat > check_typed.py <<'EOF'
import json, struct, sys
import numpy as np
dtype, label = sys.argv[1], sys.argv[2]
def tensor(argument):
    """(values as float64, stored dtype) of X.npy or X.safetensors:NAME."""
    if ":" not in argument:
        a = np.load(argument)
        return a.astype(np.float64), str(a.dtype)
    path, name = argument.split(":")
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    entry = json.loads(data[8:8 + n])[name]
    begin, end = entry["data_offsets"]
    raw = data[8 + n + begin:8 + n + end]
    if entry["dtype"] == "BF16":
        values = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        values = np.frombuffer(raw, {"F16": "<f2", "F32": "<f4"}[entry["dtype"]])
    return values.reshape(entry["shape"]).astype(np.float64), entry["dtype"]
def rounded(x):
    """x (float64 holding float32 values) rounded nearest-even to the dtype, as float64."""
    x = x.astype(np.float32)
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float64)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)
if sys.argv[3] == "round":  # round SOURCES to the dtype, saved as float32 r_q.npy, r_k.npy, r_v.npy
    for name, source in zip("qkv", sys.argv[4:7]):
        np.save(f"r_{name}.npy", rounded(tensor(source)[0]).astype(np.float32))
    sys.exit(0)
u = 2.0 ** (-8 if dtype == "bf16" else -11)
failures = []
ring, ring_stored = tensor("ring_o.npy")
typed, typed_stored = tensor("typed.safetensors:o")
exact, _ = tensor("exact_o.npy")           # attn forward --dtype f32 on the rounded inputs
single, _ = tensor("single_o.npy")         # attn forward --dtype D on the same files
v_max = np.abs(np.load("r_v.npy")).max()
ulp_error = np.abs(ring - rounded(exact)) / (np.abs(rounded(exact)) + 1e-30)
bound = 2 * u * (np.abs(single) + v_max) + 1e-5
checks = [
    ("npy dtype", ring_stored == ("float32" if dtype == "bf16" else "float16"), ring_stored),
    ("safetensors dtype", typed_stored == dtype.upper(), typed_stored),
    ("npy = safetensors", np.array_equal(ring, typed), float(np.abs(ring - typed).max())),
    ("O in the dtype", np.array_equal(ring, rounded(ring)), "every value representable"),
    ("a) one ulp of the rounded fp32 forward", float(ulp_error.max()) <= 2 * u,
     f"{float(ulp_error.max()):.2e} (<= {2 * u:.2e})"),
    ("b) forward --dtype bound", bool((np.abs(ring - single) <= bound).all()),
     f"{float((np.abs(ring - single) / bound).max()):.2f} of it"),
]
for lse_file in ("ring_lse.npy", "typed.safetensors:lse"):
    lse, stored = tensor(lse_file)
    e = float(np.max(np.abs(lse - tensor("single_lse.npy")[0]) / (1 + np.abs(lse))))
    checks.append((f"LSE {lse_file}", e <= 1e-5 and stored in ("float32", "F32"), f"{e:.1e} {stored}"))
for name, ok, detail in checks:
    if not ok:
        failures.append(name)
    print(f"{label}: {name}: {'ok' if ok else 'FAIL'} ({detail})")
sys.exit(1 if failures else 0)
EOF
dtype_runs=(
  "bf16 2 zigzag q.npy k.npy v.npy --causal bottom-right"
  "f16 3 striped q.npy k.npy v.npy --causal bottom-right"
  "bf16 4 contiguous qkv_bf16.safetensors qkv_bf16.safetensors:k qkv_bf16.safetensors:v --window 4,3"
  "f16 2 contiguous qkv_bf16.safetensors qkv_bf16.safetensors:k qkv_bf16.safetensors:v"
)
for run in "${dtype_runs[@]}"; do
  read -r dtype processes layout qf kf vf masking <<< "$run"
  [ "$qf" = qkv_bf16.safetensors ] && qf=qkv_bf16.safetensors:q
  label="--dtype $dtype np=$processes $layout $qf $masking"
  rm -f ring_o.npy ring_lse.npy typed.safetensors
  python3 check_typed.py "$dtype" "$label" round "$qf" "$kf" "$vf"
  # shellcheck disable=SC2086
  "$attn" forward --q "$qf" --k "$kf" --v "$vf" --dtype "$dtype" --out single_o.npy \
    --lse single_lse.npy $masking
  # shellcheck disable=SC2086
  "$attn" forward --q r_q.npy --k r_k.npy --v r_v.npy --out exact_o.npy $masking
  # shellcheck disable=SC2086
  if ! "${mpiexec[@]}" -np "$processes" "$attn" ring --q "$qf" --k "$kf" --v "$vf" --dtype "$dtype" \
       --out ring_o.npy --lse ring_lse.npy --layout "$layout" $masking ||
     ! "${mpiexec[@]}" -np "$processes" "$attn" ring --q "$qf" --k "$kf" --v "$vf" --dtype "$dtype" \
       --out typed.safetensors --lse typed.safetensors --layout "$layout" $masking; then
    echo "FAIL: attn ring failed ($label)"; failures=$((failures + 1)); continue
  fi
  python3 check_typed.py "$dtype" "$label" check || { echo "FAIL: $label"; failures=$((failures + 1)); }
done
# The 16-bit ring is not the f32 ring: its O differs from the f32 O by more than f32 rounding.
"$attn" forward --q q.npy --k k.npy --v v.npy --out f32_o.npy
"${mpiexec[@]}" -np 2 "$attn" ring --q q.npy --k k.npy --v v.npy --dtype bf16 --out ring_o.npy
if compare f32_o.npy ring_o.npy "bf16 ring vs f32 forward (must differ)" > /dev/null; then
  echo "FAIL: --dtype bf16 gave the float32 result"; failures=$((failures + 1))
fi

expect_error() { # expect_error LABEL EXPECTED_TEXT ARGS...
  local label=$1 text=$2
  shift 2
  rm -f ring_o.npy
  if "${mpiexec[@]}" "$@" > stdout.txt 2> stderr.txt; then
    echo "FAIL: $label: exit status 0"; failures=$((failures + 1)); return
  fi
  if ! grep -q -- "$text" stderr.txt; then
    echo "FAIL: $label: stderr lacks '$text':"; cat stderr.txt; failures=$((failures + 1))
  fi
  if [ -e ring_o.npy ]; then echo "FAIL: $label: wrote an output"; failures=$((failures + 1)); fi
  echo "$label: $(grep -m1 'attn ring' stderr.txt || true)"
}
expect_error "fp16 overflow" "q_big.npy" -np 2 "$attn" ring --q q_big.npy --k k.npy \
  --v v.npy --dtype f16 --out ring_o.npy
expect_error "unknown dtype" "--dtype 'f8'" -np 2 "$attn" ring --q q.npy --k k.npy \
  --v v.npy --dtype f8 --out ring_o.npy
expect_error "K disagrees with Q" "k_wrong.npy" -np 3 "$attn" ring --q q.npy --k k_wrong.npy \
  --v v.npy --out ring_o.npy --causal bottom-right
expect_error "T = 2 < P = 3" "sequence_length = 2" -np 3 "$attn" ring --q q_short.npy \
  --k q_short.npy --v q_short.npy --out ring_o.npy
expect_error "unknown layout" "--layout 'diagonal'" -np 2 "$attn" ring --q q.npy --k k.npy \
  --v v.npy --out ring_o.npy --layout diagonal

if [ "$failures" -ne 0 ]; then echo "$failures failures"; exit 1; fi
echo "cli_ring: all passed"
