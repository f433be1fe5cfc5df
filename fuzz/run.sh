#!/usr/bin/env bash
# run.sh — runs every libFuzzer target of a fuzz build for a bounded time (docs/robustness.md).
#
#   bash fuzz/run.sh BUILD_DIR [TARGET...]
#
# BUILD_DIR was configured with CC=clang -DATTN_SANITIZE=address -DATTN_FUZZ=ON (scripts/test.sh
# does this in build-asan). TARGETs default to every fuzz_<name> binary there.
# Environment:
#   ATTN_FUZZ_SECONDS  seconds per target (default 60; CI uses the default; run longer locally)
#   ATTN_FUZZ_JOBS     targets run at once, each on a core of its own (default: the cores)
#   ATTN_FUZZ_WORK     scratch folder (default BUILD_DIR/fuzz-work): the growing corpus, logs,
#                      and crash inputs (artifacts/). The committed seed corpora are read, never
#                      written.
# Each target starts from fuzz/corpus/<name>/ and fuzz/regressions/<name>/ (with the libFuzzer
# dictionary fuzz/<name>.dict when there is one). On a finding the
# script prints the crash input's path and how to keep it as a regression input, and exits 1.
set -euo pipefail
source_dir="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="$(cd "${1:?usage: fuzz/run.sh BUILD_DIR [TARGET...]}" && pwd)"
shift
seconds="${ATTN_FUZZ_SECONDS:-60}"
work="${ATTN_FUZZ_WORK:-$build_dir/fuzz-work}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for binary in "$build_dir"/fuzz_*; do
    name="$(basename "$binary")"
    case "$name" in fuzz_replay_*|fuzz-work) continue ;; esac
    [ -x "$binary" ] && targets+=("${name#fuzz_}")
  done
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz/run.sh: no fuzz targets in $build_dir (ATTN_FUZZ=ON?)" >&2; exit 1; }

# intercept_tls_get_addr=0: see cmake/sanitizers.cmake (LeakSanitizer's tracer and dynamic TLS).
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:intercept_tls_get_addr=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export OMP_NUM_THREADS=2
# One target: its own corpus, log and artifacts; prints its result; returns 1 on a finding.
fuzz_one() {
  local name=$1
  local log="$work/logs/$name.log"
  local seeds=("$source_dir/fuzz/corpus/$name")
  local dictionary=()  # fuzz/<name>.dict: the tokens of the target's format (model_config)
  [ -f "$source_dir/fuzz/$name.dict" ] && dictionary=(-dict="$source_dir/fuzz/$name.dict")
  [ -d "$source_dir/fuzz/regressions/$name" ] && seeds+=("$source_dir/fuzz/regressions/$name")
  if "$build_dir/fuzz_$name" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
       -max_len=4096 -print_final_stats=1 -artifact_prefix="$work/artifacts/$name-" \
       ${dictionary[@]+"${dictionary[@]}"} "$work/corpus/$name" "${seeds[@]}" >"$log" 2>&1; then
    local runs coverage
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz: $name clean: ${runs:-?} inputs in ${seconds}s, ${coverage:-cov: ?}," \
         "corpus $(ls "$work/corpus/$name" | wc -l) files"
    return 0
  fi
  {
    echo "fuzz: $name FOUND A PROBLEM; last lines of $log:"
    tail -n 40 "$log"
    for crash in "$work/artifacts/$name"-*; do
      [ -e "$crash" ] || continue
      echo "fuzz: crash input $crash — keep it with:"
      echo "  mkdir -p fuzz/regressions/$name && cp '$crash' fuzz/regressions/$name/"
    done
  } >&2
  return 1
}

# The targets run side by side, ATTN_FUZZ_JOBS at a time: each is one process on one core
# for its seconds, as when they ran one after another, in a fraction of the wall time.
jobs="${ATTN_FUZZ_JOBS:-$(nproc)}"
mkdir -p "$work/artifacts" "$work/logs"
status=0
running=0
for name in "${targets[@]}"; do
  mkdir -p "$work/corpus/$name"
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  echo "fuzz: $name for ${seconds}s (log $work/logs/$name.log)"
  fuzz_one "$name" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
