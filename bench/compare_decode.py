#!/usr/bin/env python3
"""compare_decode.py — PyTorch SDPA decoding against the same cache shapes `attn-bench decode`
uses: one new token, query [1, Hq, 1, D] against cached K/V [1, Hkv, L, D] (fp32 or bf16),
Hq = 32, D = 128. Prints ms per token and K/V GB/s; with --attn-bench PATH it also runs
`attn-bench decode` on the same configurations (same thread count) and prints the speedup
of attn over PyTorch for each row.

PyTorch's GQA: scaled_dot_product_attention(enable_gqa=True) where available (torch >= 2.5;
query head h uses KV head h // (Hq / Hkv), the attn convention), else repeat_interleave of
the cached K/V (which copies them every step).

usage: python3 bench/compare_decode.py [--threads N] [--contexts 4096,32768]
                                       [--dtype f32|bf16] [--repeats R] [--attn-bench build/attn-bench]
"""
import argparse
import re
import subprocess
import time

import torch
import torch.nn.functional as F

def _probe_enable_gqa():
    """True when this torch's SDPA accepts enable_gqa (a builtin: no signature to inspect)."""
    try:
        F.scaled_dot_product_attention(torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 1, 4),
                                       torch.zeros(1, 1, 1, 4), enable_gqa=True)
        return True
    except TypeError:
        return False


HAS_ENABLE_GQA = _probe_enable_gqa()


def sdpa_step(query, keys, values):
    group = query.shape[1] // keys.shape[1]
    if group == 1:
        return F.scaled_dot_product_attention(query, keys, values)
    if HAS_ENABLE_GQA:
        return F.scaled_dot_product_attention(query, keys, values, enable_gqa=True)
    return F.scaled_dot_product_attention(query, keys.repeat_interleave(group, dim=1),
                                          values.repeat_interleave(group, dim=1))


def time_step(query, keys, values, repeats):
    sdpa_step(query, keys, values)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sdpa_step(query, keys, values)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def attn_rows(binary, context, dtype, threads):
    """ms/token of `attn-bench decode` for each Hkv at one context, keyed by Hkv."""
    output = subprocess.run([binary, "decode", "--context", str(context), "--dtype",
                             dtype, "--no-mla", "--threads", str(threads)],
                            capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in output.splitlines():
        match = re.match(r"\S+ Hq=32 Hkv=(\d+)\s+(\d+)\s+\S+\s+(\S+)", line)
        if match and int(match.group(2)) == context:
            rows[int(match.group(1))] = float(match.group(3))
    bandwidth = re.search(r"measured read bandwidth: (\S+) GB/s", output)
    return rows, float(bandwidth.group(1)) if bandwidth else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--contexts", default="4096,32768")
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--attn-bench", default=None, help="path of the attn-bench binary to compare")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    gqa = "enable_gqa" if HAS_ENABLE_GQA else "repeat_interleave"
    print(f"PyTorch {torch.__version__} SDPA decode ({gqa}), {args.threads} threads, {args.dtype}")
    header = f"{'configuration':16} {'context':>8} {'torch ms':>9} {'torch GB/s':>10}"
    if args.attn_bench:
        header += f" {'attn ms':>9} {'attn GB/s':>9} {'speedup':>8}"
    print(header)
    for context in (int(c) for c in args.contexts.split(",")):
        attn, bandwidth = attn_rows(args.attn_bench, context, args.dtype, args.threads) \
            if args.attn_bench else ({}, None)
        for kv_heads in (32, 8, 1):
            query = torch.randn(1, 32, 1, 128, dtype=dtype)
            keys = torch.randn(1, kv_heads, context, 128, dtype=dtype)
            values = torch.randn(1, kv_heads, context, 128, dtype=dtype)
            seconds = time_step(query, keys, values, args.repeats)
            gigabytes = 2 * kv_heads * context * 128 * keys.element_size() / 1e9
            line = (f"{'Hq=32 Hkv=' + str(kv_heads):16} {context:8d} {seconds * 1e3:9.3f} "
                    f"{gigabytes / seconds:10.1f}")
            if kv_heads in attn:
                attn_seconds = attn[kv_heads] / 1e3
                line += (f" {attn[kv_heads]:9.3f} {gigabytes / attn_seconds:9.1f} "
                         f"{seconds / attn_seconds:7.1f}x")
            print(line)
            del query, keys, values
        if bandwidth is not None:
            print(f"  (attn's run measured {bandwidth:.1f} GB/s read bandwidth)")


if __name__ == "__main__":
    main()
