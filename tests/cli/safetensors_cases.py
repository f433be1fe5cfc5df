#!/usr/bin/env python3
"""safetensors_cases.py — used by safetensors.sh: `attn forward` and `attn backward` on
safetensors tensors (FILE.safetensors[:NAME]) in F32, BF16 and F16, against the .npy path on
the same values (bitwise) and against a float64 NumPy reference (within the dtype's bound);
outputs read back by the `safetensors` package (with ml_dtypes) when the interpreter has
them, else by a reader written here with struct and json; inputs written here with struct and
json (independent of attn's writer), including a tensor whose data are not aligned. Then a
table of errors: each exits nonzero with one line naming the option and the tensor, and leaves
no output file (an existing one untouched).

usage: python3 safetensors_cases.py ATTN_BINARY WORK_DIR
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

ATTN, WORK = os.path.abspath(sys.argv[1]), sys.argv[2]
os.chdir(WORK)
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


# ---- 16-bit values without ml_dtypes: bf16 as the top half of a float32 -----------------
def round_bf16(x):
    """float32 -> the nearest bf16 (ties to even), as float32 (finite inputs)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def encode(x, dtype):
    """Little-endian bytes of x (float32 values already representable) in dtype."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "F32":
        return x.astype("<f4").tobytes()
    if dtype == "F16":
        return x.astype("<f2").tobytes()
    if dtype == "BF16":
        return (x.view(np.uint32) >> 16).astype("<u2").tobytes()
    if dtype == "I32":
        return x.astype("<i4").tobytes()
    if dtype == "U8":
        return x.astype("u1").tobytes()
    raise ValueError(dtype)


def decode(raw, dtype, shape):
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape).astype(np.float64)
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").reshape(shape).astype(np.float64)
    if dtype == "BF16":
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape).astype(np.float64)
    raise ValueError(dtype)


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, array); data in order, header padded to 8 bytes."""
    header, blobs, offset = {}, [], 0
    for name, dtype, array in tensors:
        blob = encode(array, dtype)
        header[name] = {"dtype": dtype, "shape": list(np.shape(array)),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


try:  # the reference reader when the interpreter has it
    import ml_dtypes  # noqa: F401  (numpy bfloat16 for safetensors' numpy framework)
    from safetensors import safe_open
except ImportError:
    safe_open = None
print("safetensors_cases: outputs read with",
      "the safetensors package" if safe_open else "struct/json (no safetensors + ml_dtypes)")


def read_safetensors(path):
    """{name: (dtype text, float64 array)}."""
    result = {}
    if safe_open is not None:
        with safe_open(path, framework="np") as f:
            for name in f.keys():
                result[name] = (f.get_slice(name).get_dtype(),
                                f.get_tensor(name).astype(np.float64))
        return result
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        result[name] = (entry["dtype"], decode(raw, entry["dtype"], entry["shape"]))
    return result


def run(*args):
    result = subprocess.run([ATTN, *args], capture_output=True, text=True)
    return result.returncode, result.stderr


# ---- float64 references ----------------------------------------------------------------
def forward_reference(q, k, v, causal=False):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(q.shape[3])
    if causal:  # bottom-right: query i at position i + Tk - Tq
        tq, tk = s.shape[2], s.shape[3]
        allowed = np.arange(tk)[None, :] <= np.arange(tq)[:, None] + tk - tq
        s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    p /= l
    return np.einsum("bhij,bjhd->bihd", p, v), (m + np.log(l))[..., 0], p


def backward_reference(q, k, v, do):
    q, k, v, do = (np.asarray(x, dtype=np.float64) for x in (q, k, v, do))
    hkv = k.shape[2]
    group = q.shape[2] // hkv
    o, _, p = forward_reference(q, k, v)
    ke, ve = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    dp = np.einsum("bihd,bjhd->bhij", do, ve)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / np.sqrt(q.shape[3])
    dq = np.einsum("bhij,bjhd->bihd", ds, ke)
    dk = np.einsum("bhij,bihd->bjhd", ds, q)
    dv = np.einsum("bhij,bihd->bjhd", p, do)
    fold = lambda g: g.reshape(g.shape[0], g.shape[1], hkv, group, g.shape[3]).sum(3)
    return dq, fold(dk), fold(dv)


UNIT = {"F32": 2.0 ** -24, "BF16": 2.0 ** -8, "F16": 2.0 ** -11}
ROUND = {"F32": lambda x: np.asarray(x, np.float32), "BF16": round_bf16,
         "F16": lambda x: np.asarray(x, np.float32).astype(np.float16).astype(np.float32)}
DTYPE_OPTION = {"F32": "f32", "BF16": "bf16", "F16": "f16"}
NPY_OUT = {"F32": np.float32, "BF16": np.float32, "F16": np.float16}  # .npy has no bfloat16

rng = np.random.default_rng(11)
normal = lambda *s: rng.standard_normal(s).astype(np.float32)

# ---- forward: safetensors inputs = the .npy path, bitwise; O / LSE vs the reference -------
# (stored dtype of Q/K/V, --dtype, Hq, Hkv, causal, how O is written)
FORWARD_CASES = [
    ("F32", "F32", 4, 2, False, "safetensors"),
    ("BF16", "BF16", 4, 2, False, "safetensors"),
    ("F16", "F16", 4, 4, True, "safetensors"),
    ("BF16", "BF16", 8, 1, True, "npy"),      # bf16 O to .npy: float32, the same values
    ("F16", "F16", 2, 2, False, "npy"),       # float16 .npy
    ("BF16", "F32", 4, 2, False, "safetensors"),  # bf16 inputs widened exactly for f32
    ("F16", "BF16", 4, 2, True, "safetensors"),   # f16 inputs rounded to bf16
]
for number, (stored, compute, hq, hkv, causal, out_kind) in enumerate(FORWARD_CASES):
    name = f"forward {number}: {stored} inputs, --dtype {DTYPE_OPTION[compute]}, {out_kind} O"
    q, k, v = (ROUND[stored](normal(*s)) for s in ((2, 9, hq, 16), (2, 13, hkv, 16), (2, 13, hkv, 12)))
    # Q alone in one file after a 2-byte tensor (Q's data unaligned: read by copy), K and V
    # under longer names in another; the .npy path gets the same values as float32.
    write_safetensors(f"q{number}.safetensors", [("pad", "U8", np.zeros(2)), ("q", stored, q)])
    write_safetensors(f"kv{number}.safetensors",
                      [("model.k", stored, k), ("model.v", stored, v)])
    for label, array in (("q", q), ("k", k), ("v", v)):
        np.save(f"{label}{number}.npy", array)
    options = ["--dtype", DTYPE_OPTION[compute]] + (["--causal", "bottom-right"] if causal else [])
    out_arg = (f"out{number}.safetensors" if out_kind == "safetensors" else f"out{number}.npy")
    lse_arg = f"out{number}.safetensors:lse" if out_kind == "safetensors" else f"lse{number}.npy"
    code, err = run("forward", "--q", f"q{number}.safetensors", "--k",
                    f"kv{number}.safetensors:model.k", "--v", f"kv{number}.safetensors:model.v",
                    "--out", out_arg, "--lse", lse_arg, *options)
    check(code == 0, f"{name}: exit {code}: {err}")
    code, err = run("forward", "--q", f"q{number}.npy", "--k", f"k{number}.npy", "--v",
                    f"v{number}.npy", "--out", f"npy_out{number}.npy", "--lse",
                    f"npy_lse{number}.npy", *options)
    check(code == 0, f"{name}: .npy path exit {code}: {err}")
    if failures:
        continue
    if out_kind == "safetensors":
        tensors = read_safetensors(out_arg)
        check(sorted(tensors) == ["lse", "o"], f"{name}: tensors {sorted(tensors)}")
        (o_dtype, o), (lse_dtype, lse) = tensors["o"], tensors["lse"]
        check(o_dtype == compute, f"{name}: O stored as {o_dtype}, expected {compute}")
        check(lse_dtype == "F32", f"{name}: LSE stored as {lse_dtype}")
    else:
        o_file, lse = np.load(out_arg), np.load(lse_arg).astype(np.float64)
        check(o_file.dtype == NPY_OUT[compute], f"{name}: .npy O dtype {o_file.dtype}")
        o = o_file.astype(np.float64)
    npy_o = np.load(f"npy_out{number}.npy").astype(np.float64)
    check(np.array_equal(o, npy_o), f"{name}: O differs from the .npy path's "
          f"(max {np.abs(o - npy_o).max():.3g})")
    check(np.array_equal(lse, np.load(f"npy_lse{number}.npy")), f"{name}: LSE differs from .npy")
    check(np.array_equal(ROUND[compute](o), o), f"{name}: O holds values outside {compute}")
    rq, rk, rv = (ROUND[compute](x) for x in (q, k, v))
    expected, expected_lse, _ = forward_reference(rq, rk, rv, causal)
    bound = np.abs(rv).max() * (2 * UNIT[compute] + 1e-5)  # docs/precision.md: 2u max|v| + fp32
    error = np.abs(o - expected).max()
    check(error <= bound, f"{name}: O error {error:.3g} > {bound:.3g}")
    check(np.abs(lse - expected_lse).max() <= 1e-4, f"{name}: LSE error")
    print(f"{name}: O error {error:.2e} (bound {bound:.2e}), = .npy path bitwise")

# ---- backward: bf16 / f16 safetensors in and out, = the .npy path, vs the reference -------
for stored in ("BF16", "F16"):
    name = f"backward {stored}"
    q, k, v, do = (ROUND[stored](normal(*s)) for s in
                   ((1, 7, 4, 16), (1, 11, 2, 16), (1, 11, 2, 8), (1, 7, 4, 8)))
    write_safetensors(f"bwd_{stored}.safetensors",
                      [("q", stored, q), ("k", stored, k), ("v", stored, v), ("do", stored, do)])
    for label, array in (("q", q), ("k", k), ("v", v), ("do", do)):
        np.save(f"bwd_{label}.npy", array)
    dtype = DTYPE_OPTION[stored]
    source = f"bwd_{stored}.safetensors"
    code, err = run("backward", "--q", source, "--k", source, "--v", source, "--do", source,
                    "--dq", f"grads_{stored}.safetensors", "--dk", f"grads_{stored}.safetensors",
                    "--dv", f"grads_{stored}.safetensors:value_gradient", "--dtype", dtype)
    check(code == 0, f"{name}: exit {code}: {err}")
    if code != 0:
        continue
    code, err = run("backward", "--q", "bwd_q.npy", "--k", "bwd_k.npy", "--v", "bwd_v.npy",
                    "--do", "bwd_do.npy", "--dq", "bwd_dq.npy", "--dk", "bwd_dk.npy",
                    "--dv", "bwd_dv.npy", "--dtype", dtype)
    check(code == 0, f"{name}: .npy path exit {code}: {err}")
    if code != 0:
        continue
    tensors = read_safetensors(f"grads_{stored}.safetensors")
    check(sorted(tensors) == ["dk", "dq", "value_gradient"], f"{name}: tensors {sorted(tensors)}")
    expected = backward_reference(q, k, v, do)
    for label, key, reference in zip(("dq", "dk", "dv"), ("dq", "dk", "value_gradient"), expected):
        got_dtype, got = tensors[key]
        check(got_dtype == stored, f"{name}: {label} stored as {got_dtype}")
        npy = np.load(f"bwd_{label}.npy")
        check(npy.dtype == NPY_OUT[stored], f"{name}: .npy {label} dtype {npy.dtype}")
        check(np.array_equal(got, npy.astype(np.float64)), f"{name}: {label} differs from .npy")
        # fp32 computation on the exact inputs, rounded once; O recomputed in the dtype
        # (its rounding enters D = rowsum(dO * O)): a few units of the dtype
        bound = np.abs(reference).max() * 4 * UNIT[stored]
        error = np.abs(got - reference).max()
        check(error <= bound, f"{name}: {label} error {error:.3g} > {bound:.3g}")
    print(f"{name}: dq, dk, dv = .npy path bitwise, within 4u of the reference")

# ---- errors: exit status, one line naming option and tensor, no output file ---------------
q, k, v = normal(1, 4, 2, 8), normal(1, 5, 2, 8), normal(1, 5, 2, 8)
write_safetensors("in.safetensors", [("q", "F32", q), ("k", "F32", k), ("v", "F32", v),
                                     ("ids", "I32", np.zeros((1, 5, 2, 8))),
                                     ("flat", "F32", k[0]), ("k_wide", "F32", normal(1, 5, 2, 9)),
                                     ("big", "F32", v * 1e5),
                                     ("lse16", "BF16", np.zeros((1, 2, 4)))])
with open("existing.safetensors", "wb") as f:
    f.write(b"keep me")
qkv = ["--q", "in.safetensors", "--k", "in.safetensors", "--v", "in.safetensors"]
# (what, arguments, exit status, texts the message must hold, output that must not appear)
ERRORS = [
    ("missing name", ["forward", "--q", "in.safetensors:nope", "--k", "in.safetensors", "--v",
                      "in.safetensors", "--out", "e1.safetensors"], 1,
     ["--q in.safetensors:nope", "no tensor 'nope'", "its 8 tensors"], "e1.safetensors"),
    ("default name absent", ["forward", *qkv[:4], "--v", "kv0.safetensors", "--out", "e2.npy"], 1,
     ["--v kv0.safetensors", "no tensor 'v'"], "e2.npy"),
    ("integer dtype", ["forward", *qkv[:2], "--k", "in.safetensors:ids", *qkv[4:], "--out",
                       "e3.npy"], 1, ["--k in.safetensors:ids", "'ids'", "dtype I32",
                                      "expected F32, BF16 or F16"], "e3.npy"),
    ("rank 3", ["forward", *qkv[:2], "--k", "in.safetensors:flat", *qkv[4:], "--out",
                "e4.safetensors"], 1, ["--k in.safetensors:flat", "'flat'", "rank 3",
                                       "expected rank 4"], "e4.safetensors"),
    ("Dk mismatch", ["forward", *qkv[:2], "--k", "in.safetensors:k_wide", *qkv[4:], "--out",
                     "e5.npy"], 1, ["--k in.safetensors:k_wide", "Dk = 9"], "e5.npy"),
    ("beyond fp16", ["forward", *qkv[:4], "--v", "in.safetensors:big", "--out",
                     "e6.safetensors", "--dtype", "f16"], 1,
     ["--v in.safetensors:big", "does not fit float16"], "e6.safetensors"),
    ("missing file", ["forward", "--q", "absent.safetensors:q", *qkv[2:], "--out", "e7.npy"], 1,
     ["--q", "absent.safetensors"], "e7.npy"),
    ("empty name", ["forward", "--q", "in.safetensors:", *qkv[2:], "--out", "e8.npy"], 2,
     ["--q in.safetensors:", "empty tensor name"], "e8.npy"),
    ("same output tensor", ["forward", *qkv, "--out", "e9.safetensors:x", "--lse",
                            "e9.safetensors:x"], 2,
     ["--lse e9.safetensors:x", "the same tensor as --out"], "e9.safetensors"),
    ("file as npy and safetensors", ["forward", *qkv, "--out", "e10.safetensors", "--lse",
                                     "e10.safetensors.npy"], 0, [], None),
    ("existing output untouched", ["forward", "--q", "in.safetensors:nope", *qkv[2:], "--out",
                                   "existing.safetensors"], 1, ["no tensor 'nope'"], None),
    ("backward BF16 LSE", ["backward", *qkv, "--do", "in.safetensors:q", "--o",
                           "in.safetensors:q", "--lse", "in.safetensors:lse16", "--dq",
                           "e12.safetensors", "--dk", "e12.safetensors", "--dv",
                           "e12.safetensors"], 1,
     ["--lse in.safetensors:lse16", "dtype BF16, expected F32"], "e12.safetensors"),
    ("backward same gradient tensor", ["backward", *qkv, "--do", "in.safetensors:q", "--dq",
                                       "e13.safetensors:g", "--dk", "e13.safetensors:g",
                                       "--dv", "e13.npy"], 2,
     ["--dk e13.safetensors:g", "the same tensor as --dq"], "e13.safetensors"),
    ("backward missing dO", ["backward", *qkv, "--do", "in.safetensors", "--dq", "e14.npy",
                             "--dk", "e14k.npy", "--dv", "e14v.npy"], 1,
     ["--do in.safetensors", "no tensor 'do'"], "e14.npy"),
]
for what, arguments, status, texts, output in ERRORS:
    before = set(os.listdir("."))
    code, err = run(*arguments)
    lines = err.strip().splitlines()
    check(code == status, f"error '{what}': exit {code}, expected {status}: {err}")
    if status != 0:
        check(len(lines) == 1, f"error '{what}': {len(lines)} lines on stderr: {err}")
        for text in texts:
            check(text in err, f"error '{what}': message lacks {text!r}: {err}")
        new = set(os.listdir(".")) - before
        check(not new, f"error '{what}': left {sorted(new)}")
    if output is not None:
        check(not os.path.exists(output), f"error '{what}': {output} written")
check(open("existing.safetensors", "rb").read() == b"keep me", "an existing output was changed")
check(sorted(read_safetensors("e10.safetensors")) == ["o"], "e10: O under its default name")

print(f"safetensors_cases: {len(FORWARD_CASES)} forward cases, 2 backward, {len(ERRORS)} errors;",
      f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
