#!/usr/bin/env python3
"""compare_builds.py — two builds of attn timed against each other, alternated in one run.

Runs the same benchmark command of a base build and of a new build in turns (base, new, new,
base, ... so that a drift of the machine's clock falls on both alike), parses each run's rows
and prints, per row, the median time of each build and new / base. A row within a few percent
of 1.00 is a tie; only a ratio repeated across rounds means anything on a machine whose clock
moves.

    python3 bench/compare_builds.py --rounds 3 --kind decode \\
        --base "/path/to/old/attn bench decode --quick --context 32768 --dtype all" \\
        --new  "build/attn-bench decode --quick --context 32768 --dtype all"
    python3 bench/compare_builds.py --rounds 3 --kind serve \\
        --base "/path/to/old/attn bench serve --ownership --dtype all" \\
        --new  "build/attn-bench serve --ownership --dtype all"

--kind decode reads `attn-bench decode`'s rows (ms/token); --kind serve reads `attn-bench serve
--ownership`'s lines (ms per step of the library's pages and of the two caller layouts).
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys

DECODE_ROW = re.compile(r"^(\S.*?)\s{2,}(\d+)\s+([\d.]+)\s+([\d.]+)\s")
SERVE_ROW = re.compile(r"^decode, (\S+), .*library-owned ([\d.]+) ms; caller-owned "
                       r"\[page, slot, head, D\] ([\d.]+) ms .*caller-owned "
                       r"\[head, page, slot, D\] ([\d.]+) ms")


def rows(kind, text):
    """{row name: milliseconds} of one run's output."""
    found = {}
    for line in text.splitlines():
        if kind == "decode":
            match = DECODE_ROW.match(line)
            if match and not line.startswith("configuration"):
                found[f"{match.group(1).strip()} @ {match.group(2)}"] = float(match.group(4))
        else:
            match = SERVE_ROW.match(line)
            if match:
                dtype = match.group(1)
                for name, value in zip(("library pages", "caller [page, slot, head, D]",
                                        "caller [head, page, slot, D]"), match.groups()[1:]):
                    found[f"{dtype}, {name}"] = float(value)
    return found


def run(command):
    environment = dict(os.environ, OMP_WAIT_POLICY="passive")
    result = subprocess.run(shlex.split(command), capture_output=True, text=True,
                            env=environment, check=True)
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the base build's benchmark command")
    parser.add_argument("--new", required=True, help="the new build's benchmark command")
    parser.add_argument("--kind", choices=("decode", "serve"), required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times = {"base": {}, "new": {}}
    for round_ in range(args.rounds):
        order = ("base", "new") if round_ % 2 == 0 else ("new", "base")
        for which in order:
            for name, value in rows(args.kind, run(getattr(args, which))).items():
                times[which].setdefault(name, []).append(value)
        print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr)
    print(f"| row | base ms | new ms | new / base |\n|---|---|---|---|")
    ratios = []
    for name, base in times["base"].items():
        new = times["new"].get(name)
        if not new:
            continue
        b, n = statistics.median(base), statistics.median(new)
        ratios.append(n / b)
        print(f"| {name} | {b:.3f} | {n:.3f} | {n / b:.3f} |")
    if ratios:
        print(f"\nmedian new / base over {len(ratios)} rows: {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f} .. {max(ratios):.3f}), {args.rounds} alternated rounds")


if __name__ == "__main__":
    main()
