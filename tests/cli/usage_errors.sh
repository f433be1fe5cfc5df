#!/usr/bin/env bash
# usage_errors.sh — docs/cli.md's promise for usage errors, command by command: an unknown
# option, a missing value, a missing or extra argument exits 2 with exactly one line on stderr
# (naming the command and the problem, and where to look: --help or the usage) and nothing on
# stdout, before anything runs; with no arguments at all the tool prints its whole usage on
# stdout and exits 2.
# usage: bash usage_errors.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passed=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# expect NEEDLE ARGS...: exit 2, one line on stderr containing NEEDLE and (unless pointer=0)
# pointing to --help or spelling out the usage, nothing on stdout.
pointer=1
expect() {
    local needle=$1
    shift
    timeout 60 "$attn" "$@" > "$work/out" 2> "$work/err" < /dev/null
    local status=$? name="attn $*"
    if [ "$status" -ne 2 ]; then fail "$name: exit $status, expected 2 ($(head -c 200 "$work/err"))"; return; fi
    if [ -s "$work/out" ]; then fail "$name: printed on stdout: $(head -c 200 "$work/out")"; return; fi
    local lines
    lines=$(wc -l < "$work/err")
    if [ "$lines" -ne 1 ]; then fail "$name: $lines lines on stderr: $(head -n 3 "$work/err")"; return; fi
    if ! grep -qF -- "$needle" "$work/err"; then fail "$name: '$(cat "$work/err")' lacks '$needle'"; return; fi
    if [ "$pointer" -eq 1 ] && ! grep -qE -- "--help|usage: attn" "$work/err"; then
        fail "$name: '$(cat "$work/err")' points neither to --help nor to the usage"; return
    fi
    passed=$((passed + 1))
}

# unknown options, every command
expect "'--bogus'" --bogus
for command in demo forward backward train heatmap; do
    expect "--bogus" $command --bogus
done
# attn ring starts MPI first, whose plugins leak by design (the MPI tests run LeakSanitizer
# with detect_leaks=0 for the same reason): leaks are not looked at for this one call.
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" expect "--bogus" ring --bogus
expect "--bogus" kv-size --bogus
expect "--bogus" inspect --bogus
# missing values
expect "--model" kv-size --model
expect "--steps" train --steps
# missing or extra arguments
expect "missing --q" forward
expect "missing --q" backward
expect "missing --weights" heatmap
expect "no PATH" inspect
expect "'second.npy'" inspect first.npy second.npy
# a command attn does not have (the benchmarks are attn-bench's)
expect "unknown command 'bench'" bench --quick

# no arguments: exit 2 and the whole usage on stdout, every command named
timeout 60 "$attn" > "$work/out" 2> "$work/err" < /dev/null
status=$?
if [ "$status" -ne 2 ]; then fail "no arguments: exit $status, expected 2"; else passed=$((passed + 1)); fi
for command in demo forward backward train heatmap kv-size inspect; do
    if grep -qE "^  $command +[^ ]" "$work/out"; then passed=$((passed + 1))
    else fail "no arguments: the usage lacks $command: $(head -c 300 "$work/out")"; fi
done

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
