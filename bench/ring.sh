#!/usr/bin/env bash
# ring.sh — ring attention benchmark: time per layer (forward, and backward with dO = 1) and
# bytes sent per rank for P = 1, 2, 4 MPI processes on this machine, against the single-
# process engine (attn_forward on rank 0, same inputs). Prints a Markdown table; the per-rank
# details of each run go to bench/results/ring-P*.txt.
#
# usage: bash bench/ring.sh [BUILD_DIR] [T] [H] [D] [LAYOUT]
#   defaults: build, T = 4096 tokens, H = 8 heads (MHA), D = 64, zigzag, causal, B = 1.
# The machine's cores are shared by the P processes: each rank gets cores / P OpenMP threads
# (at least 1), so the total thread count stays the same for every P.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$source_dir/build}
T=${2:-4096}
H=${3:-8}
D=${4:-64}
layout=${5:-zigzag}
repeat=3
attn=$build/attn
[ -x "$attn" ] || { echo "ring.sh: $attn not found (build first)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
oversubscribe=""
mpiexec_version=$(mpiexec --version 2>&1 || true)
case "$mpiexec_version" in *"Open MPI"* | *OpenRTE*) oversubscribe="--oversubscribe" ;; esac
cores=$(nproc)
results=$source_dir/bench/results
mkdir -p "$results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$work" "$T" "$H" "$D" <<'EOF'
import sys
import numpy as np
work, T, H, D = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
for name in ("q", "k", "v"):
    np.save(f"{work}/{name}.npy", rng.standard_normal((1, T, H, D)).astype(np.float32))
EOF

echo "ring attention, causal, B = 1, T = $T, H = $H, D = $D, layout $layout, best of $repeat, $cores cores"
echo
echo "| P | threads/rank | forward ms | backward ms | fwd wait ms (max rank) | MB sent/rank fwd | MB sent/rank bwd | single-process fwd ms (rank 0's threads) | max abs diff |"
echo "|---|---|---|---|---|---|---|---|---|"
for P in 1 2 4; do
  threads=$(( cores / P )); [ "$threads" -ge 1 ] || threads=1
  out=$results/ring-P$P.txt
  OMP_NUM_THREADS=$threads mpiexec -np "$P" $oversubscribe "$attn" ring --q "$work/q.npy" \
    --k "$work/k.npy" --v "$work/v.npy" --out "$work/o.npy" --causal bottom-right \
    --layout "$layout" --repeat "$repeat" --backward --stats --compare > "$out"
  python3 - "$out" "$P" "$threads" <<'EOF'
import sys
lines = open(sys.argv[1]).read().splitlines()
rows = [l.split() for l in lines if l.strip() and l.split()[0].isdigit()]
forward = max(float(r[1]) for r in rows)
wait = max(float(r[3]) for r in rows)
sent = max(float(r[5]) for r in rows)
backward = max(float(r[6]) for r in rows)
bwd_sent = max(float(r[8]) for r in rows)
single = next(l for l in lines if l.startswith("single-process"))
single_ms = single.split(":")[1].split("ms")[0].strip()
diff = single.rsplit("=", 1)[1].strip()
print(f"| {sys.argv[2]} | {sys.argv[3]} | {forward:.1f} | {backward:.1f} | {wait:.1f} | {sent:.2f} | {bwd_sent:.2f} | {single_ms} | {diff} |")
EOF
done
