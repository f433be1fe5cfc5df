#!/usr/bin/env bash
# thread_limit.sh — every command that takes --threads accepts what the library accepts and
# no more: 1025 and 4096 are usage errors (exit 2, one line naming --threads, the value and
# the range 1..1024 = ATTN_MAX_THREADS) before anything runs, as the library would refuse them.
# usage: bash thread_limit.sh ATTN_BINARY SOURCE_DIR
set -uo pipefail
attn=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passed=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

for command in forward backward; do
    for threads in 1025 4096; do
        # shellcheck disable=SC2086
        timeout 60 "$attn" $command --threads "$threads" > "$work/out" 2> "$work/err" < /dev/null
        status=$?
        name="$command --threads $threads"
        if [ "$status" -ne 2 ]; then fail "$name: exit $status, expected 2 ($(head -c 200 "$work/err"))"; continue; fi
        if [ "$(wc -l < "$work/err")" -ne 1 ]; then fail "$name: $(wc -l < "$work/err") lines on stderr"; continue; fi
        if ! grep -q -- "--threads '*$threads'*: expected an integer in 1\.\.1024" "$work/err"; then
            fail "$name: '$(cat "$work/err")' does not name --threads $threads and 1..1024"; continue
        fi
        passed=$((passed + 1))
    done
done
echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
