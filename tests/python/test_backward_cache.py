"""attn.backward against torch autograd of a float64 dense implementation (every option
that has a gradient), attn.merge against attention over the union of the key sets, and
attn.KVCache.decode against attn's forward on the cached keys and values."""
import numpy as np
import pytest
import torch

import attn
from reference import alibi_slopes


def dense_torch(q, k, v, *, causal=None, window=None, mask=None, bias=None, scale=None,
                softcap=0.0, slopes=None, key_lengths=None):
    """Differentiable float64 attention on [B, T, H, D] tensors (autograd's oracle)."""
    B, Tq, Hq, Dk = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(Hq // Hkv, dim=2)
    v = v.repeat_interleave(Hq // Hkv, dim=2)
    scale = Dk ** -0.5 if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    shift = Tk - Tq if causal == "bottom-right" or causal is None else 0
    d = (torch.arange(Tq)[:, None] + shift) - torch.arange(Tk)[None, :]
    if slopes is not None:
        s = s - torch.as_tensor(slopes, dtype=s.dtype)[:, None, None] * d.abs()
    allowed = torch.ones(B, 1, Tq, Tk, dtype=torch.bool)
    if causal:
        allowed &= d >= 0
    if window is not None:
        if window[0] >= 0:
            allowed &= d <= window[0]
        if window[1] >= 0:
            allowed &= -d <= window[1]
    if mask is not None:
        allowed = allowed & torch.as_tensor(mask)
    if key_lengths is not None:
        allowed = allowed & (torch.arange(Tk)[None, :] < torch.as_tensor(key_lengths)[:, None]
                             )[:, None, None, :]
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v)


GRADIENT_CASES = [  # name, B, Tq, Tk, Hq, Hkv, Dk, Dv, options
    ("plain", 1, 7, 7, 1, 1, 8, 8, {}),
    ("GQA Tq<Tk odd D", 2, 9, 21, 4, 2, 7, 5, {}),
    ("causal BR", 2, 30, 30, 2, 1, 16, 16, {"causal": "bottom-right"}),
    ("causal TL Tq>Tk", 1, 20, 11, 2, 2, 16, 8, {"causal": "top-left"}),
    ("window", 1, 40, 40, 2, 2, 16, 16, {"window": (5, 2), "alignment": "bottom-right"}),
    ("mask", 2, 17, 19, 2, 1, 16, 16, {"mask": True}),
    ("bias full", 2, 12, 15, 2, 2, 8, 8, {"bias": (2, 2, 12, 15)}),
    ("bias broadcast", 2, 12, 15, 2, 2, 8, 8, {"bias": (1, 1, 12, 15)}),
    ("bias [B,1,1,Tk]", 2, 12, 15, 2, 2, 8, 8, {"bias": (2, 1, 1, 15)}),
    ("softcap", 1, 25, 25, 2, 1, 16, 16, {"softcap": 2.0}),
    ("alibi causal", 1, 25, 25, 4, 2, 16, 16, {"alibi": True, "causal": "bottom-right"}),
    ("scale", 1, 10, 10, 1, 1, 8, 8, {"scale": 0.3}),
    ("key lengths", 3, 10, 14, 2, 2, 8, 8, {"key_lengths": [14, 5, 9]}),
]


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
def test_gradients_match_torch_autograd(case, rng):
    _, B, Tq, Tk, Hq, Hkv, Dk, Dv, o = case
    q, k, v = (torch.from_numpy(rng.standard_normal(s)) for s in
               ((B, Tq, Hq, Dk), (B, Tk, Hkv, Dk), (B, Tk, Hkv, Dv)))
    dout = torch.from_numpy(rng.standard_normal((B, Tq, Hq, Dv)))
    kwargs, dense = {}, {}
    for key, value in o.items():
        if key == "mask":
            m = rng.random((B, Hq, Tq, Tk)) < 0.7
            m[..., 0] = True
            kwargs["mask"], dense["mask"] = m, m
        elif key == "bias":
            kwargs["bias"] = rng.standard_normal(value).astype(np.float32)
            dense["bias"] = torch.from_numpy(kwargs["bias"]).double().requires_grad_()
        elif key == "alibi":
            kwargs["alibi"] = True
            dense["slopes"] = alibi_slopes(Hq)
        elif key == "alignment":
            kwargs[key] = value
            dense["causal"] = None
        else:
            kwargs[key] = dense[key] = value
    dense.setdefault("causal", None)
    qf, kf, vf, dof = (x.float().numpy() for x in (q, k, v, dout))
    out, lse = attn.forward(qf, kf, vf, return_lse=True, **kwargs)
    g = attn.backward(qf, kf, vf, out, lse, dof, **kwargs)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    extra = [dense["bias"]] if "bias" in dense else []
    expected_out = dense_torch(*leaves, **dense)
    expected = torch.autograd.grad(expected_out, leaves + extra, dout)
    np.testing.assert_allclose(out, expected_out.detach().numpy(), rtol=1e-4, atol=3e-5)
    for got, want, name in zip((g.dq, g.dk, g.dv, g.dbias), expected, ("dq", "dk", "dv", "db")):
        assert got.shape == tuple(want.shape), name
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)
    assert (g.dbias is None) == (not extra)


def test_backward_half_precision_returns_input_dtype(rng):
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 6, 2, 8)).astype(np.float32))
               .to(torch.bfloat16) for _ in range(3))
    out, lse = attn.forward(q, k, v, return_lse=True)
    g = attn.backward(q, k, v, out, lse, torch.ones_like(out))
    assert all(x.dtype == torch.bfloat16 for x in g[:3])
    leaves = [x.double().requires_grad_() for x in (q, k, v)]
    want = torch.autograd.grad(dense_torch(*leaves), leaves, torch.ones(1, 6, 2, 8).double())
    for got, w in zip(g[:3], want):
        np.testing.assert_allclose(got.double().numpy(), w.numpy(), rtol=5e-2, atol=5e-2)


def test_merge_equals_attention_over_the_union(rng):
    q = rng.standard_normal((2, 5, 4, 16)).astype(np.float32)
    k = rng.standard_normal((2, 30, 2, 16)).astype(np.float32)
    v = rng.standard_normal((2, 30, 2, 8)).astype(np.float32)
    parts = [attn.forward(q, k[:, a:b], v[:, a:b], return_lse=True)
             for a, b in ((0, 7), (7, 19), (19, 30))]
    out, lse = attn.merge([p[0] for p in parts], [p[1] for p in parts])
    full, full_lse = attn.forward(q, k, v, return_lse=True)
    np.testing.assert_allclose(out, full, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, full_lse, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError):
        attn.merge([parts[0][0]], [])
    with pytest.raises(ValueError):
        attn.merge([parts[0][0], parts[1][0][:, :4]], [parts[0][1], parts[1][1]])


@pytest.mark.parametrize("dtype,page_size", [("float32", 0), ("float32", 4), ("bfloat16", 8),
                                             ("float16", 0)])
def test_cache_decode_equals_forward(dtype, page_size, rng):
    B, Hkv, Hq, D = 2, 2, 4, 16
    cache = attn.KVCache(B, Hkv, D, capacity=64, dtype=dtype, page_size=page_size)
    k = rng.standard_normal((B, 20, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, 20, Hkv, D)).astype(np.float32)
    cache.append(k[:, :12], v[:, :12])
    cache.append(k[:, 12:], v[:, 12:])
    assert cache.lengths() == [20, 20] and cache.length(1) == 20
    stored_k, stored_v = cache.read(1)
    if dtype == "float32":
        np.testing.assert_array_equal(stored_k[0], k[1])
    q = rng.standard_normal((B, 3, Hq, D)).astype(np.float32)
    out, lse = cache.decode(q, causal="bottom-right", return_lse=True)
    ks = np.stack([cache.read(b)[0][0] for b in range(B)])
    vs = np.stack([cache.read(b)[1][0] for b in range(B)])
    want, want_lse = attn.forward(q, ks, vs, causal="bottom-right", return_lse=True)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    tq = torch.from_numpy(q).to(torch.bfloat16)
    assert cache.decode(tq, causal="bottom-right").dtype == torch.bfloat16
    cache.truncate(0, 5)
    assert cache.lengths() == [5, 20]
    cache.reset()
    assert cache.lengths() == [0, 0]


def test_cache_errors():
    with pytest.raises(ValueError):
        attn.KVCache(0, 1, 8, capacity=4)
    with pytest.raises(ValueError):
        attn.KVCache(1, 1, 8, capacity=4, dtype="int8")
    cache = attn.KVCache(1, 1, 8, capacity=4)
    with pytest.raises(MemoryError, match="capacity"):
        cache.append(np.zeros((1, 5, 1, 8), np.float32), np.zeros((1, 5, 1, 8), np.float32))
    assert cache.length(0) == 0
    with pytest.raises(ValueError):
        cache.append(np.zeros((1, 2, 1, 7), np.float32), np.zeros((1, 2, 1, 8), np.float32))
    with pytest.raises(ValueError):
        cache.length(3)
    with pytest.raises(ValueError):
        cache.decode(np.zeros((1, 1, 1, 8), np.float32), causal="bottom-right")  # empty cache


def test_lse_gradient(rng):
    q, k, v = (torch.from_numpy(rng.standard_normal(s)) for s in
               ((2, 6, 4, 8), (2, 9, 2, 8), (2, 9, 2, 5)))
    dout = rng.standard_normal((2, 6, 4, 5)).astype(np.float32)
    dlse = rng.standard_normal((2, 4, 6)).astype(np.float32)
    qf, kf, vf = (x.float().numpy() for x in (q, k, v))
    out, lse = attn.forward(qf, kf, vf, causal="bottom-right", return_lse=True)
    g = attn.backward(qf, kf, vf, out, lse, dout, causal="bottom-right", dlse=dlse)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    s = torch.einsum("bqhd,bkhd->bhqk", leaves[0], leaves[1].repeat_interleave(2, 2)) * 8**-0.5
    s = s.masked_fill(~torch.ones(6, 9, dtype=torch.bool).tril(3), float("-inf"))
    o = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), leaves[2].repeat_interleave(2, 2))
    loss = (o * torch.from_numpy(dout)).sum() + (s.logsumexp(-1) * torch.from_numpy(dlse)).sum()
    for got, want in zip(g[:3], torch.autograd.grad(loss, leaves)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-3, atol=1e-4)
