"""attn.hf: output_attentions=True returns the attention probabilities, equal to eager's
(Llama: causal, GQA, left padding; Gemma2: soft-capping and a sliding window; BERT-style
bidirectional padding through attn.hf.probabilities directly); and attn's thread count
passed from Hugging Face (attn.hf.register(threads=N))."""
import pytest
import torch

import attn.hf
import attn.torch

transformers = pytest.importorskip("transformers")


def _pair(config_class, model_class, **config):
    """The same random model with "eager" and "attn" attention."""
    attn.hf.register()
    config = config_class(**config)
    models = {}
    for name in ("eager", "attn"):
        torch.manual_seed(0)
        config._attn_implementation = name
        models[name] = model_class(config).eval()
    return models


def _check(models, ids, mask, **call):
    real = mask.bool()
    with torch.no_grad():
        outputs = {n: m(input_ids=ids, attention_mask=mask, **call)
                   for n, m in models.items()}
    got, want = outputs["attn"].attentions, outputs["eager"].attentions
    assert len(got) == len(want) == models["attn"].config.num_hidden_layers
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype == torch.float32
        rows = real[:, None, :, None].expand_as(g)       # eager's padded rows are uniform
        torch.testing.assert_close(g[rows], w[rows], rtol=0, atol=1e-6)
    torch.testing.assert_close(outputs["attn"].logits[real], outputs["eager"].logits[real],
                               rtol=1e-4, atol=1e-5)


def _batch(vocab, T=9, pad=4):
    torch.manual_seed(1)
    ids = torch.randint(1, vocab, (2, T))
    mask = torch.ones(2, T, dtype=torch.long)
    ids[1, :pad], mask[1, :pad] = 0, 0                  # left padding
    return ids, mask


def test_llama_output_attentions_equal_eager():
    models = _pair(transformers.LlamaConfig, transformers.LlamaForCausalLM, vocab_size=97,
                   hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                   pad_token_id=0)
    ids, mask = _batch(97)
    _check(models, ids, mask, output_attentions=True)
    # Not requested: no weights computed.
    with torch.no_grad():
        assert not models["attn"](input_ids=ids, attention_mask=mask).attentions


def test_gemma2_softcap_and_window_output_attentions_equal_eager():
    models = _pair(transformers.Gemma2Config, transformers.Gemma2ForCausalLM, vocab_size=97,
                   hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                   max_position_embeddings=64, sliding_window=4, attn_logit_softcapping=5.0,
                   final_logit_softcapping=None, pad_token_id=0)
    ids, mask = _batch(97, T=11, pad=3)
    _check(models, ids, mask, output_attentions=True)


def test_probabilities_bidirectional_bias_and_empty_rows():
    """attn.hf.probabilities against softmax(scale q k^T + bias) in float64, with a padding
    mask and an additive bias; rows that attend no key are 0."""
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False
    mask[0, :, 2] = False                                # an empty row
    bias = torch.randn(1, 4, 5, 7)
    out, lse = attn.torch.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                    mask=mask, bias=bias, scale=0.3, empty_rows="zero")
    got = attn.hf.probabilities(q, k, lse, mask=mask, bias=bias, scale=0.3)
    k2 = k.double().repeat_interleave(2, dim=1)
    x = (q.double() @ k2.transpose(2, 3)) * 0.3 + bias.double()
    want = torch.softmax(x.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-6)
    assert float(got[0, :, 2].abs().max()) == 0
    # P V is attn's output.
    torch.testing.assert_close((got @ v.repeat_interleave(2, dim=1)).transpose(1, 2), out,
                               rtol=1e-5, atol=1e-6)


def test_register_threads_reaches_forward_and_backward(monkeypatch):
    """register(threads=N): every attention call of the model, forward and backward, runs
    with attn's execution threads = N; register() again restores attn's default (0)."""
    from attn import _attn as extension
    seen = []
    for name in ("forward", "backward", "forward_torch", "sdpa_torch"):
        original = getattr(extension, name)

        def recording(*args, _original=original, _name=name):
            # the execution tuple's thread count; the *_torch calls take the count itself, and
            # return False (forward_torch) or None (sdpa_torch) when nothing ran: tensors that
            # need the general path
            result = _original(*args)
            if result is not False and not (_name == "sdpa_torch" and result is None):
                threads = {"forward_torch": lambda: args[6], "sdpa_torch": lambda: args[7]
                           }.get(_name, lambda: args[-1][0])()
                seen.append(("backward" if _name == "backward" else "forward", threads))
            return result
        monkeypatch.setattr(extension, name, recording)
    models = _pair(transformers.LlamaConfig, transformers.LlamaForCausalLM, vocab_size=31,
                   hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    model = models["attn"].train()
    ids = torch.randint(0, 31, (2, 6))
    attn.hf.register(threads=3)
    model(input_ids=ids, labels=ids).loss.backward()
    assert sorted(set(seen)) == [("backward", 3), ("forward", 3)]
    assert len(seen) == 4                                # 2 layers, forward and backward
    grads = [p.grad.clone() for p in model.parameters()]
    seen.clear()
    with torch.no_grad():                                # the inference fast path too
        model(input_ids=ids)
    assert seen == [("forward", 3)] * 2
    seen.clear()
    attn.hf.register()
    model.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    assert sorted(set(seen)) == [("backward", 0), ("forward", 0)]
    for p, g in zip(model.parameters(), grads):         # any thread count: the same bits
        assert torch.equal(p.grad, g)
    for bad in (0, -1, 10**6):
        with pytest.raises(ValueError):
            attn.hf.register(threads=bad)


def test_sliding_window_reaches_attn_as_a_window(monkeypatch):
    """A sliding-window layer passes its window to attn (window_left = W - 1, right 0), on
    top of the mask that holds the same band; logits equal eager's, padded batch included."""
    models = _pair(transformers.MistralConfig, transformers.MistralForCausalLM, vocab_size=97,
                   hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                   max_position_embeddings=64, sliding_window=4, pad_token_id=0)
    seen = []
    original = attn.torch.attention

    def recording(*args, **kwargs):
        seen.append(kwargs.get("window"))
        return original(*args, **kwargs)

    monkeypatch.setattr(attn.torch, "attention", recording)
    ids, mask = _batch(97, T=11, pad=3)
    with torch.no_grad():
        got = models["attn"](input_ids=ids, attention_mask=mask).logits
        want = models["eager"](input_ids=ids, attention_mask=mask).logits
    assert seen and all(w == (3, 0) for w in seen)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=1e-4, atol=1e-5)
    # generation through the sliding cache: the same greedy tokens
    tokens = {n: m.generate(ids[:1], max_new_tokens=8, do_sample=False)
              for n, m in models.items()}
    assert torch.equal(tokens["attn"], tokens["eager"])
