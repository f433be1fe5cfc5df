"""Attention sinks (gpt-oss's s_aux) from Python: attn.forward / attn.sinks_backward (NumPy),
attn.torch.attention with autograd (q, k, v and the sinks against torch autograd of the eager
formula in float64: the sink as one more logit column, softmax, that column dropped), the
ops under torch.library.opcheck and a compiled training step, KVCache.decode, and a gpt-oss
model (random weights) through attn.hf: logits within 1e-5 of eager and the same greedy
tokens."""
import numpy as np
import pytest
import torch

import attn
import attn.hf
import attn.torch as at

transformers = pytest.importorskip("transformers")


def eager(q, k, v, sinks, causal=True):
    """Eager attention with sinks as transformers' gpt-oss writes it, [B, T, H, D] in,
    (out [B, Tq, Hq, D], lse [B, Hq, Tq]) out, in q's dtype."""
    B, Tq, Hq, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    kh = kh.repeat_interleave(Hq // Hkv, dim=1)
    vh = vh.repeat_interleave(Hq // Hkv, dim=1)
    logits = qh @ kh.transpose(-1, -2) / D ** 0.5
    if causal:
        allowed = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)
        logits = logits.masked_fill(~allowed, float("-inf"))
    column = sinks.reshape(1, -1, 1, 1).expand(B, Hq, Tq, 1).to(logits.dtype)
    combined = torch.cat([logits, column], dim=-1)
    lse = torch.logsumexp(combined, dim=-1)
    probabilities = torch.softmax(combined, dim=-1)[..., :-1]
    return (probabilities @ vh).transpose(1, 2), lse


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("Hq,Hkv,Tq,Tk", [(4, 4, 6, 6), (8, 2, 1, 40), (6, 3, 5, 33)])
def test_numpy_forward_and_sinks_backward(Hq, Hkv, Tq, Tk):
    torch.manual_seed(Hq * 100 + Tk)
    q, k, v = randn(2, Tq, Hq, 16), randn(2, Tk, Hkv, 16), randn(2, Tk, Hkv, 16)
    sinks = randn(Hq) * 2
    sinks[0] = float("-inf")                               # a head without a sink
    out, lse = attn.forward(q.numpy(), k.numpy(), v.numpy(), causal="bottom-right",
                            sinks=sinks.numpy(), return_lse=True)
    want, want_lse = eager(q.double(), k.double(), v.double(), sinks.double())
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(lse, want_lse.numpy(), rtol=1e-5, atol=2e-6)
    dout = randn(2, Tq, Hq, 16)
    s = sinks.double().requires_grad_()
    o, _ = eager(q.double(), k.double(), v.double(), s)
    (o * dout.double()).sum().backward()
    got = attn.sinks_backward(out, lse, dout.numpy(), sinks.numpy())
    np.testing.assert_allclose(got, s.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 2e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("Hq,Hkv,Tq,Tk", [(4, 2, 7, 7), (4, 1, 1, 30), (2, 2, 9, 20)])
def test_torch_attention_gradients_against_autograd(dtype, tolerance, Hq, Hkv, Tq, Tk):
    torch.manual_seed(Tq * 10 + Hkv)
    q, k, v = randn(1, Tq, Hq, 8, dtype=dtype), randn(1, Tk, Hkv, 8, dtype=dtype), \
        randn(1, Tk, Hkv, 8, dtype=dtype)
    sinks = (randn(Hq) * 1.5).to(dtype)
    inputs = [x.clone().requires_grad_() for x in (q, k, v, sinks)]
    out, lse = at.attention(*inputs[:3], causal="bottom-right", sinks=inputs[3])
    dout = randn(*out.shape, dtype=dtype)
    dlse = randn(*lse.shape)
    ((out.float() * dout.float()).sum() + (lse * dlse).sum()).backward()
    reference = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    want, want_lse = eager(*reference)
    ((want * dout.double()).sum() + (want_lse * dlse.double()).sum()).backward()
    torch.testing.assert_close(out.double(), want, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(lse.double(), want_lse, rtol=tolerance, atol=tolerance)
    for got, expected, name in zip(inputs, reference, ("q", "k", "v", "sinks")):
        assert got.grad is not None, name
        torch.testing.assert_close(got.grad.double(), expected.grad, rtol=tolerance * 5,
                                   atol=tolerance * 5, msg=lambda m: f"d{name}: {m}")


def test_opcheck_and_compiled_training_step():
    torch.manual_seed(3)
    q, k, v = randn(1, 5, 4, 8), randn(1, 6, 2, 8), randn(1, 6, 2, 8)
    sinks = randn(4)
    args = (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), None, None, None, True,
            1, False, -1, -1, None, 0.0, False, 0, 0, sinks.requires_grad_())
    torch.library.opcheck(torch.ops.attn.forward.default, args)
    out, lse = torch.ops.attn.forward(*args)
    torch.library.opcheck(torch.ops.attn.sinks_backward.default,
                          (out.detach(), lse.detach(), torch.randn_like(out), None,
                           sinks.detach()))

    def step(q, k, v, sinks):
        out, _ = at.attention(q, k, v, causal="bottom-right", sinks=sinks)
        return (out * out).sum()

    grads = {}
    for name, fn in (("eager", step), ("compiled", torch.compile(step, fullgraph=True))):
        inputs = [x.detach().clone().requires_grad_() for x in (q, k, v, sinks)]
        fn(*inputs).backward()
        grads[name] = [x.grad for x in inputs]
    for got, want in zip(grads["compiled"], grads["eager"]):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_kvcache_decode_with_sinks(dtype):
    rng = np.random.default_rng(5)
    B, T, Hq, Hkv, D = 2, 70, 8, 2, 32
    k = rng.standard_normal((B, T, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, T, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((B, 1, Hq, D)).astype(np.float32)
    sinks = rng.standard_normal(Hq).astype(np.float32)
    cache = attn.KVCache(sequences=B, kv_heads=Hkv, key_dim=D, value_dim=D, capacity=T,
                         dtype=dtype)
    cache.append(k, v)
    held_k, held_v = zip(*(cache.read(b) for b in range(B)))
    out, lse = cache.decode(q, causal="bottom-right", sinks=sinks, return_lse=True)
    want, want_lse = attn.forward(q, np.concatenate(held_k), np.concatenate(held_v),
                                  causal="bottom-right", sinks=sinks, return_lse=True)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)


def _gpt_oss_models():
    attn.hf.register()
    config = transformers.GptOssConfig(
        vocab_size=101, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=6, max_position_embeddings=128,
        layer_types=["sliding_attention", "full_attention"], pad_token_id=0)
    models = {}
    for name in ("eager", "attn"):
        torch.manual_seed(0)
        config._attn_implementation = name
        model = transformers.GptOssForCausalLM(config).eval()
        with torch.no_grad():                          # sinks that matter
            for layer in model.model.layers:
                layer.self_attn.sinks.normal_(0.0, 2.0)
        models[name] = model
    return models


def test_gpt_oss_logits_and_generation_equal_eager():
    models = _gpt_oss_models()
    torch.manual_seed(1)
    ids = torch.randint(1, 101, (2, 12))
    with torch.no_grad():
        logits = {n: m(input_ids=ids).logits for n, m in models.items()}
    torch.testing.assert_close(logits["attn"], logits["eager"], rtol=1e-5, atol=1e-5)
    tokens = {n: m.generate(ids, max_new_tokens=8, do_sample=False) for n, m in models.items()}
    assert torch.equal(tokens["attn"], tokens["eager"])


def test_gpt_oss_sinks_get_gradients_equal_eager():
    models = _gpt_oss_models()
    for model in models.values():
        model.train()
    torch.manual_seed(2)
    ids = torch.randint(1, 101, (1, 10))
    grads = {}
    for name, model in models.items():
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        grads[name] = [layer.self_attn.sinks.grad.clone() for layer in model.model.layers]
    for got, want in zip(grads["attn"], grads["eager"]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_sink_tokens_streaming_generation():
    """StreamingLLM: a window of 8 that keeps the first 4 tokens, forward and decode step by
    step against the same attention as an explicit boolean mask."""
    rng = np.random.default_rng(11)
    B, T, Hq, Hkv, D, window, kept = 1, 40, 4, 2, 16, 8, 4
    k = rng.standard_normal((B, T, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, T, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((B, T, Hq, D)).astype(np.float32)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    mask = (j <= i) & ((i - j <= window) | (j < kept))
    want = attn.forward(q, k, v, mask=mask)
    got = attn.forward(q, k, v, causal="bottom-right", window=(window, 0), sink_tokens=kept)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    cache = attn.KVCache(sequences=B, kv_heads=Hkv, key_dim=D, capacity=T)
    for t in range(T):                                   # one token at a time
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        step = cache.decode(q[:, t:t + 1], causal="bottom-right", window=(window, 0),
                            sink_tokens=kept)
        np.testing.assert_allclose(step[0, 0], want[0, t], rtol=1e-5, atol=1e-6)


def test_varlen_with_sinks_against_eager():
    torch.manual_seed(12)
    lengths_q, lengths_k = [3, 7], [5, 7]
    q, k, v = randn(10, 4, 8), randn(12, 2, 8), randn(12, 2, 8)
    sinks = randn(4)
    cu_q, cu_k = np.array([0, 3, 10], np.int32), np.array([0, 5, 12], np.int32)
    out, lse = attn.varlen_forward(q, k, v, cu_q, cu_k, 7, 7, causal=True, sinks=sinks,
                                   return_lse=True)
    for b in range(2):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want, want_lse = eager(q[sq][None].double(), k[sk][None].double(),
                               v[sk][None].double(), sinks.double())
        torch.testing.assert_close(out[sq].double(), want[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(lse[:, sq].double(), want_lse[0], rtol=1e-5, atol=1e-6)
    g = attn.varlen_backward(q, k, v, out, lse, torch.ones_like(out), cu_q, cu_k, 7, 7,
                             causal=True, sinks=sinks)
    leaves = [x.double().requires_grad_() for x in (q, k, v)]
    total = 0
    for b in range(2):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        total = total + eager(leaves[0][sq][None], leaves[1][sk][None], leaves[2][sk][None],
                              sinks.double())[0].sum()
    total.backward()
    for got, leaf in zip((g.dq, g.dk, g.dv), leaves):
        torch.testing.assert_close(got.double(), leaf.grad, rtol=1e-4, atol=1e-5)
