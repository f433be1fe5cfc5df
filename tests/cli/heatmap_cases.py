"""heatmap_cases.py — `attn heatmap` end to end: pictures whose pixels are checked against the
data drawn (cell colours, values in the cells of small maps, labels, title, colour bar), SVGs
read back as XML (title, every label, glyphs), the head grid, and every error: one line, a
non-zero exit, no picture.
usage: python3 heatmap_cases.py ATTN_BINARY WORK_DIR"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pictures import INK, VIRIDIS_HIGH, VIRIDIS_LOW, Png, bounding_box, read_svg  # noqa: E402

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
