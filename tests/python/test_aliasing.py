"""Outputs that share memory with an input or another output, at the Python level: attn.forward
(out=), KVCache.decode (out=) and attn.merge (out=, lse=) hand the arrays to attn, which
refuses them with ValueError naming both tensors and their byte ranges, leaving every array
unchanged; outputs interleaved with the inputs in one buffer without sharing a byte, and
merge in place on outs[0] / lses[0], are accepted and bitwise equal to separate buffers.
(forward_with_kvcache and varlen_forward allocate their outputs; the new rows aliasing a
caller-owned cache are tests/python/test_kvcache_layout.py's.)"""
import re

import numpy as np
import pytest
import torch

import attn
from test_kvcache_layout import _bytes  # [first, last) bytes of a numpy array or torch tensor

B, T, H, D = 2, 6, 2, 8


def _shares(output_name, output, other_name, other):
    o0, o1 = _bytes(output)
    b0, b1 = _bytes(other)
    return re.escape(f"{output_name} (bytes [{hex(o0)}, {hex(o1)})) and {other_name} (bytes "
                     f"[{hex(b0)}, {hex(b1)})) share memory: an output must not overlap an "
                     "input or another output")


def _refused(call, arrays, message):
    """call() raises ValueError matching `message` (and naming the status), every array
    byte for byte as before."""
    before = [np.array(a, copy=True) for a in arrays]
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "ATTN_ERROR_INVALID_ARGUMENT" in str(info.value)
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), b.view(np.uint8))


def _normal(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def _forward_out_is_q(rng):
    q, k, v = (_normal(rng, (B, T, H, D)) for _ in range(3))
    return lambda: attn.forward(q, k, v, out=q), [q, k, v], _shares("out", q, "q", q)


def _forward_out_inside_k(rng):
    arena = _normal(rng, (B * T * H * D + H * D,))
    k = arena[:B * T * H * D].reshape(B, T, H, D)
    out = arena[H * D:].reshape(B, T, H, D)  # one row on
    q, v = _normal(rng, (B, T, H, D)), _normal(rng, (B, T, H, D))
    return lambda: attn.forward(q, k, v, out=out), [arena, q, v], _shares("out", out, "k", k)


def _forward_out_inside_v_torch(rng):
    q, k = torch.from_numpy(_normal(rng, (B, T, H, D))), torch.from_numpy(_normal(rng, (B, T, H, D)))
    buffer = torch.from_numpy(_normal(rng, (B, T, 2, H, D)))
    v = buffer[:, :, 0]
    out = buffer.view(-1)[3:3 + B * T * H * D].view(B, T, H, D)  # 3 floats on: meets v's rows
    return (lambda: attn.forward(q, k, v, out=out), [buffer.numpy(), q.numpy(), k.numpy()],
            _shares("out", out, "v", v))


def _decode_out_is_q(rng):
    cache = attn.KVCache(B, H, D, capacity=T)
    cache.append(_normal(rng, (B, T, H, D)), _normal(rng, (B, T, H, D)))
    q = _normal(rng, (B, 1, H, D))
    return lambda: cache.decode(q, out=q), [q], _shares("out", q, "q", q)


def _merge_out_is_outs_1(rng):
    outs = [_normal(rng, (B, T, H, D)) for _ in range(2)]
    lses = [_normal(rng, (B, H, T)) for _ in range(2)]
    return (lambda: attn.merge(outs, lses, out=outs[1]), outs + lses,
            _shares("out", outs[1], "outs[1]", outs[1]))


def _merge_lse_inside_lses_0(rng):
    outs = [_normal(rng, (B, T, H, D)) for _ in range(2)]
    arena = _normal(rng, (B * H * T + 1,))
    lses = [arena[:B * H * T].reshape(B, H, T), _normal(rng, (B, H, T))]
    lse = arena[1:].reshape(B, H, T)
    return (lambda: attn.merge(outs, lses, lse=lse), outs + [arena, lses[1]],
            _shares("lse", lse, "lses[0]", lses[0]))


CASES = {
    "forward: out is q": _forward_out_is_q,
    "forward: out one row into k": _forward_out_inside_k,
    "forward (torch): out meets v in one buffer": _forward_out_inside_v_torch,
    "KVCache.decode: out is q": _decode_out_is_q,
    "merge: out is outs[1] (only outs[0] is in place)": _merge_out_is_outs_1,
    "merge: lse one float into lses[0]": _merge_lse_inside_lses_0,
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_aliased_outputs_are_refused(case, rng):
    call, arrays, message = CASES[case](rng)
    _refused(call, arrays, message)


def test_forward_interleaved_outputs_are_accepted(rng):
    # q, k, v and out as slots of one [B, T, 4, H, D] buffer: out shares no byte with them.
    packed = _normal(rng, (B, T, 4, H, D))
    q, k, v, out = (packed[:, :, s] for s in range(4))
    expected = attn.forward(q.copy(), k.copy(), v.copy(), causal="bottom-right")
    assert attn.forward(q, k, v, causal="bottom-right", out=out) is out
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))


def test_decode_interleaved_output_is_accepted(rng):
    cache = attn.KVCache(B, H, D, capacity=T)
    cache.append(_normal(rng, (B, T, H, D)), _normal(rng, (B, T, H, D)))
    packed = _normal(rng, (B, 1, 2, H, D))
    q, out = packed[:, :, 0], packed[:, :, 1]
    expected = cache.decode(q.copy())
    cache.decode(q, out=out)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))


def test_merge_in_place_is_accepted(rng):
    outs = [_normal(rng, (B, T, H, D)) for _ in range(3)]
    lses = [_normal(rng, (B, H, T)) for _ in range(3)]
    expected, expected_lse = attn.merge([o.copy() for o in outs], [x.copy() for x in lses])
    out, lse = attn.merge(outs, lses, out=outs[0], lse=lses[0])
    assert out is outs[0] and lse is lses[0]
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    np.testing.assert_array_equal(lse.view(np.uint32), expected_lse.view(np.uint32))


def test_output_whose_elements_meet_is_refused(rng):
    # out's tokens one row of D floats apart while its heads are D apart too: token t, head 1
    # is token t + 1, head 0. NumPy allows the view (as_strided); attn refuses it.
    q, k, v = (_normal(rng, (B, T, H, D)) for _ in range(3))
    arena = _normal(rng, (B * (T + 1) * D + H * D,))
    itemsize = arena.itemsize
    out = np.lib.stride_tricks.as_strided(
        arena, shape=(B, T, H, D),
        strides=((T + 1) * D * itemsize, D * itemsize, D * itemsize, itemsize))
    message = re.escape(f"out: shape [{B}, {T}, {H}, {D}], strides [{(T + 1) * D}, {D}, {D}, 1]: "
                        "two of its elements share memory")
    _refused(lambda: attn.forward(q, k, v, out=out), [arena, q, k, v], message)


def test_output_interleaved_with_itself_is_accepted(rng):
    # dims 2 floats apart, the second head 3 floats on (odd floats): never meets, although the
    # strides do not nest; the result equals a dense out.
    q, k, v = (_normal(rng, (B, T, H, D)) for _ in range(3))
    arena = np.zeros(B * T * 4 * D, np.float32)
    s = arena.itemsize
    out = np.lib.stride_tricks.as_strided(arena, shape=(B, T, H, D),
                                          strides=(T * 4 * D * s, 4 * D * s, 3 * s, 2 * s))
    expected = attn.forward(q, k, v)
    attn.forward(q, k, v, out=out)
    np.testing.assert_array_equal(np.ascontiguousarray(out).view(np.uint32), expected.view(np.uint32))
