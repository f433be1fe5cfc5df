"""heatmap_cases.py — `attn heatmap` end to end: pictures whose pixels are checked against the
data drawn (cell colours, values in the cells of small maps, labels, title, colour bar; masked
-0.0 cells hatched grey apart from allowed cells that round to 0.00, the rest pixel for pixel
unchanged), SVGs read back as XML (title, every label, glyphs), the head grid, weights from
safetensors tensors (F32, BF16), and every error: one line, a non-zero exit, no picture.
usage: python3 heatmap_cases.py ATTN_BINARY WORK_DIR"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pictures import INK, MASKED, VIRIDIS_HIGH, VIRIDIS_LOW, Png, bounding_box, read_svg  # noqa: E402

attn, work = sys.argv[1], sys.argv[2]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL", message)


def run(*arguments):
    return subprocess.run([attn, "heatmap", *arguments], capture_output=True, text=True)


def path(name):
    return os.path.join(work, name)


TOKENS = ["我", "喜欢", "学", "注意力", "机制"]
with open(path("tokens.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(TOKENS) + "\n")

# 1. A labelled 5x5 identity: 5 yellow cells, 20 purple ones, values printed in the cells,
#    token labels left of and below the map, a title above it.
np.save(path("identity.npy"), np.eye(5, dtype=np.float32))
r = run("--weights", path("identity.npy"), "--labels", path("tokens.txt"), "--title",
        "layer 2, head 3", "--out", path("identity.png"))
check(r.returncode == 0 and r.stderr == "", f"identity heat map: {r.returncode} {r.stderr}")
png = Png(path("identity.png"))
check(400 <= png.width <= 1200 and 350 <= png.height <= 1000, f"size {png.width}x{png.height}")
purple = png.where(VIRIDIS_LOW, 6)
yellow = png.where(VIRIDIS_HIGH, 6)
map_x0, map_y0, _, map_y1 = bounding_box(purple)
# The map ends where the colour bar's gap starts: the rightmost purple pixel left of the gap.
cells = [p for p in purple + yellow if p[0] < png.width - 80]
map_x0, map_y0, map_x1, map_y1 = bounding_box(cells)
cell = (map_x1 - map_x0) / 5
check(40 <= cell <= 100, f"cell size {cell:.1f} px for a 5x5 map")
check(abs((map_y1 - map_y0) - (map_x1 - map_x0)) <= 2, "the 5x5 map is not square")
in_map = [p for p in yellow if map_x0 <= p[0] < map_x1]
ratio = len(in_map) / max(1, len([p for p in purple if map_x0 <= p[0] < map_x1]))
check(0.15 <= ratio <= 0.35, f"yellow/purple area {ratio:.2f}, expected about 5/20")
for i in range(5):  # each diagonal cell is yellow, its right neighbour purple (cell corners)
    x, y = int(map_x0 + (i + 0.15) * cell), int(map_y0 + (i + 0.15) * cell)
    check(png.pixel(x, y) == VIRIDIS_HIGH, f"cell ({i}, {i}) is {png.pixel(x, y)}, not yellow")
    if i < 4:
        x2 = int(map_x0 + (i + 1.15) * cell)
        check(png.pixel(x2, y) == VIRIDIS_LOW, f"cell ({i}, {i + 1}) is {png.pixel(x2, y)}")
ink_in_cells = png.where(INK, 40, (map_x0, map_y0, map_x1, map_y1))
white_in_cells = [p for p in png.where((255, 255, 255), 30, (map_x0, map_y0, map_x1, map_y1))
                  if (p[0] - map_x0) % cell > 3 and (p[1] - map_y0) % cell > 3]
check(len(ink_in_cells) > 50, f"no values drawn in the yellow cells ({len(ink_in_cells)} ink pixels)")
check(len(white_in_cells) > 200, f"no values drawn in the purple cells ({len(white_in_cells)})")
row_labels = png.where(INK, 40, (0, map_y0, map_x0 - 2, map_y1))
column_labels = png.where(INK, 40, (map_x0, map_y1 + 2, map_x1, png.height))
title = png.where(INK, 40, (0, 0, png.width, map_y0 - 2))
check(len(row_labels) > 150, f"row labels: {len(row_labels)} ink pixels left of the map")
check(len(column_labels) > 150, f"column labels: {len(column_labels)} ink pixels below the map")
check(len(title) > 150, f"title: {len(title)} ink pixels above the map")
bar = png.where(VIRIDIS_HIGH, 6, (map_x1 + 5, 0, png.width, png.height))
check(len(bar) > 20, "no colour bar right of the map")
bar_ticks = png.where(INK, 40, (map_x1 + 30, map_y0, png.width, map_y1))
check(len(bar_ticks) > 100, f"colour-bar ticks and numbers: {len(bar_ticks)} ink pixels")

# Other labels change the picture; a 20x20 map has no values in its cells.
with open(path("other.txt"), "w", encoding="utf-8") as f:
    f.write("a\nb\nc\nd\ne\n")
run("--weights", path("identity.npy"), "--labels", path("other.txt"), "--title", "layer 2, head 3",
    "--out", path("other.png"))
check(open(path("other.png"), "rb").read() != open(path("identity.png"), "rb").read(),
      "the labels do not change the picture")
np.save(path("eye20.npy"), np.eye(20, dtype=np.float32))
r = run("--weights", path("eye20.npy"), "--out", path("eye20.png"))
check(r.returncode == 0, f"20x20: {r.stderr}")
png20 = Png(path("eye20.png"))
cells20 = [p for p in png20.where(VIRIDIS_LOW, 6) if p[0] < png20.width - 80]
box20 = bounding_box(cells20)
check(len(png20.where(INK, 40, box20)) == 0, "a 20x20 map has values printed in its cells")

# NaN cells are grey and get no value; the other cells keep theirs.
nan_map = np.full((3, 3), 0.5, dtype=np.float32)
nan_map[1, 1] = np.nan
np.save(path("nan.npy"), nan_map)
r = run("--weights", path("nan.npy"), "--out", path("nan.png"))
png_nan = Png(path("nan.png"))
teal = [p for p in png_nan.where((33, 144, 141), 3) if p[0] < png_nan.width - 80]  # viridis(0.5)
check(r.returncode == 0 and len(teal) > 1000, f"NaN map: {r.stderr!r}, {len(teal)} teal pixels")
if teal:
    tx0, ty0, tx1, ty1 = bounding_box(teal)
    c = (tx1 - tx0) / 3
    inner = (int(tx0 + 1.2 * c), int(ty0 + 1.2 * c), int(tx0 + 1.8 * c), int(ty0 + 1.8 * c))
    area = (inner[2] - inner[0]) * (inner[3] - inner[1])
    check(len(png_nan.where((158, 158, 158), 0, inner)) == area,
          "the NaN cell is not plain grey (a colour, or a value printed in it)")

# Masked cells: -0.0 (a pair the mask forbids, as attn forward --weights-out writes it) is
# hatched grey with no value and a "masked" legend; +0.0 and a weight that rounds to 0.00 stay
# purple. The same matrix with every zero +0.0 draws the allowed cells pixel for pixel alike.
masked = np.tril(np.full((4, 4), 0.25, dtype=np.float32))
masked[np.triu_indices(4, 1)] = -0.0
masked[3, 3] = 1e-9   # allowed, "0.00"
masked[2, 0] = 0.0    # allowed, an exact (underflowed) +0.0
np.save(path("masked.npy"), masked)
np.save(path("unmasked.npy"), masked + np.float32(0))  # -0.0 + 0 = +0.0
for name in ("masked", "unmasked"):
    r = run("--weights", path(name + ".npy"), "--min", "0", "--max", "1", "--out", path(name + ".png"))
    check(r.returncode == 0 and r.stderr == "", f"{name} map: {r.returncode} {r.stderr!r}")
png_m, png_u = Png(path("masked.png")), Png(path("unmasked.png"))
purple_u = [p for p in png_u.where(VIRIDIS_LOW, 6) if p[0] < png_u.width - 80]
mx0, my0, mx1, my1 = bounding_box(purple_u)  # the whole map: purple reaches every edge
c = (mx1 - mx0) / 4
check(abs((my1 - my0) - (mx1 - mx0)) <= 2 and c > 20, f"masked map box {mx0, my0, mx1, my1}")


def cell_box(i, j, inset=0.1):
    return (int(mx0 + (j + inset) * c), int(my0 + (i + inset) * c),
            int(mx0 + (j + 1 - inset) * c), int(my0 + (i + 1 - inset) * c))


def near(a, b, tolerance=4):
    return all(abs(x - y) <= tolerance for x, y in zip(a, b))


for i in range(4):
    for j in range(4):
        got, plain = png_m.dominant(cell_box(i, j)), png_u.dominant(cell_box(i, j))
        if j > i:  # forbidden: grey with darker hatching, no ink; purple when +0.0
            check(got == MASKED, f"masked cell ({i}, {j}) is {got}, not the masked grey")
            hatching = [p for p in png_m.where((168, 168, 168), 40, cell_box(i, j))]
            check(len(hatching) > 0.1 * c * c, f"masked cell ({i}, {j}) is not hatched")
            check(len(png_m.where(INK, 40, cell_box(i, j))) == 0, f"masked cell ({i}, {j}) has a value")
            check(plain == VIRIDIS_LOW, f"+0.0 cell ({i}, {j}) is {plain}, not purple")
        else:  # allowed: the same pixels in both pictures
            box = cell_box(i, j, 0.05)
            same = all(png_m.pixel(x, y) == png_u.pixel(x, y)
                       for y in range(box[1], box[3]) for x in range(box[0], box[2]))
            check(same, f"allowed cell ({i}, {j}) differs between the two pictures")
for i, j in ((3, 3), (2, 0)):
    got = png_m.dominant(cell_box(i, j))
    check(near(got, VIRIDIS_LOW) and got != MASKED, f"allowed zero cell ({i}, {j}) is {got}")
    check(len(png_m.where((255, 255, 255), 30, cell_box(i, j, 0.2))) > 20,
          f"allowed zero cell ({i}, {j}) has no value printed")
# The legend: a grey swatch under the colour bar (whose bottom is the map's), "masked" beside.
under_bar = [(mx1 + 10, my1, p.width, p.height) for p in (png_m, png_u)]
swatch = [len(p.where(MASKED, 0, b)) for p, b in zip((png_m, png_u), under_bar)]
check(swatch[0] >= 60 and swatch[1] <= 10, f"the 'masked' swatch: {swatch} grey pixels under the bar")
text = [len(p.where(INK, 40, (mx1 + 42, my1 + 4, p.width, p.height))) for p in (png_m, png_u)]
check(text[0] > text[1] + 30, f"no 'masked' beside the swatch: {text} ink pixels")
r = run("--weights", path("masked.npy"), "--out", path("masked.svg"))
_, _, mdesc, _ = read_svg(path("masked.svg"))
check(r.returncode == 0 and "masked cells: 6" in (mdesc or ""), f"masked SVG desc: {mdesc!r}")
# A large causal map (one pixel per cell): the masked triangle is plain masked grey.
big = np.tril(np.full((200, 200), 0.5, dtype=np.float32))
big[np.triu_indices(200, 1)] = -0.0
np.save(path("big_masked.npy"), big)
r = run("--weights", path("big_masked.npy"), "--out", path("big_masked.png"))
png_b = Png(path("big_masked.png"))
teal_b = [p for p in png_b.where((33, 144, 141), 3) if p[0] < png_b.width - 100]
if r.returncode == 0 and teal_b:
    bx0, by0, bx1, by1 = bounding_box(teal_b)  # the lower triangle spans the map
    upper = (int(bx0 + 0.7 * (bx1 - bx0)), int(by0 + 0.05 * (by1 - by0)),
             int(bx0 + 0.95 * (bx1 - bx0)), int(by0 + 0.25 * (by1 - by0)))
    check(png_b.dominant(upper) == MASKED, f"large map: upper triangle {png_b.dominant(upper)}")
else:
    check(False, f"large masked map: {r.stderr!r}")

# 2. SVG: well-formed, the title, every label as text, glyphs drawn.
r = run("--weights", path("identity.npy"), "--labels", path("tokens.txt"), "--title",
        "layer 2, head 3 <&>", "--out", path("identity.svg"))
check(r.returncode == 0, f"svg: {r.stderr}")
root, svg_title, desc, glyphs = read_svg(path("identity.svg"))
check(svg_title == "layer 2, head 3 <&>", f"SVG title {svg_title!r}")
check(desc is not None and all(t in desc for t in TOKENS), f"SVG desc lacks labels: {desc!r}")
check(glyphs >= 40, f"SVG draws {glyphs} glyphs (title, labels, values, ticks expected)")
check(root.get("width") and float(root.get("width").rstrip("px")) >= 400, "SVG width")

# 3. Grids: [3, 6, 6] gives three panels side by side, [1, 2, 5, 7] two panels with the
#    default title naming the file, --head one panel.
np.save(path("three.npy"), np.random.default_rng(3).dirichlet(np.ones(6), size=(3, 6)).astype(np.float32))
np.save(path("single.npy"), np.random.default_rng(3).dirichlet(np.ones(6), size=6).astype(np.float32))
run("--weights", path("three.npy"), "--out", path("three.png"))
run("--weights", path("single.npy"), "--out", path("single.png"))
three, single = Png(path("three.png")), Png(path("single.png"))
check(three.width > 2.2 * (single.width - 80) and three.height < 1.4 * single.height,
      f"3-head grid {three.width}x{three.height} vs one head {single.width}x{single.height}")
w4 = np.random.default_rng(4).dirichlet(np.ones(7), size=(1, 2, 5)).astype(np.float32)
np.save(path("rank4.npy"), w4)
r = run("--weights", path("rank4.npy"), "--out", path("rank4.svg"))
_, t4, d4, _ = read_svg(path("rank4.svg"))
check(r.returncode == 0 and t4 == "rank4.npy" and "panels: 2" in d4, f"rank 4: {t4!r} {d4!r}")
r = run("--weights", path("rank4.npy"), "--head", "1", "--layer", "3", "--out", path("head1.svg"))
_, t1, d1, _ = read_svg(path("head1.svg"))
check(r.returncode == 0 and t1 == "rank4.npy, layer 3, head 1" and "panels: 1" in d1,
      f"--head, --layer: {t1!r}")

# 3b. Safetensors: --weights FILE.safetensors[:NAME] draws the same pixels as the .npy (the
#     default name is "weights"; BF16 is widened exactly; -0.0 stays masked).


def save_safetensors(name, tensors):
    """Writes {name: (dtype, array as little-endian bytes source)} as a safetensors file."""
    import json
    import struct
    header, body = {}, b""
    for key, (dtype, array) in tensors.items():
        data = array.tobytes()
        header[key] = {"dtype": dtype, "shape": list(array.shape),
                       "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(name, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


bf16_bits = (masked.view(np.uint32) >> 16).astype(np.uint16)  # 0.25, 1e-9 -> bf16 by truncation
masked_bf16 = (bf16_bits.astype(np.uint32) << 16).view(np.float32)
np.save(path("masked_bf16.npy"), masked_bf16)
save_safetensors(path("w.safetensors"), {"weights": ("F32", masked), "other": ("BF16", bf16_bits),
                                         "wide": ("F64", masked.astype(np.float64)),
                                         "row": ("F32", np.ones(4, dtype=np.float32))})
pairs = [("w.safetensors", "masked.npy"), ("w.safetensors:weights", "masked.npy"),
         ("w.safetensors:other", "masked_bf16.npy")]
for argument, reference in pairs:
    out_st, out_npy = path("st.png"), path("st_reference.png")
    r = run("--weights", path(argument), "--title", "t", "--out", out_st)
    r2 = run("--weights", path(reference), "--title", "t", "--out", out_npy)
    check(r.returncode == 0 and r.stderr == "" and r2.returncode == 0,
          f"--weights {argument}: {r.returncode} {r.stderr!r}")
    if r.returncode == 0:
        a, b = Png(out_st), Png(out_npy)
        check((a.width, a.height, a.rows) == (b.width, b.height, b.rows),
              f"--weights {argument} draws other pixels than {reference}")
        check(len(a.where(MASKED, 0)) > 1000, f"--weights {argument}: no masked cells")
r = run("--weights", path("w.safetensors:weights"), "--out", path("st.svg"))
_, st_title, _, _ = read_svg(path("st.svg"))
check(r.returncode == 0 and st_title == "w.safetensors:weights", f"safetensors title {st_title!r}")

# 4. Errors: one line on stderr, exit 1 (runtime) or 2 (usage), no picture.
np.save(path("f64.npy"), np.eye(3))
np.save(path("vector.npy"), np.ones(4, dtype=np.float32))
np.save(path("heads300.npy"), np.zeros((300, 2, 2), dtype=np.float32))
np.save(path("long.npy"), np.zeros((1, 5000), dtype=np.float32))
with open(path("four.txt"), "w") as f:
    f.write("a\nb\nc\nd\n")
errors = [
    (["--weights", path("missing.npy")], "missing.npy", 1),
    (["--weights", path("f64.npy")], "float64", 1),
    (["--weights", path("vector.npy")], "rank 1", 1),
    (["--weights", path("heads300.npy")], "at most 256 heads", 1),
    (["--weights", path("long.npy")], "[1, 5000]", 1),
    (["--weights", path("identity.npy"), "--labels", path("four.txt")], "4 labels for 5", 1),
    (["--weights", path("identity.npy"), "--labels", path("nowhere.txt")], "nowhere.txt", 1),
    (["--weights", path("rank4.npy"), "--batch", "1"], "--batch 1", 1),
    (["--weights", path("rank4.npy"), "--head", "2"], "--head 2", 1),
    (["--weights", path("identity.npy"), "--min", "1"], "--min and --max", 2),
    (["--weights", path("identity.npy"), "--bogus"], "'--bogus'", 2),
    (["--weights", path("w.safetensors:nothing")], "nothing", 1),
    (["--weights", path("w.safetensors:wide")], "F64", 1),
    (["--weights", path("w.safetensors:row")], "rank 1", 1),
    (["--weights", path("w.safetensors:")], "--weights", 2),
    (["--weights", path("none.safetensors")], "none.safetensors", 1),
]
for arguments, expected, code in errors:
    out = path("error.png")
    r = run(*arguments, "--out", out)
    lines = r.stderr.splitlines()
    check(r.returncode == code and len(lines) == 1 and expected in r.stderr,
          f"{arguments[-1]}: exit {r.returncode}, stderr {r.stderr!r} (expected {expected!r})")
    check(not os.path.exists(out), f"{arguments[-1]}: left {out}")
r = run("--weights", path("identity.npy"), "--out", path("map.jpg"))
check(r.returncode == 2 and ".png or .svg" in r.stderr and not os.path.exists(path("map.jpg")),
      f"unknown extension: {r.stderr!r}")
r = run("--weights", path("identity.npy"), "--out", path("no/such/dir/map.png"))
check(r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "map.png" in r.stderr,
      f"unwritable output: {r.stderr!r}")
check(not [n for n in os.listdir(work) if ".partial" in n], "partial files left behind")
r = subprocess.run([attn, "heatmap", "--help"], capture_output=True, text=True)
for option in ["--weights", "--out", "--labels", "--query-labels", "--title", "--layer", "--head",
               "--min"]:
    check(option in r.stdout, f"--help lacks {option}")

if failures:
    print(f"{len(failures)} failures")
    sys.exit(1)
print("attn heatmap draws what it is given")
