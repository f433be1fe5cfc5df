"""attn.forward against the float64 reference over the configurations of the C tests
(tests/test_forward_configs.c): T=1, Tq != Tk, odd D, GQA/MQA, causal in both alignments,
windows, masks, biases, lengths, ALiBi, soft-cap; each in several memory layouts (C order,
[B, H, T, D] views, padded rows, reversed T, torch tensors)."""
import numpy as np
import pytest
import torch

import attn
from reference import alibi_slopes, reference

BR, TL = "bottom-right", "top-left"
CASES = [  # name, B, Tq, Tk, Hq, Hkv, Dk, Dv, options
    ("T=1", 1, 1, 1, 1, 1, 8, 8, {}),
    ("T=2 D=3", 1, 2, 2, 1, 1, 3, 3, {}),
    ("T=7", 2, 7, 7, 2, 2, 31, 31, {}),
    ("T=63", 1, 63, 63, 2, 1, 16, 16, {}),
    ("T=65 GQA", 2, 65, 65, 6, 2, 32, 32, {}),
    ("T=257 MQA", 1, 257, 257, 4, 1, 16, 24, {}),
    ("Tq<Tk Dk!=Dv", 2, 5, 70, 2, 2, 96, 40, {}),
    ("Tq>Tk", 1, 70, 9, 3, 1, 160, 7, {}),
    ("D=3 Dv=1", 3, 33, 17, 2, 1, 3, 1, {}),
    ("custom scale", 1, 20, 20, 1, 1, 8, 8, {"scale": 0.7}),
    ("causal BR square", 2, 65, 65, 4, 2, 16, 16, {"causal": BR}),
    ("causal BR Tq<Tk", 1, 30, 100, 2, 1, 16, 16, {"causal": BR}),
    ("causal BR Tq>Tk", 1, 100, 30, 2, 2, 16, 16, {"causal": BR, "empty_rows": "zero"}),
    ("causal TL Tq<Tk", 1, 30, 100, 2, 2, 16, 16, {"causal": TL}),
    ("causal TL Tq>Tk", 1, 100, 30, 1, 1, 16, 16, {"causal": TL}),
    ("window 8,0", 1, 257, 257, 2, 1, 16, 16, {"window": (8, 0), "alignment": BR}),
    ("window 20,5 TL", 1, 90, 120, 1, 1, 16, 16, {"window": (20, 5), "alignment": TL}),
    ("window -1,3 causal", 1, 70, 70, 1, 1, 16, 16, {"window": (-1, 3), "causal": BR}),
    ("window 0,0", 1, 40, 50, 1, 1, 8, 8, {"window": (0, 0), "alignment": BR}),
    ("bool mask", 2, 65, 70, 4, 2, 16, 16, {"mask": "full"}),
    ("bool mask broadcast", 2, 33, 33, 2, 1, 16, 16, {"mask": "broadcast"}),
    ("bias", 2, 40, 66, 2, 2, 16, 16, {"bias": "full"}),
    ("bias broadcast causal", 1, 66, 66, 3, 1, 16, 16, {"bias": "broadcast", "causal": TL}),
    ("lengths", 4, 37, 70, 2, 1, 16, 16, {"lengths": True}),
    ("lengths causal BR", 4, 70, 70, 2, 2, 16, 16, {"lengths": True, "causal": BR}),
    ("alibi", 1, 70, 70, 8, 2, 16, 16, {"alibi": True, "causal": BR}),
    ("alibi custom TL", 1, 40, 60, 3, 3, 16, 16, {"alibi_slopes": [0.5, 0.25, 0.1],
                                                    "alignment": TL}),
    ("softcap", 1, 70, 70, 2, 1, 16, 16, {"softcap": 5.0, "stddev": 2.0}),
    ("softcap causal alibi", 1, 70, 70, 2, 1, 16, 16, {"softcap": 3.0, "alibi": True,
                                                       "causal": BR}),
    ("softcap bias mask", 2, 30, 40, 2, 2, 16, 16, {"softcap": 2.0, "bias": "broadcast",
                                                    "mask": "full"}),
    ("combined", 3, 67, 75, 4, 2, 24, 20, {"causal": BR, "window": (30, -1),
                                           "mask": "broadcast", "bias": "full",
                                           "lengths": True, "alibi": True, "softcap": 4.0}),
]
LAYOUTS = ["contiguous", "bhtd", "padded", "reversed", "torch", "torch-bhtd"]


def make_case(rng, case):
    name, B, Tq, Tk, Hq, Hkv, Dk, Dv, o = case
    o = dict(o)
    sd = o.pop("stddev", 1.0)
    q = (rng.standard_normal((B, Tq, Hq, Dk)) * sd).astype(np.float32)
    k = (rng.standard_normal((B, Tk, Hkv, Dk)) * sd).astype(np.float32)
    v = rng.standard_normal((B, Tk, Hkv, Dv)).astype(np.float32)
    kwargs, ref = {}, {}
    for key, value in o.items():
        if key == "mask":
            shape = (B, Hq, Tq, Tk) if value == "full" else (1, 1, Tq, Tk)
            m = rng.random(shape) < 0.7
            m[..., 0] = True          # no empty rows
            kwargs["mask"] = ref["mask"] = m
        elif key == "bias":
            shape = (B, Hq, Tq, Tk) if value == "full" else (Tq, Tk)
            kwargs["bias"] = ref["bias"] = rng.standard_normal(shape).astype(np.float32)
        elif key == "lengths":
            kl = rng.integers(Tk // 2, Tk + 1, size=B)
            ql = rng.integers(1, Tq + 1, size=B)
            if o.get("causal") == BR:
                ql = np.minimum(ql, kl)   # bottom-right: every valid row sees a key
            kwargs["key_lengths"], kwargs["query_lengths"] = kl, ql
            ref["key_lengths"], ref["query_lengths"] = kl, ql
        elif key == "alibi":
            kwargs["alibi"] = True
            ref["alibi_slopes"] = alibi_slopes(Hq)
        elif key == "alibi_slopes":
            kwargs["alibi_slopes"] = ref["alibi_slopes"] = np.array(value, np.float32)
        else:
            kwargs[key] = ref[key] = value
    if "mask" in kwargs and "lengths" in o:
        kwargs["empty_rows"] = ref["empty_rows"] = "zero"
    return q, k, v, kwargs, ref


def in_layout(x, layout, rng):
    """The same values as x [B, T, H, D] in another memory layout (a strided view)."""
    if layout == "contiguous":
        return x
    if layout == "bhtd":
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    if layout == "padded":
        big = rng.standard_normal(x.shape[:3] + (x.shape[3] + 5,)).astype(np.float32)
        big[..., 2:2 + x.shape[3]] = x
        return big[..., 2:2 + x.shape[3]]
    if layout == "reversed":
        return np.ascontiguousarray(x[:, ::-1])[:, ::-1]
    if layout == "torch":
        return torch.from_numpy(x.copy())
    if layout == "torch-bhtd":
        return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 2, 1, 3))).transpose(1, 2)
    raise AssertionError(layout)


def to_numpy(x):
    return x.numpy() if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward_matches_reference(case, layout, rng):
    q, k, v, kwargs, ref = make_case(rng, case)
    expected, expected_lse = reference(q, k, v, **ref)
    args = [in_layout(x, layout, rng) for x in (q, k, v)]
    out, lse = attn.forward(*args, return_lse=True, **kwargs)
    assert type(out) is type(args[0]) and out.dtype == args[0].dtype
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(to_numpy(lse), expected_lse, rtol=1e-5, atol=2e-5)


def test_alibi_slopes_match_the_paper():
    for n in (1, 2, 3, 5, 8, 12, 16):
        np.testing.assert_allclose(attn.alibi_slopes(n), alibi_slopes(n), rtol=1e-6)


@pytest.mark.parametrize("policy", ["zero", "nan", "error"])
def test_empty_rows(policy, rng):
    q = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    k = rng.standard_normal((1, 6, 2, 8)).astype(np.float32)
    v = rng.standard_normal((1, 6, 2, 8)).astype(np.float32)
    mask = np.ones((1, 2, 4, 6), dtype=bool)
    mask[0, 1, 2, :] = False
    if policy == "error":
        with pytest.raises(ValueError, match="empty"):
            attn.forward(q, k, v, mask=mask)
        return
    out, lse = attn.forward(q, k, v, mask=mask, empty_rows=policy, return_lse=True)
    expected, expected_lse = reference(q, k, v, mask=mask, empty_rows=policy)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-5, atol=2e-5)
    row = out[0, 2, 1]
    assert np.all(row == 0) if policy == "zero" else np.all(np.isnan(row))


def test_out_argument_and_threads(rng):
    q = rng.standard_normal((2, 33, 4, 16)).astype(np.float32)
    k = rng.standard_normal((2, 40, 2, 16)).astype(np.float32)
    v = rng.standard_normal((2, 40, 2, 8)).astype(np.float32)
    out = np.zeros((2, 33, 4, 8), np.float32)
    result = attn.forward(q, k, v, causal=TL, out=out, threads=1)
    assert result is out
    # Bitwise identical for any thread count.
    for threads in (2, 3):
        np.testing.assert_array_equal(attn.forward(q, k, v, causal=TL, threads=threads), out)
    np.testing.assert_allclose(out, reference(q, k, v, causal=TL)[0], rtol=1e-4, atol=2e-5)


def test_mask_broadcast_shapes(rng):
    B, Tq, Tk, H = 2, 9, 11, 3
    q = rng.standard_normal((B, Tq, H, 8)).astype(np.float32)
    k = rng.standard_normal((B, Tk, H, 8)).astype(np.float32)
    v = rng.standard_normal((B, Tk, H, 8)).astype(np.float32)
    for shape in [(Tk,), (Tq, Tk), (1, Tk), (Tq, 1), (B, 1, 1, Tk), (1, H, Tq, Tk), (H, 1, Tk),
                  (B, H, Tq, Tk), (B, 1, Tq, 1)]:
        mask = rng.random(shape) < 0.6
        mask[..., :1] = True
        bias = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(attn.forward(q, k, v, mask=mask, bias=bias),
                                   reference(q, k, v, mask=mask, bias=bias)[0],
                                   rtol=1e-4, atol=2e-5, err_msg=str(shape))


def test_every_kernel_family_matches_the_reference(rng):
    families = attn.kernels()
    assert "generic" in families
    q, k, v, kwargs, ref = make_case(rng, CASES[-1])          # "combined"
    expected, _ = reference(q, k, v, **ref)
    for family in families + ["auto"]:
        out = attn.forward(q, k, v, kernel=family, **kwargs)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=2e-5, err_msg=family)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_return_probabilities_are_the_weights_of_out(kind):
    """attn.forward(..., return_probabilities=True): P [B, Hq, Tq, Tk] equal to the softmax
    in float64 (GQA, bottom-right causal, a mask with an empty row, soft-cap), exactly 0
    where a pair is not allowed, out = P v; with dropout P holds the mask and its scale."""
    rng = np.random.default_rng(21)
    q = rng.standard_normal((2, 5, 4, 8), dtype=np.float32)
    k = rng.standard_normal((2, 9, 2, 8), dtype=np.float32)
    v = rng.standard_normal((2, 9, 2, 8), dtype=np.float32)
    mask = rng.random((2, 1, 5, 9)) > 0.3
    mask[1, 0, 2] = False                                    # an empty row
    x = np.einsum("bihd,bjhd->bhij", q, np.repeat(k, 2, axis=2)).astype(np.float64) / 8 ** 0.5
    x = 5.0 * np.tanh(x / 5.0)
    allowed = mask & np.tril(np.ones((5, 9), bool), 4)
    x = np.where(allowed, x, -np.inf)
    top = np.max(x, -1, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(top), top, 0))
    want = e / np.maximum(e.sum(-1, keepdims=True), 1e-300)
    arrays = (q, k, v) if kind == "numpy" else tuple(torch.from_numpy(a) for a in (q, k, v))
    m = mask if kind == "numpy" else torch.from_numpy(mask)
    out, lse, p = attn.forward(*arrays, causal="bottom-right", mask=m, softcap=5.0,
                               empty_rows="zero", return_lse=True, return_probabilities=True)
    p = np.asarray(p)
    assert p.shape == (2, 4, 5, 9) and p.dtype == np.float32
    np.testing.assert_allclose(p, want, rtol=1e-5, atol=1e-6)
    assert (p[~np.broadcast_to(allowed, p.shape)] == 0).all()
    np.testing.assert_allclose(np.asarray(out), np.einsum("bhij,bjhd->bihd", p,
                                                          np.repeat(v, 2, axis=2)),
                               rtol=1e-5, atol=1e-6)
    out, p = attn.forward(*arrays, causal="bottom-right", mask=m, softcap=5.0,
                          empty_rows="zero", dropout_p=0.4, dropout_seed=3,
                          return_probabilities=True)
    keep = attn.dropout_mask(2, 4, 5, 9, 0.4, 3)
    np.testing.assert_allclose(np.asarray(p), want * keep / np.float32(0.6), rtol=1e-5,
                               atol=1e-6)
