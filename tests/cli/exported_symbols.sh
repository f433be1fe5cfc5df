#!/usr/bin/env bash
# exported_symbols.sh — the shared libraries export exactly the functions that the public
# headers declare (attn.h, attn_layers.h, attn_io.h, attn_ring.h), each once: a declared
# function without ATTN_API is not exported (with hidden visibility) and programs that call it
# fail to link; an exported function that no header declares is an accident of the build; one
# exported by two libraries (libattn, libattn_io, libattn_models) would depend on link order.
# The declarations are read from the headers with their comments stripped (gcc), the exports
# with `nm -D --defined-only` from the libraries beside the attn binary.
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
libraries=("$library")
for component in io models; do
    [ -f "$(dirname "$attn")/libattn_$component.so" ] &&
        libraries+=("$(dirname "$attn")/libattn_$component.so")
done
for shared in "${libraries[@]}"; do
    nm -D --defined-only "$shared" | awk '$2 == "T" { print $3 }' | sort -u
done | sort > "$work/exported_all"
sort -u "$work/exported_all" > "$work/exported"

failures=0
declared=$(wc -l < "$work/declared")
if [ "$declared" -lt 50 ]; then
    echo "FAIL only $declared functions found in include/*.h: the header parse is broken"
    failures=$((failures + 1))
fi
while read -r name; do
    echo "FAIL $name is declared in include/ but exported by none of ${libraries[*]##*/} (ATTN_API missing)"
    failures=$((failures + 1))
done < <(comm -23 "$work/declared" "$work/exported")
while read -r name; do
    echo "FAIL $name is exported by ${libraries[*]##*/} but declared in no public header"
    failures=$((failures + 1))
done < <(comm -13 "$work/declared" "$work/exported")
while read -r name; do
    echo "FAIL $name is exported by two of ${libraries[*]##*/}"
    failures=$((failures + 1))
done < <(uniq -d "$work/exported_all")
echo "exported_symbols: $declared declared functions, $(wc -l < "$work/exported") exported"
if [ "$failures" -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
[ "$failures" -eq 0 ]
