#!/usr/bin/env python3
"""minilm_sentences.py — the sentences of the MiniLM test, one per line: short and long ones,
punctuation, digits, accents, CJK (the demo's 我 喜欢 学 注意力 机制), and one past the model's
256-token limit (truncated by the tokenizer, so positions reach 255)."""
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Attention is all you need, and exact attention in C can be fast.",
    "我 喜欢 学 注意力 机制",
    "Déjà vu: naïve café owners in São Paulo serve crème brûlée at 3.14 a.m.!",
    "x",
    " ".join(f"token{i} is followed by another word" for i in range(80)),
]
for sentence in SENTENCES:
    print(sentence)
