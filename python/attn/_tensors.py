"""Zero-copy views of NumPy arrays and PyTorch tensors as attn tensor descriptors.

A descriptor is the tuple ``(data, dtype, shape, strides)`` that attn._attn turns into an
``attn_tensor``: the address of element [0, ..., 0], an ``attn_dtype`` code, and sizes and
strides in elements (any sign, 0 = broadcast). Nothing here copies data unless it says so.

Accepted inputs: ``numpy.ndarray`` (any strides, including negative and zero), ``torch.Tensor``
on the CPU (any strides), and anything NumPy can view without copying (``__array_interface__``,
the buffer protocol, ``__dlpack__``). Dtypes: float32, float16, bfloat16 (``torch.bfloat16``,
``ml_dtypes.bfloat16``), bool, int32, int64, float64.
"""
from __future__ import annotations

import sys

import numpy as np

# attn_dtype codes (include/attn.h)
F32, BF16, F16, BOOL, I32, I64, F64 = 0, 1, 2, 3, 4, 5, 6
DTYPE_NAMES = {F32: "float32", BF16: "bfloat16", F16: "float16", BOOL: "bool", I32: "int32",
               I64: "int64", F64: "float64"}
_NUMPY_CODES = {"float32": F32, "float16": F16, "bfloat16": BF16, "bool": BOOL, "int32": I32,
                "int64": I64, "float64": F64}
# Dtypes attn takes as they are (all operands of a call in one of them; LSE and bias float32):
# attn_forward / attn_decode (q, k, v, out), attn_backward (also dout, dq, dk, dv) and
# attn_merge (outs, out). The extension links the libattn of this source tree statically, so
# these are known when the package is built (include/attn.h documents them). Another float
# dtype would be converted to float32 here and the result back; KV-cache appends take float32.
NATIVE_QKV = frozenset({F32, BF16, F16})
NATIVE_BACKWARD = frozenset({F32, BF16, F16})
NATIVE_MERGE = frozenset({F32, BF16, F16})


def torch_module():
    """The torch module if the program has imported it (attn never imports torch itself)."""
    return sys.modules.get("torch")


def is_torch(x) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


_TORCH_CODES = None   # torch dtype -> attn_dtype code, made once torch is imported
_TORCH_DTYPES = None  # the inverse


def _torch_codes(torch):
    global _TORCH_CODES, _TORCH_DTYPES
    if _TORCH_CODES is None:
        codes = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16, torch.bool: BOOL,
                 torch.int32: I32, torch.int64: I64, torch.float64: F64}
        _TORCH_DTYPES = {c: d for d, c in codes.items()}
        _TORCH_CODES = codes
    return _TORCH_CODES


def _torch_dtype(torch, code):
    _torch_codes(torch)
    return _TORCH_DTYPES[code]


class View:
    """A strided view of one argument: the object that owns the memory and its descriptor."""

    __slots__ = ("obj", "torch", "code", "shape", "strides", "data", "itemsize")

    def __init__(self, obj, torch, code, shape, strides, data, itemsize):
        self.obj = obj          # keeps the memory alive for the call
        self.torch = torch      # True for a torch.Tensor
        self.code = code        # attn_dtype
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        self.data = data
        self.itemsize = itemsize

    @property
    def rank(self):
        return len(self.shape)

    @property
    def dtype_name(self):
        return DTYPE_NAMES[self.code]

    def desc(self):
        return (self.data, self.code, self.shape, self.strides)

    def broadcast(self, shape, strides):
        return View(self.obj, self.torch, self.code, shape, strides, self.data, self.itemsize)


def view(x, name: str, *, writable: bool = False) -> View:
    """The View of `x`. TypeError if `x` is not an array; ValueError for an unsupported dtype,
    a tensor off the CPU, or (writable=True) a read-only array."""
    if x is None:
        raise TypeError(f"{name} is required, got None")
    if is_torch(x):
        return _torch_view(x, name, writable)
    if not isinstance(x, np.ndarray):
        x = _as_numpy(x, name)
    return _numpy_view(x, name, writable)


def _as_numpy(x, name):
    if isinstance(x, (str, bytes, dict, set)) or x is Ellipsis:
        raise TypeError(f"{name} must be an array or tensor, got {type(x).__name__}")
    if hasattr(x, "__dlpack__") and not hasattr(x, "__array_interface__"):
        try:
            return np.from_dlpack(x)
        except (TypeError, BufferError, RuntimeError) as e:
            raise TypeError(f"{name}: cannot view {type(x).__name__} through DLPack: {e}") from None
    try:
        array = np.asarray(x)
    except Exception as e:  # ragged lists, objects NumPy cannot read
        raise TypeError(f"{name} must be an array or tensor, got {type(x).__name__}: {e}") from None
    if array.dtype == object:
        raise TypeError(f"{name} must be an array or tensor of numbers, got {type(x).__name__}")
    return array


_CODES_BY_DTYPE = {np.dtype(n): c for n, c in _NUMPY_CODES.items() if n != "bfloat16"}


def _numpy_code(dtype):
    code = _CODES_BY_DTYPE.get(dtype)
    if code is None and dtype.name == "bfloat16" and dtype.byteorder != ">":
        code = _CODES_BY_DTYPE[dtype] = BF16     # ml_dtypes.bfloat16, seen once
    return code


def _numpy_view(x: np.ndarray, name, writable):
    code = _numpy_code(x.dtype)
    if code is None:
        raise ValueError(f"{name}: dtype {x.dtype} is not supported (float32, float16, "
                         "bfloat16, bool, int32, int64, float64)")
    if writable and not x.flags.writeable:
        raise ValueError(f"{name} is read-only")
    itemsize = x.dtype.itemsize
    if not x.flags.aligned or any(s % itemsize for s in x.strides):
        if writable:
            raise ValueError(f"{name} is not aligned to its element size (strides "
                             f"{x.strides})")
        # A copy: attn's strides count elements, and C reads elements at aligned addresses.
        x = np.array(x, order="C", copy=True)
    data = x.__array_interface__["data"][0]
    return View(x, False, code, x.shape, [s // itemsize for s in x.strides], data, itemsize)


def _torch_view(x, name, writable):
    torch = torch_module()
    code = _torch_codes(torch).get(x.dtype)
    if code is None:
        raise ValueError(f"{name}: dtype {x.dtype} is not supported (float32, float16, "
                         "bfloat16, bool, int32, int64, float64)")
    if not x.is_cpu:
        raise ValueError(f"{name} is on device {x.device}; attn computes on the CPU")
    if x.layout != torch.strided:
        raise ValueError(f"{name}: layout {x.layout} is not supported (dense tensors only)")
    if x.is_neg() or x.is_conj():
        x = x.resolve_neg().resolve_conj()
    return View(x, True, code, x.shape, x.stride(), x.data_ptr(), x.element_size())


def empty(like: View, shape, code):
    """A new C-order array of the same kind (NumPy or torch) as `like`."""
    if like.torch:
        torch = torch_module()
        dtype = _torch_dtype(torch, code)
        return torch.empty(tuple(shape), dtype=dtype)
    return np.empty(tuple(shape), dtype=numpy_dtype(code))


def zeros(like: View, shape, code):
    array = empty(like, shape, code)
    array[...] = 0
    return array


def numpy_dtype(code):
    if code == BF16:
        try:
            import ml_dtypes
        except ImportError:
            raise ValueError("bfloat16 NumPy arrays need the ml_dtypes package") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(DTYPE_NAMES[code])


def converted(v: View, code, name):
    """A View of `v`'s values in dtype `code` (a copy, C order); `v` itself when it already is."""
    if v.code == code:
        return v
    if v.torch:
        torch = torch_module()
        dtype = _torch_dtype(torch, code)
        return view(v.obj.to(dtype).contiguous(), name)
    return view(np.ascontiguousarray(v.obj, dtype=numpy_dtype(code)), name)


def copy_into(dst, src):
    """dst[...] = src, converting dtype (both of the same kind)."""
    if is_torch(dst):
        dst.copy_(src)
    else:
        np.copyto(dst, src, casting="unsafe")


def as_dtype(array, code):
    """`array` converted to dtype `code` (a new array of the same kind)."""
    if is_torch(array):
        torch = torch_module()
        return array.to(_torch_dtype(torch, code))
    return array.astype(numpy_dtype(code))


def int32_array(values, name, count=None, *, ndim=1, layout=None):
    """A C-contiguous int32 NumPy array of integers (lengths, prefix sums, block tables): the
    one checked conversion of every integer array from Python. Refused: a dtype that is not
    an integer one (floats, even whole ones, and bool), any value outside int32 (named by its
    index, never wrapped), a rank other than `ndim` (`layout` names the expected shape), and
    for ndim = 1 a length other than `count` (when given)."""
    if is_torch(values):
        if values.device.type != "cpu":
            raise ValueError(f"{name} is on device {values.device}; attn computes on the CPU")
        values = values.detach().numpy()
    try:
        array = np.asarray(values)
    except Exception as e:
        raise TypeError(f"{name} must be a sequence of ints: {e}") from None
    if array.ndim != ndim:
        if ndim == 1 and count is not None:
            raise ValueError(f"{name} must have {count} entries (one per batch), got shape "
                             f"{array.shape}")
        expected = f"{ndim} dimension{'s' if ndim > 1 else ''}" + (f" {layout}" if layout else "")
        raise ValueError(f"{name} must have {expected}, got shape {array.shape}")
    if ndim == 1 and count is not None and array.shape[0] != count:
        raise ValueError(f"{name} must have {count} entries (one per batch), got shape "
                         f"{array.shape}")
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    if array.size and array.dtype.itemsize >= 4 and array.dtype != np.int32:
        outside = (array < -2**31) | (array > 2**31 - 1)
        if outside.any():
            where = np.unravel_index(int(np.flatnonzero(outside)[0]), array.shape)
            index = ", ".join(str(int(i)) for i in where)
            raise ValueError(f"{name}[{index}] = {int(array[where])}: outside int32")
    return np.ascontiguousarray(array, dtype=np.int32)


def float32_array(values, name, count):
    if is_torch(values):
        values = values.detach().float().cpu().numpy()
    array = np.asarray(values, dtype=np.float32)
    if array.ndim != 1 or array.shape[0] != count:
        raise ValueError(f"{name} must have {count} entries, got shape {array.shape}")
    return np.ascontiguousarray(array)
