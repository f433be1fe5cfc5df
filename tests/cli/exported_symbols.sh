#!/usr/bin/env bash
# exported_symbols.sh — the shared library exports exactly the functions that the public
# headers declare (attn.h, attn_layers.h, attn_io.h, attn_ring.h): a declared function
# without ATTN_API is not exported (with hidden visibility) and `-lattn` programs that call it
# fail to link; an exported function that no header declares is an accident of the build.
# The declarations are read from the headers with their comments stripped (gcc), the exports
# with `nm -D --defined-only` from the libattn.so beside the attn binary.
# usage: bash exported_symbols.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
source_dir=$2
library="$(dirname "$attn")/libattn.so"
if [ ! -f "$library" ] || ! command -v nm > /dev/null || ! command -v gcc > /dev/null; then
    echo "exported_symbols: no $library, nm or gcc here; nothing to compare"
    echo "0 passed, 0 failed"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Every `type name(` at file level whose name starts with attn_, comments removed and lines
# joined (declarations span lines); macros are dropped first.
for header in attn.h attn_layers.h attn_io.h attn_ring.h; do
    gcc -fpreprocessed -E -P "$source_dir/include/$header" 2> /dev/null
done | grep -v '^[[:space:]]*#' | tr '\n' ' ' |
    grep -oE '[A-Za-z_][A-Za-z0-9_]*[ *]+attn_[a-z0-9_]+ *\(' |
    sed -E 's/.*[ *](attn_[a-z0-9_]+) *\($/\1/' | sort -u > "$work/declared"
nm -D --defined-only "$library" | awk '$2 == "T" { print $3 }' | sort -u > "$work/exported"

failures=0
declared=$(wc -l < "$work/declared")
if [ "$declared" -lt 50 ]; then
    echo "FAIL only $declared functions found in include/*.h: the header parse is broken"
    failures=$((failures + 1))
fi
while read -r name; do
    echo "FAIL $name is declared in include/ but not exported by libattn.so (ATTN_API missing)"
    failures=$((failures + 1))
done < <(comm -23 "$work/declared" "$work/exported")
while read -r name; do
    echo "FAIL $name is exported by libattn.so but declared in no public header"
    failures=$((failures + 1))
done < <(comm -13 "$work/declared" "$work/exported")
echo "exported_symbols: $declared declared functions, $(wc -l < "$work/exported") exported"
if [ "$failures" -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
[ "$failures" -eq 0 ]
