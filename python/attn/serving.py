"""attn.serving — packed variable-length attention and attention against a KV cache the
caller owns, with flash-attn's semantics (flash_attn_varlen_func, flash_attn_with_kvcache).
The functions are re-exported as attn.varlen_forward, attn.varlen_backward and
attn.forward_with_kvcache; docs/inference.md ("Serving") describes them in full.

Differences from flash-attn worth knowing: causal=True means bottom-right alignment (as in
flash-attn >= 2.1); rows with no key give O = 0 and LSE = -inf; window=(left, right) with -1
for an unbounded side (flash-attn's window_size); the cache's storage dtype is float32,
bfloat16, float16, int8 (with per-row scales) or fp8 E4M3 / E5M2 (with optional per-head
scales, as vLLM stores them); computation is float32.
"""
from __future__ import annotations

import numpy as np

from . import _attn
from . import _options as _O
from . import _tensors as T


def _causal(causal):
    """flash-attn's causal flag -> the options' causal value ("bottom-right", "top-left" or None)."""
    if causal is None or causal is False:
        return None
    if causal is True:
        return "bottom-right"
    if causal in ("bottom-right", "top-left"):
        return causal
    raise ValueError(f"causal must be True, False, None, 'bottom-right' or 'top-left', got {causal!r}")


def _window(window):
    if window is None:
        return None
    if isinstance(window, (str, bytes)) or len(window) != 2:
        raise ValueError(f"window must be a (left, right) pair, got {window!r}")
    left, right = (_O._integer(w, f"window[{n}]") for n, w in enumerate(window))
    return None if (left, right) == (-1, -1) else (left, right)


def _options(Hq, causal, window, softcap, alibi_slopes, scale, dropout=(0.0, None, 0),
             sinks=None):
    causal = _causal(causal)
    return _O.build(1, Hq, 1, 1, causal=causal, alignment=causal or "bottom-right",
                    window=_window(window), mask=None, bias=None, scale=scale,
                    softcap=softcap, alibi=alibi_slopes is not None, alibi_slopes=alibi_slopes,
                    key_lengths=None, query_lengths=None, empty_rows="zero", sinks=sinks,
                    dropout_p=dropout[0], dropout_seed=dropout[1], dropout_offset=dropout[2])


def _float_views(arrays, names, rank, layout):
    views = [T.view(x, n) for x, n in zip(arrays, names)]
    for x, n in zip(views, names):
        if x.rank != rank:
            raise ValueError(f"{n} must be {layout} (rank {rank}), got shape {x.shape}")
        if x.code not in (T.F32, T.F16, T.BF16):
            raise ValueError(f"{n}: dtype {x.dtype_name} is not supported (float32, float16, bfloat16)")
    return views


def _same_dtype(views, names):
    """q, k and v in one dtype, as attn.forward requires (a mixed call would be computed in
    float32 from values the caller did not mean to mix)."""
    if len({x.code for x in views}) != 1:
        raise ValueError(f"{', '.join(names[:-1])} and {names[-1]} must have the same dtype, got "
                         + ", ".join(x.dtype_name for x in views))


def _f32(view, name):
    return view if view.code == T.F32 else T.converted(view, T.F32, name)


def _prefix(values, name, batch=None):
    array = T.int32_array(values, name, batch + 1 if batch is not None else None,
                          layout="[B + 1]")
    if array.shape[0] < 2:
        raise ValueError(f"{name} must be a 1-D int32 array of B + 1 >= 2 entries, got shape {array.shape}")
    return array


def varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                   causal=None, window=None, softcap=0.0, alibi_slopes=None, scale=None,
                   return_lse=False, threads=None, memory_limit=None, kernel=None,
                   dropout_p=0.0, dropout_seed=None, dropout_offset=0, sinks=None):
    """Attention over packed sequences (flash_attn_varlen_func).

    q [total_q, Hq, Dk], k [total_k, Hkv, Dk], v [total_k, Hkv, Dv]; cu_seqlens_q /
    cu_seqlens_k int32 [B + 1] prefix sums (from 0 to the totals); sequence b's queries attend
    its own keys only. causal=True: bottom-right per sequence (query i at i + len_k - len_q).
    window (left, right), softcap, alibi_slopes float[Hq], scale as in attn.forward.
    Returns out [total_q, Hq, Dv] (q's kind and dtype), and with return_lse=True also
    lse [Hq, total_q] float32. Bitwise identical for any thread count. dropout_p,
    dropout_seed, dropout_offset as in attn.forward; sequence b draws the mask of batch b
    (attn.dropout_mask(B, Hq, max_seqlen_q, max_seqlen_k, ...)[b, :, :len_q, :len_k]).
    sinks: float[Hq] attention sinks, as in attn.forward (every sequence's rows get them).
    """
    qv, kv, vv = _float_views((q, k, v), "qkv", 3, "[total, H, D]")
    _same_dtype((qv, kv, vv), "qkv")
    total_q, Hq, _ = qv.shape
    cu_q = _prefix(cu_seqlens_q, "cu_seqlens_q")
    B = cu_q.shape[0] - 1
    cu_k = _prefix(cu_seqlens_k, "cu_seqlens_k", B)
    options, keep, _ = _options(Hq, causal, window, softcap, alibi_slopes, scale,
                                (dropout_p, dropout_seed, dropout_offset), sinks)
    run = _O.execution(threads, memory_limit, kernel)
    cq, ck, cv = _f32(qv, "q"), _f32(kv, "k"), _f32(vv, "v")
    out = T.empty(qv, (total_q, Hq, vv.shape[2]), T.F32)
    lse = T.empty(qv, (Hq, total_q), T.F32)
    _attn.varlen_forward(cq.desc(), ck.desc(), cv.desc(), cu_q.ctypes.data, cu_k.ctypes.data, B,
                         _O._integer(max_seqlen_q, "max_seqlen_q"),
                         _O._integer(max_seqlen_k, "max_seqlen_k"), T.view(out, "out").desc(),
                         T.view(lse, "lse").desc(), options, run)
    del keep
    if qv.code != T.F32:
        out = T.as_dtype(out, qv.code)
    return (out, lse) if return_lse else out


def varlen_backward(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                    max_seqlen_k, *, causal=None, window=None, softcap=0.0, alibi_slopes=None,
                    scale=None, threads=None, memory_limit=None, kernel=None, dropout_p=0.0,
                    dropout_seed=None, dropout_offset=0, sinks=None):
    """Gradients of varlen_forward (same sequences and options, dropout's seed and offset too): q, k, v, out and lse
    ([Hq, total_q], return_lse=True) as varlen_forward took and returned, dout [total_q, Hq, Dv].
    Returns attn.Gradients(dq, dk, dv, None) with q's, k's and v's shapes and dtype."""
    from . import Gradients
    qv, kv, vv, ov, dov = _float_views((q, k, v, out, dout), ("q", "k", "v", "out", "dout"), 3,
                                       "[total, H, D]")
    _same_dtype((qv, kv, vv), "qkv")
    lv = _f32(T.view(lse, "lse"), "lse")
    total_q, Hq, Dk = qv.shape
    total_k, Hkv, Dv = vv.shape[0], kv.shape[1], vv.shape[2]
    cu_q = _prefix(cu_seqlens_q, "cu_seqlens_q")
    B = cu_q.shape[0] - 1
    cu_k = _prefix(cu_seqlens_k, "cu_seqlens_k", B)
    options, keep, _ = _options(Hq, causal, window, softcap, alibi_slopes, scale,
                                (dropout_p, dropout_seed, dropout_offset), sinks)
    run = _O.execution(threads, memory_limit, kernel)
    views = [_f32(x, n) for x, n in zip((qv, kv, vv, ov, dov), ("q", "k", "v", "out", "dout"))]
    dq = T.empty(qv, (total_q, Hq, Dk), T.F32)
    dk = T.empty(qv, (total_k, Hkv, Dk), T.F32)
    dv = T.empty(qv, (total_k, Hkv, Dv), T.F32)
    _attn.varlen_backward(*(x.desc() for x in views[:4]), lv.desc(), views[4].desc(),
                          cu_q.ctypes.data, cu_k.ctypes.data, B,
                          _O._integer(max_seqlen_q, "max_seqlen_q"),
                          _O._integer(max_seqlen_k, "max_seqlen_k"), T.view(dq, "dq").desc(),
                          T.view(dk, "dk").desc(), T.view(dv, "dv").desc(), options, run)
    del keep
    if qv.code != T.F32:
        dq, dk, dv = (T.as_dtype(x, qv.code) for x in (dq, dk, dv))
    return Gradients(dq, dk, dv, None)


# 8-bit cache dtypes (include/attn.h): int8 with scales, fp8 E4M3 ("e4m3fn") and E5M2.
_Q8, _FP8_E4M3, _FP8_E5M2 = 7, 8, 9
_EIGHT_BIT_NAMES = {"int8": _Q8, "float8_e4m3fn": _FP8_E4M3, "float8_e5m2": _FP8_E5M2}


def _cache_view(x, name):
    """A writable View of a cache tensor: float32 / bfloat16 / float16 as T.view, or 8-bit
    storage (int8, float8_e4m3fn, float8_e5m2) as its bytes in place."""
    dtype_name = str(getattr(x, "dtype", "")).replace("torch.", "")
    code = _EIGHT_BIT_NAMES.get(dtype_name)
    if code is None:
        return T.view(x, name, writable=True)
    if T.is_torch(x):
        if x.device.type != "cpu":
            raise ValueError(f"{name} is on device {x.device}; attn computes on the CPU")
        return T.View(x, True, code, x.shape, x.stride(), x.data_ptr(), 1)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array or a torch tensor")
    if not x.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return T.View(x, False, code, x.shape, x.strides, x.__array_interface__["data"][0], 1)


def _scale_view(x, name, cache_code):
    """The float32 View of an 8-bit cache's scales (a Python float: one fp8 scale for every
    head), or None."""
    if x is None:
        return None
    if isinstance(x, (int, float)):
        x = np.array([x], np.float32)
    v = T.view(x, name, writable=cache_code == _Q8)
    if v.code != T.F32:
        raise ValueError(f"{name} must be float32, got {v.dtype_name}")
    return v


def forward_with_kvcache(q, k_cache, v_cache, cache_seqlens, *, k_new=None, v_new=None,
                         block_table=None, rotary_cos=None, rotary_sin=None,
                         rotary_interleaved=False, causal=True, window=None, softcap=0.0,
                         scale=None, return_lse=False, threads=None, memory_limit=None,
                         kernel=None, k_scale=None, v_scale=None):
    """Attention against a KV cache the caller owns (flash_attn_with_kvcache's semantics,
    with attn's names and defaults: causal=True and rotary_interleaved=False here, where
    flash-attn defaults to causal=False and rotary_interleaved=True; attn.flash_attn has
    flash_attn_with_kvcache with flash-attn's exact signature).

    q [B, Tq, Hq, Dk]; k_cache / v_cache [B, S_max, Hkv, D] (contiguous), or a page pool
    [num_pages, page_size, Hkv, D] with block_table int32 [B, max_pages]; float32, bfloat16
    or float16 (NumPy, or PyTorch CPU tensors; written in place). cache_seqlens int32 [B]:
    tokens each sequence holds (not updated: add Tnew yourself). k_new / v_new
    [B, Tnew, Hkv, D] are appended at cache_seqlens first, with RoPE from rotary_cos /
    rotary_sin [positions, rotary_dim / 2] (rotate-half, or interleaved pairs with
    rotary_interleaved=True) on the new keys and on q (query i at cache_seqlens + i when
    causal or windowed). causal=True: bottom-right, query i at cache_seqlens + Tnew - Tq + i.
    Returns out [B, Tq, Hq, Dv] (q's kind and dtype), and lse [B, Hq, Tq] with
    return_lse=True. Nothing is written to the cache when an argument is wrong.

    8-bit caches (docs/inference.md, "Quantized KV cache"): int8 caches (numpy / torch int8)
    need k_scale / v_scale, float32 with one scale per (token, KV head) laid out like the
    cache without D ([B, S_max, Hkv] or [num_pages, page_size, Hkv]; written in place for
    the appended tokens: max|x| / 127, x ~ scale * q). fp8 caches (torch.float8_e4m3fn /
    float8_e5m2, or ml_dtypes' float8_e4m3fn / float8_e5m2 arrays) take optional per-head
    scales, float32 [Hkv], [1] or a Python float (vLLM's k_scale / v_scale; x ~ scale * fp8).
    """
    qv = _float_views((q,), ("q",), 4, "[B, Tq, Hq, Dk]")[0]
    B, Tq, Hq, _ = qv.shape
    kc, vc = _cache_view(k_cache, "k_cache"), _cache_view(v_cache, "v_cache")
    for view, name in ((kc, "k_cache"), (vc, "v_cache")):
        if view.rank != 4:
            raise ValueError(f"{name} must be [B, S_max, Hkv, D] or [num_pages, page_size, Hkv, "
                             f"D] (rank 4), got shape {view.shape}")
    scales = [_scale_view(x, n, kc.code) for x, n in ((k_scale, "k_scale"), (v_scale, "v_scale"))]
    seqlens = T.int32_array(cache_seqlens, "cache_seqlens", B)
    table = None
    if block_table is not None:
        table = T.view(T.int32_array(block_table, "block_table", ndim=2,
                                     layout="[B, max_pages]"), "block_table")
    news = []
    for x, name in ((k_new, "k_new"), (v_new, "v_new")):
        if x is None:
            news.append(None)
            continue
        nv = T.view(x, name)
        news.append(nv if nv.code in (T.F32, kc.code) else T.converted(nv, T.F32, name))
    rotary = [None, None]
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin go together")
    if rotary_cos is not None:
        rotary = [_f32(T.view(x, n), n) for x, n in ((rotary_cos, "rotary_cos"), (rotary_sin, "rotary_sin"))]
    options, keep, _ = _options(Hq, causal, window, softcap, None, scale)
    run = _O.execution(threads, memory_limit, kernel)
    cq = _f32(qv, "q")
    out = T.empty(qv, (B, Tq, Hq, vc.shape[3]), T.F32)
    lse = T.empty(qv, (B, Hq, Tq), T.F32) if return_lse else None
    _attn.forward_with_kvcache(cq.desc(), kc.desc(), vc.desc(), table.desc() if table else None,
                               seqlens.ctypes.data, *(x.desc() if x else None for x in news),
                               *(x.desc() if x else None for x in rotary),
                               0 if rotary_interleaved else 1, T.view(out, "out").desc(),
                               T.view(lse, "lse").desc() if return_lse else None, options, run,
                               *(x.desc() if x else None for x in scales))
    del keep
    if qv.code != T.F32:
        out = T.as_dtype(out, qv.code)
    return (out, lse) if return_lse else out
