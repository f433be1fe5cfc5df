"""attn.torch.scaled_dot_product_attention where torch's SDPA goes beyond rank 4 float32:
float64 (a float64 reference path: values as torch's, torch.autograd.gradcheck passes),
ranks 2 and >= 5 (leading batch dims broadcast and flattened), and output strides equal to
torch's for every query layout."""
import itertools

import pytest
import torch
import torch.nn.functional as F

import attn.torch as at


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def strides_of_real_dims(t):
    return tuple(s for s, n in zip(t.stride(), t.shape) if n != 1)


def assert_like_torch(got, want, tol):
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.is_contiguous() == want.is_contiguous()
    assert strides_of_real_dims(got) == strides_of_real_dims(want)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def _layouts(B, H, T, D, dtype):
    """Queries [B, H, T, D] in every memory order, and a sliced, an expanded one."""
    for perm in itertools.permutations(range(4)):
        base = randn(*[(B, H, T, D)[p] for p in perm], dtype=dtype)
        yield f"perm{perm}", base.permute([perm.index(i) for i in range(4)])
    yield "sliced", randn(B, H, T, 2 * D, dtype=dtype)[..., :D]
    yield "expanded", randn(B, 1, T, D, dtype=dtype).expand(B, H, T, D)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_strides_follow_torch_for_every_query_layout(dtype):
    B, H, T, D = 2, 3, 5, 8
    k, v = randn(B, H, T, D, dtype=dtype), randn(B, H, T, D, dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for name, q in _layouts(B, H, T, D, dtype):
        for kwargs in ({}, {"is_causal": True}):
            assert_like_torch(at.scaled_dot_product_attention(q, k, v, **kwargs),
                              F.scaled_dot_product_attention(q, k, v, **kwargs), tol)
    q = randn(B, T, H, D, dtype=dtype).transpose(1, 2)
    for args, kwargs in [((q, k, randn(B, H, T, 4, dtype=dtype)), {}),        # Ev != E
                         ((q, k[:, :1], v[:, :1]), {"enable_gqa": True}),
                         ((q[0], k[0], v[0]), {}),                           # rank 3
                         ((q, k, v), {"attn_mask": torch.rand(T, T) > 0.3})]:
        assert_like_torch(at.scaled_dot_product_attention(*args, **kwargs),
                          F.scaled_dot_product_attention(*args, **kwargs), tol)


@pytest.mark.parametrize("lead", [(), (3,), (2, 3), (2, 1, 2)])
def test_ranks_2_to_7_with_broadcast_leading_dims(lead):
    H, Tq, Tk, D = 4, 5, 6, 8
    q = randn(*lead, H, Tq, D).requires_grad_()
    k = randn(*lead[:-1], 1, H, Tk, D) if lead else randn(H, Tk, D)
    k.requires_grad_()
    v = randn(*lead, H, Tk, D).requires_grad_()
    mask = torch.rand(*lead[:-1], 1, 1, Tq, Tk) > 0.3 if lead else torch.rand(Tq, Tk) > 0.3
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    for kwargs in ({"is_causal": True}, {"attn_mask": mask},
                   {"attn_mask": randn(*mask.shape)}):
        got = at.scaled_dot_product_attention(q, k, v, **kwargs)
        want = F.scaled_dot_product_attention(*leaves, **kwargs)
        assert_like_torch(got, want, 1e-5)
        got.pow(2).sum().backward()
        want.pow(2).sum().backward()
        for a, b in zip((q, k, v), leaves):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
            a.grad = b.grad = None
    # Rank 2: [T, E], one head.
    q2, k2 = randn(Tq, D), randn(Tk, D)
    assert_like_torch(at.scaled_dot_product_attention(q2, k2, k2, is_causal=True),
                      F.scaled_dot_product_attention(q2, k2, k2, is_causal=True), 1e-5)


def test_float64_values_equal_torch_and_gradcheck_passes():
    torch.manual_seed(0)
    q = randn(2, 4, 3, 5, dtype=torch.float64).requires_grad_()
    k = randn(2, 2, 4, 5, dtype=torch.float64).requires_grad_()
    v = randn(2, 2, 4, 3, dtype=torch.float64).requires_grad_()
    mask = torch.rand(2, 1, 3, 4) > 0.3
    mask[0, 0, 1] = False                                # a row that attends no key
    bias = randn(1, 4, 3, 4, dtype=torch.float64).requires_grad_()
    cases = [dict(is_causal=True, enable_gqa=True), dict(attn_mask=mask, enable_gqa=True),
             dict(attn_mask=bias, enable_gqa=True, scale=0.7)]
    for kwargs in cases:
        got = at.scaled_dot_product_attention(q, k, v, **kwargs)
        want = F.scaled_dot_product_attention(q, k, v, **kwargs)
        assert got.dtype == torch.float64
        if "attn_mask" in kwargs and kwargs["attn_mask"].dtype == torch.bool:
            want = want.nan_to_num(0.0)                  # torch's empty rows: 0 or NaN
            assert float(got.detach()[0, :2, 1].abs().max()) == 0
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda a, b, c: at.scaled_dot_product_attention(a, b, c, is_causal=True,
                                                        enable_gqa=True), (q, k, v))
    assert torch.autograd.gradcheck(
        lambda a, b, c: at.scaled_dot_product_attention(a, b, c, attn_mask=mask,
                                                        enable_gqa=True), (q, k, v))
    assert torch.autograd.gradcheck(
        lambda a, b, c, m: at.scaled_dot_product_attention(a, b, c, attn_mask=m,
                                                           enable_gqa=True), (q, k, v, bias))
    q5 = randn(2, 1, 2, 3, 4, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a: at.scaled_dot_product_attention(a, a, a, is_causal=True), (q5,))


def test_refusals():
    q = randn(1, 2, 3, 8)
    with pytest.raises(ValueError, match="rank"):
        at.scaled_dot_product_attention(randn(8), randn(8), randn(8))
    with pytest.raises(ValueError, match="rank"):
        at.scaled_dot_product_attention(q, q[0], q)
    with pytest.raises(ValueError, match="same dtype"):
        at.scaled_dot_product_attention(q.double(), q.double(), q)
    with pytest.raises(ValueError, match="broadcast"):
        at.scaled_dot_product_attention(randn(2, 1, 2, 3, 8), randn(2, 1, 2, 3, 8),
                                        randn(2, 1, 2, 3, 8),
                                        attn_mask=torch.ones(3, 1, 1, 3, 3, dtype=torch.bool))
    with pytest.raises(RuntimeError):
        at.scaled_dot_product_attention(randn(2, 1, 2, 3, 8), randn(3, 1, 2, 3, 8),
                                        randn(3, 1, 2, 3, 8))
