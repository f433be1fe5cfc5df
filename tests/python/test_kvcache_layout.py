"""attn.forward_with_kvcache on caller-owned caches laid out in ways where an append could
write two rows (or Q8 scales) to one address, or read new rows out of the memory it writes:
each such layout raises ValueError with attn's message naming the arguments and their
values (strides, addresses, byte ranges, block-table entries), and leaves every byte of the
cache and its scales as it was. Layouts that only look alike (k and v interleaved in one
allocation, scales side by side, k_new = v_new, new rows beside the cache in one buffer) are
accepted and give the numbers of separate buffers, bitwise, and of torch SDPA in float64 on
the same keys and values."""
import re

import numpy as np
import pytest

import attn

torch = pytest.importorskip("torch")
as_strided = np.lib.stride_tricks.as_strided
byte_bounds = np.lib.array_utils.byte_bounds


def _address(x):
    return x.data_ptr() if isinstance(x, torch.Tensor) else x.__array_interface__["data"][0]


def _bytes(x):
    """[first, last) bytes x can touch, from its own shape and strides (torch or numpy)."""
    if not isinstance(x, torch.Tensor):
        return byte_bounds(x)
    low = high = x.data_ptr()
    for n, s in zip(x.shape, x.stride()):
        reach = (n - 1) * s * x.element_size()
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low, high + x.element_size()


def _snapshot(buffers):
    return [bytes(np.asarray(b).view(np.uint8).ravel()) if not isinstance(b, torch.Tensor)
            else bytes(b.contiguous().view(torch.uint8).numpy().ravel()) for b in buffers]


def _refused(call, buffers, pattern):
    """call() raises ValueError whose message matches pattern (attn's status name appended)
    and changes no byte of buffers (the allocations holding the cache and its scales)."""
    before = _snapshot(buffers)
    with pytest.raises(ValueError) as raised:
        call()
    message = str(raised.value)
    assert re.search(pattern, message), message
    assert message.endswith("[ATTN_ERROR_INVALID_ARGUMENT]"), message
    assert _snapshot(buffers) == before, "a refused append wrote into the cache"


B, S, H, D = 2, 8, 1, 4          # contiguous caches [B, S, H, D]
PAGES, PS = 4, 8                 # paged caches [PAGES, PS, H, D]


def _new(T=1, Hkv=H, Dk=D, value=1.0):
    return np.full((B, T, Hkv, Dk), value, np.float32)


def _q(T=1, Hq=H, Dk=D):
    return np.full((B, T, Hq, Dk), 0.25, np.float32)


def _stride_zero_pages():
    base = np.arange(PAGES * PS * H * D, dtype=np.float32)
    k = as_strided(base, (PAGES, PS, H, D), (0, H * D * 4, D * 4, 4), writeable=True)
    v = np.zeros((PAGES, PS, H, D), np.float32)
    table = np.array([[0], [1]], np.int32)
    return dict(k=k, v=v, table=table, seqlens=[1, 1], buffers=[base, v],
                pattern=re.escape("cache->k_cache.stride[0] = 0 (shape[0] = 4): an append would "
                                  "write two rows to one address (each dimension's stride must "
                                  "be at least 4, the extent of the smaller ones)"))


def _stride_zero_slots_torch():
    base = torch.zeros(PAGES * PS * H * D)
    v = base.as_strided((PAGES, PS, H, D), (PS * H * D, 0, D, 1))
    k = torch.zeros(PAGES, PS, H, D)
    return dict(k=k, v=v, table=np.array([[0], [2]], np.int32), seqlens=[1, 1],
                buffers=[base, k],
                pattern=re.escape("cache->v_cache.stride[1] = 0 (shape[1] = 8): an append would "
                                  "write two rows to one address (each dimension's stride must "
                                  "be at least 4"))


def _rows_overlapping():
    base = np.zeros(B * S * H * D, np.float32)
    k = as_strided(base, (B, S, H, D), (S * 2 * 4, 2 * 4, D * 4, 4), writeable=True)
    v = np.zeros((B, S, H, D), np.float32)
    return dict(k=k, v=v, table=None, seqlens=[0, 0], buffers=[base, v],
                pattern=re.escape("cache->k_cache.stride[1] = 2 (shape[1] = 8): an append would "
                                  "write two rows to one address (each dimension's stride must "
                                  "be at least 4"))


def _k_is_v():
    k = np.zeros((B, S, H, D), np.float32)
    return dict(k=k, v=k, table=None, seqlens=[3, 3], buffers=[k],
                pattern=re.escape(f"cache->k_cache (data {hex(_address(k))}) and cache->v_cache "
                                  f"(data {hex(_address(k))}) may share memory: an append writes "
                                  "both, so they must not overlap"))


def _v_inside_k_torch():
    base = torch.zeros(B * S * H * D + 2)
    k = base[:B * S * H * D].view(B, S, H, D)
    v = base[2:].view(B, S, H, D)
    return dict(k=k, v=v, table=None, seqlens=[3, 3], buffers=[base],
                pattern=re.escape(f"cache->k_cache (data {hex(k.data_ptr())}) and cache->v_cache "
                                  f"(data {hex(v.data_ptr())}) may share memory"))


def _two_sequences_one_page():
    k, v = np.zeros((PAGES, PS, H, D), np.float32), np.zeros((PAGES, PS, H, D), np.float32)
    return dict(k=k, v=v, table=np.array([[1], [1]], np.int32), seqlens=[3, 5], buffers=[k, v],
                pattern=re.escape("cache->block_table[1, 0] = 1: the append of sequence 1 writes "
                                  "page 1, which block 0 of sequence 0 also writes"))


def _append_into_a_read_page():
    k, v = np.zeros((PAGES, PS, H, D), np.float32), np.zeros((PAGES, PS, H, D), np.float32)
    # Sequence 0 (8 held) appends into its block 1 = page 1, which sequence 1 reads (block 0).
    return dict(k=k, v=v, table=np.array([[0, 1], [1, 2]], np.int32), seqlens=[8, 8],
                buffers=[k, v],
                pattern=re.escape("cache->block_table[1, 0] = 1: page 1 is written by the append "
                                  "of sequence 0 (block 1) and also used by sequence 1"))


LAYOUT_ERRORS = {
    "k_cache page stride 0": _stride_zero_pages,
    "v_cache slot stride 0 (torch)": _stride_zero_slots_torch,
    "k_cache rows overlapping (stride 2 < D)": _rows_overlapping,
    "v_cache is k_cache": _k_is_v,
    "v_cache starts inside k_cache (torch)": _v_inside_k_torch,
    "two sequences append into one page": _two_sequences_one_page,
    "an append writes a page another sequence reads": _append_into_a_read_page,
}


@pytest.mark.parametrize("name", LAYOUT_ERRORS)
def test_kvcache_colliding_layouts_are_refused(name):
    case = LAYOUT_ERRORS[name]()
    k, v, table = case["k"], case["v"], case["table"]
    if isinstance(k, torch.Tensor):
        new = torch.ones(B, 1, H, D)
    else:
        new = _new()
    _refused(lambda: attn.forward_with_kvcache(_q(), k, v, np.array(case["seqlens"], np.int32),
                                               k_new=new, v_new=new, block_table=table),
             case["buffers"], case["pattern"])
    # The same layout without an append reads fine (read-only calls take any strides >= 0).
    held = np.maximum(np.array(case["seqlens"], np.int32), 1)
    out = attn.forward_with_kvcache(_q(), k, v, held, block_table=table)
    assert np.isfinite(np.asarray(out)).all()


def _q8_cache():
    """An int8 cache [B, S, Hkv, Dk] and float32 scales [B, S, Hkv], every allocation filled
    with non-zero bytes."""
    Hkv, Dk = 2, 16
    k = np.arange(B * S * Hkv * Dk).astype(np.int8).reshape(B, S, Hkv, Dk)
    v = (np.arange(B * S * Hkv * Dk) % 7).astype(np.int8).reshape(B, S, Hkv, Dk)
    ks = np.full((B, S, Hkv), 0.125, np.float32)
    vs = np.full((B, S, Hkv), 0.5, np.float32)
    return k, v, ks, vs, Hkv, Dk


def test_kvcache_int8_scales_colliding_are_refused():
    k, v, ks, vs, Hkv, Dk = _q8_cache()
    q, new, seqlens = _q(Hq=Hkv, Dk=Dk), _new(Hkv=Hkv, Dk=Dk), np.array([2, 5], np.int32)
    call = lambda **scales: attn.forward_with_kvcache(q, k, v, seqlens, k_new=new, v_new=new, **scales)
    # One scale for every slot: stride 0.
    one = np.full(B * Hkv, 0.125, np.float32)
    ks_zero = as_strided(one, (B, S, Hkv), (Hkv * 4, 0, 4), writeable=True)
    _refused(lambda: call(k_scale=ks_zero, v_scale=vs), [k, v, one, vs],
             re.escape("cache->k_scale.stride[1] = 0 (shape[1] = 8): an append would write two "
                       "rows to one address (each dimension's stride must be at least 1"))
    # k_scale = v_scale.
    _refused(lambda: call(k_scale=ks, v_scale=ks), [k, v, ks],
             re.escape(f"cache->k_scale (data {hex(_address(ks))}) and cache->v_scale (data "
                       f"{hex(_address(ks))}) may share memory"))
    # k_scale inside k_cache's bytes: one allocation, the scales start half way into the codes.
    arena = np.zeros(k.nbytes + ks.nbytes, np.uint8)
    k_in = arena[:k.nbytes].view(np.int8).reshape(k.shape)
    k_in[...] = k
    ks_in = arena[k.nbytes // 2:k.nbytes // 2 + ks.nbytes].view(np.float32).reshape(ks.shape)
    _refused(lambda: attn.forward_with_kvcache(q, k_in, v, seqlens, k_new=new, v_new=new,
                                               k_scale=ks_in, v_scale=vs),
             [arena, v, vs],
             re.escape(f"cache->k_cache (data {hex(_address(k_in))}) and cache->k_scale (data "
                       f"{hex(_address(ks_in))}) may share memory: an append writes both"))


def _range_message(new_name, new, cache_name, cache):
    n0, n1 = _bytes(new)
    c0, c1 = _bytes(cache)
    return re.escape(f"append->{new_name} (bytes [{hex(n0)}, {hex(n1)})) and cache->{cache_name} "
                     f"(bytes [{hex(c0)}, {hex(c1)})) may share memory: the new rows must not "
                     "alias the cache they are appended into")


def test_kvcache_new_rows_aliasing_the_cache_are_refused():
    k = np.arange(B * S * H * D, dtype=np.float32).reshape(B, S, H, D)
    v = -np.arange(B * S * H * D, dtype=np.float32).reshape(B, S, H, D)
    seqlens = np.array([2, 2], np.int32)
    call = lambda kn, vn, **kw: (lambda: attn.forward_with_kvcache(_q(T=2), kw.get("kc", k), kw.get("vc", v),
                                                                   seqlens, k_new=kn, v_new=vn))
    # k_new a view of the cache's first rows (rows the queries read).
    kn = k[:, :2]
    _refused(call(kn, _new(T=2)), [k, v], _range_message("k_new", kn, "k_cache", k))
    # v_new = the very rows it would be appended into.
    vn = v[:, 2:4]
    _refused(call(_new(T=2), vn), [k, v], _range_message("v_new", vn, "v_cache", v))
    # k_new read from v_cache, backwards (negative token stride).
    kn = v[:, 5:3:-1]
    _refused(call(kn, _new(T=2)), [k, v], _range_message("k_new", kn, "v_cache", v))
    # torch: v_new inside k_cache's storage, every other element.
    kt, vt = torch.from_numpy(k.copy()), torch.from_numpy(v.copy())
    vn = kt.as_strided((B, 2, H, D), (S * H * D, H * D, D, 2), 1)
    _refused(lambda: attn.forward_with_kvcache(_q(T=2), kt, vt, seqlens, k_new=torch.ones(B, 2, H, D), v_new=vn),
             [kt, vt], _range_message("v_new", vn, "k_cache", kt))
    # int8: k_new (float32) laid over the Q8 scales it would write.
    qk, qv, ks, vs, Hkv, Dk = _q8_cache()
    kn = as_strided(ks, (B, 1, Hkv, Dk), (ks.strides[0], 4, 4, 0), writeable=False)
    _refused(lambda: attn.forward_with_kvcache(_q(Hq=Hkv, Dk=Dk), qk, qv, seqlens, k_new=kn,
                                               v_new=_new(Hkv=Hkv, Dk=Dk), k_scale=ks, v_scale=vs),
             [qk, qv, ks, vs], _range_message("k_new", kn, "k_scale", ks))


def _sdpa(q, keys, values, held):
    """torch SDPA in float64, per sequence, causal bottom-right: q [B, Tq, Hq, D],
    keys / values [B, total, Hkv, D] (the first held[b] + Tq tokens of sequence b used)."""
    Hq, Hkv = q.shape[2], keys.shape[2]
    outs = []
    for b in range(q.shape[0]):
        total = int(held[b]) + q.shape[1]
        Q = torch.tensor(np.asarray(q[b], np.float64)).transpose(0, 1)[None]
        K = torch.tensor(np.asarray(keys[b, :total], np.float64)).transpose(0, 1)[None]
        V = torch.tensor(np.asarray(values[b, :total], np.float64)).transpose(0, 1)[None]
        K, V = K.repeat_interleave(Hq // Hkv, 1), V.repeat_interleave(Hq // Hkv, 1)
        allowed = (torch.arange(q.shape[1])[:, None] + total - q.shape[1]) >= torch.arange(total)[None]
        o = torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
        outs.append(o[0].transpose(0, 1).numpy())
    return np.stack(outs)


@pytest.mark.parametrize("layout", ["[pages, 2, ps, H, D]", "[pages, ps, H, 2, D]"])
@pytest.mark.parametrize("Tq", [1, 20])
def test_kvcache_interleaved_kv_equals_separate(rng, layout, Tq):
    Hq, Hkv, Dk, ps, pages, max_pages = 4, 2, 16, 8, 16, 7
    held = np.array([13, 30], np.int32)              # + Tq <= 50 tokens: 7 blocks of 8
    table = rng.permutation(pages)[:B * max_pages].reshape(B, max_pages).astype(np.int32)
    if layout == "[pages, 2, ps, H, D]":
        joint = np.full((pages, 2, ps, Hkv, Dk), np.nan, np.float32)
        kc, vc = joint[:, 0], joint[:, 1]
    else:
        joint = np.full((pages, ps, Hkv, 2, Dk), np.nan, np.float32)
        kc, vc = joint[:, :, :, 0], joint[:, :, :, 1]
    ks, vs = np.full(kc.shape, np.nan, np.float32), np.full(vc.shape, np.nan, np.float32)
    total = int(held.max()) + Tq
    keys = rng.standard_normal((B, total, Hkv, Dk)).astype(np.float32)
    values = rng.standard_normal((B, total, Hkv, Dk)).astype(np.float32)
    for b in range(B):
        t = np.arange(held[b])
        for cache, sep, x in ((kc, ks, keys), (vc, vs, values)):
            cache[table[b][t // ps], t % ps] = x[b, :held[b]]
            sep[table[b][t // ps], t % ps] = x[b, :held[b]]
    q = rng.standard_normal((B, Tq, Hq, Dk)).astype(np.float32)
    k_new = np.stack([keys[b, held[b]:held[b] + Tq] for b in range(B)])
    v_new = np.stack([values[b, held[b]:held[b] + Tq] for b in range(B)])
    for b in range(B):  # the rows the append writes, for the reference
        keys[b, held[b]:held[b] + Tq], values[b, held[b]:held[b] + Tq] = k_new[b], v_new[b]
    run = lambda k_cache, v_cache: attn.forward_with_kvcache(q, k_cache, v_cache, held, k_new=k_new,
                                                             v_new=v_new, block_table=table)
    joint_out, separate_out = run(kc, vc), run(ks, vs)
    assert np.array_equal(joint_out, separate_out)
    assert np.array_equal(kc, ks, equal_nan=True) and np.array_equal(vc, vs, equal_nan=True)
    np.testing.assert_allclose(joint_out, _sdpa(q, keys, values, held), rtol=2e-5, atol=2e-5)


def test_kvcache_int8_scales_side_by_side_equal_separate(rng):
    Hq, Hkv, Dk, Tq = 4, 2, 16, 3
    held = np.array([5, 9], np.int32)
    joint = np.zeros((B, S * 2, Hkv, 2, Dk), np.int8)       # k and v codes interleaved per head
    scales = np.zeros((B, S * 2, Hkv, 2), np.float32)       # k and v scales side by side
    kc, vc, ksc, vsc = joint[..., 0, :], joint[..., 1, :], scales[..., 0], scales[..., 1]
    ks, vs = np.zeros_like(kc), np.zeros_like(vc)
    kss, vss = np.zeros_like(ksc), np.zeros_like(vsc)
    for cache, sep, sc, ssep in ((kc, ks, ksc, kss), (vc, vs, vsc, vss)):
        codes = rng.integers(-127, 128, cache.shape).astype(np.int8)
        row_scales = rng.uniform(0.01, 0.02, sc.shape).astype(np.float32)
        cache[...], sep[...], sc[...], ssep[...] = codes, codes, row_scales, row_scales
    q = rng.standard_normal((B, Tq, Hq, Dk)).astype(np.float32)
    k_new = rng.standard_normal((B, Tq, Hkv, Dk)).astype(np.float32)
    v_new = rng.standard_normal((B, Tq, Hkv, Dk)).astype(np.float32)
    joint_out = attn.forward_with_kvcache(q, kc, vc, held, k_new=k_new, v_new=v_new, k_scale=ksc, v_scale=vsc)
    separate_out = attn.forward_with_kvcache(q, ks, vs, held, k_new=k_new, v_new=v_new, k_scale=kss, v_scale=vss)
    assert np.array_equal(joint_out, separate_out)
    for a, b in ((kc, ks), (vc, vs), (ksc, kss), (vsc, vss)):
        assert np.array_equal(a, b)
    # Against SDPA on the dequantised stored rows (codes x scale, read back after the append).
    keys, values = kc * ksc[..., None].astype(np.float64), vc * vsc[..., None].astype(np.float64)
    np.testing.assert_allclose(joint_out, _sdpa(q, keys, values, held), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("where", ["k_new is v_new", "new rows after the cache in one buffer"])
def test_kvcache_new_rows_beside_the_cache_are_accepted(rng, where):
    Hq, Tq = 2, 3
    held = np.array([2, 4], np.int32)
    arena = np.zeros(2 * B * S * H * D + 2 * B * Tq * H * D, np.float32)
    cache_floats, new_floats = B * S * H * D, B * Tq * H * D
    kc = arena[:cache_floats].reshape(B, S, H, D)
    vc = arena[cache_floats:2 * cache_floats].reshape(B, S, H, D)
    kn = arena[2 * cache_floats:2 * cache_floats + new_floats].reshape(B, Tq, H, D)
    vn = kn if where == "k_new is v_new" else arena[2 * cache_floats + new_floats:].reshape(B, Tq, H, D)
    kc[...] = rng.standard_normal(kc.shape)
    vc[...] = rng.standard_normal(vc.shape)
    kn[...] = rng.standard_normal(kn.shape)
    if vn is not kn:
        vn[...] = rng.standard_normal(vn.shape)
    q = rng.standard_normal((B, Tq, Hq, D)).astype(np.float32)
    ks, vs, kn_copy, vn_copy = kc.copy(), vc.copy(), kn.copy(), vn.copy()
    out = attn.forward_with_kvcache(q, kc, vc, held, k_new=kn, v_new=vn)
    separate = attn.forward_with_kvcache(q, ks, vs, held, k_new=kn_copy, v_new=vn_copy)
    assert np.array_equal(out, separate) and np.array_equal(kc, ks) and np.array_equal(vc, vs)
    np.testing.assert_allclose(out, _sdpa(q, ks, vs, held), rtol=2e-5, atol=2e-5)
