"""attn.varlen_forward / varlen_backward / forward_with_kvcache against the float64 oracle
(reference.py) and PyTorch autograd: packed sequences = each sequence alone; gradients =
autograd of the dense float64 attention; appends with RoPE into a caller-owned paged cache in
chunks = one prefill; bad arguments raise with attn's message and leave the cache untouched."""
import numpy as np
import pytest

import attn
from reference import reference, rope

VARLEN_CASES = [
    # lengths_q, lengths_k, Hq, Hkv, D, causal, window, softcap, alibi
    ([5, 17, 1], [5, 17, 1], 2, 2, 8, False, None, 0.0, False),
    ([3, 9, 20], [11, 9, 20], 4, 2, 16, True, None, 0.0, False),
    ([12, 0, 33], [12, 4, 33], 2, 1, 8, True, (5, 0), 4.0, False),
    ([8, 14], [8, 20], 4, 4, 8, True, None, 0.0, True),
]


def _pack(rng, lengths, H, D):
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return rng.standard_normal((int(cu[-1]), H, D)).astype(np.float32), cu


def _sequence(x, cu, b):
    return x[cu[b]:cu[b + 1]][None]


@pytest.mark.parametrize("case", VARLEN_CASES)
def test_varlen_forward_equals_each_sequence(rng, case):
    lq, lk, Hq, Hkv, D, causal, window, softcap, alibi = case
    q, cu_q = _pack(rng, lq, Hq, D)
    k, cu_k = _pack(rng, lk, Hkv, D)
    v, _ = _pack(rng, lk, Hkv, D)
    slopes = attn.alibi_slopes(Hq) if alibi else None
    out, lse = attn.varlen_forward(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                   window=window, softcap=softcap, alibi_slopes=slopes,
                                   return_lse=True)
    assert out.shape == (q.shape[0], Hq, D) and lse.shape == (Hq, q.shape[0])
    for b in range(len(lq)):
        if lq[b] == 0:
            continue
        expected, expected_lse = reference(
            _sequence(q, cu_q, b), _sequence(k, cu_k, b), _sequence(v, cu_k, b),
            causal="bottom-right" if causal else None, alignment="bottom-right", window=window,
            softcap=softcap, alibi_slopes=slopes, empty_rows="zero")
        np.testing.assert_allclose(out[cu_q[b]:cu_q[b + 1]], expected[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lse[:, cu_q[b]:cu_q[b + 1]], expected_lse[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", VARLEN_CASES[:3])
def test_varlen_backward_equals_autograd(rng, case):
    torch = pytest.importorskip("torch")
    lq, lk, Hq, Hkv, D, causal, window, softcap, _ = case
    q, cu_q = _pack(rng, lq, Hq, D)
    k, cu_k = _pack(rng, lk, Hkv, D)
    v, _ = _pack(rng, lk, Hkv, D)
    dout = rng.standard_normal(q.shape[:2] + (D,)).astype(np.float32)
    out, lse = attn.varlen_forward(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                   window=window, softcap=softcap, return_lse=True)
    grads = attn.varlen_backward(q, k, v, out, lse, dout, cu_q, cu_k, max(lq), max(lk),
                                 causal=causal, window=window, softcap=softcap)
    group = Hq // Hkv
    for b in range(len(lq)):
        if lq[b] == 0 or lk[b] == 0:
            continue
        tq, tk = lq[b], lk[b]
        Q = torch.tensor(q[cu_q[b]:cu_q[b + 1]], dtype=torch.float64, requires_grad=True)
        K = torch.tensor(k[cu_k[b]:cu_k[b + 1]], dtype=torch.float64, requires_grad=True)
        V = torch.tensor(v[cu_k[b]:cu_k[b + 1]], dtype=torch.float64, requires_grad=True)
        s = torch.einsum("qhd,khd->hqk", Q, K.repeat_interleave(group, 1)) / np.sqrt(D)
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        d = (torch.arange(tq)[:, None] + (tk - tq)) - torch.arange(tk)[None, :]
        allowed = torch.ones(tq, tk, dtype=torch.bool)
        if causal:
            allowed &= d >= 0
        if window is not None:
            allowed &= (d <= window[0]) & (-d <= window[1])
        s = s.masked_fill(~allowed, float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)
        o = torch.einsum("hqk,khd->qhd", p, V.repeat_interleave(group, 1))
        o.backward(torch.tensor(dout[cu_q[b]:cu_q[b + 1]], dtype=torch.float64))
        for got, want in ((grads.dq[cu_q[b]:cu_q[b + 1]], Q.grad), (grads.dk[cu_k[b]:cu_k[b + 1]], K.grad),
                          (grads.dv[cu_k[b]:cu_k[b + 1]], V.grad)):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_varlen_torch_tensors_and_errors(rng):
    torch = pytest.importorskip("torch")
    q, cu = _pack(rng, [4, 6], 2, 8)
    out = attn.varlen_forward(torch.from_numpy(q), torch.from_numpy(q), torch.from_numpy(q),
                              torch.from_numpy(cu), torch.from_numpy(cu), 6, 6, causal=True)
    assert isinstance(out, torch.Tensor) and out.shape == (10, 2, 8)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\] = 9: must equal the packed total 10"):
        attn.varlen_forward(q, q, q, np.array([0, 4, 9], np.int32), cu, 6, 6)
    with pytest.raises(ValueError, match=r"sequence 1 has length 6 > max_seqlen_k = 5"):
        attn.varlen_forward(q, q, q, cu, cu, 6, 5)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\] = 3 < cu_seqlens_q\[1\] = 4"):
        attn.varlen_forward(q, q, q, np.array([0, 4, 3], np.int32), cu, 6, 6)
    # an empty torch tensor has no data pointer: the error names its size, as for NumPy's
    empty, no_keys = torch.zeros(0, 2, 8), torch.zeros(3, dtype=torch.int32)
    for k in (empty, empty.numpy()):
        with pytest.raises(ValueError, match=r"k.shape\[0\] = 0: must be >= 1"):
            attn.varlen_forward(torch.from_numpy(q), k, k, torch.from_numpy(cu), no_keys, 6, 1)


@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_kvcache_chunked_prefill_with_rope(rng, chunk, interleaved):
    B, T, Hq, Hkv, D, ps = 2, 70, 4, 2, 16, 8
    q = rng.standard_normal((B, T, Hq, D)).astype(np.float32)
    k = rng.standard_normal((B, T, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, T, Hkv, D)).astype(np.float32)
    angles = np.arange(T)[:, None] * 10000.0 ** (-np.arange(4) / 4)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    max_pages = (T + ps - 1) // ps
    table = rng.permutation(B * max_pages).reshape(B, max_pages).astype(np.int32)
    k_cache = np.full((B * max_pages, ps, Hkv, D), np.nan, np.float32)
    v_cache = np.full((B * max_pages, ps, Hkv, D), np.nan, np.float32)
    seqlens = np.zeros(B, np.int32)
    outs = []
    for first in range(0, T, chunk):
        n = min(chunk, T - first)
        outs.append(attn.forward_with_kvcache(
            q[:, first:first + n], k_cache, v_cache, seqlens, k_new=k[:, first:first + n],
            v_new=v[:, first:first + n], block_table=table, rotary_cos=cos, rotary_sin=sin,
            rotary_interleaved=interleaved, causal=True))
        seqlens += n
    out = np.concatenate(outs, axis=1)
    qr = np.stack([rope(q[b], cos, sin, np.arange(T), interleaved) for b in range(B)])
    kr = np.stack([rope(k[b], cos, sin, np.arange(T), interleaved) for b in range(B)])
    expected, _ = reference(qr, kr, v, causal="bottom-right")
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


def test_kvcache_bf16_torch_contiguous_and_errors(rng):
    torch = pytest.importorskip("torch")
    B, S, Hq, Hkv, D = 2, 40, 4, 1, 8
    k_cache = torch.randn(B, S, Hkv, D).to(torch.bfloat16)
    v_cache = torch.randn(B, S, Hkv, D).to(torch.bfloat16)
    seqlens = torch.tensor([30, 12], dtype=torch.int32)
    q = torch.randn(B, 1, Hq, D)
    out, lse = attn.forward_with_kvcache(q, k_cache, v_cache, seqlens, return_lse=True)
    assert out.shape == (B, 1, Hq, D) and lse.shape == (B, Hq, 1)
    for b in range(B):
        n = int(seqlens[b])
        expected, _ = reference(q[b:b + 1].numpy(), k_cache[b:b + 1, :n].float().numpy(),
                                v_cache[b:b + 1, :n].float().numpy(), causal="bottom-right")
        np.testing.assert_allclose(out[b:b + 1].numpy(), expected, rtol=1e-5, atol=1e-5)
    before = k_cache.clone()
    with pytest.raises(MemoryError, match=r"sequence 0: cache_seqlens\[0\] = 30 \+ 11 new tokens"):
        attn.forward_with_kvcache(torch.randn(B, 11, Hq, D), k_cache, v_cache, seqlens,
                                  k_new=torch.randn(B, 11, Hkv, D), v_new=torch.randn(B, 11, Hkv, D))
    assert torch.equal(before, k_cache)
    pool = np.zeros((4, 8, 1, D), np.float32)
    with pytest.raises(ValueError, match=r"block_table\[1, 0\] = 7: outside the pool of 4 pages"):
        attn.forward_with_kvcache(np.zeros((2, 1, 1, D), np.float32), pool, pool.copy(),
                                  np.array([3, 3], np.int32), block_table=np.array([[0], [7]]))
    with pytest.raises(ValueError, match=r"also writes"):
        attn.forward_with_kvcache(np.zeros((2, 1, 1, D), np.float32), pool, pool.copy(),
                                  np.array([3, 3], np.int32), block_table=np.array([[1], [1]]),
                                  k_new=np.ones((2, 1, 1, D), np.float32),
                                  v_new=np.ones((2, 1, 1, D), np.float32))
    assert not pool.any()


def _q8_rows(x):
    """Reference int8 rows (docs/inference.md): scale = max|x| / 127 in float32, q = x / scale
    rounded to nearest even."""
    scale = (np.abs(x).max(axis=-1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale[..., None] > 0, np.rint(x / scale[..., None]), 0)
    return np.clip(q, -127, 127).astype(np.int8), scale


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_kvcache_int8_paged_chunked_prefill(rng, chunk):
    torch = pytest.importorskip("torch")
    B, T, Hq, Hkv, D, ps = 2, 70, 4, 2, 16, 8
    q = rng.standard_normal((B, T, Hq, D)).astype(np.float32)
    k = rng.standard_normal((B, T, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, T, Hkv, D)).astype(np.float32)
    max_pages = (T + ps - 1) // ps
    table = rng.permutation(B * max_pages).reshape(B, max_pages).astype(np.int32)
    k_cache = torch.zeros(B * max_pages, ps, Hkv, D, dtype=torch.int8)
    v_cache = torch.zeros(B * max_pages, ps, Hkv, D, dtype=torch.int8)
    k_scale = torch.full((B * max_pages, ps, Hkv), float("nan"))
    v_scale = torch.full((B * max_pages, ps, Hkv), float("nan"))
    seqlens = np.zeros(B, np.int32)
    outs = []
    for first in range(0, T, chunk):
        n = min(chunk, T - first)
        outs.append(attn.forward_with_kvcache(
            q[:, first:first + n], k_cache, v_cache, seqlens, k_new=k[:, first:first + n],
            v_new=v[:, first:first + n], block_table=table, causal=True, k_scale=k_scale,
            v_scale=v_scale))
        seqlens += n
    out = np.concatenate(outs, axis=1)
    # The stored rows are the documented quantisation of the new tokens, bit for bit.
    t = np.arange(T)
    for b in range(B):
        pages, slots = table[b][t // ps], t % ps
        for cache, scales, x in ((k_cache, k_scale, k), (v_cache, v_scale, v)):
            codes, row_scales = _q8_rows(x[b])
            np.testing.assert_array_equal(cache.numpy()[pages, slots], codes)
            np.testing.assert_array_equal(scales.numpy()[pages, slots], row_scales)
    # Attention = the float64 oracle on the dequantised cache (int16 operands: 2e-4), and
    # within int8's documented bound of the float32 K/V.
    kd = np.stack([(k_cache.numpy()[table[b][t // ps], t % ps] *
                    k_scale.numpy()[table[b][t // ps], t % ps][..., None]) for b in range(B)])
    vd = np.stack([(v_cache.numpy()[table[b][t // ps], t % ps] *
                    v_scale.numpy()[table[b][t // ps], t % ps][..., None]) for b in range(B)])
    expected, _ = reference(q, kd.astype(np.float32), vd.astype(np.float32), causal="bottom-right")
    np.testing.assert_allclose(out, expected, rtol=2e-4, atol=2e-4)
    exact, _ = reference(q, k, v, causal="bottom-right")
    assert np.max(np.abs(out - exact) / (1 + np.abs(exact))) <= 3e-2


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_kvcache_fp8_contiguous_with_head_scales(rng, name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name)
    B, S, Hq, Hkv, D, Tnew = 2, 24, 4, 2, 16, 20
    q = rng.standard_normal((B, Tnew, Hq, D)).astype(np.float32)
    k = rng.standard_normal((B, Tnew, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, Tnew, Hkv, D)).astype(np.float32)
    k_cache = torch.zeros(B, S, Hkv, D, dtype=dtype)
    v_cache = torch.zeros(B, S, Hkv, D, dtype=dtype)
    k_scale = np.array([0.25, 0.5], np.float32)
    out = attn.forward_with_kvcache(q, k_cache, v_cache, np.zeros(B, np.int32), k_new=k, v_new=v,
                                    causal=True, k_scale=k_scale, v_scale=0.125)
    # Stored codes = PyTorch's own rounding of x / scale (no value here needs saturation).
    want_k = (torch.from_numpy(k) / torch.from_numpy(k_scale)[:, None]).to(dtype)
    want_v = (torch.from_numpy(v) / 0.125).to(dtype)
    assert torch.equal(k_cache[:, :Tnew].view(torch.uint8), want_k.view(torch.uint8))
    assert torch.equal(v_cache[:, :Tnew].view(torch.uint8), want_v.view(torch.uint8))
    kd = (k_cache[:, :Tnew].float() * torch.from_numpy(k_scale)[:, None]).numpy()
    vd = (v_cache[:, :Tnew].float() * 0.125).numpy()
    expected, _ = reference(q, kd, vd, causal="bottom-right")
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


def test_kvcache_8bit_errors_leave_the_cache():
    torch = pytest.importorskip("torch")
    B, S, H, D = 1, 8, 1, 4
    k_cache = torch.zeros(B, S, H, D, dtype=torch.int8)
    v_cache = torch.zeros(B, S, H, D, dtype=torch.int8)
    q, new = np.ones((B, 1, H, D), np.float32), np.ones((B, 1, H, D), np.float32)
    with pytest.raises(ValueError, match=r"cache->k_scale is NULL: a int8 \(scaled\) cache"):
        attn.forward_with_kvcache(q, k_cache, v_cache, np.zeros(B, np.int32), k_new=new, v_new=new)
    scales = torch.zeros(B, S, H)
    bad = new.copy()
    bad[0, 0, 0, 2] = np.inf
    with pytest.raises(ValueError, match=r"append->v_new\[0, 0, 0, 2\] = inf"):
        attn.forward_with_kvcache(q, k_cache, v_cache, np.zeros(B, np.int32), k_new=new, v_new=bad,
                                  k_scale=scales, v_scale=scales.clone())
    fp8 = torch.zeros(B, S, H, D, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"cache->k_scale\[0\] = -1: must be finite and > 0"):
        attn.forward_with_kvcache(q, fp8, fp8.clone(), np.zeros(B, np.int32), k_new=new, v_new=new,
                                  k_scale=-1.0)
    assert not k_cache.any() and not v_cache.any() and not scales.any()
    assert not fp8.view(torch.uint8).any()
