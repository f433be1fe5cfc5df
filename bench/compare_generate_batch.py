#!/usr/bin/env python3
"""compare_generate_batch.py — transformers' continuous batching (model.generate_batch) with attn
(attn.hf.generate_batch) against continuous batching on sdpa, on a Llama-architecture model with
random weights (built from a config: nothing downloaded). Each round runs the same requests
(prompts of random lengths up to --prompt, --new greedy tokens each) once per implementation,
alternating which goes first; it prints the wall time of every run, the median tokens/s of
each and their ratio (above 1: attn is faster). Both must generate the same tokens (checked).

usage: python3 bench/compare_generate_batch.py [--requests 16] [--prompt 512] [--new 32]
           [--dtype f32|bf16] [--layers 4] [--hidden 512] [--heads 8] [--kv-heads 4]
           [--rounds 3]
Threads: both read OMP_NUM_THREADS (attn's default thread count is that variable when set).
"""
import argparse
import random
import statistics
import time

import torch
import transformers
from transformers.generation.configuration_utils import ContinuousBatchingConfig

import attn.hf


def build_model(arguments, dtype):
    config = transformers.LlamaConfig(
        vocab_size=1024, hidden_size=arguments.hidden,
        intermediate_size=arguments.hidden * 8 // 3, num_hidden_layers=arguments.layers,
        num_attention_heads=arguments.heads, num_key_value_heads=arguments.kv_heads,
        max_position_embeddings=16384)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(dtype).eval()


def run(model, implementation, prompts, generation):
    """(seconds, {request: tokens}) of one generate_batch on `implementation`."""
    batching = ContinuousBatchingConfig(page_size=64, max_batch_tokens=1024)
    start = time.perf_counter()
    with torch.inference_mode():
        if implementation == "attn":
            outputs = attn.hf.generate_batch(model, prompts, generation_config=generation,
                                             continuous_batching_config=batching,
                                             progress_bar=False)
        else:
            model.config._attn_implementation = "sdpa"
            outputs = model.generate_batch(prompts, generation_config=generation,
                                           continuous_batching_config=batching,
                                           progress_bar=False)
    seconds = time.perf_counter() - start
    return seconds, {name: output.generated_tokens for name, output in outputs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    dtype = torch.float32 if arguments.dtype == "f32" else torch.bfloat16
    model = build_model(arguments, dtype)
    chooser = random.Random(0)
    prompts = [[chooser.randrange(1, 1024) for _ in range(chooser.randrange(8, arguments.prompt))]
               for _ in range(arguments.requests)]
    generation = transformers.GenerationConfig(max_new_tokens=arguments.new, do_sample=False,
                                               eos_token_id=-1)
    tokens = arguments.requests * arguments.new + sum(len(p) for p in prompts)
    run(model, "sdpa", prompts[:2], generation)  # warm both paths up
    run(model, "attn", prompts[:2], generation)
    times = {"attn": [], "sdpa": []}
    for round_index in range(arguments.rounds):
        order = ("attn", "sdpa") if round_index % 2 == 0 else ("sdpa", "attn")
        results = {}
        for implementation in order:
            seconds, results[implementation] = run(model, implementation, prompts, generation)
            times[implementation].append(seconds)
            print(f"round {round_index} {implementation}: {seconds:.2f} s "
                  f"({tokens / seconds:.0f} tokens/s, prompts and new tokens)")
        if results["attn"] != results["sdpa"]:
            raise SystemExit("attn and sdpa generated different tokens")
    attn_median, sdpa_median = (statistics.median(times[k]) for k in ("attn", "sdpa"))
    print(f"median: attn {attn_median:.2f} s, sdpa {sdpa_median:.2f} s; tokens/s attn / sdpa "
          f"= {sdpa_median / attn_median:.3f}  ({arguments.requests} requests, prompts < "
          f"{arguments.prompt}, {arguments.new} new tokens, {arguments.dtype}, "
          f"{arguments.layers} layers, hidden {arguments.hidden}, "
          f"{arguments.heads}/{arguments.kv_heads} heads)")


if __name__ == "__main__":
    main()
