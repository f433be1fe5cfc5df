#!/usr/bin/env bash
# cli_ring.sh — end-to-end check of `attn ring` under mpiexec: on random .npy inputs (GQA,
# T = 29, not a multiple of any P used), the gathered O and LSE equal `attn forward` on the
# same files within 1e-5 for every layout and for 2, 3 and 4 processes, causal, windowed and
# full attention; the same with Q, K, V read from a safetensors file and O, LSE written into one
# (F32, checked with struct/json);
# errors (a K file that disagrees with Q, T < P) exit with 1 on every rank, say why in one
# line and write no output.
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
# q, k, v as F32 tensors of one safetensors file (by hand: 8-byte length, JSON, data), and q
# once more as BF16 (the ring computes in float32 only: refused)
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
bf16 = (arrays["q"].view(np.uint32) >> 16).astype("<u2").tobytes()
write("q_bf16.safetensors", [("q", "BF16", bf16, arrays["q"].shape)])
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
expect_error "BF16 safetensors Q" "dtype BF16, expected F32" -np 2 "$attn" ring \
  --q q_bf16.safetensors --k k.npy --v v.npy --out ring_o.npy
expect_error "K disagrees with Q" "k_wrong.npy" -np 3 "$attn" ring --q q.npy --k k_wrong.npy \
  --v v.npy --out ring_o.npy --causal bottom-right
expect_error "T = 2 < P = 3" "sequence_length = 2" -np 3 "$attn" ring --q q_short.npy \
  --k q_short.npy --v q_short.npy --out ring_o.npy
expect_error "unknown layout" "--layout 'diagonal'" -np 2 "$attn" ring --q q.npy --k k.npy \
  --v v.npy --out ring_o.npy --layout diagonal

if [ "$failures" -ne 0 ]; then echo "$failures failures"; exit 1; fi
echo "cli_ring: all passed"
