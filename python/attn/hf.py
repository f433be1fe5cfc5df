"""attn.hf — attn as a Hugging Face transformers attention implementation.

    import attn.hf
    attn.hf.register()
    model = AutoModel.from_pretrained(path, attn_implementation="attn")

register() adds "attn" to transformers' AttentionInterface (the attention function every
layer calls) and to AttentionMaskInterface (so layers receive boolean masks, built as for
"sdpa": padding, causal and sliding-window masks included). Every attention layer then runs
through attn.torch's custom op, gradients included. register(threads=N) bounds attn's
threads in those calls; output_attentions=True returns the attention probabilities
(probabilities()). generate_batch(model, inputs, ...) runs transformers' continuous batching
(model.generate_batch) with attn computing every layer's attention over the packed batch.
"""
from __future__ import annotations

from typing import Optional

import torch

import attn as _attn

from . import _options as _O
from . import torch as _attn_torch

__all__ = ["register", "attention_forward", "probabilities", "generate_batch",
           "continuous_batching_forward"]

# The name continuous batching runs attn under. transformers' continuous batching accepts
# "sdpa", "paged|eager" or a flash implementation, and only a flash one receives the batch as
# packed sequences (cu_seq_lens_q / cu_seq_lens_k) without a dense mask: hence "flash" in it.
CONTINUOUS_BATCHING_NAME = "attn_flash_varlen"


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, position_bias=None, threads=None, **kwargs):
    """transformers' attention-function protocol: query [B, Hq, Tq, D], key/value
    [B, Hkv, Tk, D] -> (output [B, Tq, Hq, Dv], weights). attention_mask: None, bool
    (True = attend) or additive float, broadcasting to [B, Hq, Tq, Tk]. weights is None,
    or, when the caller asks for attention weights (output_attentions=True), the
    probabilities [B, Hq, Tq, Tk] in query's dtype (see probabilities(); rows that attend
    no key are 0, where eager's additive-minimum masks give a uniform row). threads: the most
    threads attn uses for this call, forward and backward (None = attn's default; see
    register(threads=...)). s_aux (gpt-oss): the layer's attention sinks, one logit per query
    head (attn.torch.attention's sinks, with their gradient). dropout: the layer's attention
    dropout (transformers passes it in training only), a mask drawn from torch's default
    generator; weights then are the dropped, rescaled probabilities, as eager's."""
    sinks = kwargs.get("s_aux")  # gpt-oss's learned attention sinks, [Hq]
    softcap = kwargs.get("softcap") or 0.0
    q_length = query.shape[2]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    # As transformers' sdpa path: causality comes from the mask when there is one.
    is_causal = bool(q_length > 1 and attention_mask is None and is_causal)
    wants_weights = _weights_requested(kwargs)
    if attention_mask is None and position_bias is None and sinks is None and not softcap \
            and not dropout and not kwargs.get("sliding_window") and not wants_weights:
        # The common inference call (a decode step, an unpadded prompt): straight to attn.
        out = _attn_torch._plain_heads_first(query, key, value, is_causal, scaling, threads)
        if out is not None:
            return out, None
    mask = bias = None
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            mask = attention_mask
        else:
            bias = attention_mask
    if position_bias is not None:
        bias = position_bias if bias is None else bias + position_bias
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))
            mask = None
    # A sliding-window layer (sliding_window W: a query sees the keys at most W - 1 positions
    # back, transformers' sliding_window_overlay) passes its window too: its mask holds the
    # same band, and the window lets attn skip the tiles outside it. The newest queries sit
    # at the end of the keys (bottom-right), a cropped sliding cache included.
    window = (int(kwargs["sliding_window"]) - 1, 0) if kwargs.get("sliding_window") else None
    seed = int(torch.randint(0, 2**62, (1,))) if dropout and wants_weights else None
    out, lse = _attn_torch.attention(query.transpose(1, 2), key.transpose(1, 2),
                                     value.transpose(1, 2),
                                     causal="bottom-right" if is_causal else None, mask=mask,
                                     bias=bias, scale=scaling, softcap=softcap,
                                     empty_rows="zero", threads=threads, sinks=sinks,
                                     window=window,
                                     alignment=None if is_causal else "bottom-right",
                                     dropout_p=dropout, dropout_seed=seed)
    weights = None
    if wants_weights:
        weights = probabilities(query, key, lse, mask=mask, bias=bias, scale=scaling,
                                softcap=softcap, causal=is_causal)
        if dropout:
            keep = _attn.dropout_mask(*weights.shape, dropout, seed, like=weights)
            weights = weights * keep / (1.0 - dropout)
        weights = weights.to(query.dtype)
    return out, weights


def _weights_requested(kwargs) -> bool:
    """Whether the caller asked for the attention probabilities: output_attentions=True among
    the layer's keyword arguments, or transformers' output collector gathering "attentions"
    (output_attentions from the call or the config, through its forward hooks)."""
    if kwargs.get("output_attentions"):
        return True
    if _ACTIVE_COLLECTOR is None:
        return False
    collected = _ACTIVE_COLLECTOR.get()
    return bool(collected) and ("attentions" in collected or "cross_attentions" in collected)


try:  # transformers' collector of layer outputs (output_attentions through forward hooks)
    from transformers.utils.output_capturing import _active_collector as _ACTIVE_COLLECTOR
except ImportError:
    _ACTIVE_COLLECTOR = None


def probabilities(query, key, lse, *, mask=None, bias=None, scale=None, softcap=0.0,
                  causal=False):
    """The attention probabilities P [B, Hq, Tq, Tk] (float32) of the call attn computed:
    query [B, Hq, Tq, D], key [B, Hkv, Tk, D] (Hq a multiple of Hkv), lse [B, Hq, Tq] the
    LSE attn returned for it, and the same options (mask bool, True = attend; bias additive;
    scale, default 1/sqrt(D); softcap c > 0 on the scaled logit, before the bias; causal
    bottom-right). P = exp(x - lse) with x = softcap(scale * q.k) + bias, computed in float32,
    exactly 0 where the mask, the causal limit or a bias of -inf forbids the pair and in rows
    that attend no key (lse = -inf). Differentiable through q, k, the bias and lse."""
    B, Hq, Tq, D = query.shape
    Hkv, Tk = key.shape[1], key.shape[2]
    k = key.float()
    if Hkv != Hq:
        k = k.repeat_interleave(Hq // Hkv, dim=1)
    x = torch.matmul(query.float(), k.transpose(2, 3)) * (D ** -0.5 if scale is None
                                                          else float(scale))
    if softcap:
        x = torch.tanh(x / softcap) * softcap
    if bias is not None:
        x = x + bias.float()
    allowed = torch.ones((), dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if causal:
        rows = torch.arange(Tq).unsqueeze(1) + (Tk - Tq)
        allowed = allowed & (torch.arange(Tk).unsqueeze(0) <= rows)
    # Forbidden logits become -inf before exp (no overflow, and zero gradients there).
    x = x.masked_fill(~allowed, float("-inf"))
    lse = lse.unsqueeze(-1)
    finite = torch.isfinite(lse)
    p = torch.exp(x - torch.where(finite, lse, torch.zeros_like(lse)))
    return torch.where(finite, p, torch.zeros_like(p))


def continuous_batching_forward(module, query, key, value, attention_mask, dropout=0.0,
                                scaling=None, sliding_window=None, softcap=None, is_causal=None,
                                threads=None, **kwargs):
    """transformers' attention-function protocol for continuous batching: query
    [1, Hq, total_q, D] and key/value [1, Hkv, total_k, D] hold the batch's sequences packed,
    cu_seq_lens_q / cu_seq_lens_k (int32 [n + 1]) and max_length_q / max_length_k delimit
    them; each sequence's queries are its newest tokens (bottom-right causal). Returns
    (output [1, total_q, Hq, Dv], None), computed by torch.ops.attn.varlen_forward (autograd
    and dropout as attn.flash_attn.flash_attn_varlen_func's)."""
    from . import flash_attn  # noqa: F401  (defines torch.ops.attn.varlen_forward)
    if kwargs.get("block_table") is not None:
        raise NotImplementedError("attn: continuous batching with a kernel block table (the "
                                  "CUDA decode fast path) is not supported; attn reads the "
                                  "packed key/value states")
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError("attn: attention sinks under continuous batching are not "
                                  "supported (use generate)")
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    left = int(sliding_window) - 1 if sliding_window else -1
    cu_q, cu_k = kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"]
    if not dropout and _attn_torch._plain_call((query, key, value)):
        # Inference: the varlen call itself, without the custom op's dispatch.
        from . import serving
        out = serving.varlen_forward(
            query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1), cu_q,
            cu_k, int(kwargs["max_length_q"]), int(kwargs["max_length_k"]), causal=bool(causal),
            window=(left, 0 if sliding_window else -1), softcap=softcap or 0.0,
            scale=scaling, threads=threads)
        return out.unsqueeze(0), None
    dropout_p, dropout_state = _attn_torch._dropout_state(dropout, None)
    out, _ = torch.ops.attn.varlen_forward(
        query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),
        kwargs["cu_seq_lens_q"].to(torch.int32), kwargs["cu_seq_lens_k"].to(torch.int32),
        int(kwargs["max_length_q"]), int(kwargs["max_length_k"]), bool(causal), left,
        0 if sliding_window else -1, None if scaling is None else float(scaling),
        float(softcap or 0.0), None, 0 if threads is None else int(threads), dropout_p,
        dropout_state)
    return out.unsqueeze(0), None


def generate_batch(model, inputs, *, threads: Optional[int] = None, **kwargs):
    """model.generate_batch(inputs, **kwargs) (transformers' continuous batching) with attn
    computing the attention of every layer (continuous_batching_forward): the same requests,
    scheduling and outputs, the model's own attention implementation back afterwards.
    threads: the most threads attn uses per call (None = attn's default)."""
    from transformers import AttentionInterface

    count = None if threads is None else _O.execution(threads, None)[0]

    def function(module, query, key, value, attention_mask, **arguments):
        if count is not None:
            arguments.setdefault("threads", count)
        return continuous_batching_forward(module, query, key, value, attention_mask,
                                           **arguments)
    AttentionInterface.register(CONTINUOUS_BATCHING_NAME, function)
    config = model.config
    saved = config._attn_implementation
    # Set on the config directly: set_attn_implementation would look a flash name up as a
    # kernel from the Hub.
    config._attn_implementation = CONTINUOUS_BATCHING_NAME
    try:
        return model.generate_batch(inputs, **kwargs)
    finally:
        config._attn_implementation = saved


def register(name: str = "attn", threads: Optional[int] = None) -> None:
    """Registers attn under `name` in transformers' attention and mask interfaces. threads:
    the most threads attn uses in every attention call of models with
    attn_implementation=name, forward and backward (None = attn's default: OMP_NUM_THREADS,
    else every CPU; results are bitwise the same for any count). Registering again under the
    same name replaces the setting; different names can carry different counts."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if threads is None:
        function = attention_forward
    else:
        count = _O.execution(threads, None)[0]      # checked here: 1..ATTN_MAX_THREADS

        def function(module, query, key, value, attention_mask, **kwargs):
            kwargs.setdefault("threads", count)
            return attention_forward(module, query, key, value, attention_mask, **kwargs)
    AttentionInterface.register(name, function)
    AttentionMaskInterface.register(name, sdpa_mask)
