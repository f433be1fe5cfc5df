"""Arguments refused before anything is written, integer arrays converted with checks, and
messages that name the argument and the value as given: a caller-owned cache keeps every
byte after an option error; block_table entries outside int32 or not integers are refused
(not wrapped or truncated to another page); extreme integers are refused by name."""
import re

import numpy as np
import pytest

import attn

B, S, H, D = 1, 8, 1, 4


def _cache():
    k = np.arange(B * S * H * D, dtype=np.float32).reshape(B, S, H, D)
    return k, -k.copy()


@pytest.mark.parametrize("options, pattern", [
    (dict(window=(-2, 0)), r"options\.window_left = -2: must be >= -1"),
    (dict(softcap=-1.0), r"options\.softcap = -1: must be 0 \(off\) or finite and > 0"),
])
def test_kvcache_option_error_writes_nothing(options, pattern):
    k_cache, v_cache = _cache()
    k_before, v_before = k_cache.copy(), v_cache.copy()
    k_new = np.full((B, 1, H, D), 7.0, np.float32)
    q = np.full((B, 1, H, D), 0.5, np.float32)
    with pytest.raises(ValueError, match=pattern):
        attn.forward_with_kvcache(q, k_cache, v_cache, [2], k_new=k_new, v_new=k_new, **options)
    assert k_cache.tobytes() == k_before.tobytes()
    assert v_cache.tobytes() == v_before.tobytes()
    # the same call with valid options writes the new row at token 2
    attn.forward_with_kvcache(q, k_cache, v_cache, [2], k_new=k_new, v_new=k_new)
    assert (k_cache[0, 2] == 7.0).all() and (k_cache[0, 3] == k_before[0, 3]).all()


def _paged(table):
    pages, ps = 8, 4
    k = np.zeros((pages, ps, H, D), np.float32)
    v = np.zeros((pages, ps, H, D), np.float32)
    q = np.ones((1, 1, H, D), np.float32)
    return lambda: attn.forward_with_kvcache(q, k, v, [3], block_table=table)


@pytest.mark.parametrize("table, pattern", [
    (np.array([[2**32 + 4]], np.int64), r"block_table\[0, 0\] = 4294967300: outside int32"),
    (np.array([[-2**31 - 1]], np.int64), r"block_table\[0, 0\] = -2147483649: outside int32"),
    (np.array([[1.7]]), r"block_table must hold integers, got dtype float64"),
    (np.array([[1.0]]), r"block_table must hold integers, got dtype float64"),
    ([[1.5]], r"block_table must hold integers, got dtype float64"),
    (np.array([[2**64 - 1]], np.uint64), r"block_table\[0, 0\] = 18446744073709551615: outside int32"),
    (np.array([4]), r"block_table must have 2 dimensions \[B, max_pages\], got shape \(1,\)"),
])
def test_block_table_checked_conversion(table, pattern):
    with pytest.raises(ValueError, match=pattern):
        _paged(table)()


def test_block_table_in_range_is_used():
    """Page 4 given as int64 is page 4 (the checked conversion keeps valid values)."""
    pages, ps = 8, 4
    k = np.zeros((pages, ps, H, D), np.float32)
    v = np.zeros((pages, ps, H, D), np.float32)
    v[4, :3] = 3.0
    q = np.ones((1, 1, H, D), np.float32)
    out = attn.forward_with_kvcache(q, k, v, [3], block_table=np.array([[4]], np.int64))
    np.testing.assert_array_equal(out, np.full((1, 1, H, D), 3.0, np.float32))


@pytest.mark.parametrize("values, pattern", [
    ([1.5], r"cache_seqlens must hold integers, got dtype float64"),
    ([2**31], r"cache_seqlens\[0\] = 2147483648: outside int32"),
])
def test_cache_seqlens_checked(values, pattern):
    k_cache, v_cache = _cache()
    q = np.ones((B, 1, H, D), np.float32)
    with pytest.raises(ValueError, match=pattern):
        attn.forward_with_kvcache(q, k_cache, v_cache, values)


def test_cu_seqlens_checked():
    q = np.ones((4, H, D), np.float32)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[1\] = 4294967300: outside int32"):
        attn.varlen_forward(q, q, q, np.array([0, 2**32 + 4], np.int64), [0, 4], 4, 4)


def test_kvcache_rank3_cache_named():
    k_cache, v_cache = _cache()
    q = np.ones((B, 1, H, D), np.float32)
    with pytest.raises(ValueError, match=r"k_cache must be \[B, S_max, Hkv, D\] or "
                                         r"\[num_pages, page_size, Hkv, D\] \(rank 4\), got "
                                         r"shape \(8, 1, 4\)"):
        attn.forward_with_kvcache(q, k_cache[0], v_cache, [0])
    with pytest.raises(ValueError, match=r"v_cache must be .* \(rank 4\), got shape \(8, 1, 4\)"):
        attn.forward_with_kvcache(q, k_cache, v_cache[0], [0])


@pytest.mark.parametrize("scale, shown", [(1e-50, "1e-50"), (1e300, "1e+300")])
def test_scale_outside_float32_named_as_given(scale, shown):
    q = np.ones((1, 2, 1, 4), np.float32)
    with pytest.raises(ValueError, match=rf"scale = {re.escape(shown)} is outside float32"):
        attn.forward(q, q, q, scale=scale)
    with pytest.raises(ValueError, match=rf"softcap = {re.escape(shown)} is outside float32"):
        attn.forward(q, q, q, softcap=scale)


def test_scale_float32_extremes_accepted():
    """The largest and smallest float32 scales are still scales (no false refusal)."""
    q = np.full((1, 2, 1, 4), 1e-20, np.float32)   # equal logits, finite at either scale
    v = np.ones((1, 2, 1, 4), np.float32)
    np.testing.assert_array_equal(attn.forward(q, q, v, scale=3.0e38), v)
    np.testing.assert_array_equal(attn.forward(q, q, v, scale=2e-45), v)


def test_varlen_mixed_dtypes_refused_as_forward():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q = np.ones((4, H, D), np.float32)
    k = q.astype(ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=r"q, k and v must have the same dtype, got float32, "
                                         r"bfloat16, float32"):
        attn.varlen_forward(q, k, q, [0, 4], [0, 4], 4, 4)
    with pytest.raises(ValueError, match=r"q, k and v must have the same dtype"):
        attn.forward(q[None], k[None], q[None])


def test_kvcache_head_dim_limit():
    with pytest.raises(ValueError, match=r"config\.key_dim = 1048577: head dims are limited to "
                                         r"2\^20"):
        attn.KVCache(1, 1, 2**20 + 1, capacity=1)
    with pytest.raises(ValueError, match=r"config\.value_dim = 1048577"):
        attn.KVCache(1, 1, 4, 2**20 + 1, capacity=1)


def test_kvcache_read_past_int64_named():
    cache = attn.KVCache(1, 1, 4, capacity=8)
    with pytest.raises(ValueError) as raised:
        cache.read(0, 2**63 - 2, 5)
    message = str(raised.value)
    assert "first_token = 9223372036854775806: 5 tokens from there are not all in sequence 0 " \
           "(length 0)" in message, message
    assert "-9223372036854775" not in message, message


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("which", [0, 1, 2])
def test_torch_meta_input_raises_device_error(which):
    torch = _torch()
    import attn.torch as at
    tensors = [torch.randn(1, 4, 2, 8) for _ in range(3)]
    tensors[which] = tensors[which].to("meta")
    name = "qkv"[which]
    with pytest.raises(ValueError, match=rf"{name} is on device meta .*attn computes on the CPU"):
        at.attention(*tensors)
    with pytest.raises(ValueError, match=rf"{name} is on device meta"):
        torch.ops.attn.forward(*tensors, None, None, None, False, 0, False, -1, -1, None, 0.0,
                               False, 0)
    q, k, v = (t.transpose(1, 2) for t in tensors)
    with pytest.raises(ValueError, match=rf"is on device meta"):
        at.scaled_dot_product_attention(q, k, v)


def test_torch_meta_everywhere_is_shape_inference():
    torch = _torch()
    import attn.torch as at
    q = torch.empty(1, 4, 2, 8, device="meta")
    out, lse = at.attention(q, q, q)
    assert out.device.type == "meta" and tuple(out.shape) == (1, 4, 2, 8)
    assert lse.device.type == "meta" and tuple(lse.shape) == (1, 2, 4)


def test_torch_mask_on_meta_raises():
    torch = _torch()
    import attn.torch as at
    q = torch.randn(1, 4, 2, 8)
    mask = torch.ones(4, 4, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"mask is on device meta"):
        at.attention(q, q, q, mask=mask)


def test_torch_cuda_input_raises_device_error():
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    import attn.torch as at
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match=r"k is on device cuda:0"):
        at.attention(q, q.cuda(), q)


@pytest.mark.parametrize("position, value, pattern", [
    (7, 7, r"alignment = 7: must be 0 \(unset\), 1 \(bottom-right\) or 2 \(top-left\)"),
    (14, 9, r"empty_rows = 9: must be 0 \(error\), 1 \(zero\) or 2 \(nan\)"),
])
def test_torch_op_codes_named(position, value, pattern):
    torch = _torch()
    import attn.torch  # noqa: F401  (registers the ops)
    q = torch.randn(1, 4, 2, 8)
    arguments = [q, q, q, None, None, None, False, 0, False, -1, -1, None, 0.0, False, 0]
    arguments[position] = value
    with pytest.raises(ValueError, match=pattern):
        torch.ops.attn.forward(*arguments)


def test_torch_mixed_dtypes_named():
    torch = _torch()
    import attn.torch as at
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match=r"k\.dtype = torch\.bfloat16: q is torch\.float32"):
        at.attention(q, q.bfloat16(), q)


@pytest.mark.parametrize("call, name", [
    (lambda c: c.read(0, 2**64, 5), "first_token"),
    (lambda c: c.truncate(2**64, 1), "sequence"),
    (lambda c: c.length(-2**63 - 1), "sequence"),
    (lambda c: c.share_prefix(0, 1, 2**70), "length"),
])
def test_kvcache_int64_arguments_named(call, name):
    cache = attn.KVCache(2, 1, 4, capacity=8)
    with pytest.raises(ValueError, match=rf"{name} = -?\d+ is out of range "
                                         r"\[-9223372036854775808, 9223372036854775807\]"):
        call(cache)
