"""pictures.py — reading the CLI's pictures back for the tests, with the standard library only:
a PNG decoder (zlib + the five row filters, 8-bit RGB/RGBA), pixel classes (viridis ends, text
ink, white, masked cells) and an SVG reader (well-formed XML, its <title>, <desc> and glyph uses)."""
import struct
import xml.etree.ElementTree as ElementTree
import zlib

VIRIDIS_LOW = (68, 1, 84)     # the colour of the minimum (0 for probabilities)
VIRIDIS_HIGH = (253, 231, 37)  # the colour of the maximum (1)
INK = (31, 31, 31)             # text and frames (0.12 grey)
MASKED = (222, 222, 222)       # the fill of a masked cell (-0.0, 0.87 grey), under its hatching


class Png:
    """width, height and pixel(x, y) -> (r, g, b) of an 8-bit RGB or RGBA PNG."""

    def __init__(self, path):
        data = open(path, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
        position, idat, header = 8, b"", None
        while position < len(data):
            length, kind = struct.unpack(">I4s", data[position:position + 8])
            body = data[position + 8:position + 8 + length]
            crc = struct.unpack(">I", data[position + 8 + length:position + 12 + length])[0]
            assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in {kind}"
            if kind == b"IHDR":
                header = struct.unpack(">IIBBBBB", body)
            elif kind == b"IDAT":
                idat += body
            position += 12 + length
        assert kind == b"IEND", f"{path}: no IEND"
        self.width, self.height, depth, colour, _, _, interlace = header
        assert depth == 8 and colour in (2, 6) and interlace == 0, f"{path}: {header}"
        self.channels = 3 if colour == 2 else 4
        raw = zlib.decompress(idat)
        stride = self.width * self.channels
        assert len(raw) == self.height * (stride + 1), f"{path}: image data size"
        self.rows = []
        previous = bytearray(stride)
        c = self.channels
        for y in range(self.height):
            kind = raw[y * (stride + 1)]
            row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
            if kind == 1:
                for i in range(c, stride):
                    row[i] = (row[i] + row[i - c]) & 255
            elif kind == 2:
                for i in range(stride):
                    row[i] = (row[i] + previous[i]) & 255
            elif kind == 3:
                for i in range(stride):
                    left = row[i - c] if i >= c else 0
                    row[i] = (row[i] + ((left + previous[i]) >> 1)) & 255
            elif kind == 4:
                for i in range(stride):
                    a = row[i - c] if i >= c else 0
                    b = previous[i]
                    d = previous[i - c] if i >= c else 0
                    p = a + b - d
                    pa, pb, pd = abs(p - a), abs(p - b), abs(p - d)
                    row[i] = (row[i] + (a if pa <= pb and pa <= pd else b if pb <= pd else d)) & 255
            else:
                assert kind == 0, f"{path}: unknown filter {kind}"
            self.rows.append(row)
            previous = row

    def pixel(self, x, y):
        row, i = self.rows[y], x * self.channels
        return row[i], row[i + 1], row[i + 2]

    def where(self, colour, tolerance=12, box=None):
        """The (x, y) of pixels within `tolerance` of `colour` (per channel), inside box
        (x0, y0, x1, y1) when given."""
        x0, y0, x1, y1 = box or (0, 0, self.width, self.height)
        found = []
        for y in range(y0, y1):
            for x in range(x0, x1):
                p = self.pixel(x, y)
                if all(abs(p[k] - colour[k]) <= tolerance for k in range(3)):
                    found.append((x, y))
        return found


    def dominant(self, box):
        """The most frequent colour inside box (x0, y0, x1, y1)."""
        x0, y0, x1, y1 = box
        counts = {}
        for y in range(y0, y1):
            for x in range(x0, x1):
                p = self.pixel(x, y)
                counts[p] = counts.get(p, 0) + 1
        return max(counts, key=counts.get)


def bounding_box(points):
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs) + 1, max(ys) + 1


def read_svg(path):
    """(root element, title text, desc text, number of glyph uses) of a well-formed SVG."""
    root = ElementTree.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == ns + "svg", f"{path}: root is {root.tag}"
    title = root.find(ns + "title")
    desc = root.find(ns + "desc")
    uses = [e for e in root.iter(ns + "use")
            if any(v.startswith("#glyph") for k, v in e.attrib.items() if k.endswith("href"))]
    return (root, title.text if title is not None else None,
            desc.text if desc is not None else None, len(uses))
