"""weights_out_cases.py — `attn forward --weights-out`: the probabilities [B, Hq, Tq, Tk] against
an independent float64 numpy softmax(Q·Kᵀ·scale (+ bias, masks; empty rows 0)) within 1e-5, against
exp(S - lse) of the forward's own --lse, drawn by `attn heatmap`; forbidden pairs written as -0.0
exactly where numpy's mask forbids them (allowed weights that underflow stay +0.0); the same
tensor in a safetensors file; and its refusals (too many probabilities, too many keys, clashing
names): one line naming the size and the limit, no output file at all.
usage: python3 weights_out_cases.py ATTN_BINARY WORK_DIR"""
import os
import subprocess
import sys

import numpy as np

attn, work = sys.argv[1], sys.argv[2]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL", message)


def path(name):
    return os.path.join(work, name)


def read_safetensors(name):
    """{tensor: (dtype, shape, bytes)} of a safetensors file, read with the standard library."""
    import json
    import struct
    data = open(name, "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    return {key: (value["dtype"], value["shape"], body[value["data_offsets"][0]:value["data_offsets"][1]])
            for key, value in header.items() if key != "__metadata__"}


def forward(*arguments):
    return subprocess.run([attn, "forward", "--q", path("q.npy"), "--k", path("k.npy"), "--v",
                           path("v.npy"), "--out", path("o.npy"), *arguments],
                          capture_output=True, text=True)


def save_qkv(B, Tq, Tk, Hq, Hkv, D, seed):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, Tq, Hq, D)).astype(np.float32)
    k = rng.normal(size=(B, Tk, Hkv, D)).astype(np.float32)
    v = rng.normal(size=(B, Tk, Hkv, D)).astype(np.float32)
    for name, array in (("q", q), ("k", k), ("v", v)):
        np.save(path(name + ".npy"), array)
    return q.astype(np.float64), k.astype(np.float64)


def logits(q, k, scale):
    """S [B, Hq, Tq, Tk] in float64, query head h reading KV head h // (Hq / Hkv)."""
    group = q.shape[2] // k.shape[2]
    return np.einsum("bihd,bjhd->bhij", q, np.repeat(k, group, axis=2)) * scale


def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# Cases as data: (name, B, Tq, Tk, Hq, Hkv, D, extra CLI options, logits -> masked logits).
rng = np.random.default_rng(7)
bias = rng.normal(size=(1, 4, 6, 9)).astype(np.float32)
np.save(path("bias.npy"), bias)


row_mask = np.ones((6, 9), dtype=bool)
row_mask[2, :] = False  # query 2 sees no key: an empty row
row_mask[4, 5:] = False
np.save(path("rowmask.npy"), row_mask)


# A bias that forbids pairs (-inf) and makes allowed ones underflow to exactly 0 (-1000).
hard_bias = np.zeros((6, 9), dtype=np.float32)
hard_bias[:, 7] = -np.inf
hard_bias[1, 2] = hard_bias[3, 4] = -1000.0
np.save(path("hardbias.npy"), hard_bias)


def window_softcap_alibi(s, left=2, right=1, cap=5.0):
    """Soft-cap, ALiBi (standard slopes of 4 heads: 2^-2, 2^-4, 2^-6, 2^-8), window, top-left."""
    Tq, Tk = s.shape[-2:]
    distance = np.arange(Tq)[:, None] - np.arange(Tk)[None, :]
    slopes = 2.0 ** (-2.0 * np.arange(1, 5))
    s = cap * np.tanh(s / cap) - slopes[None, :, None, None] * np.abs(distance)
    return np.where((distance <= left) & (-distance <= right), s, -np.inf)


def causal_bottom_right(s):
    Tq, Tk = s.shape[-2:]
    allowed = np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + (Tk - Tq)
    return np.where(allowed, s, -np.inf)


cases = [
    ("plain GQA", 2, 6, 9, 4, 2, 8, [], 1 / np.sqrt(8), lambda s: s),
    ("scale + causal bottom-right", 1, 6, 9, 4, 4, 16, ["--scale", "0.3", "--causal", "bottom-right"],
     0.3, causal_bottom_right),
    ("bias", 1, 6, 9, 4, 1, 8, ["--bias", path("bias.npy")], 1 / np.sqrt(8),
     lambda s: s + bias.astype(np.float64)),
    ("one query, MQA", 3, 1, 33, 8, 1, 4, [], 0.5, lambda s: s),
    ("mask with an empty row, --empty-rows zero", 2, 6, 9, 2, 2, 8,
     ["--mask", path("rowmask.npy"), "--empty-rows", "zero"], 1 / np.sqrt(8),
     lambda s: np.where(row_mask, s, -np.inf)),
    ("-inf bias and underflowing weights", 1, 6, 9, 2, 1, 8, ["--bias", path("hardbias.npy")],
     1 / np.sqrt(8), lambda s: s + hard_bias.astype(np.float64)),
    ("window + soft-cap + ALiBi", 1, 6, 6, 4, 2, 8,
     ["--window", "2,1", "--align", "top-left", "--softcap", "5", "--alibi"], 1 / np.sqrt(8),
     window_softcap_alibi),
]
for name, B, Tq, Tk, Hq, Hkv, D, options, scale, mask in cases:
    q, k = save_qkv(B, Tq, Tk, Hq, Hkv, D, seed=len(name))
    for stale in ("w.npy", "lse.npy"):
        if os.path.exists(path(stale)):
            os.remove(path(stale))
    r = forward("--lse", path("lse.npy"), "--weights-out", path("w.npy"), *options)
    check(r.returncode == 0 and r.stderr == "", f"{name}: exit {r.returncode} {r.stderr!r}")
    if r.returncode != 0:
        continue
    w = np.load(path("w.npy"))
    check(w.dtype == np.float32 and w.shape == (B, Hq, Tq, Tk), f"{name}: {w.dtype} {w.shape}")
    s = mask(logits(q, k, scale))
    with np.errstate(invalid="ignore"):
        expected = np.nan_to_num(softmax(s), nan=0.0)  # an empty row: P = 0 (--empty-rows zero)
    error = np.abs(w - expected).max()
    check(error <= 1e-5, f"{name}: max |P - numpy softmax| = {error:.2e} > 1e-5")
    lse = np.load(path("lse.npy")).astype(np.float64)
    with np.errstate(invalid="ignore"):
        from_lse = np.nan_to_num(np.exp(s - lse[..., None]), nan=0.0)
    check(np.abs(w - from_lse).max() <= 1e-5, f"{name}: P differs from exp(S - lse)")
    forbidden = np.broadcast_to(s == -np.inf, w.shape)
    negative_zero = (w == 0) & np.signbit(w)
    check(np.array_equal(negative_zero, forbidden),
          f"{name}: -0.0 at {int(negative_zero.sum())} pairs, numpy forbids {int(forbidden.sum())}"
          f" ({int((negative_zero != forbidden).sum())} differ)")
    underflow = (w == 0) & ~forbidden
    if name.startswith("-inf bias"):
        check(underflow.sum() == 2 * Hq and not np.signbit(w[underflow]).any(),
              f"{name}: {int(underflow.sum())} allowed weights that underflow to +0.0, expected "
              f"{2 * Hq}")
    print(f"{name}: [{B}, {Hq}, {Tq}, {Tk}] max |P - numpy| = {error:.1e}")

# The file draws: attn heatmap on it (two heads of the GQA case).
save_qkv(1, 5, 5, 2, 1, 4, seed=11)
r = forward("--weights-out", path("w5.npy"), "--causal", "top-left")
r2 = subprocess.run([attn, "heatmap", "--weights", path("w5.npy"), "--out", path("w5.png")],
                    capture_output=True, text=True)
check(r.returncode == 0 and r2.returncode == 0 and os.path.getsize(path("w5.png")) > 5000,
      f"attn heatmap of --weights-out: {r.stderr!r} {r2.stderr!r}")

# A safetensors output: --weights-out W.safetensors (tensor "weights") next to O and LSE in
# the same file, float32, the same numbers (and -0.0 signs) as the .npy.
save_qkv(1, 5, 7, 2, 1, 4, seed=12)
r = forward("--causal", "bottom-right", "--lse", path("lse.npy"), "--weights-out", path("w5c.npy"))
r2 = subprocess.run([attn, "forward", "--q", path("q.npy"), "--k", path("k.npy"), "--v",
                     path("v.npy"), "--causal", "bottom-right", "--out", path("all.safetensors"),
                     "--lse", path("all.safetensors"), "--weights-out", path("all.safetensors")],
                    capture_output=True, text=True)
check(r.returncode == 0 and r2.returncode == 0, f"safetensors --weights-out: {r.stderr!r} {r2.stderr!r}")
if r2.returncode == 0:
    tensors = read_safetensors(path("all.safetensors"))
    check(sorted(tensors) == ["lse", "o", "weights"], f"safetensors tensors {sorted(tensors)}")
    dtype, shape, data = tensors.get("weights", (None, None, b""))
    check(dtype == "F32" and shape == [1, 2, 5, 7], f"safetensors weights {dtype} {shape}")
    if dtype == "F32":
        ws = np.frombuffer(data, dtype="<f4").reshape(shape)
        check(ws.tobytes() == np.load(path("w5c.npy")).tobytes(),
              "safetensors weights differ from the .npy's bit for bit")
        check(int(np.signbit(ws).sum()) == 2 * 10, f"causal 5x7: {int(np.signbit(ws).sum())} -0.0")
    r3 = subprocess.run([attn, "heatmap", "--weights", path("all.safetensors:weights"), "--out",
                         path("all.png")], capture_output=True, text=True)
    check(r3.returncode == 0 and os.path.getsize(path("all.png")) > 5000,
          f"attn heatmap of a safetensors --weights-out: {r3.stderr!r}")

# Refusals: one line naming the size and the limit; no --out, --lse or --weights-out file.
refusals = [
    ("too many probabilities", (1, 4096, 4096, 2, 1, 1),
     ["B*Hq*Tq*Tk = 1*2*4096*4096 = 33,554,432", "limit of 16,777,216"], 1),
    ("too many keys", (1, 1, 8192, 1, 1, 1), ["Tk = 8,192 keys", "limit of 4,096"], 1),
]
for name, shape, expected, code in refusals:
    save_qkv(*shape, seed=5)
    for stale in ("o.npy", "lse.npy", "w.npy"):
        if os.path.exists(path(stale)):
            os.remove(path(stale))
    r = forward("--lse", path("lse.npy"), "--weights-out", path("w.npy"))
    check(r.returncode == code and len(r.stderr.splitlines()) == 1 and
          all(e in r.stderr for e in expected) and "w.npy" in r.stderr,
          f"{name}: exit {r.returncode}, stderr {r.stderr!r}")
    left = [n for n in ("o.npy", "lse.npy", "w.npy") if os.path.exists(path(n))]
    check(not left, f"{name}: left {left}")
save_qkv(1, 4, 4, 1, 1, 4, seed=6)
for clash, option in ((path("o.npy"), "--out"), (path("lse.npy"), "--lse")):
    r = forward("--lse", path("lse.npy"), "--weights-out", clash)
    check(r.returncode == 2 and len(r.stderr.splitlines()) == 1 and option in r.stderr,
          f"--weights-out = {option}: exit {r.returncode} {r.stderr!r}")
# A failing call (an empty row under the default policy) leaves no weights file.
np.save(path("nomask.npy"), np.zeros((4, 4), dtype=bool))
r = forward("--mask", path("nomask.npy"), "--weights-out", path("w.npy"))
check(r.returncode == 1 and not os.path.exists(path("w.npy")), f"empty row: {r.stderr!r}")
check(not [n for n in os.listdir(work) if ".partial" in n], "partial files left behind")

if failures:
    print(f"{len(failures)} failures")
    sys.exit(1)
print("attn forward --weights-out writes the probabilities")
