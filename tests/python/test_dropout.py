"""Attention dropout from Python against independent references: attn.forward / backward and
varlen (NumPy) against softmax(...) * mask / (1 - p) @ V in float64 with the mask from
attn.dropout_mask; attn.torch.attention, the SDPA and flash-attn drop-ins with autograd
against torch autograd through that explicit mask; the keep rate and E[O] over seeds;
reproducibility under torch.manual_seed; the ops under opcheck and a compiled training step;
a Hugging Face model training with attention dropout through attn.hf (its weights are the
dropped probabilities, as eager's); argument errors."""
import numpy as np
import pytest
import torch

import attn
import attn.flash_attn as fa
import attn.torch as at


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def explicit(q, k, v, keep, p, causal=None):
    """[B, T, H, D] attention with the dropout mask keep [B, Hq, Tq, Tk] applied to the
    probabilities, by torch operations in q's dtype (differentiable): (out, lse)."""
    B, Tq, Hq, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    kh, vh = (x.repeat_interleave(Hq // Hkv, dim=1) for x in (kh, vh))
    logits = qh @ kh.transpose(-1, -2) / D ** 0.5
    if causal:
        shift = Tk - Tq if causal == "bottom-right" else 0
        allowed = torch.ones(Tq, Tk, dtype=torch.bool).tril(shift)
        logits = logits.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)
    weights = torch.softmax(logits, dim=-1) * keep.to(logits.dtype) / (1 - p)
    return (weights @ vh).transpose(1, 2), lse


@pytest.mark.parametrize("Hq,Hkv,Tq,Tk,causal", [(4, 4, 17, 40, None), (8, 2, 33, 33, "top-left"),
                                                 (4, 1, 5, 70, "bottom-right")])
def test_numpy_forward_backward_against_the_explicit_mask(Hq, Hkv, Tq, Tk, causal):
    torch.manual_seed(0)
    p, seed, offset = 0.3, 2**63 + 5, 9
    q, k, v, dout = (randn(2, T, H, 16, dtype=torch.float64) for T, H in
                     ((Tq, Hq), (Tk, Hkv), (Tk, Hkv), (Tq, Hq)))
    keep = torch.from_numpy(attn.dropout_mask(2, Hq, Tq, Tk, p, seed, offset))
    assert abs(keep.float().mean().item() - (1 - p)) < 0.05
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    want, want_lse = explicit(*leaves, keep, p, causal)
    want.backward(dout)
    f32 = [x.float().numpy() for x in (q, k, v)]
    arguments = dict(causal=causal, dropout_p=p, dropout_seed=seed, dropout_offset=offset)
    out, lse = attn.forward(*f32, return_lse=True, threads=1, **arguments)
    np.testing.assert_allclose(out, want.detach().numpy(), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(lse, want_lse.detach().numpy(), rtol=1e-5, atol=2e-6)
    again = attn.forward(*f32, threads=2, **arguments)
    assert np.array_equal(out, again), "1 and 2 threads bitwise"
    g = attn.backward(*f32, out, lse, dout.float().numpy(), **arguments)
    for got, leaf in zip((g.dq, g.dk, g.dv), leaves):
        np.testing.assert_allclose(got, leaf.grad.numpy(), rtol=1e-4, atol=2e-5)


def test_mask_statistics_and_counters():
    p = 0.25
    keep = attn.dropout_mask(2, 4, 64, 257, p, 11, 100)
    rate, sigma = keep.mean(), (p * (1 - p) / keep.size) ** 0.5
    assert abs(rate - (1 - p)) < 5 * sigma
    # offset + 1 draws what column j + 4 drew (a row's counters are offset + j // 4)
    assert np.array_equal(attn.dropout_mask(2, 4, 64, 257, p, 11, 101)[..., :-4], keep[..., 4:])
    assert (attn.dropout_mask(1, 1, 4, 8, 0.0, None)).all()


def test_expectation_over_seeds_is_the_plain_output():
    torch.manual_seed(1)
    q, k, v = randn(1, 6, 2, 8), randn(1, 30, 2, 8), randn(1, 30, 2, 8)
    plain = attn.forward(q, k, v)
    draws = torch.stack([attn.forward(q, k, v, dropout_p=0.4, dropout_seed=s)
                         for s in range(300)]).double()
    error = (draws.mean(0) - plain.double()).abs() / (draws.std(0) / 300 ** 0.5 + 1e-9)
    assert error.max() < 6


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_torch_attention_gradients_against_autograd(dtype, tolerance):
    torch.manual_seed(2)
    q, k, v = randn(2, 21, 8, 16), randn(2, 40, 2, 16), randn(2, 40, 2, 16)
    p, seed = 0.2, 77
    keep = attn.dropout_mask(2, 8, 21, 40, p, seed, like=q)
    leaves = [x.to(dtype).requires_grad_() for x in (q, k, v)]
    out, lse = at.attention(*leaves, causal="bottom-right", dropout_p=p, dropout_seed=seed)
    dout = torch.randn_like(out)
    out.backward(dout)
    exact = [x.detach().to(dtype).double().requires_grad_() for x in (q, k, v)]
    want, want_lse = explicit(*exact, keep, p, "bottom-right")
    want.backward(dout.double())
    torch.testing.assert_close(out.double(), want, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=1e-5)
    for got, leaf in zip(leaves, exact):
        torch.testing.assert_close(got.grad.double(), leaf.grad, rtol=tolerance,
                                   atol=tolerance)


def test_seeds_from_torch_generator():
    torch.manual_seed(3)
    q, k, v = randn(1, 4, 12, 8), randn(1, 4, 12, 8), randn(1, 4, 12, 8)
    torch.manual_seed(10)
    a = at.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    b = at.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(10)
    c = at.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert torch.equal(a, c) and not torch.equal(a, b)
    # float64 inputs take the float64 reference with the same mask
    torch.manual_seed(10)
    d = at.scaled_dot_product_attention(q.double(), k.double(), v.double(), dropout_p=0.5)
    torch.testing.assert_close(d.float(), a, rtol=1e-5, atol=1e-6)
    torch.manual_seed(10)
    e = at.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                           dropout_p=0.5)
    assert e.shape == (1, 12, 4, 8) and torch.isfinite(e).all()


def test_varlen_gradients_against_autograd():
    torch.manual_seed(4)
    lengths_q, lengths_k = [5, 9, 1], [7, 9, 12]
    cu_q = torch.tensor([0, 5, 14, 15], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 16, 28], dtype=torch.int32)
    q, k, v = randn(15, 4, 8), randn(28, 2, 8), randn(28, 2, 8)
    p, seed = 0.3, 1234
    keep = attn.dropout_mask(3, 4, 9, 12, p, seed, like=q)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out, lse = at_varlen(leaves, cu_q, cu_k, p, seed)
    dout = torch.randn_like(out)
    out.backward(dout)
    for b in range(3):
        sq = slice(int(cu_q[b]), int(cu_q[b + 1]))
        sk = slice(int(cu_k[b]), int(cu_k[b + 1]))
        exact = [x[s].double()[None].requires_grad_() for x, s in ((q, sq), (k, sk), (v, sk))]
        mask = keep[b:b + 1, :, :lengths_q[b], :lengths_k[b]]
        want, _ = explicit(*exact, mask, p, "bottom-right")
        want.backward(dout[sq].double()[None])
        torch.testing.assert_close(out[sq].double(), want[0], rtol=1e-5, atol=1e-6)
        for leaf, s, e in zip(leaves, (sq, sk, sk), exact):
            torch.testing.assert_close(leaf.grad[s].double(), e.grad[0], rtol=1e-5, atol=1e-5)


def at_varlen(leaves, cu_q, cu_k, p, seed):
    """flash_attn_varlen_func's op with an explicit dropout state [seed, 0]."""
    state = torch.tensor([seed, 0], dtype=torch.int64)
    return torch.ops.attn.varlen_forward(*leaves, cu_q, cu_k, 9, 12, True, -1, -1, None, 0.0,
                                         None, 0, p, state)


def test_opcheck_and_compiled_training_step():
    torch.manual_seed(5)
    q, k, v = randn(1, 5, 4, 8), randn(1, 6, 2, 8), randn(1, 6, 2, 8)
    state = torch.tensor([99, 3], dtype=torch.int64)
    args = (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), None, None, None, True,
            1, False, -1, -1, None, 0.0, False, 0, 0, None, 0.25, state)
    torch.library.opcheck(torch.ops.attn.forward.default, args)
    out, lse = torch.ops.attn.forward(*args)
    torch.library.opcheck(torch.ops.attn.backward.default,
                          (q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(),
                           torch.randn_like(out), None, None, None, None, True, 1, False, -1,
                           -1, None, 0.0, False, 0, 0, 0.25, state))

    def step(q, k, v):
        out, _ = at.attention(q, k, v, causal="bottom-right", dropout_p=0.25, dropout_seed=99)
        return (out * out).sum()

    grads = {}
    for name, fn in (("eager", step), ("compiled", torch.compile(step, fullgraph=True))):
        inputs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        fn(*inputs).backward()
        grads[name] = [x.grad for x in inputs]
    for got, want in zip(grads["compiled"], grads["eager"]):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_hugging_face_training_with_attention_dropout():
    transformers = pytest.importorskip("transformers")
    import attn.hf
    attn.hf.register()
    config = transformers.LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, attention_dropout=0.3)
    config._attn_implementation = "attn"
    torch.manual_seed(6)
    model = transformers.LlamaForCausalLM(config).train()
    ids = torch.randint(0, 61, (2, 12))
    losses = []
    for _ in range(2):
        torch.manual_seed(7)
        result = model(ids, labels=ids, output_attentions=True)
        losses.append(result.loss)
    assert torch.equal(losses[0], losses[1]), "torch.manual_seed reproduces the masks"
    losses[0].backward()
    assert all(torch.isfinite(x.grad).all() for x in model.parameters() if x.grad is not None)
    weights = result.attentions[0]
    dropped = (weights == 0).float().mean().item()  # causal zeros and dropped pairs
    assert 0.3 < dropped < 0.85
    model.eval()
    assert torch.equal(model(ids).logits, model(ids).logits), "no dropout in eval"


def test_argument_errors():
    q = np.zeros((1, 4, 2, 8), np.float32)
    with pytest.raises(ValueError, match="dropout_seed"):
        attn.forward(q, q, q, dropout_p=0.1)
    for p in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="dropout_p"):
            attn.forward(q, q, q, dropout_p=p, dropout_seed=1)
    cache = attn.KVCache(1, 2, 8, capacity=8)
    cache.append(q, q)
    with pytest.raises(TypeError):
        cache.decode(q[:, :1], dropout_p=0.1)
