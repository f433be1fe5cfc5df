"""Keyword arguments of attn.forward / backward / KVCache.decode -> the options tuple of attn._attn.

The tuple's fields and their order are those parse_options() in python/src/module.c reads:
(scale, alignment, causal, window, mask, bias, query_lengths, key_lengths, alibi,
 alibi_slopes, softcap, empty_rows, sinks, sink_tokens, dropout_p, dropout_seed,
 dropout_offset). Masks and biases are checked here to broadcast to
[B, Hq, Tq, Tk] and passed as zero-copy views of logical shape [B|1, Hq|1, Tq, Tk].
"""
from __future__ import annotations

import math
import numbers

from . import _tensors as T

ALIGN_UNSET, ALIGN_BOTTOM_RIGHT, ALIGN_TOP_LEFT = 0, 1, 2
_ALIGNMENTS = {"bottom-right": ALIGN_BOTTOM_RIGHT, "top-left": ALIGN_TOP_LEFT}
_EMPTY_ROWS = {"error": 0, "zero": 1, "nan": 2}
MAX_THREADS = 1024


def _alignment(value, name):
    if value is None:
        return ALIGN_UNSET
    if isinstance(value, str) and value in _ALIGNMENTS:
        return _ALIGNMENTS[value]
    raise ValueError(f"{name} must be 'bottom-right', 'top-left' or None, got {value!r} "
                     "(attn never guesses where a query sits: name the alignment)")


# The smallest positive (subnormal) and the first overflowing float32 magnitudes.
_FLOAT32_TINY = 1.401298464324817e-45
_FLOAT32_HUGE = 3.4028235677973366e38


def _integer(value, name, low=None, high=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} = {value} is out of range [{low}, {high}]")
    return value


def _real(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


def kernel_choices():
    """{family name: attn_kernel_choice} for the kernel families this CPU and build run."""
    global _KERNELS
    if _KERNELS is None:
        from . import _attn
        _KERNELS = {}
        for choice in range(1, 64):
            name = _attn.kernel_name(choice)
            if name is not None:
                _KERNELS.setdefault(name, choice)
    return _KERNELS


_KERNELS = None


def execution(threads, memory_limit, kernel=None):
    """The execution tuple (threads, memory_limit_bytes, kernel choice); 0 = attn's default /
    no limit / the fastest kernel. threads is at most the library's ATTN_MAX_THREADS."""
    threads = 0 if threads is None else _integer(threads, "threads", 1, MAX_THREADS)
    limit = 0 if memory_limit is None else _integer(memory_limit, "memory_limit", 1, 2**63)
    choice = 0
    if kernel is not None and kernel != "auto":
        choices = kernel_choices()
        if kernel not in choices:
            raise NotImplementedError(f"kernel {kernel!r} is not available on this CPU and "
                                      f"build (available: auto, {', '.join(choices)})")
        choice = choices[kernel]
    return (threads, limit, choice)


def attention_matrix(v: T.View, name, B, H, Tq, Tk):
    """`v` (rank <= 4, NumPy broadcasting to [B, H, Tq, Tk]) as a view [B|1, H|1, Tq, Tk]
    with zero strides where Tq or Tk broadcast; ValueError when it does not broadcast."""
    if v.rank > 4:
        raise ValueError(f"{name} must have rank <= 4 ([B, Hq, Tq, Tk]), got shape {v.shape}")
    pad = 4 - v.rank
    shape = [1] * pad + list(v.shape)
    strides = [0] * pad + list(v.strides)
    target = (B, H, Tq, Tk)
    for d in range(4):
        if shape[d] == target[d]:
            continue
        if shape[d] != 1:
            raise ValueError(f"{name} of shape {v.shape} does not broadcast to [B, Hq, Tq, Tk] "
                             f"= {list(target)}")
        strides[d] = 0
        if d >= 2:
            shape[d] = target[d]
    return v.broadcast(shape, strides)


def build(B, Hq, Tq, Tk, *, causal, alignment, window, mask, bias, scale, softcap, alibi,
          alibi_slopes, key_lengths, query_lengths, empty_rows, decode=False, sinks=None,
          sink_tokens=0, dropout_p=0.0, dropout_seed=None, dropout_offset=0):
    """Returns (options tuple, keep, bias view or None). `keep` holds the arrays the tuple
    points at: keep it alive until the call returns."""
    keep = []
    if causal is True or causal is False:
        if causal:
            raise ValueError("causal=True is ambiguous when Tq != Tk: pass causal='bottom-right' "
                             "(FlashAttention, generation) or causal='top-left' (PyTorch "
                             "is_causal)")
        causal = None
    align = _alignment(causal, "causal")
    is_causal = align != ALIGN_UNSET
    explicit = _alignment(alignment, "alignment")
    if is_causal and explicit not in (ALIGN_UNSET, align):
        raise ValueError(f"causal={causal!r} contradicts alignment={alignment!r}")
    if not is_causal:
        align = explicit

    if window is not None:
        if isinstance(window, (str, bytes)) or len(window) != 2:
            raise ValueError(f"window must be a (left, right) pair, got {window!r}")
        window = (_integer(window[0], "window[0]"), _integer(window[1], "window[1]"))

    if alibi_slopes is not None:
        alibi = True
    alibi = bool(alibi)
    same = Tq == Tk and key_lengths is None and query_lengths is None
    if align == ALIGN_UNSET and (window is not None or alibi) and (same or decode):
        # With Tq == Tk (and no per-batch lengths) both alignments put query i at position i;
        # for decoding, the queries are the newest tokens, at the end of each sequence.
        align = ALIGN_BOTTOM_RIGHT if decode else ALIGN_TOP_LEFT

    mask_view = None
    if mask is not None:
        mask_view = T.view(mask, "mask")
        if mask_view.code != T.BOOL:
            raise ValueError(f"mask must be bool (True = attend), got {mask_view.dtype_name}; "
                             "pass an additive float mask as bias=")
        mask_view = attention_matrix(mask_view, "mask", B, Hq, Tq, Tk)
        keep.append(mask_view)

    bias_view = None
    if bias is not None:
        bias_view = T.view(bias, "bias")
        if bias_view.code not in (T.F32, T.F16, T.BF16, T.F64):
            raise ValueError(f"bias must be a float array, got {bias_view.dtype_name}")
        bias_view = attention_matrix(T.converted(bias_view, T.F32, "bias"), "bias",
                                     B, Hq, Tq, Tk)
        keep.append(bias_view)

    def lengths(values, name):
        if values is None:
            return None
        array = T.int32_array(values, name, B)
        keep.append(array)
        return array.ctypes.data

    slopes = None
    if alibi_slopes is not None:
        array = T.float32_array(alibi_slopes, "alibi_slopes", Hq)
        keep.append(array)
        slopes = array.ctypes.data

    sink_logits = None
    if sinks is not None:
        array = T.float32_array(sinks, "sinks", Hq)
        keep.append(array)
        sink_logits = array.ctypes.data

    if scale is not None:
        scale = _real(scale, "scale")
    softcap = 0.0 if softcap is None else _real(softcap, "softcap")
    if empty_rows not in _EMPTY_ROWS:
        raise ValueError(f"empty_rows must be 'error', 'zero' or 'nan', got {empty_rows!r}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale = {scale!r} must be finite and > 0")
    # attn computes in float32: a value that becomes 0 or inf there is refused as given.
    for value, name in ((scale, "scale"), (softcap, "softcap")):
        if value is not None and value != 0 and math.isfinite(value) and \
                not _FLOAT32_TINY / 2 < abs(value) < _FLOAT32_HUGE:
            raise ValueError(f"{name} = {value!r} is outside float32 (attn computes in float32: "
                             "about 1.4e-45 to 3.4e38)")

    options = (scale, align, is_causal, window,
               mask_view.desc() if mask_view else None,
               bias_view.desc() if bias_view else None,
               lengths(query_lengths, "query_lengths"), lengths(key_lengths, "key_lengths"),
               alibi, slopes, softcap, _EMPTY_ROWS[empty_rows], sink_logits,
               _integer(sink_tokens, "sink_tokens", 0, 2**62),
               *dropout(dropout_p, dropout_seed, dropout_offset))
    return options, keep, bias_view


def dropout(p, seed, offset):
    """(dropout_p, dropout_seed, dropout_offset) of the options tuple, checked: p in [0, 1);
    with p > 0 a seed is required (the backward regenerates the mask from it), any int in
    [-2^63, 2^64) (taken modulo 2^64); offset in [0, 2^64)."""
    p = 0.0 if p is None else _real(p, "dropout_p")
    if not (math.isfinite(p) and 0.0 <= p < 1.0):
        raise ValueError(f"dropout_p = {p!r} must be in [0, 1)")
    if p == 0.0:
        return (0.0, 0, 0)
    if seed is None:
        raise ValueError("dropout_p > 0 needs dropout_seed (an int): the backward regenerates "
                         "the same mask from the seed and offset")
    seed = _integer(seed, "dropout_seed", -2**63, 2**64 - 1) % 2**64
    return (p, seed, _integer(offset, "dropout_offset", 0, 2**64 - 1))
