#!/usr/bin/python3
"""How the 8-stream gain of dqt serve's engine falls as the context grows, for each KV cache
type asked for: `dqt bench serve MODEL --streams 1 8` at several decode lengths, each run's 8
streams over its own one stream, drawn against the mean number of positions a decode step
attends to (prompt + half the decode), beside the ceiling the cache's added reads leave.

    /usr/bin/python3 scripts/bench_serve_context.py MODEL OUT [--threads 2] [--rounds 2]
        [--prompt-tokens 16] [--decode-tokens 32 96 224 480] [--kv-cache f32 f16 (int8)]
    /usr/bin/python3 scripts/bench_serve_context.py --plot-only OUT

writes OUT.jsonl (one `bench serve --json` object a run, appended as it goes) and OUT.png.
The weights are read once a step for all streams, but each stream's keys and values are its
own, so the bytes a step reads from the KV cache grow with streams times positions. Rounds
alternate the settings, so a slow stretch of a noisy machine touches them all alike.
Debian's python3-matplotlib (/usr/bin/python3).
"""
import argparse
import json
import subprocess
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def run_bench(args, decode_tokens, kv_cache):
    command = [args.dqt, "bench", "serve", args.model, "--threads", str(args.threads), "--streams", "1", "8",
               "--prompt-tokens", str(args.prompt_tokens), "--decode-tokens", str(decode_tokens),
               "--kv-cache", kv_cache, "--repeats", "1", "--json"]
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_serve_context: {' '.join(command)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def eight_over_one(record):
    rates = {run["streams"]: run["decode_tokens_per_second"] for run in record["runs"]}
    return rates[8] / rates[1]


def ceilings(records):
    """8 over 1 at each context were the 8-stream step to grow only by its added cache reads at
    the read limit (no overlap with the products; the limit the first run at that context
    measured in its process): the best 8-stream step at the shortest context, plus 8 streams x
    the added positions x the bytes a position, against the best one-stream step at that
    context."""
    positions = sorted(records)
    shortest = positions[0]
    step8_shortest = min(8 / run_rate(r, 8) for r in records[shortest])
    result = {}
    for p in positions:
        record = records[p][0]
        added_seconds = 8 * (p - shortest) * record["kv_bytes_per_position"] / (record["read_gb_per_s"] * 1e9)
        step1 = min(1 / run_rate(r, 1) for r in records[p])
        result[p] = 8 * step1 / (step8_shortest + added_seconds)
    return result


def run_rate(record, streams):
    return next(run["decode_tokens_per_second"] for run in record["runs"] if run["streams"] == streams)


def plot(out):
    by_cache = defaultdict(lambda: defaultdict(list))  # kv cache -> mean positions -> records
    try:
        lines = open(out + ".jsonl").read().splitlines()
    except OSError as error:
        sys.exit(f"bench_serve_context: cannot read {out}.jsonl: {error.strerror}")
    for line in lines:
        try:
            record = json.loads(line)
            positions = record["prompt_tokens"] + record["decode_tokens"] / 2
            by_cache[record["kv_cache"]][positions].append(record)
        except (json.JSONDecodeError, KeyError, TypeError):
            sys.exit(f"bench_serve_context: {out}.jsonl: not a `bench serve --json` line: {line[:80]!r}")
    if not by_cache:
        sys.exit(f"bench_serve_context: {out}.jsonl holds no runs")
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    print("kv cache | mean positions | 8 over 1 (runs) | ceiling")
    for kv_cache, records in sorted(by_cache.items()):
        xs = sorted(records)
        ratios = {x: [eight_over_one(r) for r in records[x]] for x in xs}
        ceiling = ceilings(records)
        line, = axes.plot(xs, [max(ratios[x]) for x in xs], marker="o", label=f"{kv_cache} KV cache (best run)")
        axes.vlines(xs, [min(ratios[x]) for x in xs], [max(ratios[x]) for x in xs], color=line.get_color())
        axes.plot(xs, [ceiling[x] for x in xs], color=line.get_color(), linestyle=":",
                  label=f"{kv_cache}: ceiling, added cache reads at the read limit")
        for x in xs:
            spread = "-".join(f"{v:.2f}" for v in (min(ratios[x]), max(ratios[x])))
            print(f"{kv_cache} | {x:g} | {spread}x ({len(ratios[x])}) | {ceiling[x]:.2f}x")
    axes.axhline(4.0, color="grey", linestyle="--", linewidth=1, label="the issue's bar, 4x")
    axes.set_xlabel("mean positions a decode step attends to (prompt + half the decode)")
    axes.set_ylabel("8 streams' tokens/s over one stream's")
    axes.set_title("dqt serve's engine: 8-stream gain against context")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(out + ".png", dpi=120)
    print(f"wrote {out}.png")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="a checkpoint or GGUF file")
    parser.add_argument("out", nargs="?", help="OUT.jsonl and OUT.png are written")
    parser.add_argument("--plot-only", metavar="OUT", help="redraw OUT.png from OUT.jsonl, running nothing")
    parser.add_argument("--dqt", default="build/dqt")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--decode-tokens", type=int, nargs="+", default=[32, 96, 224, 480])
    parser.add_argument("--kv-cache", nargs="+", default=["f32", "f16"], choices=["f32", "f16", "int8"])
    args = parser.parse_args()
    if args.plot_only:
        plot(args.plot_only)
        return
    if not args.out:
        parser.error("MODEL and OUT are required unless --plot-only")
    with open(args.out + ".jsonl", "a") as jsonl:
        for _ in range(args.rounds):
            for decode_tokens in args.decode_tokens:
                for kv_cache in args.kv_cache:
                    record = run_bench(args, decode_tokens, kv_cache)
                    print(f"  {kv_cache} decode {decode_tokens}: 8 over 1 = {eight_over_one(record):.2f}x")
                    jsonl.write(json.dumps(record) + "\n")
                    jsonl.flush()
    plot(args.out)


if __name__ == "__main__":
    main()
