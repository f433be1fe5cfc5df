#!/usr/bin/env python3
"""compare_generate.py — Hugging Face generate with attn_implementation="attn" against "sdpa"
on a Llama-architecture model with random weights (built from a config: nothing downloaded).
For each prompt length it times greedy generation of 1 + N tokens, alternating the two
implementations, with a streamer that stamps the time of every token: the prefill is the time
to the first new token, the decode time per token that of the N after it. It prints both for
each and the ratio of decode tokens/s (above 1: attn is faster). Both generate the same tokens
(checked).

usage: python3 bench/compare_generate.py [--prompts 128,2048,8192] [--new 32] [--dtype f32|bf16]
           [--layers 4] [--hidden 512] [--heads 8] [--kv-heads 4] [--rounds 3]
Threads: both libraries read OMP_NUM_THREADS (attn's default thread count is that variable
when set); attn runs on PyTorch's OpenMP threads unless ATTN_TORCH_THREADS=own.
"""
import argparse
import os
import statistics
import time

import torch
import transformers

import attn.hf
import attn.torch


def build_model(arguments, dtype):
    config = transformers.LlamaConfig(
        vocab_size=1024, hidden_size=arguments.hidden, intermediate_size=arguments.hidden * 8 // 3,
        num_hidden_layers=arguments.layers, num_attention_heads=arguments.heads,
        num_key_value_heads=arguments.kv_heads, max_position_embeddings=16384)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    return model


class Stamps:
    """A generate streamer that records when each put() arrives (the prompt, then each token)."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def timed_generate(model, implementation, prompt, new_tokens):
    """(prefill seconds, decode seconds per token, tokens) of one greedy generation."""
    model.set_attn_implementation(implementation)
    stamps = Stamps()
    start = time.perf_counter()
    with torch.inference_mode():
        tokens = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                do_sample=False, pad_token_id=0, streamer=stamps)
    first, last = stamps.times[1], stamps.times[-1]  # [0] is the prompt
    return first - start, (last - first) / (new_tokens - 1), tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", default="128,2048,8192")
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    attn.hf.register()
    dtype = torch.float32 if arguments.dtype == "f32" else torch.bfloat16
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    model = build_model(arguments, dtype)
    print(f"compare_generate: Llama, {arguments.layers} layers, hidden {arguments.hidden}, "
          f"{arguments.heads}/{arguments.kv_heads} heads, {arguments.dtype}, {arguments.new} new "
          f"tokens, torch {torch.__version__} on {torch.get_num_threads()} threads, "
          f"transformers {transformers.__version__}, attn on "
          f"{'PyTorch' if attn.torch._TORCH_THREADS else 'its own'} threads, median of "
          f"{arguments.rounds} rounds")
    print("| prompt | sdpa prefill (s) | attn prefill (s) | sdpa decode (ms/token) | "
          "attn decode (ms/token) | decode tokens/s attn / sdpa |")
    print("|---|---|---|---|---|---|")
    for length in (int(x) for x in arguments.prompts.split(",")):
        prompt = torch.randint(1, 1024, (1, length), generator=torch.Generator().manual_seed(1))
        prefill = {"sdpa": [], "attn": []}
        decode = {"sdpa": [], "attn": []}
        outputs = {}
        for _ in range(arguments.rounds):
            for name in ("sdpa", "attn"):
                first, per_token, tokens = timed_generate(model, name, prompt, 1 + arguments.new)
                prefill[name].append(first)
                decode[name].append(per_token)
                outputs[name] = tokens
        same = torch.equal(outputs["sdpa"], outputs["attn"])
        p = {n: statistics.median(v) for n, v in prefill.items()}
        d = {n: statistics.median(v) for n, v in decode.items()}
        print(f"| {length} | {p['sdpa']:.3f} | {p['attn']:.3f} | {d['sdpa'] * 1e3:.2f} | "
              f"{d['attn'] * 1e3:.2f} | {d['sdpa'] / d['attn']:.2f}"
              f"{'' if same else ' (tokens differ)'} |", flush=True)


if __name__ == "__main__":
    main()
