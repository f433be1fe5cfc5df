#!/usr/bin/env python3
"""compare_threads.py — one attention call right after a PyTorch operator, as a model makes
them, on attn's one thread against two: the time of the call alone, median of --pairs
(operator, call) pairs, the two thread counts alternated in one process. Above 1: the second
thread made the call slower.

PyTorch's OpenMP workers spin on the cores for a while after each operator unless
OMP_WAIT_POLICY=passive; a helper thread of attn's then shares a core with one of them. Run
it both ways:
    OMP_NUM_THREADS=2 python3 bench/compare_threads.py
    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive python3 bench/compare_threads.py

The thread counts are exact here (ATTN_THREADS_BY_WORK=0, set before attn loads): this
measures what a second thread does, not which count attn's policy would choose.

usage: python3 bench/compare_threads.py [--pairs N] [--calls Tq:Tk:Hq:Hkv:D,...]
"""
import argparse
import os
import statistics
import time

os.environ["ATTN_THREADS_BY_WORK"] = "0"

import torch  # noqa: E402

import attn.torch  # noqa: E402,F401  (registers torch with the extension)
from attn import _attn as extension  # noqa: E402

CALLS = "1:576:16:4:64,1:1024:16:4:64,1:2048:16:4:64,1:4096:16:4:64,1:2048:8:4:64,16:512:16:4:64"


def time_after_operator(call, threads, operator):
    operator()
    start = time.perf_counter()
    call(threads)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--calls", default=CALLS)
    arguments = parser.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    x, w = torch.randn(256, 512), torch.randn(512, 512)
    operator = lambda: torch.mm(x, w)  # noqa: E731
    print(f"compare_threads: torch {torch.__version__} on {threads} threads, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY')}, median of {arguments.pairs} pairs")
    print("| Tq, Tk, Hq/Hkv, D | 1 thread (us) | 2 threads (us) | 2 / 1 |")
    print("|---|---|---|---|")
    for text in arguments.calls.split(","):
        Tq, Tk, Hq, Hkv, D = (int(n) for n in text.split(":"))
        generator = torch.Generator().manual_seed(0)
        q = torch.randn(1, Hq, Tq, D, generator=generator)
        k = torch.randn(1, Hkv, Tk, D, generator=generator)
        v = torch.randn(1, Hkv, Tk, D, generator=generator)
        call = lambda n: extension.sdpa_torch(q, k, v, 0, None, True, False, n)  # noqa: E731
        times = {1: [], 2: []}
        for _ in range(arguments.pairs):
            for n in (1, 2):
                times[n].append(time_after_operator(call, n, operator))
        one, two = (statistics.median(times[n]) * 1e6 for n in (1, 2))
        print(f"| {Tq}, {Tk}, {Hq}/{Hkv}, {D} | {one:.1f} | {two:.1f} | {two / one:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
