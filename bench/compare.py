#!/usr/bin/env python3
"""compare.py — attn against PyTorch's scaled_dot_product_attention on CPU, in one run.

For every configuration of the grid (the same grid and flags as `attn-bench`), it times:
  * attn: `attn-bench` with the same thread count (its median over --repeats runs),
  * PyTorch: torch.nn.functional.scaled_dot_product_attention on CPU, in --dtype (float32
    by default; bf16 / f16 time PyTorch's own 16-bit SDPA against `attn-bench --dtype`), with
    torch.set_num_threads(threads); causal uses is_causal=True, the sliding window a boolean
    attn_mask (what a PyTorch user would write); GQA/MQA through enable_gqa=True when the
    installed torch has it, else K/V expanded with repeat_interleave (not timed),
  * PyTorch FlexAttention (torch.nn.attention.flex_attention) for the causal and window rows,
    with a block mask built from the mask_mod (so blocks outside the band are skipped),
    compiled by torch.compile when that works on this machine, else eager (the header line
    says which; --no-flex skips it; compiling takes a while per shape),
  * the naive reference (`attn-bench --reference`: attn_reference_forward, T x T in double)
    for T <= --reference-max-t only,
and prints one Markdown table of medians and ratios. With --backward it also times
attn_backward against loss.backward() through SDPA (q, k, v requiring grad; the forward is
excluded from the PyTorch backward time by timing only .backward()).

--clock cpu times both sides by process CPU time divided by the thread count (attn-bench
--clock cpu; time.process_time() for PyTorch), which on a shared machine counts only the time
the threads actually ran; the default is the wall clock.

GFLOP/s count allowed pairs only: 4*D per pair forward, 10*D backward (see `attn-bench --help`).

Usage: python3 bench/compare.py --attn-bench build/attn-bench [--quick] [--t 1024,4096] [--d 64] ...
       [--threads 2] [--repeats 5] [--markdown results.md] [--backward] [--dtype bf16]
(The naive reference stays float32.)
"""
import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def parse_list(text):
    return [int(x) for x in text.split(",") if x]


def allowed_pairs(mask, t, window):
    if mask == "none":
        return t * t
    if mask == "causal":
        return t * (t + 1) // 2
    return sum(min(i + 1, window) for i in range(t))


def run_attn(args, extra, lengths):
    command = [args.attn_bench, "forward", "--t", ",".join(map(str, lengths)), "--d", args.d,
               "--heads", args.heads, "--groups", args.groups, "--masks", args.masks,
               "--window", str(args.window), "--repeats", str(args.repeats),
               "--threads", str(args.threads), "--clock", args.clock, "--csv", "/dev/stdout"] + extra
    if args.peak_gflops:
        command += ["--peak-gflops", str(args.peak_gflops)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    # The CSV follows the Markdown table on stdout: it starts at its header line.
    start = output.index("pass,batch,length")
    rows = {}
    for row in csv.DictReader(io.StringIO(output[start:])):
        key = (row["pass"], int(row["length"]), int(row["query_heads"]), int(row["kv_heads"]),
               int(row["head_dim"]), row["mask"])
        rows[key] = row
    return rows


CLOCK = {"wall": time.perf_counter}


def now():
    return CLOCK["now"]()


def torch_time(function, repeats):
    function()  # warm-up
    times = []
    for _ in range(repeats):
        start = now()
        function()
        times.append(now() - start)
    return statistics.median(times)


TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def torch_case(t, hq, hkv, d, mask, window, repeats, backward, dtype="f32"):
    generator = torch.Generator().manual_seed(0)
    q = (torch.rand(1, hq, t, d, generator=generator) * 2 - 1).to(TORCH_DTYPES[dtype])
    k = (torch.rand(1, hkv, t, d, generator=generator) * 2 - 1).to(TORCH_DTYPES[dtype])
    v = (torch.rand(1, hkv, t, d, generator=generator) * 2 - 1).to(TORCH_DTYPES[dtype])
    kwargs = {}
    if hq != hkv:
        try:
            F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1], enable_gqa=True)
            kwargs["enable_gqa"] = True
        except TypeError:
            k = k.repeat_interleave(hq // hkv, dim=1)
            v = v.repeat_interleave(hq // hkv, dim=1)
    if mask == "causal":
        kwargs["is_causal"] = True
    elif mask == "window":
        i = torch.arange(t).unsqueeze(1)
        j = torch.arange(t).unsqueeze(0)
        kwargs["attn_mask"] = (j <= i) & (j > i - window)
    if not backward:
        with torch.no_grad():
            return torch_time(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs), repeats)
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    dout = torch.rand(q.shape, generator=generator).to(q.dtype)
    times = []
    for run in range(repeats + 1):
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        start = now()
        out.backward(dout)
        if run > 0:
            times.append(now() - start)
        q.grad = k.grad = v.grad = None
    return statistics.median(times)


FLEX = {}


def flex_setup(enabled):
    """FlexAttention (torch.nn.attention.flex_attention) compiled by torch.compile when that
    works here (tried once on a small causal case), else eager; None when unavailable."""
    if not enabled:
        return None
    try:
        from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    except ImportError:
        return None
    FLEX["create_block_mask"] = create_block_mask
    try:
        compiled = torch.compile(flex_attention)
        x = torch.rand(1, 1, 128, 16)
        mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, 128, 128, device="cpu")
        with torch.no_grad():
            compiled(x, x, x, block_mask=mask)
        FLEX["function"], FLEX["mode"] = compiled, "compiled (torch.compile)"
    except Exception as error:  # no compiler toolchain, unsupported backend...
        FLEX["function"] = flex_attention
        FLEX["mode"] = f"eager (torch.compile failed: {type(error).__name__})"
    return FLEX["mode"]


def flex_case(t, hq, hkv, d, mask, window, repeats, backward, dtype="f32"):
    """FlexAttention time for the causal and window rows (a block mask from the mask_mod, so
    blocks outside the band are skipped), or None for other masks and for the backward where
    this torch's FlexAttention refuses it on CPU (NotImplementedError)."""
    if "function" not in FLEX or mask not in ("causal", "window"):
        return None
    try:
        return flex_time(t, hq, hkv, d, mask, window, repeats, backward, dtype)
    except NotImplementedError:
        return None


def flex_time(t, hq, hkv, d, mask, window, repeats, backward, dtype):
    """flex_case's timing, its arguments checked."""
    generator = torch.Generator().manual_seed(0)
    q = (torch.rand(1, hq, t, d, generator=generator) * 2 - 1).to(TORCH_DTYPES[dtype])
    k = (torch.rand(1, hkv, t, d, generator=generator) * 2 - 1).to(TORCH_DTYPES[dtype])
    v = (torch.rand(1, hkv, t, d, generator=generator) * 2 - 1).to(TORCH_DTYPES[dtype])
    if mask == "causal":
        def mask_mod(b, h, q_index, k_index):
            return q_index >= k_index
    else:
        def mask_mod(b, h, q_index, k_index):
            return (q_index >= k_index) & (q_index - k_index < window)
    block_mask = FLEX["create_block_mask"](mask_mod, None, None, t, t, device="cpu")
    kwargs = {"block_mask": block_mask}
    if hq != hkv:
        kwargs["enable_gqa"] = True
    function = FLEX["function"]
    if not backward:
        with torch.no_grad():
            return torch_time(lambda: function(q, k, v, **kwargs), repeats)
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    dout = torch.rand(q.shape, generator=generator).to(q.dtype)
    times = []
    for run in range(repeats + 1):
        out = function(q, k, v, **kwargs)
        start = now()
        out.backward(dout)
        if run > 0:
            times.append(now() - start)
        q.grad = k.grad = v.grad = None
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attn-bench", default="build/attn-bench", help="path of the attn-bench binary")
    parser.add_argument("--quick", action="store_true", help="T 512..4096, Hq 8")
    parser.add_argument("--t", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--d", default="64,128")
    parser.add_argument("--heads", default="8,32")
    parser.add_argument("--groups", default="1,4")
    parser.add_argument("--masks", default="none,causal,window")
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reference-max-t", type=int, default=1024)
    parser.add_argument("--peak-gflops", type=float, default=0.0)
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32",
                        help="type of Q, K, V, O on both sides (attn-bench --dtype)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall clock, or process CPU time per thread (shared machines)")
    parser.add_argument("--no-flex", action="store_true",
                        help="skip FlexAttention (timed for the causal and window rows)")
    args = parser.parse_args()
    CLOCK["now"] = (time.perf_counter if args.clock == "wall"
                    else lambda: time.process_time() / args.threads)
    if args.quick:
        args.t, args.heads = "512,1024,2048,4096", "8"
    torch.set_num_threads(args.threads)
    lengths = parse_list(args.t)
    flex_mode = flex_setup(not args.no_flex and any(
        m in ("causal", "window") for m in args.masks.split(",")))

    attn_rows = run_attn(args, (["--backward"] if args.backward else []) + ["--dtype", args.dtype],
                         lengths)
    small = [t for t in lengths if t <= args.reference_max_t]
    reference_rows = run_attn(args, ["--reference"], small) if small else {}

    wait_policy = os.environ.get("OMP_WAIT_POLICY")
    command = ("OMP_WAIT_POLICY=" + wait_policy + " " if wait_policy else "") + \
        "python3 " + " ".join(sys.argv)
    lines = [f"Command: `{command}`", "",
             f"torch {torch.__version__}, {args.dtype}, {args.threads} threads, {args.clock} clock; "
             f"attn median of "
             f"{args.repeats} runs; ratios > 1 mean attn is faster. FlexAttention (causal and "
             f"window rows, block mask): {flex_mode or 'not run'}.", "",
             "| pass | T | Hq | Hkv | D | mask | attn ms | attn GFLOP/s | % peak | torch ms | "
             "torch GFLOP/s | attn vs torch | flex ms | flex GFLOP/s | attn vs flex | "
             "reference ms | attn vs reference |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in sorted(attn_rows, key=lambda k: (k[0], k[2], -k[3], k[4], k[5], k[1])):
        passname, t, hq, hkv, d, mask = key
        row = attn_rows[key]
        if row["status"] != "ok":
            lines.append(f"| {passname} | {t} | {hq} | {hkv} | {d} | {mask} | {row['status']} "
                         "| | | | | | | | | | |")
            continue
        attn_seconds = float(row["median_seconds"])
        torch_seconds = torch_case(t, hq, hkv, d, mask, args.window, args.repeats,
                                   passname == "backward", args.dtype)
        flops = (10 if passname == "backward" else 4) * d * allowed_pairs(mask, t, args.window) * hq
        flex_seconds = flex_case(t, hq, hkv, d, mask, args.window, args.repeats,
                                 passname == "backward", args.dtype)
        flex_columns = "| | |"
        if flex_seconds:
            flex_columns = (f"{flex_seconds * 1e3:.2f} | {flops / flex_seconds * 1e-9:.1f} | "
                            f"{flex_seconds / attn_seconds:.2f}x |")
        reference = reference_rows.get(("reference", t, hq, hkv, d, mask))
        reference_ms = reference_ratio = ""
        if reference and reference["status"] == "ok" and passname == "forward":
            reference_seconds = float(reference["median_seconds"])
            reference_ms = f"{reference_seconds * 1e3:.2f}"
            reference_ratio = f"{reference_seconds / attn_seconds:.1f}x"
        lines.append(
            f"| {passname} | {t} | {hq} | {hkv} | {d} | {mask} | {attn_seconds * 1e3:.2f} | "
            f"{float(row['gflops']):.1f} | {float(row['peak_fraction']) * 100:.1f}% | "
            f"{torch_seconds * 1e3:.2f} | {flops / torch_seconds * 1e-9:.1f} | "
            f"{torch_seconds / attn_seconds:.2f}x | {flex_columns} {reference_ms} | "
            f"{reference_ratio} |")
        print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as file:
            file.write(text)


if __name__ == "__main__":
    main()
