#!/usr/bin/env python3
"""compare_small.py — small attention calls, the ones a generation or serving loop makes,
through attn.torch.scaled_dot_product_attention against torch.nn.functional's, alternated
call by call in one process. Prints each call's median time (microseconds) and the ratio
attn / torch (below 1: attn is faster).

Threads: both libraries read OMP_NUM_THREADS at start (attn's default thread count is that
variable when set); run the script once per thread count:
    OMP_NUM_THREADS=1 python3 bench/compare_small.py
    OMP_NUM_THREADS=2 python3 bench/compare_small.py

attn runs its parallel regions on PyTorch's OpenMP threads (attn.torch's default); --own-pool
adds a column for attn on its own worker pool (ATTN_TORCH_THREADS=own), alternated with the
other two in the same rounds.

usage: python3 bench/compare_small.py [--rounds R] [--dtype f32|bf16] [--own-pool]
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import attn.torch as attn_torch
from attn import _attn as attn_extension

CALLS = [  # (Tq, Tk, Hq, Hkv, D)
    (1, 128, 16, 4, 64),
    (1, 576, 16, 4, 64),
    (1, 2048, 32, 8, 128),
    (1, 8192, 32, 8, 128),
    (16, 512, 16, 4, 64),
]


def time_call(function, calls):
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def use_pool(own):
    """attn's regions on its own pool (own) or on PyTorch's threads, as attn.torch chose."""
    if own:
        attn_extension.use_openmp(None)
    else:
        attn_torch._use_torch_threads()


def measure(shape, dtype, rounds, own_pool):
    Tq, Tk, Hq, Hkv, D = shape
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, Hq, Tq, D, generator=generator).to(dtype)
    k = torch.randn(1, Hkv, Tk, D, generator=generator).to(dtype)
    v = torch.randn(1, Hkv, Tk, D, generator=generator).to(dtype)
    mask = None  # the new rows see every key (no mask: the call a cache read makes)

    def ours():
        return attn_torch.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    def theirs():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    difference = (ours().float() - theirs().float()).abs().max().item()
    probe = time_call(theirs, 3)
    calls = max(3, int(2e-3 / max(probe, 1e-7)))
    times = {"attn": [], "torch": [], "own": []}
    for _ in range(rounds):
        times["attn"].append(time_call(ours, calls))
        times["torch"].append(time_call(theirs, calls))
        if own_pool:
            use_pool(True)
            times["own"].append(time_call(ours, calls))
            use_pool(False)
    return {name: statistics.median(values) for name, values in times.items() if values}, \
        difference


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--own-pool", action="store_true",
                        help="also time attn on its own worker pool")
    arguments = parser.parse_args()
    dtype = torch.float32 if arguments.dtype == "f32" else torch.bfloat16
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    own = arguments.own_pool
    print(f"compare_small: {arguments.dtype}, torch {torch.__version__} on "
          f"{torch.get_num_threads()} threads, OMP_NUM_THREADS={threads}, attn on "
          f"{'PyTorch' if attn_torch._TORCH_THREADS else 'its own'} threads, median of "
          f"{arguments.rounds} alternated rounds")
    print("| Tq, Tk, Hq/Hkv, D | attn (us) | torch SDPA (us) | attn / torch |"
          + (" attn, own pool (us) | own pool / torch |" if own else "") + " max |diff| |")
    print("|---|---|---|---|" + ("---|---|" if own else "") + "---|")
    for shape in CALLS:
        medians, difference = measure(shape, dtype, arguments.rounds, own)
        Tq, Tk, Hq, Hkv, D = shape
        extra = (f" {medians['own'] * 1e6:.1f} | {medians['own'] / medians['torch']:.2f} |"
                 if own else "")
        print(f"| {Tq}, {Tk}, {Hq}/{Hkv}, {D} | {medians['attn'] * 1e6:.1f} | "
              f"{medians['torch'] * 1e6:.1f} | {medians['attn'] / medians['torch']:.2f} |"
              f"{extra} {difference:.1e} |", flush=True)


if __name__ == "__main__":
    main()
