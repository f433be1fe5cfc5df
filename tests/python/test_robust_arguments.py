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
