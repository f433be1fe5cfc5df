#!/usr/bin/env python3
"""exported_symbols.py — checks that a shared library exports only what the headers declare.

Usage: exported_symbols.py LIBRARY HEADER...
Lists the library's defined dynamic symbols (nm -D --defined-only) and the names the headers
declare: functions (an identifier followed by '(' outside comments and preprocessor lines)
and extern objects. Prints every exported name that no header declares and exits 1 if there
is one; prints the counts either way. The linker's own markers (_init, _fini, _edata, _end,
__bss_start) are not the library's API and are ignored.
"""
import re
import subprocess
import sys

LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}
C_WORDS = {"if", "while", "for", "switch", "return", "sizeof", "defined", "_Alignof",
           "alignof", "__attribute__", "__declspec", "_Static_assert", "static_assert"}


def declared_names(paths):
    names = set()
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)        # block comments
        text = re.sub(r"//[^\n]*", " ", text)                      # line comments
        text = re.sub(r"\\\n", " ", text)                          # continued lines
        text = re.sub(r"^[ \t]*#[^\n]*", " ", text, flags=re.M)    # preprocessor lines
        for match in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", text):
            if match.group(1) not in C_WORDS:
                names.add(match.group(1))
        for match in re.finditer(r"\bextern\b[^;(]*?\b([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*;", text):
            names.add(match.group(1))
    return names


def exported_names(library):
    listing = subprocess.run(["nm", "-D", "--defined-only", library], check=True,
                             capture_output=True, text=True).stdout
    names = set()
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            names.add(fields[2].split("@")[0])
    return names - LINKER_SYMBOLS


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exported = exported_names(sys.argv[1])
    declared = declared_names(sys.argv[2:])
    undeclared = sorted(exported - declared)
    print(f"exported_symbols: {len(exported)} exported, {len(exported & declared)} declared "
          f"in the headers, {len(undeclared)} not declared")
    for name in undeclared:
        print(f"  not declared in any installed header: {name}")
    if not exported & declared:
        print("exported_symbols: no exported symbol is declared: the header parse is broken")
        return 1
    return 1 if undeclared else 0


if __name__ == "__main__":
    sys.exit(main())
