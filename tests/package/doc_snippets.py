#!/usr/bin/env python3
"""doc_snippets.py — writes out the code blocks of a Markdown section, so tests/package/run.sh
can run the documentation's commands exactly as written.

Usage: doc_snippets.py FILE.md "SECTION HEADING" OUTPUT_DIR NAME...
Takes the fenced code blocks under the heading (up to the next heading of the same or a
higher level), in order, and writes the i-th one to OUTPUT_DIR/<the i-th NAME> ("-" skips
that block; a NAME with "/" gets its folders made). Fails if the section or a block is missing.
"""
import os
import re
import sys


def section_blocks(text, heading):
    lines = text.splitlines(keepends=True)
    start = None
    level = 0
    for number, line in enumerate(lines):
        match = re.match(r"(#+)\s+(.*?)\s*$", line)
        if match and match.group(2) == heading:
            start, level = number + 1, len(match.group(1))
            break
    if start is None:
        sys.exit(f"doc_snippets: no section '{heading}'")
    body = []
    fenced = False
    for line in lines[start:]:
        fenced ^= line.startswith("```")
        match = re.match(r"(#+)\s", line)
        if not fenced and match and len(match.group(1)) <= level:
            break
        body.append(line)
    return re.findall(r"^```[\w-]*\n(.*?)^```", "".join(body), flags=re.S | re.M)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    path, heading, output = sys.argv[1:4]
    names = sys.argv[4:]
    with open(path, encoding="utf-8") as handle:
        blocks = section_blocks(handle.read(), heading)
    if len(blocks) < len(names):
        sys.exit(f"doc_snippets: '{heading}' in {path} has {len(blocks)} code blocks, "
                 f"expected {len(names)}")
    for name, block in zip(names, blocks):
        if name == "-":
            continue
        target = os.path.join(output, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(block)


if __name__ == "__main__":
    main()
