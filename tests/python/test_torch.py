"""attn.torch: the custom ops (schema, fake kernels, autograd: torch.library.opcheck), and
the drop-ins against PyTorch itself: scaled_dot_product_attention against
torch.nn.functional.scaled_dot_product_attention (non-contiguous tensors, GQA, bool and
float masks of every broadcast shape, empty rows, gradients), flash_attn_func against SDPA
with the equivalent bottom-right mask."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attn.torch as at

torch.manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def non_contiguous(x):
    """The same values in a non-contiguous layout (stored [.., D, T] and transposed)."""
    return x.transpose(-1, -2).contiguous().transpose(-1, -2)


def test_opcheck_forward_and_backward():
    q, k, v = randn(2, 5, 4, 8), randn(2, 7, 2, 8), randn(2, 7, 2, 8)
    bias = randn(2, 1, 5, 7).requires_grad_()
    for args in [
        (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), None, None, None, True,
         1, False, -1, -1, None, 0.0, False, 1),
        (q, k, v, None, bias, None, False, 2, True, 3, 1, 0.5, 2.0, True, 0),
    ]:
        torch.library.opcheck(torch.ops.attn.forward.default, args)


@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("Tq,Tk", [(1, 1), (9, 9), (5, 17), (17, 5)])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_sdpa_matches_torch(Hq, Hkv, is_causal, Tq, Tk, layout):
    """The plain call (a contiguous query: the extension's fast path, sdpa_torch) and strided
    views (the general path) against torch, with a value dim that differs from the key's."""
    change = non_contiguous if layout == "strided" else (lambda x: x)
    q = change(randn(2, Hq, Tq, 16))
    k = change(randn(2, Hkv, Tk, 16))
    v = randn(2, Hkv, Tk, 8)[..., ::1]
    gqa = Hq != Hkv
    got = at.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=gqa)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=gqa)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-5)


MASK_SHAPES = [(7, 11), (1, 11), (7, 1), (2, 1, 1, 11), (1, 4, 7, 11), (4, 7, 11),
               (2, 4, 7, 11), (2, 1, 7, 11), (1, 1, 1, 1), (4, 1, 1)]


@pytest.mark.parametrize("shape", MASK_SHAPES, ids=[str(s) for s in MASK_SHAPES])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_masks_of_every_broadcast_shape(shape, kind):
    q, k, v = randn(2, 4, 7, 16), randn(2, 2, 11, 16), randn(2, 2, 11, 16)
    if kind == "bool":
        mask = torch.rand(shape) < 0.6
    else:
        mask = randn(*shape)
        mask = mask.masked_fill(torch.rand(shape) < 0.3, float("-inf"))
    if len(shape) == 4 and shape[0] == 2:
        mask[1] = False if kind == "bool" else float("-inf")   # a batch of empty rows
    got = at.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float"])
def test_sdpa_gradients_match_torch(kind):
    q, k, v = (non_contiguous(randn(2, 4, 9, 8)), randn(2, 2, 12, 8), randn(2, 2, 12, 8))
    mask, is_causal = None, kind == "causal"
    if kind == "bool":
        mask = torch.rand(2, 1, 9, 12) < 0.7
        mask[..., 0] = True
    if kind == "float":
        mask = randn(2, 1, 1, 12)
    grads = []
    for function in (at.scaled_dot_product_attention, F.scaled_dot_product_attention):
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        m = mask.detach().clone().requires_grad_() if kind == "float" else mask
        out = function(*leaves, attn_mask=m, is_causal=is_causal, enable_gqa=True)
        out.backward(torch.cos(out.detach()))
        grads.append([x.grad for x in leaves] + ([m.grad] if kind == "float" else []))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=5e-5)


def test_sdpa_rank3_bf16_scale_and_refusals():
    q, k, v = (randn(3, 6, 8, dtype=torch.bfloat16) for _ in range(3))
    got = at.scaled_dot_product_attention(q, k, v, scale=0.25)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.25)
    assert got.dtype == torch.bfloat16 and got.shape == (3, 6, 8)
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
    dropped = at.scaled_dot_product_attention(q, k, v, dropout_p=0.5, scale=0.25)
    assert dropped.shape == got.shape and not torch.equal(dropped, got)  # dropout applies
    with pytest.raises(ValueError):
        at.scaled_dot_product_attention(q, k, v, is_causal=True,
                                        attn_mask=torch.ones(6, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="enable_gqa"):
        at.scaled_dot_product_attention(randn(1, 4, 3, 8), randn(1, 2, 3, 8), randn(1, 2, 3, 8))


def bottom_right_mask(Tq, Tk, causal, window):
    d = (torch.arange(Tq)[:, None] + Tk - Tq) - torch.arange(Tk)[None, :]
    allowed = torch.ones(Tq, Tk, dtype=torch.bool)
    if causal:
        allowed &= d >= 0
    left, right = window
    if left >= 0:
        allowed &= d <= left
    if right >= 0:
        allowed &= -d <= right
    return allowed, d


@pytest.mark.parametrize("Tq,Tk", [(8, 8), (5, 19), (19, 5)])
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)),
                                           (False, (3, 2)), (True, (4, -1))])
@pytest.mark.parametrize("alibi", [False, True])
def test_flash_attn_func_matches_sdpa_with_its_mask(Tq, Tk, causal, window, alibi):
    B, Hq, Hkv = 2, 4, 2
    q, k, v = randn(B, Tq, Hq, 16), randn(B, Tk, Hkv, 16), randn(B, Tk, Hkv, 16)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625]) if alibi else None
    out, lse, probs = at.flash_attn_func(q, k, v, causal=causal, window_size=window,
                                         alibi_slopes=slopes, return_attn_probs=True)
    allowed, d = bottom_right_mask(Tq, Tk, causal, window)
    bias = torch.zeros(Tq, Tk).masked_fill(~allowed, float("-inf"))
    if alibi:
        bias = bias - slopes[:, None, None] * d.abs()
    want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                          v.transpose(1, 2), attn_mask=bias, enable_gqa=True)
    torch.testing.assert_close(out, want.transpose(1, 2), rtol=1e-4, atol=2e-5)
    assert lse.shape == (B, Hq, Tq) and probs is None


def test_flash_attn_func_softcap_gradients():
    q, k, v = (randn(1, 10, 2, 8).requires_grad_() for _ in range(3))
    out = at.flash_attn_func(q, k, v, softcap=1.5, causal=True, softmax_scale=0.5)
    out.sum().backward()
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    s = torch.einsum("bqhd,bkhd->bhqk", leaves[0], leaves[1]) * 0.5
    s = 1.5 * torch.tanh(s / 1.5)
    s = s.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
    want = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), leaves[2])
    want.sum().backward()
    torch.testing.assert_close(out, want, rtol=1e-4, atol=2e-5)
    for x, y in zip((q, k, v), leaves):
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-4, atol=5e-5)
    torch.manual_seed(9)
    dropped = at.flash_attn_func(q, k, v, dropout_p=0.5)
    torch.manual_seed(9)
    assert torch.equal(dropped, at.flash_attn_func(q, k, v, dropout_p=0.5))


def test_torch_compile_uses_the_fake_kernel():
    q, k, v = randn(1, 4, 6, 8), randn(1, 4, 6, 8), randn(1, 4, 6, 8)
    graph = torch.fx.experimental.proxy_tensor.make_fx(
        lambda a, b, c: at.scaled_dot_product_attention(a, b, c, is_causal=True),
        tracing_mode="fake")(q, k, v)
    assert "attn.forward" in str(graph.graph)
    torch.testing.assert_close(graph(q, k, v), F.scaled_dot_product_attention(
        q, k, v, is_causal=True), rtol=1e-4, atol=2e-5)


def test_torch_compile_fullgraph_forward_and_backward():
    function = torch.compile(
        lambda a, b, c: at.scaled_dot_product_attention(a, b, c, is_causal=True),
        backend="aot_eager", fullgraph=True)
    q = randn(1, 2, 8, 16).requires_grad_()
    out = function(q, q, q)
    out.sum().backward()
    leaf = q.detach().clone().requires_grad_()
    want = F.scaled_dot_product_attention(leaf, leaf, leaf, is_causal=True)
    want.sum().backward()
    torch.testing.assert_close(out, want, rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(q.grad, leaf.grad, rtol=1e-4, atol=5e-5)


@pytest.mark.parametrize("shapes", [((0, 2, 3, 8), (0, 2, 5, 8)), ((1, 2, 0, 8), (1, 2, 5, 8)),
                                    ((1, 2, 3, 8), (1, 2, 0, 8))])
def test_sdpa_empty_sizes_as_torch(shapes):
    q = randn(*shapes[0]).requires_grad_()
    k = randn(*shapes[1]).requires_grad_()
    got = at.scaled_dot_product_attention(q, k, k)
    want = F.scaled_dot_product_attention(q, k, k)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)
    got.sum().backward()
    assert q.grad is not None and float(q.grad.abs().sum()) == 0
