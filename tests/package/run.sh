#!/usr/bin/env bash
# run.sh — ctest `package_install`: attn as its users get it. Installs the already built tree
# into a temporary prefix, checks what is there (headers, versioned libraries of the core and
# of each component built, SONAMEs, the exported symbols, the core library's dependencies:
# libc, libm and threads only, attnConfig.cmake, the .pc files, the tools), then builds and
# runs every program of examples/ against it three ways, each checked for exit status 0 and
# for printing exactly what the same example built inside attn's own tree prints (an example
# that includes attn_layers.h uses the models component, the others the core library):
#   1. find_package(attn): examples/ as a project of its own, once with attn::attn (shared)
#      and once with attn::attn_static (no libattn*.so in the result);
#      plus find_package(attn COMPONENTS mpi) when the MPI component was installed;
#   2. pkg-config: cc $(pkg-config --cflags --libs attn), and libattn.a with what
#      `pkg-config --static` says it needs (Libs.private, Requires.private), the system
#      libraries staying shared (no libattn*.so in the result); and a program of the core
#      library alone with no .pc file but attn's visible (as on a machine without the cJSON
#      and OpenBLAS development packages);
#   3. add_subdirectory: tests/package/subproject, which builds attn from this source tree as
#      its subproject and the examples with it.
# Usage: run.sh SOURCE_DIR BUILD_DIR [CMAKE [CC]]
set -euo pipefail
source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
cmake=${3:-cmake}
cc=${4:-cc}
jobs=2

unset DESTDIR  # the prefix below is where everything goes
work=$(mktemp -d "${TMPDIR:-/tmp}/attn-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "package_install: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

version_part() { sed -n "s/^#define ATTN_VERSION_$1 \\([0-9][0-9]*\\).*/\\1/p" "$source_dir/include/attn.h"; }
major=$(version_part MAJOR); version="$major.$(version_part MINOR).$(version_part PATCH)"
[ -n "$major" ] || fail "no ATTN_VERSION_MAJOR in include/attn.h"

# Runs program $2 (a consumer's build of example $1) and compares its output with the same
# example built in attn's own tree (when that tree built the examples).
run_example() {
  local name=$1 program=$2 output
  output=$("$program" 2>&1) || fail "$program exited with status $?: $output"
  local reference=$build_dir/examples/example_$name
  if [ -x "$reference" ]; then
    [ "$output" = "$("$reference" 2>&1)" ] ||
      fail "$program prints something else than $reference: $output"
  fi
  echo "   ran $program: ${output##*$'\n'}"
}
examples=()
for source in "$source_dir"/examples/*.c; do examples+=("$(basename "$source" .c)"); done
# An example that includes attn_layers.h uses the models component (examples/CMakeLists.txt).
uses_models() { grep -q '#include "attn_layers.h"' "$source_dir/examples/$1.c"; }
[ ${#examples[@]} -gt 0 ] || fail "no examples/*.c"

# ---- install --------------------------------------------------------------------------------
step "cmake --install $build_dir --prefix $prefix"
"$cmake" --install "$build_dir" --prefix "$prefix" > "$work/install.log" || {
  cat "$work/install.log"; fail "cmake --install"; }
library=$(find "$prefix" -name "libattn.so.$version" | head -n 1)
[ -n "$library" ] || fail "no libattn.so.$version installed"
libdir=$(dirname "$library")
for file in "$libdir/libattn.so.$major" "$libdir/libattn.so" "$libdir/libattn.a" \
            "$libdir/cmake/attn/attnConfig.cmake" "$libdir/cmake/attn/attnConfigVersion.cmake" \
            "$libdir/pkgconfig/attn.pc"; do
  [ -e "$file" ] || fail "not installed: ${file#"$prefix"/}"
done
have_mpi=0 have_models=0
[ -e "$libdir/libattn_mpi.so.$version" ] && have_mpi=1
[ -e "$libdir/libattn_models.so.$version" ] && have_models=1
for component in io models mpi; do
  [ -e "$libdir/libattn_$component.so.$version" ] || continue
  for file in "$libdir/libattn_$component.so.$major" "$libdir/libattn_$component.a" \
              "$libdir/pkgconfig/attn_$component.pc" \
              "$libdir/cmake/attn/attn_${component}Targets.cmake"; do
    [ -e "$file" ] || fail "not installed: ${file#"$prefix"/}"
  done
done
for header in "$source_dir"/include/*.h; do
  name=$(basename "$header")
  [ "$name" = attn_mpi.h ] && [ $have_mpi = 0 ] && continue
  cmp -s "$header" "$prefix/include/$name" || fail "header not installed: include/$name"
done
for tool in attn attn-bench; do
  [ -x "$build_dir/$tool" ] || continue
  [ -x "$prefix/bin/$tool" ] || fail "the $tool tool is not installed"
  [ "$("$prefix/bin/$tool" --version)" = "$tool $version" ] ||
    fail "installed $tool --version: $("$prefix/bin/$tool" --version) (expected $tool $version)"
done

# ---- the shared library: SONAME, dependencies, exported symbols ---------------------------
step "readelf -d / nm -D $library"
soname=$(readelf -d "$library" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libattn.so.$major" ] || fail "SONAME is '$soname', expected libattn.so.$major"
echo "   SONAME $soname"
# The core library needs the C library, libm and threads, nothing else (no cJSON, BLAS,
# OpenMP runtime or picture library: those are the components' and the tools').
needed=$(readelf -d "$library" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
for dependency in $needed; do
  case $dependency in
    libc.so.*|libm.so.*|libpthread.so.*|ld-linux*) ;;
    *) fail "libattn.so needs $dependency (only libc, libm and threads allowed): $needed" ;;
  esac
done
echo "   NEEDED $needed"
symbol_headers=("$prefix"/include/*.h)
shared_libraries=("$library")
for component in io models mpi; do
  [ -e "$libdir/libattn_$component.so.$version" ] &&
    shared_libraries+=("$libdir/libattn_$component.so.$version")
done
for shared in "${shared_libraries[@]}"; do
  name=$(basename "$shared"); name=${name%.so.*}
  soname=$(readelf -d "$shared" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ "$soname" = "$name.so.$major" ] || fail "SONAME of $shared is '$soname', expected $name.so.$major"
  # Hidden visibility + ATTN_API: only what the installed headers declare is exported.
  python3 "$source_dir/tests/package/exported_symbols.py" "$shared" "${symbol_headers[@]}" \
    > "$work/symbols.log" || { cat "$work/symbols.log"
      fail "$(basename "$shared") exports symbols that no installed header declares"; }
  echo "   $(basename "$shared"): $(head -n 1 "$work/symbols.log")"
done

# ---- 1. find_package(attn) -------------------------------------------------------------------
configure_examples() {  # $1 build folder, then extra -D options
  local folder=$1; shift
  "$cmake" -S "$source_dir/examples" -B "$folder" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release "$@" > "$folder.log" 2>&1 || { cat "$folder.log"; fail "configure $folder"; }
  "$cmake" --build "$folder" -j"$jobs" >> "$folder.log" 2>&1 || { cat "$folder.log"; fail "build $folder"; }
}
for target in attn attn_static; do
  step "find_package(attn), examples linked with attn::$target"
  configure_examples "$work/find-$target" -DATTN_EXAMPLES_LIBRARY=attn::$target
  for name in "${examples[@]}"; do
    program=$work/find-$target/example_$name
    [ -e "$program" ] || { [ $have_models = 0 ] && uses_models "$name" && continue; }
    needs_library=0
    readelf -d "$program" | grep -q "NEEDED.*libattn\.so\.$major" && needs_library=1
    if [ $target = attn ] && [ $needs_library = 0 ]; then fail "$program does not use libattn.so.$major"; fi
    if [ $target = attn_static ] && readelf -d "$program" | grep -q "NEEDED.*libattn"; then
      fail "$program needs a libattn*.so"
    fi
    run_example "$name" "$program"
  done
done
minor=$(version_part MINOR)
step "find_package(attn VERSION): $major.$minor found, $major.$((minor + 1)) and $((major + 1)) refused"
mkdir -p "$work/versions"
cat > "$work/versions/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.21)
project(attn_versions LANGUAGES C)
foreach(wanted $major.$((minor + 1)) $((major + 1)))
  find_package(attn \${wanted} QUIET CONFIG)
  if(attn_FOUND)
    message(FATAL_ERROR "find_package(attn \${wanted}) accepted attn \${attn_VERSION}")
  endif()
endforeach()
find_package(attn $major.$minor REQUIRED CONFIG)
if(NOT attn_VERSION STREQUAL "$version")
  message(FATAL_ERROR "find_package(attn $major.$minor) found \${attn_VERSION}, expected $version")
endif()
CMAKE
"$cmake" -S "$work/versions" -B "$work/versions/build" -DCMAKE_PREFIX_PATH="$prefix" \
  > "$work/versions.log" 2>&1 || { cat "$work/versions.log"; fail "attnConfigVersion.cmake"; }

if [ $have_mpi = 1 ]; then
  step "find_package(attn COMPONENTS mpi)"
  mkdir -p "$work/mpi-consumer"
  cat > "$work/mpi-consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.21)
project(attn_mpi_consumer LANGUAGES C)
find_package(attn REQUIRED COMPONENTS mpi)
add_executable(ring_linked ring_linked.c)
target_link_libraries(ring_linked PRIVATE attn::attn_mpi)
CMAKE
  cat > "$work/mpi-consumer/ring_linked.c" <<'C'
#include <stdio.h>
#include "attn_mpi.h"
/* Links attn_ring_forward from libattn_mpi and attn_version from libattn (the volatile
 * pointer keeps the compiler from folding the reference away). */
int main(void) {
    void (*volatile ring)(void) = (void (*)(void))attn_ring_forward;
    printf("attn %s, ring forward at %p\n", attn_version(), (void *)ring);
    return ring == 0;
}
C
  if ! { "$cmake" -S "$work/mpi-consumer" -B "$work/mpi-build" -DCMAKE_PREFIX_PATH="$prefix" \
           -DCMAKE_C_COMPILER="$cc" > "$work/mpi.log" 2>&1 &&
         "$cmake" --build "$work/mpi-build" >> "$work/mpi.log" 2>&1; }; then
    cat "$work/mpi.log"; fail "find_package(attn COMPONENTS mpi) consumer"
  fi
  readelf -d "$work/mpi-build/ring_linked" | grep -q "NEEDED.*libattn_mpi\.so\.$major" ||
    fail "ring_linked does not use libattn_mpi.so.$major"
  echo "   built $work/mpi-build/ring_linked against attn::attn_mpi"
fi

# ---- 2. pkg-config -------------------------------------------------------------------------
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion attn)" = "$version" ] ||
  fail "pkg-config --modversion attn: $(pkg-config --modversion attn) (expected $version)"
for name in "${examples[@]}"; do
  source=$source_dir/examples/$name.c
  module=attn libraries="-lattn"
  if uses_models "$name"; then
    [ $have_models = 1 ] || continue
    module=attn_models libraries="-lattn_models -lattn_io -lattn"
  fi
  step "pkg-config $module: $name.c, shared and static"
  # shellcheck disable=SC2046 # pkg-config's output is a list of words
  "$cc" -std=c11 -O2 -o "$work/pc-shared-$name" "$source" $(pkg-config --cflags --libs $module) \
    -lm -Wl,-rpath,"$libdir" || fail "cc $(pkg-config --cflags --libs $module) $name.c"
  readelf -d "$work/pc-shared-$name" | grep -q "NEEDED.*lib$module\.so\.$major" ||
    fail "pc-shared-$name does not use lib$module.so.$major"
  run_example "$name" "$work/pc-shared-$name"
  # -Bstatic makes -lattn libattn.a; --as-needed drops the libattn.so that the -lattn of
  # `pkg-config --static --libs` adds again (docs/install.md).
  # shellcheck disable=SC2046,SC2086
  "$cc" -std=c11 -O2 -o "$work/pc-static-$name" "$source" $(pkg-config --cflags $module) \
    -Wl,--as-needed -Wl,-Bstatic $libraries -Wl,-Bdynamic $(pkg-config --static --libs $module) -lm ||
    fail "cc ... -Wl,-Bstatic $libraries -Wl,-Bdynamic $(pkg-config --static --libs $module) $name.c"
  if readelf -d "$work/pc-static-$name" | grep -q "NEEDED.*libattn"; then
    fail "pc-static-$name needs a libattn*.so"
  fi
  run_example "$name" "$work/pc-static-$name"
done
# The core library alone, where pkg-config sees attn's .pc files and nothing else (as on a
# machine without the cJSON and OpenBLAS development packages): attn.pc requires no other
# module, and a program of attn.h links shared and static with what it says.
step "pkg-config attn with only attn's .pc files: $source_dir/examples/causal_gqa.c"
core_flags=$(PKG_CONFIG_LIBDIR=$libdir/pkgconfig pkg-config --cflags --libs attn) ||
  fail "pkg-config --libs attn needs a module besides attn's"
core_static=$(PKG_CONFIG_LIBDIR=$libdir/pkgconfig pkg-config --static --libs attn) ||
  fail "pkg-config --static --libs attn needs a module besides attn's"
case "$core_flags $core_static" in
  *cjson*|*blas*|*gomp*) fail "attn.pc names a component's dependency: $core_flags / $core_static" ;;
esac
# shellcheck disable=SC2086
"$cc" -std=c11 -O2 -o "$work/core-shared" "$source_dir/examples/causal_gqa.c" $core_flags -lm \
  -Wl,-rpath,"$libdir" || fail "cc causal_gqa.c $core_flags"
run_example causal_gqa "$work/core-shared"
# shellcheck disable=SC2086
"$cc" -std=c11 -O2 -o "$work/core-static" "$source_dir/examples/causal_gqa.c" \
  -I"$prefix/include" -Wl,--as-needed -Wl,-Bstatic -lattn -Wl,-Bdynamic $core_static -lm ||
  fail "cc causal_gqa.c -Wl,-Bstatic -lattn -Wl,-Bdynamic $core_static"
run_example causal_gqa "$work/core-static"
echo "   attn.pc alone: $core_flags (static: $core_static)"
for component in io models; do
  [ -e "$libdir/pkgconfig/attn_$component.pc" ] || continue
  pkg-config --exists "attn_$component" ||
    fail "attn_$component.pc: $(pkg-config --print-errors "attn_$component" 2>&1)"
done
if [ $have_mpi = 1 ]; then
  pkg-config --exists attn_mpi || fail "attn_mpi.pc: $(pkg-config --print-errors attn_mpi 2>&1)"
fi

# ---- the documentation's commands, as written ---------------------------------------------------
# docs/install.md (find_package, pkg-config) and the README's pkg-config lines, run in a home
# folder whose ~/.local is the prefix above (they install to "$HOME/.local").
step "docs/install.md and README.md, as written (HOME=$work/home)"
home=$work/home
mkdir -p "$home"
ln -s "$prefix" "$home/.local"
ln -s "$source_dir/examples" "$home/examples"
snippets=$source_dir/tests/package/doc_snippets.py
python3 "$snippets" "$source_dir/docs/install.md" find_package "$home" app/app.c app/CMakeLists.txt find.sh
python3 "$snippets" "$source_dir/docs/install.md" pkg-config "$home" pkgconfig.sh
python3 "$snippets" "$source_dir/README.md" "Use it from C/C++" "$home" - - readme-pkgconfig.sh
for script in find.sh pkgconfig.sh readme-pkgconfig.sh; do
  output=$(cd "$home" && HOME=$home PATH="$(dirname "$cmake"):$PATH" bash -euo pipefail "$script" 2>&1) ||
    fail "the commands of $script (from the docs) failed: $output"
  # find.sh runs one program, the pkg-config ones two (shared and static).
  case $script in
    find.sh) expected="attn $version" count=1 ;;
    pkgconfig.sh) expected="attn $version" count=2 ;;
    readme-*) expected="1 passed, 0 failed" count=2 ;;
  esac
  [ "$(printf '%s\n' "$output" | grep -cx "$expected")" = "$count" ] ||
    fail "$script (from the docs) did not print '$expected' $count times: $output"
  echo "   $script: $count x '$expected'"
done

# ---- 3. add_subdirectory -----------------------------------------------------------------------
# As a subproject CMAKE_SOURCE_DIR/CMAKE_BINARY_DIR are the parent's: attn's build files use
# PROJECT_SOURCE_DIR/PROJECT_BINARY_DIR (or CMAKE_CURRENT_*) only.
step "add_subdirectory($source_dir) in tests/package/subproject"
if grep -n -E '\$\{CMAKE_(SOURCE|BINARY)_DIR\}' "$source_dir/CMakeLists.txt" "$source_dir"/cmake/*.cmake \
     "$source_dir/examples/CMakeLists.txt"; then
  fail "the lines above use the parent's CMAKE_SOURCE_DIR/CMAKE_BINARY_DIR (use PROJECT_*)"
fi
"$cmake" -S "$source_dir/tests/package/subproject" -B "$work/subproject" \
  -DATTN_SOURCE_DIR="$source_dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release > "$work/subproject.log" 2>&1 ||
  { cat "$work/subproject.log"; fail "configure the add_subdirectory consumer"; }
targets=()
for name in "${examples[@]}"; do targets+=(--target "example_$name"); done
"$cmake" --build "$work/subproject" -j"$jobs" "${targets[@]}" >> "$work/subproject.log" 2>&1 ||
  { cat "$work/subproject.log"; fail "build the add_subdirectory consumer"; }
for name in "${examples[@]}"; do
  run_example "$name" "$work/subproject/examples/example_$name"
done
echo "package_install: all checks passed (attn $version)"
