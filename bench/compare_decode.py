#!/usr/bin/env python3
"""compare_decode.py — PyTorch SDPA decoding against the same cache shapes `attn bench decode`
uses: one new token, query [1, Hq, 1, D] against cached K/V [1, Hkv, L, D] (fp32 or bf16),
Hq = 32, D = 128. Prints ms per token and K/V GB/s, to set beside `attn bench decode`.

usage: python3 bench/compare_decode.py [--threads N] [--contexts 4096,32768] [--dtype f32|bf16]
"""
import argparse
import time

import torch
import torch.nn.functional as F


def time_step(query, keys, values, repeats):
    group = query.shape[1] // keys.shape[1]
    def step():
        # repeat_interleave: query head h uses KV head h // group (the attn convention).
        k = keys if group == 1 else keys.repeat_interleave(group, dim=1)
        v = values if group == 1 else values.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(query, k, v)
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--contexts", default="4096,32768")
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    print(f"PyTorch {torch.__version__} SDPA decode, {args.threads} threads, {args.dtype}")
    print(f"{'configuration':24} {'context':>8} {'ms/token':>9} {'K/V GB/s':>9}")
    for kv_heads in (32, 8, 1):
        for context in (int(c) for c in args.contexts.split(",")):
            query = torch.randn(1, 32, 1, 128, dtype=dtype)
            keys = torch.randn(1, kv_heads, context, 128, dtype=dtype)
            values = torch.randn(1, kv_heads, context, 128, dtype=dtype)
            seconds = time_step(query, keys, values, args.repeats)
            gigabytes = 2 * kv_heads * context * 128 * keys.element_size() / 1e9
            print(f"{'Hq=32 Hkv=' + str(kv_heads):24} {context:8d} {seconds * 1e3:9.3f} "
                  f"{gigabytes / seconds:9.1f}")


if __name__ == "__main__":
    main()
