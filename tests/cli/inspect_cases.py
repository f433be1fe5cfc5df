#!/usr/bin/env python3
"""inspect_cases.py — the cases of inspect.sh: writes safetensors files by hand, runs
`attn inspect` on each and checks what it prints.

usage: python3 inspect_cases.py ATTN_BINARY WORK_DIR
"""
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np

ATTN, WORK = sys.argv[1], sys.argv[2]
FAILURES = []
DTYPE_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "F8_E4M3": 1, "U8": 1}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape); data are zeros except a recognisable pattern."""
    header, offset, chunks = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        size = int(np.prod(shape, dtype=np.int64)) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        chunks.append(bytes((offset + i) % 251 for i in range(size)))
        offset += size
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    return offset


def run(*args):
    result = subprocess.run([ATTN, "inspect", *args], capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print("FAIL", what)


def layers_of(stdout):
    """[(index, family, prefix, shapes line, bias line)] from the 'attention layers' part."""
    part = stdout.split("attention layers (", 1)[1]
    lines = part.splitlines()[1:]
    found = []
    for i, line in enumerate(lines):
        m = re.match(r"  layer (\S+) +(\S+) +'(.*)'$", line)
        if m:
            found.append((m.group(1), m.group(2), m.group(3), lines[i + 1].strip(), lines[i + 2].strip()))
    return found


def tensor_rows(stdout):
    rows = {}
    for line in stdout.split("tensors (", 1)[1].split("attention layers", 1)[0].splitlines()[1:]:
        parts = line.split()
        name, dtype = parts[0], parts[1]
        shape = json.loads(line[line.index("["):line.index("]") + 1])
        rows[name] = (dtype, shape, int(line[line.index("]") + 1:].split()[0]))
    return rows


def llama_layer(n, hidden=64, kv=16, dtype="BF16", bias=()):
    p = f"model.layers.{n}.self_attn."
    t = [(p + "q_proj.weight", dtype, [hidden, hidden]), (p + "k_proj.weight", dtype, [kv, hidden]),
         (p + "v_proj.weight", dtype, [kv, hidden]), (p + "o_proj.weight", dtype, [hidden, hidden])]
    t += [(p + f"{r}_proj.bias", dtype, [hidden if r in "qo" else kv]) for r in bias]
    return t + [(f"model.layers.{n}.mlp.up_proj.weight", dtype, [128, hidden]),
                (f"model.layers.{n}.input_layernorm.weight", dtype, [hidden])]


# ---- Llama, sharded, with 10 kB of metadata ----------------------------------------------
folder = os.path.join(WORK, "llama")
os.makedirs(folder)
long_value = ('quote " backslash \\ newline \n tab \t 注意力 ' * 300)[:10000]
shard_tensors = [[("model.embed_tokens.weight", "BF16", [100, 64])] + llama_layer(0),
                 llama_layer(1) + [("lm_head.weight", "BF16", [100, 64])]]
names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
total = 0
for name, tensors in zip(names, shard_tensors):
    total += write_safetensors(os.path.join(folder, name), tensors,
                               {"format": "pt", "long": long_value})
weight_map = {t[0]: names[s] for s in range(2) for t in shard_tensors[s]}
with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

for target in (folder, os.path.join(folder, "model.safetensors.index.json")):
    code, out, err = run(target)
    check(code == 0, f"llama {target}: exit {code}: {err}")
    if code:
        continue
    check(f"2 shards, {len(weight_map)} tensors, {total} bytes of tensor data" in out,
          f"llama summary line: {out.splitlines()[0]}")
    check(f'"total_size" = "{total}"' in out, "index metadata total_size")
    check('"format" = "pt"' in out, "shard metadata once")
    check(f"... ({len(long_value.encode())} bytes)" in out and '"quote \\" backslash \\\\ newline \\n tab \\t 注意力' in out,
          "long metadata shortened and escaped")
    rows = tensor_rows(out)
    check(len(rows) == len(weight_map), f"{len(rows)} tensor rows")
    check(rows.get("model.layers.1.self_attn.k_proj.weight") == ("BF16", [16, 64], 16 * 64 * 2),
          f"k_proj row: {rows.get('model.layers.1.self_attn.k_proj.weight')}")
    check("[1]" in [l for l in out.splitlines() if "lm_head.weight" in l][0], "lm_head in shard 1")
    layers = layers_of(out)
    check([(l[0], l[1], l[2]) for l in layers] ==
          [("0", "llama", "model.layers.0.self_attn."), ("1", "llama", "model.layers.1.self_attn.")],
          f"llama layers: {layers}")
    check(layers and layers[0][3] == "q [64, 64]  k [16, 64]  v [16, 64]  o [64, 64]"
          and layers[0][4] == "bias: none", f"llama layer 0 detail: {layers[:1]}")

code, out, err = run(folder, "--no-tensors")
check(code == 0 and "tensors (" not in out and "attention layers (2)" in out, "--no-tensors")

# ---- single files of other families ---------------------------------------------------------
families = {
    "qwen2": (llama_layer(0, 32, 8, "F32", bias="qkv"), [("0", "qwen2", "model.layers.0.self_attn.",
              "q [32, 32]  k [8, 32]  v [8, 32]  o [32, 32]", "bias: q k v")]),
    "bert": ([(f"encoder.layer.{n}.attention.{part}.{kind}", "F32", [24, 24] if kind == "weight" else [24])
              for n in (0, 1) for part in ("self.query", "self.key", "self.value", "output.dense")
              for kind in ("weight", "bias")] + [("encoder.layer.0.attention.output.LayerNorm.weight", "F32", [24])],
             [(str(n), "bert", f"encoder.layer.{n}.attention.", "q [24, 24]  k [24, 24]  v [24, 24]  o [24, 24]",
               "bias: q k v o") for n in (0, 1)]),
    "gpt2": ([("h.0.attn.c_attn.weight", "F32", [48, 144]), ("h.0.attn.c_attn.bias", "F32", [144]),
              ("h.0.attn.c_proj.weight", "F32", [48, 48]), ("h.0.attn.c_proj.bias", "F32", [48]),
              ("h.0.mlp.c_proj.weight", "F32", [192, 48]), ("wte.weight", "F32", [50, 48])],
             [("0", "gpt2", "h.0.attn.", "o [48, 48]  qkv [48, 144]", "bias: o qkv")]),
    "mla": ([("model.layers.0.self_attn.q_proj.weight", "BF16", [8 * 24, 64]),
             ("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "BF16", [32 + 8, 64]),
             ("model.layers.0.self_attn.kv_a_layernorm.weight", "BF16", [32]),
             ("model.layers.0.self_attn.kv_b_proj.weight", "BF16", [8 * (16 + 16), 32]),
             ("model.layers.0.self_attn.o_proj.weight", "BF16", [64, 8 * 16])],
            [("0", "deepseek-v2", "model.layers.0.self_attn.",
              "q [192, 64]  o [64, 128]  kv_a [40, 64]  kv_a_norm [32]  kv_b [256, 32]", "bias: none")]),
    "attn": ([(f"{r}_proj.{k}", "F32", [12, 12] if k == "weight" else [12]) for r in "qkvo"
              for k in ("weight", "bias")],
             [("-", "attn", "", "q [12, 12]  k [12, 12]  v [12, 12]  o [12, 12]", "bias: q k v o")]),
    "fp8": ([("model.norm.weight", "F8_E4M3", [16]), ("packed", "U8", [3, 5])], []),
    "incomplete": ([("model.layers.2.self_attn.q_proj.weight", "F32", [8, 8]),
                    ("model.layers.2.self_attn.k_proj.weight", "F32", [8, 8])], None),
}
for family, (tensors, expected) in families.items():
    path = os.path.join(WORK, f"{family}.safetensors")
    write_safetensors(path, tensors)
    code, out, err = run(path)
    check(code == 0, f"{family}: exit {code}: {err}")
    if code:
        continue
    rows = tensor_rows(out)
    check(all(rows.get(n) == (d, s, int(np.prod(s)) * DTYPE_BYTES[d]) for n, d, s in tensors),
          f"{family}: tensor rows {rows}")
    if expected is None:
        check("incomplete, missing: model.layers.2.self_attn.v_proj.weight "
              "model.layers.2.self_attn.o_proj.weight" in out, f"{family}: missing listed: {out}")
        continue
    check(layers_of(out) == expected, f"{family}: layers {layers_of(out)} != {expected}")
    if not expected:
        check("attention layers (0):\n  none recognised" in out, f"{family}: no layers: {out}")

# ---- .npy -------------------------------------------------------------------------------------
np.save(os.path.join(WORK, "a.npy"), np.zeros((3, 5, 7), dtype=np.float16))
code, out, err = run(os.path.join(WORK, "a.npy"))
check(code == 0 and "dtype F16, shape [3, 5, 7], 210 bytes" in out, f"npy: {out} {err}")

# ---- failures: exit 1 with the file and the problem named; usage errors exit 2 --------------
bad = os.path.join(WORK, "bad.safetensors")
with open(bad, "wb") as f:
    text = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}'
    f.write(struct.pack("<Q", len(text)) + text + b"\0" * 4)
code, out, err = run(bad)
check(code == 1 and "bad.safetensors" in err and "'w'" in err and "need 8" in err and out == "",
      f"malformed: exit {code}, stderr {err!r}")
index = os.path.join(WORK, "broken.index.json")
with open(index, "w") as f:
    json.dump({"weight_map": {"x": "missing.safetensors"}}, f)
code, out, err = run(index)
check(code == 1 and "missing.safetensors" in err, f"missing shard: exit {code}, stderr {err!r}")
code, out, err = run(os.path.join(WORK, "nothing-here"))
check(code == 1 and "nothing-here" in err, f"missing path: exit {code}, {err!r}")
code, out, err = run()
check(code == 2 and "no PATH" in err, f"no argument: exit {code}")
code, out, err = run(bad, "--bogus")
check(code == 2 and "--bogus" in err, f"bad option: exit {code}")

if FAILURES:
    print(f"inspect_cases.py: {len(FAILURES)} failures")
    sys.exit(1)
print("inspect_cases.py: all checks passed")
