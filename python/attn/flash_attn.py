"""attn.flash_attn — flash-attn's Python functions under flash-attn's names, with its argument
names, order, defaults and return values, computed by attn on CPU torch tensors:

    from attn.flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

flash_attn_func, flash_attn_qkvpacked_func, flash_attn_kvpacked_func,
flash_attn_varlen_func, flash_attn_varlen_qkvpacked_func and flash_attn_varlen_kvpacked_func
are differentiable (attn's own backward, through torch.library custom ops that also trace
under torch.compile); flash_attn_with_kvcache is inference only, as in flash-attn. The
semantics are flash-attn's: causal is bottom-right, window_size=(left, right) with -1 for an
unbounded side, softmax_lse is float32 natural-log. Where attn differs:

- dropout_p > 0 draws attn's own mask (attn.dropout_mask) from a seed taken from torch's
  default generator: the same distribution as flash-attn's, not the same bits; `deterministic`
  is accepted and ignored (attn is always deterministic, dropout's backward included);
- return_attn_probs=True returns (out, softmax_lse, None): the third value, flash-attn's
  dropout pattern S_dmask (only meaningful for testing), is not produced;
- rows that attend no key give out = 0 and softmax_lse = -inf;
- flash_attn_with_kvcache refuses cache_batch_idx, cache_leftpad and alibi_slopes
  (NotImplementedError) and ignores num_splits (attn chooses its own split);
- flash_attn_varlen_func refuses a block_table (no paged varlen in attn).

attn's own names keep their defaults: attn.forward_with_kvcache defaults to causal=True and
rotary_interleaved=False, where flash_attn_with_kvcache here (as flash-attn) defaults to
causal=False and rotary_interleaved=True.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import serving as _serving
from . import torch as _attn_torch
from .torch import flash_attn_func

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"]


def _slopes(alibi_slopes):
    """flash-attn's ALiBi slopes ([H] or [B, H]) as one float32 row [H]; per-batch rows that
    differ are refused."""
    if alibi_slopes is None:
        return None
    slopes = torch.as_tensor(alibi_slopes, dtype=torch.float32)
    if slopes.dim() == 2:
        if not bool((slopes == slopes[:1]).all()):
            raise NotImplementedError("attn: per-batch ALiBi slopes are not supported (use "
                                      "one row of slopes for every batch)")
        slopes = slopes[0]
    return slopes.reshape(-1).contiguous()


# ---------------------------------------------------------------- packed variable lengths

@torch.library.custom_op("attn::varlen_forward", mutates_args=(), device_types="cpu")
def _varlen_forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                       max_seqlen_q: int, max_seqlen_k: int, causal: bool, window_left: int,
                       window_right: int, scale: Optional[float], softcap: float,
                       alibi_slopes: Optional[torch.Tensor], threads: int = 0,
                       dropout_p: float = 0.0, dropout_state: Optional[torch.Tensor] = None
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
    """out [total_q, Hq, Dv] (q's dtype), lse [Hq, total_q] float32: attn.varlen_forward;
    dropout_p and dropout_state (int64 [seed, offset]) as torch.ops.attn.forward's."""
    out, lse = _serving.varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                       max_seqlen_k, causal=causal,
                                       window=(window_left, window_right), softcap=softcap,
                                       alibi_slopes=alibi_slopes, scale=scale,
                                       return_lse=True, threads=threads or None,
                                       **_attn_torch._dropout_kwargs(dropout_p, dropout_state))
    return out.contiguous(), lse.contiguous()


@_varlen_forward_op.register_fake
def _varlen_forward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         causal, window_left, window_right, scale, softcap, alibi_slopes,
                         threads=0, dropout_p=0.0, dropout_state=None):
    total_q, Hq, _ = q.shape
    return q.new_empty((total_q, Hq, v.shape[2])), q.new_empty((Hq, total_q),
                                                               dtype=torch.float32)


@torch.library.custom_op("attn::varlen_backward", mutates_args=(), device_types="cpu")
def _varlen_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                        lse: torch.Tensor, dout: torch.Tensor, dlse: Optional[torch.Tensor],
                        cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                        max_seqlen_q: int, max_seqlen_k: int, causal: bool, window_left: int,
                        window_right: int, scale: Optional[float], softcap: float,
                        alibi_slopes: Optional[torch.Tensor], threads: int = 0,
                        dropout_p: float = 0.0, dropout_state: Optional[torch.Tensor] = None
                        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), contiguous, in q's dtype: attn.varlen_backward. dlse [Hq, total_q]
    (optional) is a gradient of lse: since d lse_i / d s_ij = P_ij it enters as
    D_i - dlse_i in dS = P (dP - D), which the backward computes when out and dout get one
    more column (-dlse and 1) and v a zero column."""
    Dv = v.shape[2]
    if dlse is not None:
        q, k = q.float(), k.float()
        g = dlse.float().t().unsqueeze(-1)                            # [total_q, Hq, 1]
        v = torch.cat([v.float(), v.new_zeros(v.shape[:2] + (1,), dtype=torch.float32)], 2)
        out = torch.cat([out.float(), -g], 2)
        dout = torch.cat([dout.float(), torch.ones_like(g)], 2)
    grads = _serving.varlen_backward(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k,
                                     max_seqlen_q, max_seqlen_k, causal=causal,
                                     window=(window_left, window_right), softcap=softcap,
                                     alibi_slopes=alibi_slopes, scale=scale,
                                     threads=threads or None,
                                     **_attn_torch._dropout_kwargs(dropout_p, dropout_state))
    return tuple(x[..., :Dv].contiguous() if x is grads.dv else x.contiguous()
                 for x in (grads.dq, grads.dk, grads.dv))


@_varlen_backward_op.register_fake
def _varlen_backward_fake(q, k, v, out, lse, dout, dlse, cu_seqlens_q, cu_seqlens_k,
                          max_seqlen_q, max_seqlen_k, causal, window_left, window_right, scale,
                          softcap, alibi_slopes, threads=0, dropout_p=0.0, dropout_state=None):
    dtype = q.dtype if dlse is None else torch.float32
    return (q.new_empty(q.shape, dtype=dtype), k.new_empty(k.shape, dtype=dtype),
            v.new_empty(v.shape, dtype=dtype))


def _varlen_setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k = inputs[:5]
    out, lse = output
    dropout_state = inputs[15] if len(inputs) > 15 else None
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, inputs[12], dropout_state)
    ctx.config = inputs[5:12] + (inputs[13] if len(inputs) > 13 else 0,
                                 inputs[14] if len(inputs) > 14 else 0.0)


def _varlen_backward(ctx, dout, dlse):
    q, k, v, out, lse, cu_q, cu_k, alibi_slopes, dropout_state = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    max_q, max_k, causal, wl, wr, scale, softcap, threads, dropout_p = ctx.config
    dq, dk, dv = torch.ops.attn.varlen_backward(q, k, v, out, lse, dout, dlse, cu_q, cu_k,
                                                max_q, max_k, causal, wl, wr, scale, softcap,
                                                alibi_slopes, threads, dropout_p,
                                                dropout_state)
    dq, dk, dv = dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
    return (dq, dk, dv) + (None,) * 13


torch.library.register_autograd("attn::varlen_forward", _varlen_backward,
                                setup_context=_varlen_setup_context)


def _prefix_tensor(cu, name):
    if not isinstance(cu, torch.Tensor):
        cu = torch.as_tensor(cu)
    if cu.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must be an integer tensor (int32, as flash-attn), got "
                         f"{cu.dtype}")
    return cu.to(torch.int32).contiguous()


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash-attn's flash_attn_varlen_func: q [total_q, Hq, D], k [total_k, Hkv, D],
    v [total_k, Hkv, Dv] packed sequences; cu_seqlens_q / cu_seqlens_k int32 [B + 1] prefix
    sums; sequence b's queries attend its own keys, bottom-right causal per sequence. Returns
    out [total_q, Hq, Dv], or (out, softmax_lse [Hq, total_q] float32, None) with
    return_attn_probs=True. Differentiable in q, k, v, through out and softmax_lse
    (computation in float32, gradients in q's dtype). dropout_p > 0: attention dropout, its
    mask drawn from torch's default generator (sequence b draws batch b's mask)."""
    if block_table is not None:
        raise NotImplementedError("attn.flash_attn.flash_attn_varlen_func: block_table (paged "
                                  "K/V) is not supported; use flash_attn_with_kvcache")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    left, right = (int(w) for w in window_size)
    dropout_p, dropout_state = _attn_torch._dropout_state(dropout_p, None)
    out, lse = torch.ops.attn.varlen_forward(
        q, k, v, _prefix_tensor(cu_seqlens_q, "cu_seqlens_q"),
        _prefix_tensor(cu_seqlens_k, "cu_seqlens_k"), int(max_seqlen_q), int(max_seqlen_k),
        bool(causal), left, right, None if softmax_scale is None else float(softmax_scale),
        float(softcap or 0.0), _slopes(alibi_slopes), 0, dropout_p, dropout_state)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash-attn's flash_attn_varlen_qkvpacked_func: qkv [total, 3, H, D] (self-attention
    over packed sequences); as flash_attn_varlen_func with q, k, v = qkv.unbind(1)."""
    q, k, v = qkv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """flash-attn's flash_attn_varlen_kvpacked_func: kv [total_k, 2, Hkv, D]; as
    flash_attn_varlen_func with k, v = kv.unbind(1)."""
    k, v = kv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_attn_probs)


# ---------------------------------------------------------------- fixed-length packed calls

def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """flash-attn's flash_attn_qkvpacked_func: qkv [B, T, 3, H, D]; as flash_attn_func with
    q, k, v = qkv.unbind(2) (views: attn reads the packed layout in place)."""
    q, k, v = qkv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """flash-attn's flash_attn_kvpacked_func: q [B, Tq, Hq, D], kv [B, Tk, 2, Hkv, D]; as
    flash_attn_func with k, v = kv.unbind(2)."""
    k, v = kv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


# ---------------------------------------------------------------- caches the caller owns

def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """flash-attn's flash_attn_with_kvcache on attn.forward_with_kvcache: q [B, Tq, Hq, D];
    k_cache / v_cache [B, S_max, Hkv, D] or, with block_table int32 [B, max_pages], a page
    pool [num_pages, page_size, Hkv, D], updated in place: k / v [B, Tnew, Hkv, D] (optional)
    are written at positions cache_seqlens .. cache_seqlens + Tnew - 1 before attending.
    cache_seqlens: int32 [B], an int (every sequence), or None (every sequence holds the
    whole cache: S_max, or max_pages * page_size); it is not advanced. rotary_cos /
    rotary_sin [positions, rotary_dim / 2]: RoPE on the new keys at their positions and on q
    (query i at cache_seqlens + i when causal or windowed, else every query at
    cache_seqlens), interleaved pairs by default (rotary_interleaved=True) or rotate-half.
    causal (default False) is bottom-right. Returns out [B, Tq, Hq, Dv], and
    (out, softmax_lse [B, Hq, Tq]) with return_softmax_lse=True. No autograd (inference).
    Caches may also be 8-bit (see attn.forward_with_kvcache)."""
    for value, name in ((cache_batch_idx, "cache_batch_idx"), (cache_leftpad, "cache_leftpad"),
                        (alibi_slopes, "alibi_slopes")):
        if value is not None:
            raise NotImplementedError(f"attn.flash_attn.flash_attn_with_kvcache: {name} is not "
                                      "supported")
    B = q.shape[0]
    if cache_seqlens is None:
        held = k_cache.shape[1] if block_table is None else \
            block_table.shape[1] * k_cache.shape[1]
        cache_seqlens = torch.full((B,), held, dtype=torch.int32)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32)
    with torch.no_grad():
        return _serving.forward_with_kvcache(
            q, k_cache, v_cache, cache_seqlens, k_new=k, v_new=v, block_table=block_table,
            rotary_cos=rotary_cos, rotary_sin=rotary_sin,
            rotary_interleaved=bool(rotary_interleaved), causal=bool(causal),
            window=tuple(window_size), softcap=float(softcap or 0.0), scale=softmax_scale,
            return_lse=bool(return_softmax_lse))
