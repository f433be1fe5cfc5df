"""attn — exact, fast attention on the CPU (Python binding of libattn).

    import numpy as np, attn
    q = k = v = np.random.rand(2, 128, 8, 64).astype(np.float32)   # [B, T, H, D]
    out = attn.forward(q, k, v, causal="bottom-right")

Functions take NumPy arrays or PyTorch (CPU) tensors of any strides, without copying, in
float32, float16 or bfloat16, and return the input's kind and dtype. Q/K/V/O are
[B, T, H, D]; LSE is [B, H, T] float32 (natural log). The GIL is released while attn computes.
Errors raise ValueError (bad arguments), MemoryError (memory limit, cache full),
NotImplementedError (a combination attn does not serve), each with attn's message.
Submodules: attn.torch (custom op, SDPA and flash-attn drop-ins), attn.hf (transformers).
See docs/python.md.
"""
from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np

from . import _attn
from . import _options as _O
from . import _tensors as T

__all__ = ["forward", "backward", "merge", "KVCache", "Gradients", "version", "alibi_slopes",
           "varlen_forward", "varlen_backward", "forward_with_kvcache",
           "kernels", "sinks_backward", "dropout_mask"]
__version__ = _attn.version()

Gradients = namedtuple("Gradients", ["dq", "dk", "dv", "dbias"])
Gradients.__doc__ = "attn.backward's result: dq, dk, dv (as q, k, v) and dbias (None without bias)."


def version() -> str:
    """libattn's version, "MAJOR.MINOR.PATCH" (the package's version too)."""
    return _attn.version()


def kernels():
    """The kernel families this CPU and build run (e.g. ["generic", "avx2", "avx512"]); pass
    one as kernel= to forward, backward or KVCache.decode."""
    return list(_O.kernel_choices())


def _qkv(q, k, v):
    views = [T.view(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"))]
    for x, name in zip(views, "qkv"):
        if x.rank != 4:
            raise ValueError(f"{name} must be [B, T, H, D] (rank 4), got shape {x.shape}")
        if x.code not in (T.F32, T.F16, T.BF16):
            raise ValueError(f"{name}: dtype {x.dtype_name} is not supported (float32, "
                             "float16, bfloat16)")
    if len({x.code for x in views}) != 1:
        raise ValueError("q, k and v must have the same dtype, got "
                         + ", ".join(x.dtype_name for x in views))
    return views


def _compute_views(views, names):
    """The views as attn_forward takes them (float32 copies of a dtype it does not take)."""
    if views[0].code in T.NATIVE_QKV:
        return list(views)
    return [T.converted(x, T.F32, n) for x, n in zip(views, names)]


def _output(like, out, shape, code, name, native=T.NATIVE_QKV):
    """(array to return or None, View attn writes into, float32 buffer or None). When the
    computation dtype differs from `code`, attn writes the buffer, converted after (_finish).
    An `out` attn writes directly is checked by attn itself against every input and output
    (exactly: a view interleaved with the inputs in one buffer without sharing a byte is
    accepted; one that shares memory is a ValueError naming both and their byte ranges); a
    buffer is copied into `out` after attn has read the inputs, so nothing can alias."""
    if out is not None:
        ov = T.view(out, name, writable=True)
        if ov.shape != tuple(shape):
            raise ValueError(f"{name} must have shape {list(shape)}, got {list(ov.shape)}")
        if ov.code != code:
            raise ValueError(f"{name} must have dtype {T.DTYPE_NAMES[code]}, got {ov.dtype_name}")
        if code in native or code == T.F32:
            return out, ov, None
        buffer = T.empty(like, shape, T.F32)
        return out, T.view(buffer, name), buffer
    if code in native or code == T.F32:
        result = T.empty(like, shape, code)
        return result, T.view(result, name), None
    buffer = T.empty(like, shape, T.F32)
    return None, T.view(buffer, name), buffer


def _finish(result, buffer, code):
    if buffer is None:
        return result
    if result is None:
        return T.as_dtype(buffer, code)
    T.copy_into(result, buffer)
    return result


def forward(q, k, v, *, causal=None, window=None, mask=None, bias=None, scale=None,
            softcap=0.0, alibi=False, alibi_slopes=None, key_lengths=None, query_lengths=None,
            empty_rows="error", return_lse=False, out=None, threads=None, alignment=None,
            memory_limit=None, kernel=None, sinks=None, sink_tokens=0, dropout_p=0.0,
            dropout_seed=None, dropout_offset=0, return_probabilities=False):
    """Exact attention softmax(scale * q k^T + bias) v over [B, T, H, D] arrays.

    q [B, Tq, Hq, Dk], k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv] (Hq a multiple of Hkv: GQA);
    returns out [B, Tq, Hq, Dv] (q's kind and dtype), and with return_lse=True the pair
    (out, lse) with lse [B, Hq, Tq] float32. return_probabilities=True appends the attention
    probabilities P [B, Hq, Tq, Tk] float32, the weights out is made of (out = P v, with
    dropout's mask and scale in them; 0 where a pair is not allowed), computed by a second
    call with v the identity (O(Tq Tk^2) work: for inspection and small problems).
      causal: None, "bottom-right" (query i at position i + Tk - Tq, FlashAttention) or
          "top-left" (position i, PyTorch is_causal).
      window: (left, right): keys within [pos - left, pos + right]; -1 = unbounded side.
      alignment: where queries sit for window / ALiBi without causal ("bottom-right" or
          "top-left"; not needed when Tq == Tk).
      mask: bool, True = attend, broadcasting to [B, Hq, Tq, Tk]. bias: additive float, same.
      scale: default 1/sqrt(Dk). softcap: c > 0 caps logits to c*tanh(x/c) (0 = off).
      alibi / alibi_slopes (float[Hq]): ALiBi bias (standard slopes when not given).
      key_lengths / query_lengths: int[B], valid lengths of padded batches.
      empty_rows: "error" (default), "zero" (O = 0, LSE = -inf) or "nan" for rows that
          attend no key.
      sinks: float[Hq], attention sinks (gpt-oss's s_aux): per query head the logit of one
          more key column whose value is 0, in every row's softmax denominator (-inf = none
          for that head). The LSE includes it. Gradient: sinks_backward.
      sink_tokens: the keys at positions below it are never cut off by the window
          (StreamingLLM's sink tokens; still subject to causal, masks and lengths).
      dropout_p, dropout_seed, dropout_offset: attention dropout (training): each
          probability is dropped with probability dropout_p and the kept ones scaled by
          1 / (1 - dropout_p); the mask is a function of the seed (required with
          dropout_p > 0), the offset and the position (attn.dropout_mask), so backward given
          the same three regenerates it. lse is that of the whole softmax.
      out: an array to write (shape and dtype of the result). threads: the most threads the
          call uses (fewer for small work; default: OMP_NUM_THREADS, else every CPU).
      memory_limit: refuse (MemoryError) calls whose working memory exceeds this many bytes.
      kernel: None / "auto" (the fastest this CPU runs) or a family of attn.kernels().
    """
    qv, kv, vv = _qkv(q, k, v)
    B, Tq, Hq, _ = qv.shape
    Tk, Dv = kv.shape[1], vv.shape[3]
    options, keep, _ = _O.build(B, Hq, Tq, Tk, causal=causal, alignment=alignment,
                                window=window, mask=mask, bias=bias, scale=scale,
                                softcap=softcap, alibi=alibi, alibi_slopes=alibi_slopes,
                                key_lengths=key_lengths, query_lengths=query_lengths,
                                empty_rows=empty_rows, sinks=sinks, sink_tokens=sink_tokens,
                                dropout_p=dropout_p, dropout_seed=dropout_seed,
                                dropout_offset=dropout_offset)
    run = _O.execution(threads, memory_limit, kernel)
    cq, ck, cv = _compute_views((qv, kv, vv), "qkv")
    result, ov, buffer = _output(qv, out, (B, Tq, Hq, Dv), qv.code, "out")
    lse = T.empty(qv, (B, Hq, Tq), T.F32) if return_lse else None
    lv = T.view(lse, "lse") if return_lse else None
    _attn.forward(cq.desc(), ck.desc(), cv.desc(), ov.desc(), lv.desc() if lv else None,
                  options, run)
    probabilities = _probabilities(qv, kv, options, run) if return_probabilities else None
    del keep
    result = _finish(result, buffer, qv.code)
    if not (return_lse or return_probabilities):
        return result
    return (result,) + ((lse,) if return_lse else ()) + \
        ((probabilities,) if return_probabilities else ())


def _probabilities(qv, kv, options, run):
    """P [B, Hq, Tq, Tk] float32 of a forward call: attn_forward with float32 q and k and v the
    identity (value j is the j-th unit vector, broadcast over batch and heads), so that
    O = P I = P with every option of the call, dropout's mask included, as the call applied it."""
    B, Tq, Hq, _ = qv.shape
    Tk, Hkv = kv.shape[1], kv.shape[2]
    cq, ck = T.converted(qv, T.F32, "q"), T.converted(kv, T.F32, "k")
    identity = T.view(np.eye(Tk, dtype=np.float32), "identity").broadcast(
        (B, Tk, Hkv, Tk), (0, Tk, 0, 1))
    weights = T.empty(qv, (B, Tq, Hq, Tk), T.F32)
    _attn.forward(cq.desc(), ck.desc(), identity.desc(), T.view(weights, "weights").desc(),
                  None, options, run)
    return weights.permute(0, 2, 1, 3) if qv.torch else weights.transpose(0, 2, 1, 3)


def backward(q, k, v, out, lse, dout, *, causal=None, window=None, mask=None, bias=None,
             scale=None, softcap=0.0, alibi=False, alibi_slopes=None, key_lengths=None,
             query_lengths=None, empty_rows="error", dlse=None, threads=None, alignment=None,
             memory_limit=None, kernel=None, sinks=None, sink_tokens=0, dropout_p=0.0,
             dropout_seed=None, dropout_offset=0):
    """Gradients of attn.forward: returns Gradients(dq, dk, dv, dbias).

    q, k, v, out and lse are what forward took and returned (return_lse=True); dout is the
    gradient of out ([B, Tq, Hq, Dv]). Pass the options forward used (dropout's seed and
    offset too: the gradients are those of the mask forward applied). dq, dk, dv have the
    shapes and dtype of q, k, v; dbias has the shape of `bias` (summed over its broadcast
    dimensions), None without bias. ALiBi has no gradient. dlse [B, Hq, Tq], optional, is a
    gradient of lse (for losses that use it): since d lse_i / d s_ij = P_ij, it enters as
    dS = P (dP - (D - dlse)), D = rowsum(dO * O), which attn's backward computes when out and
    dout get one more column (-dlse and 1) and v a zero column.
    """
    qv, kv, vv = _qkv(q, k, v)
    B, Tq, Hq, Dk = qv.shape
    Tk, Hkv, Dv = kv.shape[1], kv.shape[2], vv.shape[3]
    ov, dov = T.view(out, "out"), T.view(dout, "dout")
    lv = T.converted(T.view(lse, "lse"), T.F32, "lse")
    for x, name in ((ov, "out"), (dov, "dout")):
        if x.code not in (T.F32, T.F16, T.BF16):
            raise ValueError(f"{name}: dtype {x.dtype_name} is not supported")
    options, keep, bias_view = _O.build(B, Hq, Tq, Tk, causal=causal, alignment=alignment,
                                        window=window, mask=mask, bias=bias, scale=scale,
                                        softcap=softcap, alibi=alibi,
                                        alibi_slopes=alibi_slopes, key_lengths=key_lengths,
                                        query_lengths=query_lengths, empty_rows=empty_rows,
                                        sinks=sinks, sink_tokens=sink_tokens,
                                        dropout_p=dropout_p, dropout_seed=dropout_seed,
                                        dropout_offset=dropout_offset)
    run = _O.execution(threads, memory_limit, kernel)
    # All operands in one dtype attn_backward takes (q's, or float32 for the LSE gradient).
    code = qv.code if qv.code in T.NATIVE_BACKWARD and dlse is None else T.F32
    cq, ck, cv, co, cdo = (T.converted(x, code, n) for x, n in
                           zip((qv, kv, vv, ov, dov), ("q", "k", "v", "out", "dout")))
    if dlse is not None:
        cv, co, cdo = _with_lse_gradient(cv, co, cdo, T.view(dlse, "dlse"), (B, Hq, Tq))
    dq = T.empty(qv, (B, Tq, Hq, Dk), code)
    dk = T.empty(qv, (B, Tk, Hkv, Dk), code)
    dv = T.empty(qv, (B, Tk, Hkv, cv.shape[3]), code)
    dbias = dbias_view = None
    if bias_view is not None:
        b, h = bias_view.shape[0], bias_view.shape[1]
        dbias = T.zeros(qv, (b, h, Tq, Tk), T.F32)
        dbias_view = T.view(dbias, "dbias")
    _attn.backward(cq.desc(), ck.desc(), cv.desc(), co.desc(), lv.desc(), cdo.desc(), options,
                   T.view(dq, "dq").desc(), T.view(dk, "dk").desc(), T.view(dv, "dv").desc(),
                   dbias_view.desc() if dbias_view else None, run)
    del keep
    dv = dv[..., :Dv]
    if code != qv.code:
        dq, dk, dv = (T.as_dtype(x, qv.code) for x in (dq, dk, dv))
    if dbias is not None:
        dbias = _reduce_to(dbias, T.view(bias, "bias"))
    return Gradients(dq, dk, dv, dbias)


def dropout_mask(batch, heads, query_length, key_length, dropout_p, dropout_seed,
                 dropout_offset=0, *, like=None):
    """The dropout mask forward applies with these dropout arguments: bool
    [batch, heads, query_length, key_length], True where a probability is kept (and scaled
    by 1 / (1 - dropout_p)). A NumPy array, or a torch tensor when `like` is one. For tests
    and for reproducing a call: forward's output equals ((P * mask) / (1 - p)) @ V."""
    shape = tuple(_O._integer(n, name, 1, 2**62) for n, name in
                  ((batch, "batch"), (heads, "heads"), (query_length, "query_length"),
                   (key_length, "key_length")))
    options, keep, _ = _O.build(1, 1, 1, 1, causal=None, alignment=None, window=None,
                                mask=None, bias=None, scale=None, softcap=0.0, alibi=False,
                                alibi_slopes=None, key_lengths=None, query_lengths=None,
                                empty_rows="error", dropout_p=dropout_p,
                                dropout_seed=dropout_seed if dropout_p else 0,
                                dropout_offset=dropout_offset)
    mask = np.empty(shape, np.bool_)
    _attn.dropout_mask(options, T.view(mask, "mask").desc())
    if like is not None and T.is_torch(like):
        return T.torch_module().from_numpy(mask)
    return mask


def sinks_backward(out, lse, dout, sinks, *, query_lengths=None, dlse=None):
    """The gradient of the sink logits (forward's sinks=): float32 [Hq],
    dsinks[h] = -sum over b and the real rows i of e^(sinks[h] - lse[b, h, i]) * D[b, h, i],
    D = rowsum(dout * out) (minus dlse where a gradient of lse is given: d lse / d sink = the
    sink's probability). out, lse: what forward returned with these sinks; dout: the gradient
    of out; query_lengths: as forward took them."""
    import numpy as np
    ov, dov = T.view(out, "out"), T.view(dout, "dout")
    if ov.rank != 4:
        raise ValueError(f"out must be [B, Tq, Hq, Dv] (rank 4), got shape {ov.shape}")
    B, Tq, Hq, Dv = ov.shape
    lv = T.converted(T.view(lse, "lse"), T.F32, "lse")
    code = ov.code if ov.code in (T.F32, T.F16, T.BF16) else T.F32
    co, cdo = T.converted(ov, code, "out"), T.converted(dov, code, "dout")
    if dlse is not None:
        _, co, cdo = _with_lse_gradient(T.view(np.zeros((B, 1, Hq, Dv), np.float32), "v"),
                                        T.converted(co, T.F32, "out"),
                                        T.converted(cdo, T.F32, "dout"), T.view(dlse, "dlse"),
                                        (B, Hq, Tq))
    options, keep, _ = _O.build(B, Hq, Tq, 1, causal=None, alignment=None, window=None,
                                mask=None, bias=None, scale=None, softcap=0.0, alibi=False,
                                alibi_slopes=None, key_lengths=None,
                                query_lengths=query_lengths, empty_rows="zero", sinks=sinks)
    dsinks = np.zeros(Hq, np.float32)
    _attn.sinks_backward(co.desc(), lv.desc(), cdo.desc(), options, dsinks.ctypes.data)
    del keep
    if ov.torch:
        return T.torch_module().from_numpy(dsinks)
    return dsinks


def _with_lse_gradient(v, out, dout, dlse, shape):
    """v, out, dout (float32 copies) with one more column: 0, -dlse and 1 (see backward)."""
    import numpy as np
    if dlse.shape != shape:
        raise ValueError(f"dlse must have shape {list(shape)}, got {list(dlse.shape)}")
    def numpy(x: T.View):
        return x.obj.detach().float().numpy() if x.torch else np.asarray(x.obj, np.float32)
    g = numpy(dlse).transpose(0, 2, 1)[..., None]                     # [B, Tq, Hq, 1]
    v2 = np.concatenate([numpy(v), np.zeros(v.shape[:3] + (1,), np.float32)], axis=3)
    out2 = np.concatenate([numpy(out), -g], axis=3)
    dout2 = np.concatenate([numpy(dout), np.ones_like(g)], axis=3)
    return (T.view(v2, "v"), T.view(out2, "out"), T.view(dout2, "dout"))


def _reduce_to(full, original: T.View):
    """Sums `full` [b, h, Tq, Tk] over the dimensions `original` broadcast along, and gives
    it `original`'s shape, kind and dtype."""
    shape = [1] * (4 - original.rank) + list(original.shape)
    axes = tuple(d for d in range(4) if shape[d] == 1 and full.shape[d] != 1)
    if axes:
        full = full.sum(axes, keepdims=True) if not T.is_torch(full) else \
            full.sum(dim=axes, keepdim=True)
    full = full.reshape(tuple(original.shape))
    if original.torch != T.is_torch(full):
        torch = T.torch_module()
        full = torch.from_numpy(full) if original.torch else full.numpy()
    return T.as_dtype(full, original.code) if original.code != T.F32 else full


def merge(outs, lses, *, out=None, lse=None):
    """Exact merge of partial attention results over disjoint key sets (split-KV, cascade):
    outs[s] [B, T, H, Dv], lses[s] [B, H, T] float32 -> (out, lse). A partial with lse = -inf
    contributes nothing; rows empty in every partial get O = 0, lse = -inf."""
    outs, lses = list(outs), list(lses)
    if not outs or len(outs) != len(lses):
        raise ValueError(f"merge needs as many lses as outs (>= 1), got {len(outs)} and "
                         f"{len(lses)}")
    ovs = [T.view(x, f"outs[{s}]") for s, x in enumerate(outs)]
    lvs = [T.converted(T.view(x, f"lses[{s}]"), T.F32, f"lses[{s}]") for s, x in enumerate(lses)]
    first = ovs[0]
    if first.rank != 4:
        raise ValueError(f"outs[0] must be [B, T, H, Dv] (rank 4), got shape {first.shape}")
    if first.code not in (T.F32, T.F16, T.BF16):
        raise ValueError(f"outs[0]: dtype {first.dtype_name} is not supported")
    code = first.code if first.code in T.NATIVE_MERGE else T.F32
    covs = [T.converted(x, code, f"outs[{s}]") for s, x in enumerate(ovs)]
    B, Tq, H, Dv = first.shape
    result, rv, buffer = _output(first, out, (B, Tq, H, Dv), first.code, "out",
                                 T.NATIVE_MERGE)
    if lse is None:
        lse = T.empty(first, (B, H, Tq), T.F32)
    lsv = T.view(lse, "lse", writable=True)
    _attn.merge([x.desc() for x in covs], [x.desc() for x in lvs], rv.desc(), lsv.desc())
    return _finish(result, buffer, first.code), lse


def alibi_slopes(num_heads: int):
    """The standard ALiBi slopes (Press et al.) for `num_heads` heads, float32 NumPy array."""
    import numpy as np
    heads = _O._integer(num_heads, "num_heads", 1, 2**31 - 1)
    slopes = np.empty(heads, dtype=np.float32)
    _attn.alibi_slopes(heads, slopes.ctypes.data)
    return slopes


_ROPE_LAYOUTS = {"interleaved": 0, "half": 1}


# The range of the int64 arguments the cache's C functions take: outside it, a ValueError
# naming the argument instead of the conversion's OverflowError.
_INT64 = (-2**63, 2**63 - 1)


class KVCache:
    """A KV cache for one attention layer, with decoding (attn_kv_cache + attn_decode).

    KVCache(sequences, kv_heads, key_dim, value_dim=None, *, capacity, dtype="float32",
            page_size=0, page_count=0, values_in_keys=False, rope_dim=0,
            rope_layout="half", rope_base=10000.0)
    holds up to `capacity` tokens for each of `sequences` sequences x `kv_heads` heads, stored
    as float32, bfloat16 or float16 (converted on append). page_size > 0 gives a paged pool of
    page_count pages (0 = enough for every sequence at full capacity). rope_dim > 0 applies
    RoPE to keys at append time at each token's position. Methods take a lock, so one cache
    can be shared between threads (calls run one at a time).
    """

    def __init__(self, sequences, kv_heads, key_dim, value_dim=None, *, capacity,
                 dtype="float32", page_size=0, page_count=0, values_in_keys=False,
                 rope_dim=0, rope_layout="half", rope_base=10000.0):
        ints = {"sequences": sequences, "kv_heads": kv_heads, "key_dim": key_dim,
                "value_dim": key_dim if value_dim is None else value_dim,
                "capacity": capacity, "page_size": page_size, "page_count": page_count,
                "rope_dim": rope_dim}
        for name, value in ints.items():
            ints[name] = _O._integer(value, name, -2**62, 2**62)
        code = _dtype_code(dtype)
        if code not in (T.F32, T.BF16, T.F16):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
        if rope_layout not in _ROPE_LAYOUTS:
            raise ValueError(f"rope_layout must be 'interleaved' or 'half', got {rope_layout!r}")
        self._lock = threading.RLock()
        self.sequences, self.kv_heads = ints["sequences"], ints["kv_heads"]
        self.key_dim, self.value_dim = ints["key_dim"], ints["value_dim"]
        self.capacity, self.values_in_keys = ints["capacity"], bool(values_in_keys)
        self.dtype = T.DTYPE_NAMES[code]
        self._cache = _attn.cache_create(
            ints["sequences"], ints["kv_heads"], ints["key_dim"], ints["value_dim"],
            bool(values_in_keys), code, ints["capacity"], ints["page_size"],
            ints["page_count"], ints["rope_dim"], _ROPE_LAYOUTS[rope_layout],
            _O._real(rope_base, "rope_base"))

    @classmethod
    def create(cls, *args, **kwargs):
        """The same as KVCache(...)."""
        return cls(*args, **kwargs)

    def append(self, k, v=None, *, first_sequence=0):
        """Appends T tokens to sequences first_sequence .. first_sequence + n - 1:
        k [n, T, Hkv, Dk], v [n, T, Hkv, Dv] (None with values_in_keys). All or nothing:
        MemoryError when a sequence would exceed its capacity or the pool is exhausted."""
        kv = T.view(k, "k")
        kc = T.converted(kv, T.F32, "k") if kv.code != T.F32 else kv
        vc = None
        if v is not None:
            vv = T.view(v, "v")
            vc = T.converted(vv, T.F32, "v") if vv.code != T.F32 else vv
        first = _O._integer(first_sequence, "first_sequence", *_INT64)
        with self._lock:
            _attn.cache_append(self._cache, first, kc.desc(), vc.desc() if vc else None)

    def length(self, sequence=0) -> int:
        """Tokens held by `sequence`."""
        sequence = _O._integer(sequence, "sequence", *_INT64)
        with self._lock:
            n = _attn.cache_length(self._cache, sequence)
        if n < 0:
            raise ValueError(f"sequence = {sequence} is out of range [0, {self.sequences})")
        return n

    def lengths(self):
        """Tokens held by every sequence, as a list."""
        return [self.length(s) for s in range(self.sequences)]

    def reset(self):
        """Empties every sequence."""
        with self._lock:
            _attn.cache_reset(self._cache)

    def truncate(self, sequence, length):
        """Shortens `sequence` to `length` tokens."""
        with self._lock:
            _attn.cache_truncate(self._cache, _O._integer(sequence, "sequence", *_INT64),
                                 _O._integer(length, "length", *_INT64))

    def share_prefix(self, source, destination, length):
        """Makes the empty sequence `destination` start with the first `length` tokens of
        `source` (full pages shared, copied on write)."""
        with self._lock:
            _attn.cache_share_prefix(self._cache, _O._integer(source, "source", *_INT64),
                                     _O._integer(destination, "destination", *_INT64),
                                     _O._integer(length, "length", *_INT64))

    @property
    def free_pages(self) -> int:
        with self._lock:
            return _attn.cache_stats(self._cache)[0]

    @property
    def footprint_bytes(self) -> int:
        with self._lock:
            return _attn.cache_stats(self._cache)[1]

    def read(self, sequence=0, first_token=0, count=None):
        """(k, v) of tokens [first_token, first_token + count) of `sequence` as float32 NumPy
        arrays [1, count, Hkv, Dk] / [1, count, Hkv, Dv] (count None = to the end)."""
        import numpy as np
        if count is None:
            count = self.length(sequence) - _O._integer(first_token, "first_token", *_INT64)
        count = _O._integer(count, "count", 1, 2**62)
        k = np.empty((1, count, self.kv_heads, self.key_dim), np.float32)
        v = np.empty((1, count, self.kv_heads, self.value_dim), np.float32)
        with self._lock:
            _attn.cache_read(self._cache, _O._integer(sequence, "sequence", *_INT64),
                             _O._integer(first_token, "first_token", *_INT64), T.view(k, "k").desc(),
                             T.view(v, "v").desc())
        return k, v

    def decode(self, q, *, causal=None, window=None, mask=None, bias=None, scale=None,
               softcap=0.0, alibi=False, alibi_slopes=None, query_lengths=None,
               empty_rows="error", return_lse=False, out=None, threads=None, alignment=None,
               memory_limit=None, kernel=None, sinks=None, sink_tokens=0):
        """Attention of q [B, Tq, Hq, Dk] (B = sequences) against everything cached; the
        same result as attn.forward on each sequence's cached K/V with these options. For
        generation use causal="bottom-right" (query i at position length - Tq + i). Masks
        and biases broadcast to [B, Hq, Tq, longest length]. Returns out [B, Tq, Hq, Dv]
        (and lse [B, Hq, Tq] with return_lse=True)."""
        qv = T.view(q, "q")
        if qv.rank != 4:
            raise ValueError(f"q must be [B, Tq, Hq, Dk] (rank 4), got shape {qv.shape}")
        if qv.code not in (T.F32, T.F16, T.BF16):
            raise ValueError(f"q: dtype {qv.dtype_name} is not supported")
        B, Tq, Hq, _ = qv.shape
        with self._lock:
            Tk = max(self.lengths()) if B == self.sequences else 1
            options, keep, _ = _O.build(B, Hq, Tq, max(Tk, 1), causal=causal,
                                        alignment=alignment, window=window, mask=mask,
                                        bias=bias, scale=scale, softcap=softcap, alibi=alibi,
                                        alibi_slopes=alibi_slopes, key_lengths=None,
                                        query_lengths=query_lengths, empty_rows=empty_rows,
                                        decode=True, sinks=sinks, sink_tokens=sink_tokens)
            run = _O.execution(threads, memory_limit, kernel)
            cq = qv if qv.code in T.NATIVE_QKV else T.converted(qv, T.F32, "q")
            result, ov, buffer = _output(qv, out, (B, Tq, Hq, self.value_dim), qv.code, "out")
            lse = T.empty(qv, (B, Hq, Tq), T.F32) if return_lse else None
            _attn.decode(self._cache, cq.desc(), ov.desc(),
                         T.view(lse, "lse").desc() if return_lse else None, options, run)
            del keep
        result = _finish(result, buffer, qv.code)
        return (result, lse) if return_lse else result

    def __repr__(self):
        return (f"attn.KVCache(sequences={self.sequences}, kv_heads={self.kv_heads}, "
                f"key_dim={self.key_dim}, value_dim={self.value_dim}, "
                f"capacity={self.capacity}, dtype={self.dtype!r})")


def _dtype_code(dtype):
    if isinstance(dtype, str):
        name = dtype
    elif T.torch_module() is not None and isinstance(dtype, T.torch_module().dtype):
        name = str(dtype).replace("torch.", "")
    else:
        import numpy as np
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise ValueError(f"unknown dtype {dtype!r}") from None
    codes = {"float32": T.F32, "bfloat16": T.BF16, "float16": T.F16}
    if name not in codes:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    return codes[name]


# Serving (attn/serving.py): packed variable-length batches and caches the caller owns.
from .serving import forward_with_kvcache, varlen_backward, varlen_forward  # noqa: E402
