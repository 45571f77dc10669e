#!/usr/bin/env python3
"""Training and decode speed of two dqt binaries, side by side in one session: `dqt bench train`
(fp and ternary dqt) and `dqt bench generate` (the random 154M ternary model, dqt only), the two
binaries taking turns, ROUNDS times each; prints the median of each figure and the ratio.
For a refactor that must not change speed (issue 27): build the old commit elsewhere and pass it.

    git worktree add /tmp/dqt-old <commit> && cmake -S /tmp/dqt-old -B /tmp/dqt-old/build \\
        -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/dqt-old/build -j2 --target dqt
    python3 scripts/bench_before_after.py /tmp/dqt-old/build/dqt build/dqt [--rounds 5]

Keep the cores otherwise idle while it runs (pause background training: kill -STOP).
"""
import argparse
import json
import statistics
import subprocess

CASES = [
    ("train fp, tokens/s", ["bench", "train", "--method", "fp", "--json"], ("tokens_per_second",)),
    ("train dqt 1.58, tokens/s", ["bench", "train", "--method", "dqt", "--json"], ("tokens_per_second",)),
    ("decode 154M, 2 threads, tok/s", ["bench", "generate", "--no-llama-cpp", "--json", "--threads", "2"],
     ("dqt", "decode_tokens_per_second")),
    ("prompt 154M, 2 threads, tok/s", ["bench", "generate", "--no-llama-cpp", "--json", "--threads", "2"],
     ("dqt", "prompt_tokens_per_second")),
    ("decode 154M, 1 thread, tok/s", ["bench", "generate", "--no-llama-cpp", "--json", "--threads", "1"],
     ("dqt", "decode_tokens_per_second")),
]


def read(output, key):
    value = json.loads(output)
    for part in key:
        value = value[part]
    return float(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    binaries = (args.before, args.after)
    outputs = {}  # (command, binary) -> every round's output; the binaries take turns round by round
    for _, command, _ in CASES:
        if (tuple(command), args.before) in outputs:
            continue
        for binary in binaries:
            outputs[(tuple(command), binary)] = []
        for _ in range(args.rounds):
            for binary in binaries:
                run = subprocess.run([binary, *command], capture_output=True, text=True, check=True)
                outputs[(tuple(command), binary)].append(run.stdout)
    print("| figure | before (median) | after (median) | after / before |\n|---|---|---|---|")
    for name, command, key in CASES:
        before, after = (statistics.median(read(o, key) for o in outputs[(tuple(command), b)]) for b in binaries)
        print(f"| {name} | {before:.1f} | {after:.1f} | {after / before:.3f} |")


if __name__ == "__main__":
    main()
