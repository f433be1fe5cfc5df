#!/usr/bin/env python3
"""minilm_check.py — compares examples/minilm.c's embeddings with sentence-transformers.
usage: minilm_check.py MODEL_DIR SENTENCES.txt EMBEDDINGS.npy
Fails unless every sentence has cosine >= 0.99999 and max |difference| <= 1e-5."""
import sys

import numpy as np
from sentence_transformers import SentenceTransformer

model_dir, sentences_path, embeddings_path = sys.argv[1:4]
with open(sentences_path, encoding="utf-8") as f:
    sentences = [line.rstrip("\n") for line in f if line.strip()]
reference = SentenceTransformer(model_dir, device="cpu").encode(
    sentences, convert_to_numpy=True, batch_size=len(sentences))
got = np.load(embeddings_path)
assert got.shape == reference.shape, f"shape {got.shape}, expected {reference.shape}"
cosine = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
max_abs = np.abs(got - reference).max(1)
for i, sentence in enumerate(sentences):
    print(f"minilm: sentence {i} ({sentence[:30]!r}): cosine {cosine[i]:.8f}, max abs {max_abs[i]:.2e}")
ok = bool((cosine >= 0.99999).all() and (max_abs <= 1e-5).all())
print("minilm: " + ("PASS" if ok else "FAIL") + f" (worst cosine {cosine.min():.8f}, "
      f"worst max abs {max_abs.max():.2e})")
sys.exit(0 if ok else 1)
