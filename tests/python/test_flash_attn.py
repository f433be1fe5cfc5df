"""attn.flash_attn: flash-attn's names, argument order and defaults; the varlen call against a
float64 reference (values, and gradients through out and softmax_lse within 1e-5), under
opcheck and torch.compile; flash_attn_with_kvcache with flash-attn's defaults (causal=False,
rotary_interleaved=True) against attn.forward_with_kvcache and a reference; the packed
variants against their unpacked calls."""
import inspect
import math

import pytest
import torch

import attn
import attn.torch as at
from attn import flash_attn as fa

# flash-attn 2's documented signatures: (name, default) in order; None = no default.
_D = inspect.Parameter.empty
SIGNATURES = {
    "flash_attn_func": [
        ("q", _D), ("k", _D), ("v", _D), ("dropout_p", 0.0), ("softmax_scale", None),
        ("causal", False), ("window_size", (-1, -1)), ("softcap", 0.0),
        ("alibi_slopes", None), ("deterministic", False), ("return_attn_probs", False)],
    "flash_attn_qkvpacked_func": [
        ("qkv", _D), ("dropout_p", 0.0), ("softmax_scale", None), ("causal", False),
        ("window_size", (-1, -1)), ("softcap", 0.0), ("alibi_slopes", None),
        ("deterministic", False), ("return_attn_probs", False)],
    "flash_attn_kvpacked_func": [
        ("q", _D), ("kv", _D), ("dropout_p", 0.0), ("softmax_scale", None), ("causal", False),
        ("window_size", (-1, -1)), ("softcap", 0.0), ("alibi_slopes", None),
        ("deterministic", False), ("return_attn_probs", False)],
    "flash_attn_varlen_func": [
        ("q", _D), ("k", _D), ("v", _D), ("cu_seqlens_q", _D), ("cu_seqlens_k", _D),
        ("max_seqlen_q", _D), ("max_seqlen_k", _D), ("dropout_p", 0.0),
        ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
        ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False),
        ("return_attn_probs", False), ("block_table", None)],
    "flash_attn_varlen_qkvpacked_func": [
        ("qkv", _D), ("cu_seqlens", _D), ("max_seqlen", _D), ("dropout_p", 0.0),
        ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
        ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False),
        ("return_attn_probs", False)],
    "flash_attn_varlen_kvpacked_func": [
        ("q", _D), ("kv", _D), ("cu_seqlens_q", _D), ("cu_seqlens_k", _D),
        ("max_seqlen_q", _D), ("max_seqlen_k", _D), ("dropout_p", 0.0),
        ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
        ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False),
        ("return_attn_probs", False)],
    "flash_attn_with_kvcache": [
        ("q", _D), ("k_cache", _D), ("v_cache", _D), ("k", None), ("v", None),
        ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None),
        ("cache_batch_idx", None), ("cache_leftpad", None), ("block_table", None),
        ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
        ("softcap", 0.0), ("rotary_interleaved", True), ("alibi_slopes", None),
        ("num_splits", 0), ("return_softmax_lse", False)],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signatures_are_flash_attns(name):
    for module in (fa, at):
        parameters = inspect.signature(getattr(module, name)).parameters
        got = [(p.name, p.default) for p in parameters.values()]
        assert got == SIGNATURES[name]
        assert all(p.kind == p.POSITIONAL_OR_KEYWORD for p in parameters.values())


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def varlen_reference(q, k, v, cu_q, cu_k, causal, window, scale, softcap):
    """float64 per-sequence attention with bottom-right causal / window: (out, lse)."""
    Hq, Hkv = q.shape[1], k.shape[1]
    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        qb = q[cu_q[b]:cu_q[b + 1]].double()
        kb = k[cu_k[b]:cu_k[b + 1]].double().repeat_interleave(Hq // Hkv, dim=1)
        vb = v[cu_k[b]:cu_k[b + 1]].double().repeat_interleave(Hq // Hkv, dim=1)
        Lq, Lk = qb.shape[0], kb.shape[0]
        x = torch.einsum("qhd,khd->hqk", qb, kb) * scale
        if softcap:
            x = softcap * torch.tanh(x / softcap)
        i = torch.arange(Lq).unsqueeze(1) + (Lk - Lq)
        j = torch.arange(Lk).unsqueeze(0)
        allowed = torch.ones(Lq, Lk, dtype=torch.bool)
        if causal:
            allowed &= j <= i
        if window != (-1, -1):
            if window[0] >= 0:
                allowed &= j >= i - window[0]
            if window[1] >= 0:
                allowed &= j <= i + window[1]
        x = x.masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(x, dim=-1)                             # [Hq, Lq]
        live = torch.isfinite(lse).unsqueeze(-1)
        p = torch.where(live, torch.exp(x - torch.where(live, lse.unsqueeze(-1), 0.0)), 0.0)
        outs.append(torch.einsum("hqk,khd->qhd", p, vb))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses, dim=1)


LENGTHS = ([5, 1, 9], [3, 7, 2])                                     # queries, keys


def _packed(Hq=4, Hkv=2, D=8, Dv=6, dtype=torch.float32):
    torch.manual_seed(0)
    cu_q = torch.tensor([0] + list(torch.tensor(LENGTHS[0]).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(LENGTHS[1]).cumsum(0)), dtype=torch.int32)
    q = randn(int(cu_q[-1]), Hq, D, dtype=dtype)
    k = randn(int(cu_k[-1]), Hkv, D, dtype=dtype)
    v = randn(int(cu_k[-1]), Hkv, Dv, dtype=dtype)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal,window,softcap", [(False, (-1, -1), 0.0),
                                                   (True, (-1, -1), 0.0),
                                                   (False, (2, 1), 3.0)])
def test_varlen_values_and_gradients_against_float64_reference(causal, window, softcap):
    q, k, v, cu_q, cu_k = _packed()
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse, none = fa.flash_attn_varlen_func(*leaves, cu_q, cu_k, max(LENGTHS[0]),
                                               max(LENGTHS[1]), causal=causal,
                                               window_size=window, softcap=softcap,
                                               return_attn_probs=True)
    assert none is None and out.shape == (q.shape[0], 4, 6) and lse.shape == (4, q.shape[0])
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    want_out, want_lse = varlen_reference(*ref_leaves, cu_q.tolist(), cu_k.tolist(), causal,
                                          window, 8 ** -0.5, softcap)
    live = torch.isfinite(want_lse)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse.double()[live], want_lse[live], rtol=1e-5, atol=1e-6)
    # A loss through out and softmax_lse (the LSE gradient) and through out alone.
    g_out, g_lse = randn(*out.shape), randn(*lse.shape)
    for use_lse in (False, True):
        got = torch.autograd.grad((out * g_out).sum() + ((lse[live] * g_lse[live]).sum()
                                                         if use_lse else 0), leaves,
                                  retain_graph=True)
        want = torch.autograd.grad((want_out * g_out.double()).sum() + (
            (want_lse[live] * g_lse.double()[live]).sum() if use_lse else 0), ref_leaves,
            retain_graph=True)
        for a, b in zip(got, want):
            torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


def test_varlen_matches_flash_attn_func_per_sequence_and_bf16():
    q, k, v, cu_q, cu_k = _packed(dtype=torch.bfloat16)
    out = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 7, causal=True)
    assert out.dtype == torch.bfloat16
    for b in range(3):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want = at.flash_attn_func(q[sq][None], k[sk][None], v[sk][None], causal=True)[0]
        torch.testing.assert_close(out[sq].float(), want.float(), rtol=1e-2, atol=1e-2)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    fa.flash_attn_varlen_func(*leaves, cu_q, cu_k, 9, 7, causal=True).float().sum().backward()
    assert all(t.grad.dtype == torch.bfloat16 and t.grad.shape == t.shape for t in leaves)


def test_varlen_opcheck_and_compiled_step():
    q, k, v, cu_q, cu_k = _packed()
    options = (9, 7, True, -1, -1, None, 0.0, None, 0)
    out, lse = torch.ops.attn.varlen_forward(q, k, v, cu_q, cu_k, *options)
    torch.library.opcheck(torch.ops.attn.varlen_forward.default,
                          (q.clone().requires_grad_(), k.clone().requires_grad_(),
                           v.clone().requires_grad_(), cu_q, cu_k, *options))
    for dlse in (None, randn(*lse.shape)):
        torch.library.opcheck(torch.ops.attn.varlen_backward.default,
                              (q, k, v, out, lse, randn(*out.shape), dlse, cu_q, cu_k,
                               *options[:7], None, 0))

    def step(a, b, c):
        o, s, _ = fa.flash_attn_varlen_func(a, b, c, cu_q, cu_k, 9, 7, causal=True,
                                            return_attn_probs=True)
        return o.pow(2).sum() + s.clamp(min=-1e4).sum()

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(step(*leaves), leaves)
    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(step, backend="aot_eager", fullgraph=True)(
        *leaves), leaves)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_packed_variants_equal_unpacked_calls():
    torch.manual_seed(1)
    qkv = randn(2, 7, 3, 4, 8).requires_grad_()
    got = fa.flash_attn_qkvpacked_func(qkv, None, None, True)     # positional as flash-attn
    want = at.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    got.sum().backward()
    assert qkv.grad.shape == qkv.shape
    q, kv = randn(2, 5, 4, 8), randn(2, 7, 2, 2, 8)
    torch.testing.assert_close(fa.flash_attn_kvpacked_func(q, kv, causal=True),
                               at.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], causal=True),
                               rtol=0, atol=0)
    q, k, v, cu_q, cu_k = _packed(Hq=2, Hkv=2, Dv=8)
    kv = torch.stack([k, v], dim=1)
    want = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 7, causal=True)
    torch.testing.assert_close(fa.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 9, 7,
                                                                  causal=True), want)
    qkv = torch.stack([q[:12], k[:12], v[:12]], dim=1)
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    torch.testing.assert_close(
        fa.flash_attn_varlen_qkvpacked_func(qkv, cu, 7),
        fa.flash_attn_varlen_func(q[:12], k[:12], v[:12], cu, cu, 7, 7))


def _rope_tables(positions, rotary_dim, base=10000.0):
    inv = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(positions, dtype=torch.float64).unsqueeze(1) * inv
    return torch.cos(angles).float(), torch.sin(angles).float()


def _rotate_interleaved(x, cos, sin):
    """x [T, H, D] rotated in interleaved pairs (x0, x1), (x2, x3)... by cos/sin [T, r/2]."""
    r = 2 * cos.shape[1]
    x = x.double().clone()
    even, odd = x[..., 0:r:2].clone(), x[..., 1:r:2].clone()
    c, s = cos.double().unsqueeze(1), sin.double().unsqueeze(1)
    x[..., 0:r:2], x[..., 1:r:2] = even * c - odd * s, even * s + odd * c
    return x


def test_with_kvcache_flash_attn_defaults_and_documented_decode_example():
    """flash-attn's decoding pattern, unchanged: a cache of zeros, k/v of the new token
    appended in place at cache_seqlens, interleaved rotary (the default) on q and the new
    keys, non-causal (the default) attention over the held keys."""
    torch.manual_seed(2)
    batch_size, seqlen_cache, nheads, nheads_k, headdim, rotary_dim = 2, 16, 4, 2, 8, 8
    k_cache = torch.zeros(batch_size, seqlen_cache, nheads_k, headdim)
    v_cache = torch.zeros(batch_size, seqlen_cache, nheads_k, headdim)
    held = randn(batch_size, 6, nheads_k, headdim)
    k_cache[:, :6], v_cache[:, :6] = held, held * 0.5
    cache_seqlens = torch.tensor([6, 4], dtype=torch.int32)
    q = randn(batch_size, 1, nheads, headdim)
    k, v = randn(batch_size, 1, nheads_k, headdim), randn(batch_size, 1, nheads_k, headdim)
    cos, sin = _rope_tables(seqlen_cache, rotary_dim)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=cos,
                                     rotary_sin=sin, cache_seqlens=cache_seqlens)
    assert out.shape == (batch_size, 1, nheads, headdim)
    for b in range(batch_size):
        n = int(cache_seqlens[b])
        rotated = _rotate_interleaved(k[b], cos[n:n + 1], sin[n:n + 1]).float()
        torch.testing.assert_close(k_cache[b, n], rotated[0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(v_cache[b, n], v[b, 0])
        assert torch.equal(k_cache[b, :n], before_k[b, :n])
        qr = _rotate_interleaved(q[b], cos[n:n + 1], sin[n:n + 1])      # [1, H, D]
        keys = k_cache[b, :n + 1].double().repeat_interleave(2, dim=1)
        values = v_cache[b, :n + 1].double().repeat_interleave(2, dim=1)
        p = torch.softmax(torch.einsum("qhd,khd->hqk", qr, keys) / math.sqrt(headdim), -1)
        torch.testing.assert_close(out[b].double(), torch.einsum("hqk,khd->qhd", p, values),
                                   rtol=1e-5, atol=1e-6)
    # The same call through attn's own name needs flash-attn's defaults spelled out.
    k_cache2, v_cache2 = before_k.clone(), before_v.clone()
    own = attn.forward_with_kvcache(q, k_cache2, v_cache2, cache_seqlens, k_new=k, v_new=v,
                                    rotary_cos=cos, rotary_sin=sin, rotary_interleaved=True,
                                    causal=False)
    assert torch.equal(own, out) and torch.equal(k_cache2, k_cache)


def test_with_kvcache_causal_lse_int_and_default_seqlens():
    torch.manual_seed(3)
    k_cache, v_cache = randn(2, 8, 2, 8), randn(2, 8, 2, 8)
    q = randn(2, 3, 4, 8)
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=5, causal=True,
                                          return_softmax_lse=True)
    want, want_lse = attn.forward_with_kvcache(q, k_cache, v_cache, [5, 5], causal=True,
                                               return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse) and lse.shape == (2, 4, 3)
    full = fa.flash_attn_with_kvcache(q, k_cache, v_cache)           # None: the whole cache
    torch.testing.assert_close(full, at.flash_attn_func(q, k_cache, v_cache), rtol=1e-5,
                               atol=1e-6)
    pool_k, pool_v = k_cache.reshape(4, 4, 2, 8), v_cache.reshape(4, 4, 2, 8)
    table = torch.arange(4, dtype=torch.int32).reshape(2, 2)
    paged = fa.flash_attn_with_kvcache(q, pool_k, pool_v, block_table=table)
    torch.testing.assert_close(paged, full, rtol=1e-6, atol=1e-6)
    for name in ("cache_batch_idx", "cache_leftpad", "alibi_slopes"):
        with pytest.raises(NotImplementedError, match=name):
            fa.flash_attn_with_kvcache(q, k_cache, v_cache, **{name: torch.zeros(2)})
    runs = []
    for _ in range(2):  # dropout's mask comes from torch's generator
        torch.manual_seed(4)
        runs.append(fa.flash_attn_varlen_func(q[0], k_cache[0], v_cache[0], [0, 3], [0, 8], 3,
                                              8, dropout_p=0.1))
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], fa.flash_attn_varlen_func(
        q[0], k_cache[0], v_cache[0], [0, 3], [0, 8], 3, 8))
