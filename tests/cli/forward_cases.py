#!/usr/bin/env python3
"""forward_cases.py — used by forward.sh: runs `attn forward` on random inputs for a table of
option sets and compares O and LSE with an independent float64 numpy implementation of the
maths of docs/attention-math.md. Exits 1 on any mismatch.

usage: python3 forward_cases.py ATTN_BINARY WORK_DIR
"""
import os
import subprocess
import sys

import numpy as np

ATTN, WORK = sys.argv[1], sys.argv[2]
TOLERANCE = 2e-5


def alibi_slopes(n):
    """Press et al.'s slopes; n a power of two here: 2^(-8k/n), k = 1..n."""
    return np.array([2.0 ** (-8.0 * k / n) for k in range(1, n + 1)])


def reference(q, k, v, case, files):
    """O [B, Tq, Hq, Dv] and LSE [B, Hq, Tq] in float64, straight from the definitions."""
    B, Tq, Hq, Dk = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    scale = case.get("scale", 1.0 / np.sqrt(Dk))
    out = np.zeros((B, Tq, Hq, v.shape[3]))
    lse = np.full((B, Hq, Tq), -np.inf)
    qlen = files.get("query_lengths", np.full(B, Tq))
    klen = files.get("key_lengths", np.full(B, Tk))
    for b in range(B):
        for h in range(Hq):
            kh = h // group
            x = scale * (q[b, :, h, :].astype(np.float64) @ k[b, :, kh, :].T.astype(np.float64))
            if "softcap" in case:
                c = case["softcap"]
                x = c * np.tanh(x / c)
            i = np.arange(Tq)[:, None]
            j = np.arange(Tk)[None, :]
            shift = (klen[b] - qlen[b]) if case.get("align") == "bottom-right" else 0
            pq, pk = i + shift, j + 0 * i
            if "bias" in files:
                bias = files["bias"].reshape((1,) * (4 - files["bias"].ndim) + files["bias"].shape)
                x = x + bias[min(b, bias.shape[0] - 1), min(h, bias.shape[1] - 1)]
            if case.get("alibi"):
                x = x - alibi_slopes(Hq)[h] * np.abs(pq - pk)
            allowed = np.ones((Tq, Tk), dtype=bool)
            if case.get("causal"):
                allowed &= pk <= pq
            local = np.ones((Tq, Tk), dtype=bool)
            if "window" in case:
                left, right = case["window"]
                if left >= 0:
                    local &= pk >= pq - left
                if right >= 0:
                    local &= pk <= pq + right
            if "strided" in case:
                s = case["strided"]
                d = pq - pk
                local &= (np.abs(d) < s) | (d % s == 0)
            if "global" in case:
                g = np.array(case["global"])
                local |= np.isin(i, g) | np.isin(j, g)
            allowed &= local
            if "mask" in files:
                m = files["mask"].reshape((1,) * (4 - files["mask"].ndim) + files["mask"].shape)
                allowed &= m[min(b, m.shape[0] - 1), min(h, m.shape[1] - 1)]
            allowed &= (j < klen[b]) & (i < qlen[b])
            if "block_layout" in files:
                bq, bk = case["block_size"]
                layout = files["block_layout"]
                layout = layout.reshape((1,) * (4 - layout.ndim) + layout.shape)
                allowed &= layout[min(b, layout.shape[0] - 1), min(h, layout.shape[1] - 1)][
                    i // bq, j // bk]
            x = np.where(allowed, x, -np.inf)
            for row in range(Tq):
                if not np.isfinite(x[row]).any():
                    continue  # empty or padding row: O = 0, LSE = -inf
                top = x[row].max()
                p = np.exp(x[row] - top)
                total = p.sum()
                lse[b, h, row] = top + np.log(total)
                out[b, row, h] = (p / total) @ v[b, :, kh, :].astype(np.float64)
    return out, lse


def run_case(number, case, rng):
    B, Tq, Tk, Hq, Hkv, Dk, Dv = case["shape"]
    q = rng.standard_normal((B, Tq, Hq, Dk)).astype(np.float32)
    k = rng.standard_normal((B, Tk, Hkv, Dk)).astype(np.float32)
    v = rng.standard_normal((B, Tk, Hkv, Dv)).astype(np.float32)
    directory = os.path.join(WORK, f"case{number}")
    os.makedirs(directory, exist_ok=True)
    paths = {name: os.path.join(directory, name + ".npy") for name in "qkv"}
    for name, array in zip("qkv", (q, k, v)):
        np.save(paths[name], array)
    args = [ATTN, "forward", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"],
            "--out", os.path.join(directory, "o.npy"), "--lse", os.path.join(directory, "lse.npy")]
    files = {}
    for name, maker in case.get("files", {}).items():
        files[name] = maker(rng)
        path = os.path.join(directory, name + ".npy")
        np.save(path, files[name])
        args += ["--" + name.replace("_", "-"), path]
    args += case.get("args", [])
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        print(f"FAIL case {number} {case['name']}: exit {result.returncode}: {result.stderr}")
        return False
    out = np.load(os.path.join(directory, "o.npy"))
    lse = np.load(os.path.join(directory, "lse.npy"))
    want_out, want_lse = reference(q, k, v, case, files)
    error_out = np.max(np.abs(out - want_out) / (1 + np.abs(want_out)))
    finite = np.isfinite(want_lse)
    same_inf = np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    error_lse = np.max(np.abs(lse[finite] - want_lse[finite]) / (1 + np.abs(want_lse[finite]))) \
        if finite.any() else 0.0
    ok = out.shape == want_out.shape and error_out < TOLERANCE and error_lse < TOLERANCE \
        and same_inf
    print(f"{'ok  ' if ok else 'FAIL'} case {number} {case['name']}: max rel error O {error_out:.2e}"
          f", LSE {error_lse:.2e}{'' if same_inf else ', -inf rows differ'}")
    return ok


CASES = [
    {"name": "plain MHA", "shape": (2, 7, 7, 2, 2, 8, 8)},
    {"name": "GQA cross Tq<Tk, Dk!=Dv, explicit scale", "shape": (1, 5, 9, 4, 2, 6, 3),
     "args": ["--scale", "0.3"], "scale": 0.3},
    {"name": "causal bottom-right Tq<Tk", "shape": (2, 4, 9, 2, 1, 5, 5),
     "args": ["--causal", "bottom-right"], "causal": True, "align": "bottom-right"},
    {"name": "causal top-left Tq>Tk, empty rows zero", "shape": (1, 9, 4, 2, 2, 5, 5),
     "args": ["--causal", "top-left", "--empty-rows", "zero"], "causal": True,
     "align": "top-left"},
    {"name": "sliding window + softcap", "shape": (1, 11, 11, 2, 2, 4, 4),
     "args": ["--window", "3,1", "--softcap", "2.5"], "window": (3, 1), "softcap": 2.5,
     "align": "bottom-right"},
    {"name": "bool mask [Tq, Tk] + float bias [B, 1, Tq, Tk]", "shape": (2, 6, 8, 2, 2, 4, 4),
     "args": ["--empty-rows", "zero"],
     "files": {"mask": lambda r: r.random((6, 8)) < 0.7,
               "bias": lambda r: r.standard_normal((2, 1, 6, 8)).astype(np.float32)}},
    {"name": "ALiBi causal, 4 heads", "shape": (1, 8, 8, 4, 4, 4, 4),
     "args": ["--alibi", "--causal", "bottom-right"], "alibi": True, "causal": True,
     "align": "bottom-right"},
    {"name": "padded batch: query and key lengths", "shape": (3, 6, 7, 2, 2, 4, 4),
     "args": ["--causal", "bottom-right", "--empty-rows", "zero"], "causal": True,
     "align": "bottom-right",
     "files": {"query_lengths": lambda r: np.array([6, 3, 0], dtype=np.int32),
               "key_lengths": lambda r: np.array([7, 5, 2], dtype=np.int32)}},
    {"name": "global tokens + window", "shape": (1, 12, 12, 1, 1, 4, 4),
     "args": ["--window", "1,1", "--global-tokens", "0,5"], "window": (1, 1), "global": [0, 5],
     "align": "bottom-right"},
    {"name": "strided pattern causal", "shape": (1, 13, 13, 1, 1, 4, 4),
     "args": ["--pattern", "strided:3", "--causal", "top-left"], "strided": 3, "causal": True,
     "align": "top-left"},
    {"name": "block layout 4x4 tiles", "shape": (1, 10, 12, 2, 2, 4, 4),
     "args": ["--block-size", "4,4", "--empty-rows", "zero"], "block_size": (4, 4),
     "files": {"block_layout": lambda r: np.array(
         [[[1, 0, 1], [0, 1, 0], [1, 1, 0]]], dtype=bool)}},
    {"name": "threads 1 with kernel generic", "shape": (1, 33, 40, 2, 1, 16, 16),
     "args": ["--threads", "1", "--kernel", "generic"]},
]


def main():
    rng = np.random.default_rng(20240501)
    failures = sum(not run_case(n, case, rng) for n, case in enumerate(CASES))
    print(f"{len(CASES) - failures} of {len(CASES)} forward cases match numpy")
    sys.exit(1 if failures else 0)


main()
