"""attn.hf — attn as a Hugging Face transformers attention implementation.

    import attn.hf
    attn.hf.register()
    model = AutoModel.from_pretrained(path, attn_implementation="attn")

register() adds "attn" to transformers' AttentionInterface (the attention function every
layer calls) and to AttentionMaskInterface (so layers receive boolean masks, built as for
"sdpa": padding, causal and sliding-window masks included). Every attention layer then runs
through attn.torch's custom op, gradients included.
"""
from __future__ import annotations

import torch

from . import torch as _attn_torch

__all__ = ["register", "attention_forward"]


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, position_bias=None, **kwargs):
    """transformers' attention-function protocol: query [B, Hq, Tq, D], key/value
    [B, Hkv, Tk, D] -> (output [B, Tq, Hq, Dv], None). attention_mask: None, bool
    (True = attend) or additive float, broadcasting to [B, Hq, Tq, Tk]."""
    if dropout:
        raise NotImplementedError("attn: attention dropout is not supported (attn is exact "
                                  "attention); call model.eval() or set the dropout to 0")
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError("attn: attention sinks (s_aux) are not supported")
    if kwargs.get("output_attentions"):
        raise NotImplementedError("attn: output_attentions=True is not supported; use "
                                  "attn_implementation='eager' for attention weights")
    softcap = kwargs.get("softcap") or 0.0
    q_length = query.shape[2]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    # As transformers' sdpa path: causality comes from the mask when there is one.
    is_causal = bool(q_length > 1 and attention_mask is None and is_causal)
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
    out, _ = _attn_torch.attention(query.transpose(1, 2), key.transpose(1, 2),
                                   value.transpose(1, 2),
                                   causal="bottom-right" if is_causal else None, mask=mask,
                                   bias=bias, scale=scaling, softcap=softcap,
                                   empty_rows="zero")
    return out, None


def register(name: str = "attn") -> None:
    """Registers attn under `name` in transformers' attention and mask interfaces."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
