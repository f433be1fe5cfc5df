"""attn.torch — attn as PyTorch operators: custom ops with fake (meta) kernels and autograd
through attn's own backward, plus drop-ins for torch's SDPA and flash-attn's flash_attn_func.

    import torch, attn.torch
    out = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)   # [B, H, T, D]
    out = attn.torch.flash_attn_func(q, k, v, causal=True)                   # [B, T, H, D]
    out, lse = torch.ops.attn.forward(q, k, v, ...)                          # the op itself

The ops (torch.ops.attn.forward / torch.ops.attn.backward) take [B, T, H, D] CPU tensors of any
strides in float32, float16 or bfloat16; they work under torch.compile (fake kernels that
declare exactly what the kernels return) and autograd (gradients for q, k, v and the float
bias, through out and lse). flash-attn's other functions are in attn.flash_attn (and
reachable from here under the same names).
"""
from __future__ import annotations

import functools
import math
import os as _os
from typing import Optional, Tuple

import torch

import attn as _attn
from attn import _attn as _extension
from attn import _options as _O

__all__ = ["scaled_dot_product_attention", "flash_attn_func", "attention"]

_ALIGN = {0: None, 1: "bottom-right", 2: "top-left"}
_EMPTY = {0: "error", 1: "zero", 2: "nan"}


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_ALIGNMENT_CODES = {None: 0, "bottom-right": 1, "top-left": 2}
_EMPTY_ROW_CODES = {"error": 0, "zero": 1, "nan": 2}


def _check(tensors, alignment, empty_rows):
    """What every op checks before it dispatches (and again in its kernels, which a direct
    torch.ops call reaches): the enum codes, q, k and v of one float dtype attn computes in,
    and every tensor on the CPU, or every one on 'meta' (shape inference). A tensor on another
    device would send the call to the fake kernel (meta) or to no kernel at all, and the
    result would be uninitialised memory: ValueError naming the argument and its device."""
    if alignment not in _ALIGN:
        raise ValueError(f"alignment = {alignment!r}: must be 0 (unset), 1 (bottom-right) or "
                         "2 (top-left)")
    if empty_rows not in _EMPTY:
        raise ValueError(f"empty_rows = {empty_rows!r}: must be 0 (error), 1 (zero) or 2 (nan)")
    if _plain_cpu(tensors):
        return
    given = [(name, t) for name, t in tensors if isinstance(t, torch.Tensor)]
    q = given[0][1]
    for name, t in given[:3]:
        if t.dtype not in _FLOATS:
            raise ValueError(f"{name}: dtype {t.dtype} is not supported (float32, float16, "
                             "bfloat16)")
        if t.dtype != q.dtype:
            raise ValueError(f"{name}.dtype = {t.dtype}: q is {q.dtype}; q, k and v must have "
                             "the same dtype")
    everywhere = "meta" if all(t.device.type == "meta" for _, t in given) else "cpu"
    for name, t in given:
        if t.device.type != everywhere:
            others = ", ".join(f"{n} on {u.device}" for n, u in given if n != name)
            raise ValueError(f"{name} is on device {t.device} ({others}): attn computes on the "
                             "CPU, every tensor must be there")


def _plain_cpu(tensors) -> bool:
    """The common case _check lets through at once: q, k and v plain CPU tensors of one float
    dtype, every other tensor argument a plain CPU tensor or None."""
    dtype = tensors[0][1].dtype if type(tensors[0][1]) is torch.Tensor else None
    if dtype not in _FLOATS:
        return False
    for index, (_, t) in enumerate(tensors):
        if t is None:
            continue
        if type(t) is not torch.Tensor or not t.is_cpu or (index < 3 and t.dtype != dtype):
            return False
    return True


def _kwargs(causal, alignment, window, window_left, window_right, scale, softcap, alibi,
            alibi_slopes, empty_rows):
    return dict(causal=_ALIGN[alignment] if causal else None,
                alignment=None if causal else _ALIGN[alignment],
                window=(window_left, window_right) if window else None, scale=scale,
                softcap=softcap, alibi=alibi, alibi_slopes=alibi_slopes,
                empty_rows=_EMPTY[empty_rows])


def _dropout_kwargs(dropout_p, dropout_state):
    """attn.forward's dropout arguments from the ops' (dropout_p, dropout_state: int64
    [seed, offset] or None)."""
    if not dropout_p:
        return {}
    if dropout_state is None or dropout_state.numel() != 2 or \
            dropout_state.dtype != torch.int64:
        raise ValueError("dropout_p > 0 needs dropout_state, an int64 tensor [seed, offset]")
    seed, offset = (int(x) for x in dropout_state.tolist())
    return dict(dropout_p=dropout_p, dropout_seed=seed, dropout_offset=offset)


def _forward_kernel(q, k, v, mask, bias, alibi_slopes, causal, alignment, window, window_left,
                    window_right, scale, softcap, alibi, empty_rows, threads=0, sinks=None,
                    dropout_p=0.0, dropout_state=None):
    """The forward op's CPU kernel (arguments as torch.ops.attn.forward takes them, checked)."""
    return _attn.forward(q, k, v, mask=mask, bias=bias, return_lse=True,
                         threads=threads or None, sinks=sinks,
                         **_dropout_kwargs(dropout_p, dropout_state),
                         **_kwargs(causal, alignment, window, window_left, window_right, scale,
                                   softcap, alibi, alibi_slopes, empty_rows))


@torch.library.custom_op("attn::forward", mutates_args=(), device_types="cpu")
def _forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                bias: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor],
                causal: bool, alignment: int, window: bool, window_left: int,
                window_right: int, scale: Optional[float], softcap: float, alibi: bool,
                empty_rows: int, threads: int = 0,
                sinks: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                dropout_state: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor,
                                                                       torch.Tensor]:
    """out [B, Tq, Hq, Dv] (q's dtype), lse [B, Hq, Tq] float32. alignment: 0 unset,
    1 bottom-right, 2 top-left; empty_rows: 0 error, 1 zero, 2 nan; mask bool and bias float
    [B|1, Hq|1, Tq, Tk]; threads: the most threads attn uses (0 = its default); sinks float
    [Hq]: attention sinks (lse includes them; their gradient: torch.ops.attn.sinks_backward);
    dropout_p with dropout_state, int64 [seed, offset]: attention dropout (attn.dropout_mask
    gives its mask; the backward op takes the same two)."""
    _check((("q", q), ("k", k), ("v", v), ("mask", mask), ("bias", bias),
            ("alibi_slopes", alibi_slopes), ("sinks", sinks)), alignment, empty_rows)
    return _forward_kernel(q, k, v, mask, bias, alibi_slopes, causal, alignment, window,
                           window_left, window_right, scale, softcap, alibi, empty_rows,
                           threads, sinks, dropout_p, dropout_state)


_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}  # attn_dtype (include/attn.h)
_extension.set_torch(torch.Tensor, torch.float32, torch.bfloat16, torch.float16)
# PyTorch's OpenMP threads spin between its operators: on attn's own pool (below: when
# PyTorch's threads are not used) a helper would share a core with one of them, so a call
# takes a second thread only for about a millisecond of work per thread.
_extension.set_spinning_neighbours(True)


def _use_torch_threads() -> bool:
    """Runs attn's parallel regions on PyTorch's own OpenMP threads, which its operators keep
    awake, instead of a pool of attn's beside them (docs/python.md, "Threads"); attn's pool
    when PyTorch's intra-op backend is not OpenMP, when no OpenMP runtime PyTorch loaded is
    found, or with ATTN_TORCH_THREADS=own. Returns whether PyTorch's threads are in use."""
    if _os.environ.get("ATTN_TORCH_THREADS", "") == "own":
        return False
    if "OpenMP" not in torch.__config__.parallel_info():
        return False
    library = _os.path.join(_os.path.dirname(torch.__file__), "lib")
    for path in (_os.path.join(library, "libgomp.so.1"), _os.path.join(library, "libiomp5.so"),
                 "libgomp.so.1", "libiomp5.so", "libomp.so"):
        if _extension.use_openmp(path):
            return True
    return False


_TORCH_THREADS = _use_torch_threads()
_DEFAULT_RUN = (0, 0, 0)  # the execution tuple: default threads, no memory limit, AUTO kernels


@functools.lru_cache(maxsize=256)
def _scalar_options(same_length, causal, alignment, window, window_left, window_right, scale,
                    softcap, alibi, empty_rows):
    """The options tuple of a call whose options are all scalars (no mask, bias or slopes),
    built once per combination; only whether Tq == Tk matters of the sizes (the default
    alignment of windows and ALiBi)."""
    options, _, _ = _O.build(1, 1, 1, 1 if same_length else 2, mask=None, bias=None,
                             key_lengths=None, query_lengths=None,
                             **{name: value for name, value in _kwargs(
                                 causal, alignment, window, window_left, window_right, scale,
                                 softcap, alibi, None, empty_rows).items()
                                if name != "alibi_slopes"},
                             alibi_slopes=None)
    return options


def _descriptor(t):
    return (t.data_ptr(), _CODES[t.dtype], tuple(t.shape), t.stride())


def _scalar_forward(q, k, v, causal, alignment, window, window_left, window_right, scale,
                    softcap, alibi, empty_rows, threads=0, need_lse=True):
    """The forward kernel for plain CPU tensors of one float dtype and scalar options:
    descriptors made here, the options tuple from a cache, out (and lse unless need_lse is
    false, then None) allocated by torch."""
    B, Tq, Hq, _ = q.shape
    out = torch.empty((B, Tq, Hq, v.shape[3]), dtype=q.dtype)
    lse = torch.empty((B, Hq, Tq), dtype=torch.float32) if need_lse else None
    options = _scalar_options(Tq == k.shape[1], causal, alignment, window, window_left,
                              window_right, scale, softcap, alibi, empty_rows)
    if not _extension.forward_torch(q, k, v, out, lse, options, threads, 0):
        _extension.forward(_descriptor(q), _descriptor(k), _descriptor(v), _descriptor(out),
                           _descriptor(lse) if need_lse else None, options,
                           _DEFAULT_RUN if not threads else _O.execution(threads, None))
    return out, lse


def _untraced() -> bool:
    """Nothing traces or transforms the call (torch.compile, a dispatch mode, vmap): a plain
    call may then go straight to the extension."""
    return not (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0 or
                torch._C._are_functorch_transforms_active())


def _plain_heads_first(query, key, value, causal, scale, threads):
    """Inference attention of [B, H, T, D] q, k, v (Hugging Face's layout) into a new
    [B, Tq, Hq, Dv] output, bottom-right causal or not, no mask: the extension reads the
    tensors and makes the output itself (sdpa_torch). None when the call is not such a one
    (plain CPU tensors, nothing tracing): the caller then takes the general path."""
    if not _untraced():
        return None
    return _extension.sdpa_torch(query, key, value, 1 if causal else 0, scale, True, True,
                                 threads or 0)


def _plain_call(tensors) -> bool:
    """Whether the forward can run as a plain call of its kernel, without the dispatcher: no
    gradient to record, nothing tracing or transforming the call (torch.compile, fake tensors,
    vmap, a dispatch mode) and every tensor a plain CPU tensor. Inference then skips the custom
    op's dispatch and autograd wrappers, which cost more than a small attention call."""
    if not _untraced():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or not t.is_cpu or
                              (grad and t.requires_grad)):
            return False
    return True


@_forward_op.register_fake
def _forward_fake(q, k, v, mask, bias, alibi_slopes, causal, alignment, window, window_left,
                  window_right, scale, softcap, alibi, empty_rows, threads=0, sinks=None,
                  dropout_p=0.0, dropout_state=None):
    _check((("q", q), ("k", k), ("v", v), ("mask", mask), ("bias", bias),
            ("alibi_slopes", alibi_slopes), ("sinks", sinks)), alignment, empty_rows)
    B, Tq, Hq, _ = q.shape
    out = q.new_empty((B, Tq, Hq, v.shape[3]))
    lse = q.new_empty((B, Hq, Tq), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("attn::backward", mutates_args=(), device_types="cpu")
def _backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, dout: torch.Tensor, dlse: Optional[torch.Tensor],
                 mask: Optional[torch.Tensor],
                 bias: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor],
                 causal: bool, alignment: int, window: bool, window_left: int,
                 window_right: int, scale: Optional[float], softcap: float, alibi: bool,
                 empty_rows: int, threads: int = 0, dropout_p: float = 0.0,
                 dropout_state: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor,
                                                                        torch.Tensor,
                                                                        torch.Tensor,
                                                                        torch.Tensor]:
    """(dq, dk, dv, dbias), contiguous: dbias has bias's shape, or is an empty tensor without
    bias. dlse (optional) is the gradient of lse; threads, dropout_p and dropout_state as the
    forward's."""
    _check((("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("dout", dout),
            ("dlse", dlse), ("mask", mask), ("bias", bias), ("alibi_slopes", alibi_slopes)),
           alignment, empty_rows)
    g = _attn.backward(q, k, v, out, lse, dout, dlse=dlse, mask=mask, bias=bias,
                       threads=threads or None, **_dropout_kwargs(dropout_p, dropout_state),
                       **_kwargs(causal, alignment, window, window_left, window_right, scale,
                                 softcap, alibi, alibi_slopes, empty_rows))
    dbias = g.dbias if g.dbias is not None else q.new_empty((0,), dtype=torch.float32)
    # Contiguous, as the fake kernel declares (compiled graphs assert the strides): attn's
    # LSE-gradient path computes dv with one padding column and returns a view of it.
    return g.dq.contiguous(), g.dk.contiguous(), g.dv.contiguous(), dbias.contiguous()


@_backward_op.register_fake
def _backward_fake(q, k, v, out, lse, dout, dlse, mask, bias, alibi_slopes, causal, alignment,
                   window, window_left, window_right, scale, softcap, alibi, empty_rows,
                   threads=0, dropout_p=0.0, dropout_state=None):
    _check((("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("dout", dout),
            ("dlse", dlse), ("mask", mask), ("bias", bias), ("alibi_slopes", alibi_slopes)),
           alignment, empty_rows)
    dbias = bias.new_empty(bias.shape) if bias is not None else \
        q.new_empty((0,), dtype=torch.float32)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dbias


@torch.library.custom_op("attn::sinks_backward", mutates_args=(), device_types="cpu")
def _sinks_backward_op(out: torch.Tensor, lse: torch.Tensor, dout: torch.Tensor,
                       dlse: Optional[torch.Tensor], sinks: torch.Tensor) -> torch.Tensor:
    """The sinks' gradient, float32 [Hq]: -sum over b, i of e^(sinks[h] - lse) (D - dlse),
    D = rowsum(dout * out) (attn.sinks_backward)."""
    for name, t in (("out", out), ("lse", lse), ("dout", dout), ("dlse", dlse), ("sinks", sinks)):
        if t is not None and t.device.type != "cpu":
            raise ValueError(f"{name} is on device {t.device}: attn computes on the CPU")
    return _attn.sinks_backward(out, lse, dout, sinks, dlse=dlse).contiguous()


@_sinks_backward_op.register_fake
def _sinks_backward_fake(out, lse, dout, dlse, sinks):
    return sinks.new_empty(sinks.shape, dtype=torch.float32)


_CONFIG = ("causal", "alignment", "window", "window_left", "window_right", "scale", "softcap",
           "alibi", "empty_rows", "threads")


def _setup_context(ctx, inputs, output):
    q, k, v, mask, bias, alibi_slopes = inputs[:6]
    sinks = inputs[16] if len(inputs) > 16 else None
    ctx.dropout_p = inputs[17] if len(inputs) > 17 else 0.0
    dropout_state = inputs[18] if len(inputs) > 18 else None
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask, bias, alibi_slopes, sinks, dropout_state)
    ctx.config = inputs[6:16]                     # options and threads, as the op took them
    ctx.bias_shape = None if bias is None else bias.shape


def _backward(ctx, dout, dlse):
    q, k, v, out, lse, mask, bias, alibi_slopes, sinks, dropout_state = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv, dbias = torch.ops.attn.backward(q, k, v, out, lse, dout, dlse, mask, bias,
                                                alibi_slopes, *ctx.config, ctx.dropout_p,
                                                dropout_state)
    if bias is None or not ctx.needs_input_grad[4]:
        dbias = None
    dsinks = None
    if sinks is not None and ctx.needs_input_grad[16]:
        dsinks = torch.ops.attn.sinks_backward(out, lse, dout, dlse, sinks).to(sinks.dtype)
    return (dq, dk, dv, None, dbias, None, *([None] * len(_CONFIG)), dsinks, None, None)


torch.library.register_autograd("attn::forward", _backward, setup_context=_setup_context)


def attention(q, k, v, *, causal=None, window=None, mask=None, bias=None, scale=None,
              softcap=0.0, alibi=False, alibi_slopes=None, empty_rows="error", alignment=None,
              threads=None, sinks=None, dropout_p=0.0, dropout_seed=None):
    """Differentiable attn.forward on [B, T, H, D] torch tensors through the custom op:
    returns (out, lse). Masks and biases broadcast to [B, Hq, Tq, Tk] (bias gets a gradient).
    sinks: [Hq] attention sinks (gpt-oss's s_aux: per query head the logit of one more key
    column whose value is 0; they get a gradient, and lse includes them).
    dropout_p: attention dropout; its mask is drawn from torch's default generator (so
    torch.manual_seed reproduces it), or from dropout_seed when given (attn.dropout_mask(B,
    Hq, Tq, Tk, dropout_p, dropout_seed) is then the mask); the backward regenerates it.
    threads: the most threads attn uses, forward and backward (None = attn's default);
    results are bitwise the same for any count."""
    return _attention(q, k, v, causal, window, mask, bias, scale, softcap, alibi, alibi_slopes,
                      empty_rows, alignment, threads, True, sinks, dropout_p, dropout_seed)


def _dropout_state(dropout_p, dropout_seed):
    """(dropout_p as a float, the int64 tensor [seed, offset] or None) of a call: the seed
    drawn from torch's default generator unless given (taken modulo 2^64)."""
    p = _O.dropout(dropout_p, 0 if dropout_seed is None else dropout_seed, 0)[0]
    if not p:
        return 0.0, None
    if dropout_seed is None:
        seed = torch.randint(0, 2**62, (1,), dtype=torch.int64)
        return p, torch.cat((seed, torch.zeros(1, dtype=torch.int64)))
    seed = int(dropout_seed) % 2**64
    return p, torch.tensor([seed - 2**64 if seed >= 2**63 else seed, 0], dtype=torch.int64)


def _attention(q, k, v, causal, window, mask, bias, scale, softcap, alibi, alibi_slopes,
               empty_rows, alignment, threads, need_lse, sinks=None, dropout_p=0.0,
               dropout_seed=None):
    """attention(); need_lse false lets a plain inference call skip the LSE (then None)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be [B, T, H, D] (rank 4), got shape {tuple(t.shape)}")
    if sinks is not None:
        sinks = torch.as_tensor(sinks).reshape(-1)
        if sinks.dtype not in _FLOATS:
            sinks = sinks.float()
    _check((("q", q), ("k", k), ("v", v), ("mask", mask), ("bias", bias),
            ("alibi_slopes", alibi_slopes), ("sinks", sinks)), 0, 0)
    B, Tq, Hq, _ = q.shape
    Tk = k.shape[1]
    if q.numel() == 0 or k.numel() == 0 or v.numel() == 0:
        return _empty_attention(q, k, v)
    if causal not in (None, "bottom-right", "top-left"):
        raise ValueError(f"causal must be 'bottom-right', 'top-left' or None, got {causal!r}")
    align = _ALIGNMENT_CODES
    if alignment not in align:
        raise ValueError(f"alignment must be 'bottom-right', 'top-left' or None, got "
                         f"{alignment!r}")
    a = align[causal] if causal else align[alignment]
    if a == 0 and (window is not None or alibi or alibi_slopes is not None):
        if Tq != Tk:
            raise ValueError("window and ALiBi need an alignment when Tq != Tk: pass "
                             "alignment='bottom-right' or 'top-left'")
        a = 2
    if empty_rows not in ("error", "zero", "nan"):
        raise ValueError(f"empty_rows must be 'error', 'zero' or 'nan', got {empty_rows!r}")
    mask = _matrix(mask, "mask", B, Hq, Tq, Tk, torch.bool) if mask is not None else None
    bias = _matrix(bias, "bias", B, Hq, Tq, Tk, None) if bias is not None else None
    if alibi_slopes is not None:
        alibi_slopes = torch.as_tensor(alibi_slopes, dtype=torch.float32).reshape(-1)
        alibi = True
    wl, wr = (-1, -1) if window is None else (int(window[0]), int(window[1]))
    arguments = (q, k, v, mask, bias, alibi_slopes, causal is not None, a, window is not None,
                 wl, wr, None if scale is None else float(scale), float(softcap or 0),
                 bool(alibi), _EMPTY_ROW_CODES[empty_rows],
                 0 if threads is None else _O.execution(threads, None)[0])
    dropout_p, dropout_state = _dropout_state(dropout_p, dropout_seed)
    if _plain_call((q, k, v, mask, bias, alibi_slopes, sinks)):
        if mask is None and bias is None and alibi_slopes is None and sinks is None and \
                not dropout_p and not (q.is_neg() or k.is_neg() or v.is_neg()):
            return _scalar_forward(q, k, v, *arguments[6:], need_lse=need_lse)
        return _forward_kernel(*arguments, sinks, dropout_p, dropout_state)
    if dropout_p:
        return torch.ops.attn.forward(*arguments, sinks, dropout_p, dropout_state)
    if sinks is not None:
        return torch.ops.attn.forward(*arguments, sinks)
    return torch.ops.attn.forward(*arguments)


def _empty_attention(q, k, v):
    """PyTorch's answer for empty sizes: an empty output, or zeros when there are no keys
    (LSE -inf), connected to the inputs so that backward gives zero gradients."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be [B, T, H, D] (rank 4)")
    B, Tq, Hq, _ = q.shape
    link = (q.sum() + k.sum() + v.sum()) * 0
    out = q.new_zeros((B, Tq, Hq, v.shape[3])) + link.to(q.dtype)
    lse = q.new_full((B, Hq, Tq), float("-inf"), dtype=torch.float32)
    return out, lse


def _matrix(x, name, B, H, Tq, Tk, dtype):
    """x broadcast (as a view) to [B|1, H|1, Tq, Tk]: leading size-1 axes added, Tq and Tk
    expanded, B and H left at 1 when x has 1 there (so a bias gradient keeps its shape)."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    if dtype is not None and x.dtype != dtype:
        raise ValueError(f"{name} must be {dtype}, got {x.dtype}")
    if x.dim() > 4:
        raise ValueError(f"{name} must have rank <= 4, got shape {tuple(x.shape)}")
    x = x.reshape((1,) * (4 - x.dim()) + tuple(x.shape))
    target = [B, H, Tq, Tk]
    for d in range(4):
        if x.shape[d] not in (1, target[d]):
            raise ValueError(f"{name} of shape {tuple(x.shape)} does not broadcast to "
                             f"[B, H, Tq, Tk] = {target}")
    return x.expand(x.shape[0], x.shape[1], Tq, Tk)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature and semantics, computed by
    attn: query [..., Hq, Tq, E], key [..., Hkv, Tk, E], value [..., Hkv, Tk, Ev] of rank >= 2
    (rank 2: [T, E], one head; leading batch dims broadcast between query, key and value and
    are flattened into one for attn), top-left causal, attn_mask bool (True = attend) or float
    (added), broadcasting to [..., Hq, Tq, Tk]. Hq != Hkv needs enable_gqa=True. Rows that
    attend no key give 0. dropout_p > 0: attention dropout with a mask drawn from torch's
    default generator (attn.torch.attention's; torch's own SDPA draws another mask from the
    same generator, so the two agree in distribution, not element by element).

    float32, float16 and bfloat16 run on attn's kernels (fp32 accumulation). float64 inputs
    are computed in float64 by an explicit reference in torch operations (the probabilities
    materialised, differentiable by torch's autograd): exact to float64 rounding, so
    torch.autograd.gradcheck works, but not attn's speed or memory bound.

    The output's strides follow torch's CPU kernels: when query is dense with its last
    dimension innermost (e.g. a [B, T, H, D] buffer transposed to [B, H, T, D]), rank <= 4
    and Ev == E, the output has query's strides; otherwise it is contiguous."""
    if attn_mask is None and not dropout_p and _untraced():
        # The plain call: the extension reads the tensors, makes the output and builds the
        # options itself; None when the call needs the general path below.
        out = _extension.sdpa_torch(query, key, value, 2 if is_causal else 0, scale, enable_gqa,
                                    False, 0)
        if out is not None:
            return out
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: is_causal=True with an explicit "
                         "attn_mask is not allowed (as in PyTorch)")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    rank = query.dim()
    if rank < 2 or key.dim() != rank or value.dim() != rank:
        raise ValueError("attn.torch.scaled_dot_product_attention takes query/key/value of "
                         f"equal rank >= 2, got ranks {query.dim()}, {key.dim()}, "
                         f"{value.dim()}")
    original = query
    if rank == 2:                                       # [T, E]: one head
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    # Equal leading dims (the common [B, H, T, D] call) need no broadcast (torch's costs tens
    # of microseconds, more than a small attention call).
    lead = query.shape[:-3]
    if key.shape[:-3] != lead or value.shape[:-3] != lead:
        lead = torch.broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3])
    Hq, Tq = query.shape[-3], query.shape[-2]
    Hkv, Tk = key.shape[-3], key.shape[-2]
    if Hq != Hkv and not enable_gqa:
        raise ValueError(f"query has {Hq} heads and key {Hkv}: pass enable_gqa=True for "
                         "grouped-query attention")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key/value heads ({Hkv})")
    if len(lead) != 1:
        query, key, value = (_batch_flattened(t, lead) for t in (query, key, value))
    else:
        query, key, value = (_batch_flattened(t, lead) if t.shape[:-3] != lead else t
                             for t in (query, key, value))
    if attn_mask is not None:
        attn_mask = _mask_flattened(attn_mask, lead, Hq, Tq, Tk)
    mask = bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            mask = attn_mask
        else:
            bias = attn_mask
    if query.dtype == torch.float64:
        out = _float64_attention(query, key, value, mask, bias, is_causal, scale, dropout_p)
    else:
        out, _ = _attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                            "top-left" if is_causal else None, None, mask, bias, scale, 0.0,
                            False, None, "zero", None, None, False, None, dropout_p)
        out = out.transpose(1, 2)
    if rank == 2:
        out = out.reshape(original.shape[:-2] + out.shape[-2:])
    elif rank != 4:
        out = out.reshape(tuple(lead) + tuple(out.shape[1:]))
    return _strided_like_torch(out, original)


def _batch_flattened(t, lead):
    """t [..., H, T, D] with its leading dims broadcast to `lead` and flattened: [N, H, T, D]
    (a view where the layout allows, N = 1 without leading dims)."""
    if tuple(t.shape[:-3]) != tuple(lead):
        t = t.expand(tuple(lead) + tuple(t.shape[-3:]))
    return t.reshape((math.prod(lead),) + tuple(t.shape[-3:]))


def _mask_flattened(m, lead, Hq, Tq, Tk):
    """attn_mask broadcasting to [*lead, Hq, Tq, Tk] as [N|1, Hq|1, Tq|1, Tk|1] (rank <= 4
    as given when there is at most one leading dim; attention() checks the broadcast)."""
    if not isinstance(m, torch.Tensor):
        m = torch.as_tensor(m)
    if len(lead) <= 1 or m.dim() <= 3:
        return m
    full = tuple(lead) + (Hq, Tq, Tk)
    if m.dim() > len(full):
        raise ValueError(f"attn_mask of shape {tuple(m.shape)} has more dims than the "
                         f"inputs' {list(full)}")
    m = m.reshape((1,) * (len(full) - m.dim()) + tuple(m.shape))
    try:
        torch.broadcast_shapes(m.shape, full)
    except RuntimeError:
        raise ValueError(f"attn_mask of shape {tuple(m.shape)} does not broadcast to "
                         f"{list(full)}") from None
    if all(n == 1 for n in m.shape[:-3]):
        return m.reshape(m.shape[-4:])
    return m.expand(tuple(lead) + tuple(m.shape[-3:])).reshape(
        (math.prod(lead),) + tuple(m.shape[-3:]))


def _float64_attention(q, k, v, mask, bias, is_causal, scale, dropout_p=0.0):
    """SDPA in float64 by torch operations: q [N, Hq, Tq, E], k/v [N, Hkv, Tk, E|Ev],
    softmax(scale * q k^T + bias) v over the allowed keys (mask, top-left causal); a row
    with no allowed key gives 0, with zero gradients. dropout_p: attn's mask (drawn as
    attention's), applied to the probabilities."""
    for name, t in (("key", k), ("value", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name}.dtype = {t.dtype}: query is {q.dtype}; query, key and "
                             "value must have the same dtype")
    if q.device.type not in ("cpu", "meta"):
        raise ValueError(f"query is on device {q.device}: attn computes on the CPU")
    groups = q.shape[1] // k.shape[1]
    if groups != 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    factor = q.shape[-1] ** -0.5 if scale is None else float(scale)
    x = torch.matmul(q, k.transpose(-2, -1)) * factor
    if bias is not None:
        x = x + bias.to(x.dtype)
    Tq, Tk = x.shape[-2], x.shape[-1]
    if mask is not None:
        x = x.masked_fill(~mask, float("-inf"))
    if is_causal:
        later = torch.ones(Tq, Tk, dtype=torch.bool, device=x.device).triu(1)
        x = x.masked_fill(later, float("-inf"))
    live = (x > float("-inf")).any(dim=-1, keepdim=True)
    p = torch.softmax(torch.where(live, x, torch.zeros_like(x)), dim=-1) * live
    dropout_p, state = _dropout_state(dropout_p, None)
    if dropout_p:
        seed, _ = (int(x) for x in state.tolist())
        keep = _attn.dropout_mask(*p.shape, dropout_p, seed, like=p)
        p = p * keep / (1.0 - dropout_p)
    return torch.matmul(p, v)


def _strided_like_torch(out, query):
    """out with the strides torch's CPU SDPA gives for this query: query's strides when query
    is dense with a unit last stride, of rank <= 4 and of out's shape; contiguous otherwise
    (a copy only when the strides differ)."""
    if query.dim() <= 4 and out.shape == query.shape and _same_strides(out, query.stride()):
        return out  # out is dense, so a query with its strides is too: torch's choice
    target = None
    if query.dim() <= 4 and tuple(out.shape) == tuple(query.shape) and \
            _dense_innermost_last(query):
        target = tuple(query.stride())
    if target is None:
        return out.contiguous()
    if _same_strides(out, target):
        return out
    return torch.empty_like(query, dtype=out.dtype).copy_(out)


def _dense_innermost_last(t):
    """Whether t's elements fill its memory without gaps or overlaps, last dim innermost."""
    if t.shape[-1] != 1 and t.stride(-1) != 1:
        return False
    dims = [d for d in range(t.dim()) if t.shape[d] != 1]
    expected = 1
    for d in sorted(dims, key=lambda d: t.stride(d)):
        if t.stride(d) != expected:
            return False
        expected *= t.shape[d]
    return True


def _same_strides(t, strides):
    return all(t.stride(d) == strides[d] for d in range(t.dim()) if t.shape[d] != 1)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """flash-attn's flash_attn_func signature, computed by attn: q [B, Tq, Hq, D],
    k/v [B, Tk, Hkv, D] (GQA when Hq != Hkv), bottom-right causal, sliding window
    (left, right) with -1 = unbounded, soft-cap, ALiBi slopes [Hq] or [B, Hq] (equal rows).
    With return_attn_probs=True returns (out, softmax_lse [B, Hq, Tq], None): attn never
    materialises the probabilities. attn is deterministic whatever `deterministic` says.
    dropout_p > 0: attention dropout, its mask drawn from torch's default generator."""
    window = None
    if tuple(window_size) != (-1, -1):
        window = (int(window_size[0]), int(window_size[1]))
    if alibi_slopes is not None:
        alibi_slopes = torch.as_tensor(alibi_slopes)
        if alibi_slopes.dim() == 2:
            if not bool((alibi_slopes == alibi_slopes[:1]).all()):
                raise NotImplementedError("attn: per-batch ALiBi slopes are not supported "
                                          "(use one row of slopes for every batch)")
            alibi_slopes = alibi_slopes[0]
    out, lse = attention(q, k, v, causal="bottom-right" if causal else None, window=window,
                         alignment="bottom-right", scale=softmax_scale,
                         softcap=softcap, alibi_slopes=alibi_slopes, empty_rows="zero",
                         dropout_p=dropout_p)
    return (out, lse, None) if return_attn_probs else out


_FLASH_ATTN_NAMES = ("flash_attn_varlen_func", "flash_attn_with_kvcache",
                     "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
                     "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func")


def __getattr__(name):
    """flash-attn's other functions (attn.flash_attn), importable from attn.torch as well."""
    if name in _FLASH_ATTN_NAMES:
        from . import flash_attn
        return getattr(flash_attn, name)
    raise AttributeError(f"module 'attn.torch' has no attribute {name!r}")
