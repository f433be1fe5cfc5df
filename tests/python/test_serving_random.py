"""Random configurations of the serving calls, each against an independent float64 oracle: the
table test_serving.py spells out covers one option at a time; here a seeded generator draws
them together (GQA groups, odd head dims, Dv != Dk, windows, soft-cap, ALiBi, empty sequences,
Tq != Tk; paged or contiguous caches, pages of 1..16 slots in a shuffled pool, appends with
RoPE in either layout, every float dtype), so that the combinations are exercised too.
varlen_forward = reference.py per sequence; varlen_backward = PyTorch autograd of the dense
float64 attention; forward_with_kvcache = reference.py on the keys it appended (themselves
checked against RoPE in float64) and the cache's old contents."""
import math

import numpy as np
import pytest

import attn
from reference import reference, rope

torch = pytest.importorskip("torch")

SEEDS = range(20)


def _draw_varlen(rng):
    """One varlen configuration: lengths (some 0), heads, dims and options."""
    B = int(rng.integers(1, 5))
    Hkv = int(rng.choice([1, 2]))
    Hq = Hkv * int(rng.choice([1, 3, 4]))
    Dk = int(rng.choice([8, 24, 64]))
    Dv = int(rng.choice([Dk, 16]))
    lk = rng.integers(0, 50, size=B)
    lk[0] = max(lk[0], 1)                       # at least one key in the batch
    lq = lk.copy() if rng.integers(0, 3) == 0 else rng.integers(0, 40, size=B)
    lq[0] = max(lq[0], 1)                       # and one query
    window = None if rng.integers(0, 2) else (int(rng.integers(0, 20)), int(rng.choice([-1, 0, 5])))
    return dict(lq=lq, lk=lk, Hq=Hq, Hkv=Hkv, Dk=Dk, Dv=Dv, causal=bool(rng.integers(0, 2)),
                window=window, softcap=float(rng.choice([0.0, 3.0])),
                slopes=rng.uniform(0.01, 0.5, Hq).astype(np.float32) if rng.integers(0, 3) == 0 else None,
                scale=None if rng.integers(0, 2) else 0.25)


def _dense_torch(Q, K, V, c):
    """Sequence attention [Tq, Hq, Dv] in float64 torch (bottom-right, rows without keys 0)."""
    group = c["Hq"] // c["Hkv"]
    tq, tk = Q.shape[0], K.shape[0]
    scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(c["Dk"])
    s = torch.einsum("qhd,khd->hqk", Q, K.repeat_interleave(group, 1)) * scale
    if c["softcap"]:
        s = c["softcap"] * torch.tanh(s / c["softcap"])
    d = (torch.arange(tq)[:, None] + (tk - tq)) - torch.arange(tk)[None, :]
    if c["slopes"] is not None:
        s = s - torch.tensor(c["slopes"], dtype=torch.float64)[:, None, None] * d.abs()
    allowed = torch.ones(tq, tk, dtype=torch.bool)
    if c["causal"]:
        allowed &= d >= 0
    if c["window"] is not None:
        left, right = c["window"]
        if left >= 0:
            allowed &= d <= left
        if right >= 0:
            allowed &= -d <= right
    s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, V.repeat_interleave(group, 1))


@pytest.mark.parametrize("seed", SEEDS)
def test_varlen_random_configurations(seed):
    rng = np.random.default_rng(seed)
    c = _draw_varlen(rng)
    cu_q = np.concatenate([[0], np.cumsum(c["lq"])]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(c["lk"])]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], c["Hq"], c["Dk"])).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], c["Hkv"], c["Dk"])).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], c["Hkv"], c["Dv"])).astype(np.float32)
    dout = rng.standard_normal((cu_q[-1], c["Hq"], c["Dv"])).astype(np.float32)
    options = dict(causal=c["causal"], window=c["window"], softcap=c["softcap"],
                   alibi_slopes=c["slopes"], scale=c["scale"])
    sizes = (cu_q, cu_k, int(c["lq"].max()), int(c["lk"].max()))
    out, lse = attn.varlen_forward(q, k, v, *sizes, return_lse=True, **options)
    grads = attn.varlen_backward(q, k, v, out, lse, dout, *sizes, **options)
    Q, K, V = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    outs = []
    for b in range(len(c["lq"])):
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if c["lq"][b] == 0:
            continue
        if c["lk"][b] == 0:  # queries without keys: empty rows, O = 0 and LSE = -inf
            np.testing.assert_array_equal(out[rq], 0.0)
            assert np.all(np.isneginf(lse[:, rq]))
            continue
        expected, expected_lse = reference(
            q[None, rq], k[None, rk], v[None, rk], causal="bottom-right" if c["causal"] else None,
            alignment="bottom-right", window=c["window"], softcap=c["softcap"],
            alibi_slopes=c["slopes"], scale=c["scale"], empty_rows="zero")
        np.testing.assert_allclose(out[rq], expected[0], rtol=1e-5, atol=2e-5)
        np.testing.assert_allclose(lse[:, rq], expected_lse[0], rtol=1e-5, atol=2e-5)
        outs.append((rq, _dense_torch(Q[rq], K[rk], V[rk], c)))
    loss = sum((o * torch.tensor(dout[rq], dtype=torch.float64)).sum() for rq, o in outs)
    loss.backward()
    for got, want in ((grads.dq, Q.grad), (grads.dk, K.grad), (grads.dv, V.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


DTYPES = {"float32": (torch.float32, 2e-5), "float16": (torch.float16, 1e-2),
          "bfloat16": (torch.bfloat16, 4e-2)}


@pytest.mark.parametrize("seed", SEEDS)
def test_kvcache_random_configurations(seed):
    rng = np.random.default_rng(1000 + seed)
    B, Hkv = int(rng.integers(1, 4)), int(rng.choice([1, 2, 3]))
    Hq, D = Hkv * int(rng.choice([1, 2, 4, 5])), int(rng.choice([8, 16, 40, 72]))
    Tq = int(rng.choice([1, 2, 5, 17, 70]))
    Tnew = int(rng.choice([0, Tq]))
    causal = bool(rng.integers(0, 4) > 0)
    window = None if rng.integers(0, 3) else (int(rng.integers(0, 40)), int(rng.choice([-1, 0, 3])))
    softcap, scale = float(rng.choice([0.0, 5.0])), None if rng.integers(0, 2) else 0.3
    name = str(rng.choice(list(DTYPES)))
    dtype, tolerance = DTYPES[name]
    rotary = Tnew > 0 and bool(rng.integers(0, 2))
    interleaved = bool(rng.integers(0, 2))
    seqlens = rng.integers(Tq if Tnew == 0 else 0, 90, size=B).astype(np.int32)  # no empty rows
    capacity = int(seqlens.max()) + Tnew + int(rng.integers(0, 20))
    page = int(rng.choice([1, 4, 16])) if rng.integers(0, 2) else 0

    def draw(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype)

    q = draw(B, Tq, Hq, D)
    if page:
        per = -(-capacity // page)
        pool = B * per + int(rng.integers(0, 5))
        k_cache, v_cache = draw(pool, page, Hkv, D), draw(pool, page, Hkv, D)
        table = rng.permutation(pool)[:B * per].reshape(B, per).astype(np.int32)
    else:
        k_cache, v_cache, table = draw(B, capacity, Hkv, D), draw(B, capacity, Hkv, D), None
    k_new = draw(B, Tnew, Hkv, D) if Tnew else None
    v_new = draw(B, Tnew, Hkv, D) if Tnew else None
    cos = sin = None
    if rotary:
        angles = rng.uniform(0, 2 * np.pi, (capacity + 5, int(rng.choice([D // 2, D // 4]))))
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    out, lse = attn.forward_with_kvcache(
        q, k_cache, v_cache, torch.from_numpy(seqlens), k_new=k_new, v_new=v_new,
        block_table=None if table is None else torch.from_numpy(table),
        rotary_cos=None if cos is None else torch.from_numpy(cos),
        rotary_sin=None if sin is None else torch.from_numpy(sin),
        rotary_interleaved=interleaved, causal=causal, window=window, softcap=softcap,
        scale=scale, return_lse=True)
    for b in range(B):
        length = int(seqlens[b]) + Tnew
        slots = [(int(table[b, t // page]), t % page) if page else (b, t) for t in range(length)]
        K = np.stack([k_cache[s].float().numpy() for s in slots]).astype(np.float64)
        V = np.stack([v_cache[s].float().numpy() for s in slots]).astype(np.float64)
        qb = q[b].float().numpy()
        appended = np.arange(Tnew) + int(seqlens[b])
        if rotary:  # flash-attn: query i at cache_seqlens + i when causal or windowed
            positions = appended if causal or window is not None else np.full(Tq, seqlens[b])
            qb = rope(qb, cos, sin, positions, interleaved)
            want = rope(k_new[b].float().numpy(), cos, sin, appended, interleaved)
            np.testing.assert_allclose(K[seqlens[b]:], want, rtol=tolerance, atol=tolerance)
        elif Tnew:
            np.testing.assert_array_equal(K[seqlens[b]:], k_new[b].float().numpy())
        expected, expected_lse = reference(
            qb[None], K[None], V[None], causal="bottom-right" if causal else None,
            alignment="bottom-right", window=window, softcap=softcap, scale=scale,
            empty_rows="zero")
        np.testing.assert_allclose(out[b].float().numpy(), expected[0], rtol=tolerance,
                                   atol=tolerance)
        np.testing.assert_allclose(lse[b].numpy(), expected_lse[0], rtol=tolerance,
                                   atol=tolerance)
