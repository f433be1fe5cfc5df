#!/usr/bin/env python3
"""ring_model.py — when does ring attention's K/V transfer hide behind its compute?

Per ring step a rank computes its c = T/P queries against one visiting block of c keys and
meanwhile sends/receives one K/V block. With f the fraction of the c x c pairs computed per
step (1 non-causal; 1/2 for zigzag or striped causal), Hq query heads, Hkv KV heads, head dim D,
b bytes per K/V element, a sustained attention rate F (FLOP/s) and a link bandwidth W (bytes/s):

    compute per step   = 4 c^2 f Hq D / F            (2D flops for q.k, 2D for p.v, per pair)
    transfer per step  = 2 c Hkv D b / W             (K and V of the block)
    R = compute / transfer = 2 c f Hq W / (Hkv b F)  (D cancels)
    hidden  iff  R >= 1  iff  c >= c_min = Hkv b F / (2 f Hq W)

Backward: about 2.5x the forward's flops, and the dK/dV accumulators (fp32) travel too, so
transfer per step = 2 c Hkv D (b + 4) / W; R_backward = 2.5 * 4 c f Hq D/F / that.

usage: python3 bench/ring_model.py [MEASURED_GFLOPS]   (prints Markdown tables)
"""
import sys

measured_gflops = float(sys.argv[1]) if len(sys.argv) > 1 else 32.0
cases = [  # name, F (FLOP/s), bytes per K/V element
    (f"this CPU (measured {measured_gflops:.0f} GFLOP/s, fp32)", measured_gflops * 1e9, 4),
    ("H100-class GPU (400 TFLOP/s attention, bf16)", 400e12, 2),
]
links_gbit = [25, 100, 200, 400]
f = 0.5  # zigzag / striped causal
heads = [("MHA, Hq = Hkv", 1.0), ("GQA 8:1 (e.g. Hq = 64, Hkv = 8)", 1 / 8)]


def c_min(F, b, W, kv_ratio, fraction=f):
    return kv_ratio * b * F / (2 * fraction * W)


print("### Smallest per-rank block c = T/P that hides the forward transfer (causal, zigzag)\n")
print("| compute | heads | " + " | ".join(f"{g} Gb/s" for g in links_gbit) + " |")
print("|---|---|" + "---|" * len(links_gbit))
for name, F, b in cases:
    for head_name, kv_ratio in heads:
        values = [c_min(F, b, g * 1e9 / 8, kv_ratio) for g in links_gbit]
        cells = [f"{x:,.0f}" if x >= 10 else f"{x:.1f}" for x in values]
        print(f"| {name} | {head_name} | " + " | ".join(cells) + " |")

print("\n### R = compute / transfer per step for sequences up to 1M tokens "
      "(H100-class, bf16, MHA, causal zigzag; R >= 1: hidden)\n")
lengths = [32_768, 131_072, 1_048_576]
ranks = [8, 32, 128]
print("| T | P | c = T/P | " + " | ".join(f"R fwd @ {g} Gb/s" for g in links_gbit) +
      " | R bwd @ 400 Gb/s |")
print("|---|---|---|" + "---|" * (len(links_gbit) + 1))
F, b = cases[1][1], cases[1][2]
for T in lengths:
    for P in ranks:
        c = T // P
        cells = []
        for g in links_gbit:
            W = g * 1e9 / 8
            R = 2 * c * f * W / (b * F)
            cells.append(f"{R:.2f}")
        W = 400e9 / 8
        R_backward = 2.5 * 4 * c * f / F / (2 * (b + 4) / W)
        print(f"| {T:,} | {P} | {c:,} | " + " | ".join(cells) + f" | {R_backward:.2f} |")

print("\n### Per-step times at T = 1M tokens, P = 32 (c = 32,768), Hq = Hkv = 32, D = 128\n")
print("| compute | link | compute ms/step | transfer ms/step | hidden? |")
print("|---|---|---|---|---|")
c, H, D = 32_768, 32, 128
for name, F, b in cases:
    for g in (25, 400):
        W = g * 1e9 / 8
        compute = 4 * c * c * f * H * D / F * 1e3
        transfer = 2 * c * H * D * b / W * 1e3
        print(f"| {name} | {g} Gb/s | {compute:,.1f} | {transfer:,.1f} | "
              f"{'yes' if compute >= transfer else 'no'} |")
