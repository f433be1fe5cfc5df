#!/usr/bin/env python3
"""compare_serve.py — the continuous-batching step mix of `attn-bench serve`, timed through
PyTorch scaled_dot_product_attention in the same run.

The mix (identical draws: the same splitmix64 seed and formula as bench/cmd_serve.c):
B sequences with contexts uniform in [min, max]; each step, `prefills` sequences get a
prefill chunk of `chunk` tokens (causal, bottom-right: the chunk's query i sits at position
context + i) and every other sequence one decode token. PyTorch runs it two ways:
  per-sequence  one SDPA call per sequence on its own K/V cache [1, Hkv, context + new, D]
                (no padding; the chunk's bottom-right causal mask built once per sequence)
  padded        one SDPA call for the decode tokens on a batch padded to the longest
                context with a key mask, plus one padded call for the prefill chunks
                (skipped with --no-padded, or when the padded batch would exceed --max-gib)
Both append the new tokens' K/V into preallocated caches as a server would. Reported per
dtype: ms per step and tokens per second. With --attn-bench PATH the script also runs
`attn-bench serve` with the same sizes and thread count right after, and prints its step row
beside PyTorch's and the speedup.

How to run (this machine: the prepared venv has torch):
  /work/venv/bin/python bench/compare_serve.py --quick --attn-bench build/attn-bench
  OMP_WAIT_POLICY=passive /work/venv/bin/python bench/compare_serve.py --threads 2 \
      --attn-bench build/attn-bench        # the full mix: 64 sequences, 512..32768
In CI or elsewhere: any Python with torch (`pip install torch numpy`).

usage: compare_serve.py [--quick] [--sequences N] [--context MIN MAX] [--seed S]
                        [--prefills N] [--chunk N] [--heads HQ] [--kv-heads HKV] [--dim D]
                        [--dtype f32|bf16|all] [--threads N] [--repeats R] [--no-padded]
                        [--max-gib G] [--attn-bench build/attn-bench]
"""
import argparse
import re
import subprocess
import time

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


def splitmix64(state):
    """The next (state, value) of splitmix64, as bench/cmd_serve.c draws them."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def draw_contexts(count, low, high, seed):
    state, contexts = seed, []
    for _ in range(count):
        state, value = splitmix64(state)
        contexts.append(low + value % (high - low + 1))
    return contexts


def sdpa(query, keys, values, mask=None):
    group = query.shape[1] // keys.shape[1]
    if group > 1:
        try:
            return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, enable_gqa=True)
        except TypeError:  # torch < 2.5
            keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
    return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)


def bottom_right_mask(queries, keys):
    """Boolean [queries, keys]: query i (at position keys - queries + i) sees keys <= it."""
    rows = torch.arange(queries).unsqueeze(1) + (keys - queries)
    return torch.arange(keys).unsqueeze(0) <= rows


def median_seconds(step, repeats):
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def per_sequence_step(args, contexts, dtype):
    """The step as one SDPA call per sequence; returns the step function."""
    Hq, Hkv, D, P, C = args.heads, args.kv_heads, args.dim, args.prefills, args.chunk
    caches, masks, queries, news = [], {}, [], []
    for b, context in enumerate(contexts):
        tokens = C if b < P else 1
        k = torch.rand(1, Hkv, context + tokens, D, dtype=dtype) * 2 - 1
        v = torch.rand(1, Hkv, context + tokens, D, dtype=dtype) * 2 - 1
        caches.append((k, v))
        queries.append(torch.rand(1, Hq, tokens, D, dtype=dtype) * 2 - 1)
        news.append((torch.rand(1, Hkv, tokens, D, dtype=dtype), torch.rand(1, Hkv, tokens, D, dtype=dtype)))
        if tokens > 1:
            masks[b] = bottom_right_mask(tokens, context + tokens)

    def step():
        for b, context in enumerate(contexts):
            k, v = caches[b]
            kn, vn = news[b]
            tokens = kn.shape[2]
            k[:, :, context:context + tokens].copy_(kn)
            v[:, :, context:context + tokens].copy_(vn)
            sdpa(queries[b], k, v, masks.get(b))

    return step


def padded_step(args, contexts, dtype):
    """The step as two padded SDPA calls (decode batch, prefill batch) with key masks."""
    Hq, Hkv, D, P, C = args.heads, args.kv_heads, args.dim, args.prefills, args.chunk
    prefill, decode = contexts[:P], contexts[P:]
    longest_p, longest_d = max(prefill) + C, max(decode) + 1
    kp = torch.rand(len(prefill), Hkv, longest_p, D, dtype=dtype)
    vp = torch.rand(len(prefill), Hkv, longest_p, D, dtype=dtype)
    kd = torch.rand(len(decode), Hkv, longest_d, D, dtype=dtype)
    vd = torch.rand(len(decode), Hkv, longest_d, D, dtype=dtype)
    qp = torch.rand(len(prefill), Hq, C, D, dtype=dtype)
    qd = torch.rand(len(decode), Hq, 1, D, dtype=dtype)
    mask_p = torch.zeros(len(prefill), 1, C, longest_p, dtype=torch.bool)
    for n, context in enumerate(prefill):
        mask_p[n, 0, :, :context + C] = bottom_right_mask(C, context + C)
    mask_d = torch.zeros(len(decode), 1, 1, longest_d, dtype=torch.bool)
    for n, context in enumerate(decode):
        mask_d[n, 0, 0, :context + 1] = True

    def step():
        sdpa(qd, kd, vd, mask_d)
        sdpa(qp, kp, vp, mask_p)

    return step


def attn_step_rows(args, binary):
    """{dtype: (ms/step, tokens/s)} from `attn-bench serve` with the same sizes."""
    command = [binary, "serve", "--sequences", str(args.sequences), "--context",
               str(args.context[0]), str(args.context[1]), "--seed", str(args.seed),
               "--prefills", str(args.prefills), "--chunk", str(args.chunk), "--heads",
               str(args.heads), "--kv-heads", str(args.kv_heads), "--dim", str(args.dim),
               "--dtype", args.dtype, "--threads", str(args.threads)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in output.splitlines():
        match = re.match(r"(f32|bf16|f16)\s+step\s+([\d.]+)\s+([\d.]+)", line)
        if match:
            rows[match.group(1)] = (float(match.group(2)), float(match.group(3)))
    return rows, output


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--context", type=int, nargs=2, default=[512, 32768])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prefills", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--dtype", default="all", choices=["f32", "bf16", "all"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-padded", action="store_true")
    parser.add_argument("--max-gib", type=float, default=4.0)
    parser.add_argument("--attn-bench", help="path of the attn-bench binary: run `attn-bench serve` too")
    args = parser.parse_args()
    if args.quick:
        args.sequences, args.context, args.repeats = 16, [512, 8192], 3
    torch.set_num_threads(args.threads)
    contexts = draw_contexts(args.sequences, args.context[0], args.context[1], args.seed)
    tokens = args.prefills * args.chunk + (args.sequences - args.prefills)
    print(f"compare_serve: {args.sequences} sequences, contexts {args.context[0]}..{args.context[1]} "
          f"(seed {args.seed}), Hq {args.heads}, Hkv {args.kv_heads}, D {args.dim}, each step "
          f"{args.prefills} chunks of {args.chunk} + {args.sequences - args.prefills} decode tokens, "
          f"torch {torch.__version__}, {args.threads} threads")
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    chosen = list(dtypes) if args.dtype == "all" else [args.dtype]
    results = {}
    for name in chosen:
        dtype = dtypes[name]
        ms = median_seconds(per_sequence_step(args, contexts, dtype), args.repeats) * 1e3
        results[(name, "per-sequence")] = ms
        print(f"{name:5s} torch SDPA per-sequence  {ms:10.2f} ms/step {tokens / ms * 1e3:12.0f} tokens/s", flush=True)
        element = 4 if dtype == torch.float32 else 2
        padded_bytes = 2 * args.kv_heads * args.dim * element * (
            (args.sequences - args.prefills) * (max(contexts[args.prefills:]) + 1) +
            args.prefills * (max(contexts[:args.prefills]) + args.chunk))
        if args.no_padded or padded_bytes > args.max_gib * 2**30:
            print(f"{name:5s} torch SDPA padded        skipped ({padded_bytes / 2**30:.1f} GiB > --max-gib)")
            continue
        ms = median_seconds(padded_step(args, contexts, dtype), args.repeats) * 1e3
        results[(name, "padded")] = ms
        print(f"{name:5s} torch SDPA padded        {ms:10.2f} ms/step {tokens / ms * 1e3:12.0f} tokens/s", flush=True)
    if args.attn_bench:
        rows, output = attn_step_rows(args, args.attn_bench)
        print(output.rstrip())
        for name in chosen:
            if name in rows and (name, "per-sequence") in results:
                ms = rows[name][0]
                line = f"{name:5s} attn step {ms:.2f} ms: {results[(name, 'per-sequence')] / ms:.2f}x torch per-sequence"
                if (name, "padded") in results:
                    line += f", {results[(name, 'padded')] / ms:.2f}x torch padded"
                print(line)


if __name__ == "__main__":
    main()
