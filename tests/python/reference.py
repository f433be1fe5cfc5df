"""The tests' oracle: attention written out densely in float64 NumPy, independently of attn.

reference(q, k, v, ...) follows the logit order of include/attn.h: scale * q.k, soft-cap,
+ bias + ALiBi, then -inf where not allowed (causal, window, mask, lengths); padded query
rows (i >= query_lengths[b]) give O = 0 and LSE = -inf; other rows with no allowed key follow
`empty_rows`. Arrays are [B, T, H, D]; returns (out [B, Tq, Hq, Dv], lse [B, Hq, Tq]).
"""
import numpy as np


def alibi_slopes(n):
    """Press et al.'s geometric slopes for n heads."""
    def power_of_two(m):
        return [2.0 ** (-8.0 * (i + 1) / m) for i in range(m)]
    c = 1 << (n.bit_length() - 1)
    if c == n:
        return np.array(power_of_two(n))
    return np.array(power_of_two(c) + power_of_two(2 * c)[0::2][: n - c])


def reference(q, k, v, *, causal=None, alignment=None, window=None, mask=None, bias=None,
              scale=None, softcap=0.0, alibi_slopes=None, key_lengths=None,
              query_lengths=None, empty_rows="error"):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Tq, Hq, Dk = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    k = np.repeat(k, group, axis=2)
    v = np.repeat(v, group, axis=2)
    scale = 1.0 / np.sqrt(Dk) if scale is None else scale
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + np.broadcast_to(np.asarray(bias, dtype=np.float64), s.shape)
    align = causal or alignment or "top-left"
    allowed = np.ones(s.shape, dtype=bool)
    for b in range(B):
        tk = Tk if key_lengths is None else int(key_lengths[b])
        tq = Tq if query_lengths is None else int(query_lengths[b])
        pq = np.arange(Tq) + (tk - tq if align == "bottom-right" else 0)
        pk = np.arange(Tk)
        d = pq[:, None] - pk[None, :]          # [Tq, Tk]
        ok = np.ones((Tq, Tk), dtype=bool)
        if causal:
            ok &= d >= 0
        if window is not None:
            left, right = window
            if left >= 0:
                ok &= d <= left
            if right >= 0:
                ok &= -d <= right
        ok &= (pk < tk)[None, :]
        ok &= (np.arange(Tq) < tq)[:, None]
        allowed[b] &= ok[None]
        if alibi_slopes is not None:
            s[b] -= np.asarray(alibi_slopes, np.float64)[:, None, None] * np.abs(d)[None]
    if mask is not None:
        allowed &= np.broadcast_to(np.asarray(mask, dtype=bool), s.shape)
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m[..., 0])                    # [B, H, Tq]
    padded = np.zeros_like(empty)
    if query_lengths is not None:
        for b in range(B):
            padded[b, :, int(query_lengths[b]):] = True
    if (empty & ~padded).any() and empty_rows == "error":
        raise ValueError("reference: empty row")
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    total = p.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = p / total
        lse = (np.log(total[..., 0]) + m[..., 0])
    out = np.einsum("bhqk,bkhd->bqhd", np.nan_to_num(p), v)
    fill = np.nan if empty_rows == "nan" else 0.0
    lse_fill = np.nan if empty_rows == "nan" else -np.inf
    rows = empty & ~padded
    out = np.where(np.transpose(rows, (0, 2, 1))[..., None], fill, out)
    out = np.where(np.transpose(padded, (0, 2, 1))[..., None], 0.0, out)
    lse = np.where(rows, lse_fill, lse)
    lse = np.where(padded, -np.inf, lse)
    return out, lse


def rope(x, cos, sin, positions, interleaved):
    """RoPE of x [T, H, D] at `positions` in float64: cos / sin [positions, rotary_dim / 2],
    rotate-half pairs (d, d + rotary_dim / 2) or interleaved pairs (2d, 2d + 1); dimensions
    past rotary_dim unchanged."""
    x = x.astype(np.float64).copy()
    half = cos.shape[1]
    c, s = cos[positions][:, None, :], sin[positions][:, None, :]
    if interleaved:
        a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
        x[..., :half], x[..., half:2 * half] = a * c - b * s, b * c + a * s
    return x
