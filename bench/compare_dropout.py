#!/usr/bin/env python3
"""compare_dropout.py — one training step of attention (forward and backward, causal) with
attention dropout, attn.torch.scaled_dot_product_attention against PyTorch's, alternated call by
call in one process; prints the median milliseconds of each and torch / attn (above 1: attn is
faster) for dropout 0 and the given probability. PyTorch's CPU kernels have no fused dropout, so
its SDPA takes the math path (the probabilities materialised) when dropout_p > 0.

usage: python3 bench/compare_dropout.py [--t 1024] [--heads 8] [--d 64] [--p 0.1] [--rounds 7]
Threads: both libraries read OMP_NUM_THREADS.
"""
import argparse
import statistics
import time

import torch

import attn.torch as attn_torch


def step_seconds(function, shape, p):
    """The seconds of one forward + backward of `function` on new random [B, H, T, D] inputs."""
    q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
    start = time.perf_counter()
    function(q, k, v, dropout_p=p, is_causal=True).sum().backward()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--t", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--p", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=7)
    arguments = parser.parse_args()
    shape = (1, arguments.heads, arguments.t, arguments.d)
    functions = {"attn": attn_torch.scaled_dot_product_attention,
                 "torch": torch.nn.functional.scaled_dot_product_attention}
    print(f"compare_dropout: [1, {arguments.heads}, {arguments.t}, {arguments.d}] causal, "
          f"forward + backward, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"median of {arguments.rounds} alternated rounds")
    print("| dropout_p | attn (ms) | torch (ms) | torch / attn |\n|---|---|---|---|")
    torch.manual_seed(0)
    for p in (0.0, arguments.p):
        times = {"attn": [], "torch": []}
        for name in functions:  # warm-up
            step_seconds(functions[name], shape, p)
        for round_index in range(arguments.rounds):
            order = ("attn", "torch") if round_index % 2 == 0 else ("torch", "attn")
            for name in order:
                times[name].append(step_seconds(functions[name], shape, p))
        attn_ms, torch_ms = (statistics.median(times[n]) * 1e3 for n in ("attn", "torch"))
        print(f"| {p} | {attn_ms:.1f} | {torch_ms:.1f} | {torch_ms / attn_ms:.2f} |")


if __name__ == "__main__":
    main()
