"""Inputs of every kind: float16/bfloat16 (NumPy via ml_dtypes, torch), zero-copy strided
views, other array protocols; and nonsense (wrong ranks, dtypes, None, huge or empty sizes,
read-only or overlapping outputs), each of which must raise a Python exception carrying a
message, never crash. Also: the GIL is released while attn computes."""
import threading
import time

import ml_dtypes
import numpy as np
import pytest
import torch

import attn
from reference import reference


def qkv(rng, B=2, Tq=9, Tk=13, Hq=4, Hkv=2, D=16, dtype=np.float32):
    return (rng.standard_normal((B, Tq, Hq, D)).astype(dtype),
            rng.standard_normal((B, Tk, Hkv, D)).astype(dtype),
            rng.standard_normal((B, Tk, Hkv, D)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_numpy_half_precision(dtype, rng):
    q, k, v = qkv(rng, dtype=dtype)
    out, lse = attn.forward(q, k, v, causal="bottom-right", return_lse=True)
    assert isinstance(out, np.ndarray) and out.dtype == np.dtype(dtype)
    assert lse.dtype == np.float32
    expected, expected_lse = reference(q.astype(np.float64), k.astype(np.float64),
                                       v.astype(np.float64), causal="bottom-right")
    tolerance = 1e-2 if dtype == np.float16 else 3e-2
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-5, atol=1e-5)
    buffer = np.zeros(out.shape, dtype)
    assert attn.forward(q, k, v, causal="bottom-right", out=buffer) is buffer
    np.testing.assert_array_equal(buffer, out)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_torch_dtypes(dtype, rng):
    q, k, v = (torch.from_numpy(x).to(dtype) for x in qkv(rng))
    out = attn.forward(q, k, v)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype
    expected, _ = reference(*(x.double().numpy() for x in (q, k, v)))
    tolerance = {torch.float16: 1e-2, torch.bfloat16: 3e-2, torch.float32: 2e-5}[dtype]
    np.testing.assert_allclose(out.double().numpy(), expected, rtol=tolerance, atol=tolerance)


def test_zero_copy_views_of_every_stride(rng):
    base = rng.standard_normal((2, 20, 3, 2, 16)).astype(np.float32)
    q = base[:, ::2, :, 0]                 # every other T, a slice of a larger axis
    k = base[:, ::-1, :, 1]                # negative T stride
    v = np.broadcast_to(base[:1, :, :, 0], (2, 20, 3, 16))   # zero batch stride
    expected, _ = reference(q, k, v)
    np.testing.assert_allclose(attn.forward(q, k, v), expected, rtol=1e-4, atol=2e-5)
    tq = torch.from_numpy(base)[:, ::2, :, 0]
    tk = torch.from_numpy(base.copy()).permute(0, 3, 2, 1, 4)[:, 1].permute(0, 2, 1, 3)
    tk = tk[:, :, :, :]
    np.testing.assert_allclose(attn.forward(tq, tk, tk).numpy(),
                               reference(tq.numpy(), tk.numpy(), tk.numpy())[0],
                               rtol=1e-4, atol=2e-5)


def test_unaligned_and_byte_strided_arrays_are_copied(rng):
    q, k, v = qkv(rng, Tq=6, Tk=6)
    raw = np.zeros(q.nbytes + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(q.shape)
    unaligned[...] = q
    assert not unaligned.flags.aligned
    record = np.zeros(k.shape, dtype=[("x", np.float32), ("pad", np.uint8)])
    record["x"] = k
    byte_strided = record["x"]                # strides of 5 bytes: not whole elements
    np.testing.assert_allclose(attn.forward(unaligned, byte_strided, v),
                               reference(q, k, v)[0], rtol=1e-4, atol=2e-5)
    with pytest.raises(ValueError, match="aligned"):
        attn.forward(q, k, v, out=raw[1:].view(np.float32).reshape(q.shape[:3] + (16,)))


def test_other_array_protocols(rng):
    q, k, v = qkv(rng, Tq=5, Tk=5)
    memory = memoryview(q)          # buffer protocol

    class Interface:                # __array_interface__ only
        def __init__(self, a):
            self.__array_interface__ = a.__array_interface__
            self.keep = a
    out = attn.forward(memory, Interface(k), v)
    np.testing.assert_allclose(out, reference(q, k, v)[0], rtol=1e-4, atol=2e-5)


def test_the_gil_is_released(rng):
    q = rng.standard_normal((1, 1500, 4, 64)).astype(np.float32)
    done = []
    worker = threading.Thread(target=lambda: done.append(attn.forward(q, q, q, threads=1)))
    gaps, last = [], time.perf_counter()
    worker.start()
    while worker.is_alive():
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        time.sleep(0.001)
    worker.join()
    assert done and len(gaps) > 5, "the call was too quick to observe"
    assert max(gaps[1:]) < 0.1, f"the main thread was blocked for {max(gaps[1:]):.3f} s"


F32 = np.float32
GOOD = (np.zeros((1, 4, 2, 8), F32), np.zeros((1, 5, 2, 8), F32), np.zeros((1, 5, 2, 8), F32))


def call(**changes):
    args = dict(zip("qkv", GOOD))
    kwargs = {name: changes.pop(name) for name in list(changes) if name not in "qkv"}
    args.update(changes)
    return lambda: attn.forward(args["q"], args["k"], args["v"], **kwargs)


NONSENSE = [  # name, call, exception, message fragment
    ("q None", call(q=None), TypeError, "q is required"),
    ("q a string", call(q="abc"), TypeError, "array"),
    ("q a dict", call(q={}), TypeError, "array"),
    ("q ragged list", call(q=[[1.0], [1.0, 2.0]]), TypeError, "array"),
    ("q rank 3", call(q=np.zeros((4, 2, 8), F32)), ValueError, "rank 4"),
    ("q rank 5", call(q=np.zeros((1, 1, 4, 2, 8), F32)), ValueError, "rank 4"),
    ("q scalar", call(q=np.float32(1)), ValueError, "rank 4"),
    ("q float64", call(q=np.zeros((1, 4, 2, 8))), ValueError, "float64"),
    ("q int32", call(q=np.zeros((1, 4, 2, 8), np.int32)), ValueError, "int32"),
    ("q complex", call(q=np.zeros((1, 4, 2, 8), np.complex64)), ValueError, "complex"),
    ("q big-endian", call(q=np.zeros((1, 4, 2, 8), ">f4")), ValueError, "not supported"),
    ("mixed dtypes", call(k=np.zeros((1, 5, 2, 8), np.float16)), ValueError, "same dtype"),
    ("Dk mismatch", call(k=np.zeros((1, 5, 2, 7), F32)), ValueError, "k"),
    ("Hq % Hkv", call(k=np.zeros((1, 5, 3, 8), F32), v=np.zeros((1, 5, 3, 8), F32)),
     ValueError, ""),
    ("K/V Tk mismatch", call(v=np.zeros((1, 6, 2, 8), F32)), ValueError, "v"),
    ("batch mismatch", call(k=np.zeros((2, 5, 2, 8), F32)), ValueError, ""),
    ("empty batch", call(q=np.zeros((0, 4, 2, 8), F32)), ValueError, ""),
    ("empty Tk", call(k=np.zeros((1, 0, 2, 8), F32), v=np.zeros((1, 0, 2, 8), F32)),
     ValueError, ""),
    ("causal=True", call(causal=True), ValueError, "bottom-right"),
    ("causal nonsense", call(causal="diagonal"), ValueError, "causal"),
    ("alignment nonsense", call(alignment=3), ValueError, "alignment"),
    ("window not a pair", call(window=5), TypeError, ""),
    ("window of 3", call(window=(1, 2, 3)), ValueError, "pair"),
    ("window floats", call(window=(1.5, 2), alignment="top-left"), TypeError, "int"),
    ("window below -1", call(window=(-2, 0), alignment="top-left"), ValueError, "window"),
    ("window without alignment", call(window=(2, 2)), ValueError, "align"),
    ("scale negative", call(scale=-1.0), ValueError, "scale"),
    ("scale nan", call(scale=float("nan")), ValueError, "scale"),
    ("scale a string", call(scale="1"), TypeError, "scale"),
    ("softcap negative", call(softcap=-1.0), ValueError, "softcap"),
    ("mask float", call(mask=np.zeros((4, 5), F32)), ValueError, "bool"),
    ("mask wrong shape", call(mask=np.ones((4, 6), bool)), ValueError, "broadcast"),
    ("mask rank 5", call(mask=np.ones((1, 1, 1, 4, 5), bool)), ValueError, "rank"),
    ("bias wrong shape", call(bias=np.zeros((3, 5), F32)), ValueError, "broadcast"),
    ("bias bool", call(bias=np.ones((4, 5), bool)), ValueError, "float"),
    ("key_lengths count", call(key_lengths=[1, 2]), ValueError, "key_lengths"),
    ("key_lengths > Tk", call(key_lengths=[6]), ValueError, "key_lengths"),
    ("key_lengths negative", call(key_lengths=[-1]), ValueError, "key_lengths"),
    ("key_lengths huge", call(key_lengths=[2**40]), ValueError, "int32"),
    ("key_lengths floats", call(key_lengths=[1.5]), ValueError, "integers"),
    ("alibi_slopes count", call(alibi_slopes=[1.0], alignment="top-left"), ValueError,
     "alibi_slopes"),
    ("empty_rows nonsense", call(empty_rows="ignore"), ValueError, "empty_rows"),
    ("threads 0", call(threads=0), ValueError, "threads"),
    ("threads negative", call(threads=-4), ValueError, "threads"),
    ("threads huge", call(threads=2**40), ValueError, "threads"),
    ("threads a million", call(threads=10**6), ValueError, "threads"),
    ("threads a string", call(threads="2"), TypeError, "threads"),
    ("memory limit", call(memory_limit=16), MemoryError, "limit"),
    ("kernel unknown", call(kernel="quantum"), NotImplementedError, "not available"),
    ("out wrong shape", call(out=np.zeros((1, 4, 2, 7), F32)), ValueError, "shape"),
    ("out wrong dtype", call(out=np.zeros((1, 4, 2, 8), np.float16)), ValueError, "dtype"),
    ("out read-only", call(out=np.broadcast_to(np.zeros(8, F32), (1, 4, 2, 8))), ValueError,
     "read-only"),
    ("meta tensor", call(q=torch.zeros((1, 4, 2, 8), device="meta")), ValueError, "device"),
    ("sparse tensor", call(q=torch.zeros((1, 4, 2, 8)).to_sparse()), ValueError, "layout"),
    ("huge broadcast", call(q=np.broadcast_to(np.zeros((1, 1, 2, 8), F32), (1, 2**40, 2, 8))),
     (MemoryError, ValueError), ""),
]


@pytest.mark.parametrize("name,function,exception,fragment", NONSENSE,
                         ids=[n[0] for n in NONSENSE])
def test_nonsense_raises(name, function, exception, fragment):
    with pytest.raises(exception) as info:
        function()
    assert fragment.lower() in str(info.value).lower()


def test_out_overlapping_an_input_is_refused():
    q = np.zeros((1, 4, 2, 8), F32)
    with pytest.raises(ValueError, match="out .* and q .* share memory"):
        attn.forward(q, q[:, :3], q[:, :3], out=q)


def test_library_messages_name_the_argument():
    with pytest.raises(ValueError) as info:
        attn.forward(*GOOD, softcap=float("inf"))
    assert "softcap" in str(info.value) and "ATTN_ERROR_INVALID_ARGUMENT" in str(info.value)


def test_version():
    major, minor, patch = (int(x) for x in attn.version().split("."))
    assert attn.__version__ == attn.version() == f"{major}.{minor}.{patch}"
    from importlib.metadata import version
    assert version("attn") == attn.version()


def _backward(**changes):
    q, k, v = GOOD
    out, lse = attn.forward(q, k, v, return_lse=True)
    args = {"q": q, "k": k, "v": v, "out": out, "lse": lse, "dout": np.ones_like(out)}
    args.update(changes)
    return lambda: attn.backward(args["q"], args["k"], args["v"], args["out"], args["lse"],
                                 args["dout"])


def _decode(q, **kwargs):
    cache = attn.KVCache(1, 2, 8, capacity=8)
    cache.append(GOOD[1], GOOD[2])
    return lambda: cache.decode(q, **kwargs)


def _sdpa(*shapes, **kwargs):
    import attn.torch as at
    return lambda: at.scaled_dot_product_attention(*(torch.zeros(s) for s in shapes), **kwargs)


MORE_NONSENSE = [
    ("backward lse None", _backward(lse=None), TypeError, "lse"),
    ("backward lse shape", _backward(lse=np.zeros((1, 2, 3), F32)), ValueError, "lse"),
    ("backward dout shape", _backward(dout=np.zeros((1, 4, 2, 7), F32)), ValueError, "dout"),
    ("backward out int", _backward(out=np.zeros((1, 4, 2, 8), np.int32)), ValueError, "out"),
    ("backward dlse shape", lambda: attn.backward(*GOOD, *attn.forward(*GOOD, return_lse=True),
                                                  np.ones((1, 4, 2, 8), F32),
                                                  dlse=np.ones(3, F32)), ValueError, "dlse"),
    ("merge no parts", lambda: attn.merge([], []), ValueError, "merge"),
    ("merge strings", lambda: attn.merge(["a"], ["b"]), TypeError, "array"),
    ("merge rank 2", lambda: attn.merge([np.zeros((2, 2), F32)], [np.zeros((2, 2), F32)]),
     ValueError, "rank"),
    ("decode wrong batch", _decode(np.zeros((2, 1, 2, 8), F32)), ValueError, ""),
    ("decode rank 3", _decode(np.zeros((1, 2, 8), F32)), ValueError, "rank"),
    ("decode key_lengths", lambda: attn.KVCache(1, 1, 8, capacity=4).decode(
        np.zeros((1, 1, 1, 8), F32), key_lengths=[1]), TypeError, "key_lengths"),
    ("cache capacity string", lambda: attn.KVCache(1, 1, 8, capacity="4"), TypeError,
     "capacity"),
    ("cache huge", lambda: attn.KVCache(2**20, 2**10, 2**10, capacity=2**20), (MemoryError,
                                                                                 ValueError), ""),
    ("sdpa rank 1", _sdpa((8,), (8,), (8,)), ValueError, "rank"),
    ("sdpa D mismatch", _sdpa((1, 2, 4, 8), (1, 2, 4, 7), (1, 2, 4, 8)), ValueError, ""),
    ("sdpa mask shape", _sdpa((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 5, 8),
                              attn_mask=torch.ones(3, 5, dtype=torch.bool)), ValueError,
     "broadcast"),
]


@pytest.mark.parametrize("name,function,exception,fragment", MORE_NONSENSE,
                         ids=[n[0] for n in MORE_NONSENSE])
def test_more_nonsense_raises(name, function, exception, fragment):
    with pytest.raises(exception) as info:
        function()
    assert fragment.lower() in str(info.value).lower()


def test_import_attn_imports_neither_torch_nor_transformers():
    import subprocess
    import sys
    code = "import sys, attn; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_goes_to_attn_unconverted(dtype, rng, monkeypatch):
    """bf16/f16 operands reach libattn as they are (no float32 copies)."""
    q, k, v = (torch.from_numpy(x).to(dtype) for x in qkv(rng, Tq=7, Tk=7))
    out, lse = attn.forward(q, k, v, return_lse=True)
    import attn._tensors as tensors

    def refuse(view, code, name):
        if view.code != code and name in ("q", "k", "v", "out", "dout", "outs[0]", "outs[1]"):
            raise AssertionError(f"{name} was converted")
        return view
    monkeypatch.setattr(tensors, "converted", refuse)
    assert attn.forward(q, k, v).dtype == dtype
    g = attn.backward(q, k, v, out, lse, torch.ones_like(out))
    assert g.dq.dtype == g.dk.dtype == g.dv.dtype == dtype
    merged, _ = attn.merge([out, out], [lse, lse])
    assert merged.dtype == dtype
    torch.testing.assert_close(merged, out)
    cache = attn.KVCache(2, 2, 16, capacity=8, dtype="bfloat16")
    cache.append(k.float(), v.float())
    assert cache.decode(q, causal="bottom-right").dtype == dtype
