#!/usr/bin/python3
"""Compressed data-parallel transfers on this machine: bytes sent and step time at N = 2, bytes
at N = 2 and 4 for two model sizes, and the cost model of docs/data-parallel.md with them.

Every setting trains the reference model (dim 256, 4 layers, FFN 688, byte vocabulary) with the
same global batch (--batch 8 --grad-accum 2: 16 x 256 tokens per step) on 2 ranks of 1 compute
thread, for --steps steps; tokens/s is the global tokens per step over the median step time
after warm-up, the median of --rounds interleaved runs. Bytes are counted by dqt's communicator
on rank 0. The larger model (dim 512, 8 layers, FFN 1376) and 4 ranks (oversubscribed) give
bytes only.

    /usr/bin/python3 scripts/bench_compressed_comm.py [--steps 30] [--rounds 3] [--out docs/data-parallel]

Writes OUT/compressed.json and OUT/compressed.png, prints Markdown tables. Needs build/dqt,
data/sotu-byte and an otherwise idle machine.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_data_parallel import LARGER, MODELS, run, tokens_per_second  # noqa: E402

METHODS = {
    "fp": ["--method", "fp"],
    "bitnet": ["--method", "bitnet"],
    "dqt ternary": ["--method", "dqt", "--bits", "1.58"],
    "dqt 8-bit": ["--method", "dqt", "--bits", "8"],
}
COMPRESSIONS = {
    "fp32": [],
    "g8": ["--compress-gradients", "8"],
    "g4": ["--compress-gradients", "4"],
    "g4 w4": ["--compress-gradients", "4", "--compress-weights", "4"],
}
SETTINGS = [("fp", "fp32"), ("fp", "g8"), ("fp", "g4"), ("fp", "g4 w4"),
            ("bitnet", "fp32"), ("bitnet", "g4"), ("bitnet", "g4 w4"),
            ("dqt ternary", "fp32"), ("dqt ternary", "g8"), ("dqt ternary", "g4"),
            ("dqt 8-bit", "fp32"), ("dqt 8-bit", "g4")]
# Bytes on the wire per value: fp32, and a block of 256 values with its fp32 scale.
WIRE = {"fp32": 4.0, "8": 260 / 256, "4": 132 / 256}
CODE_BYTES = {"fp": 4.0, "bitnet": 4.0, "dqt ternary": 0.25, "dqt 8-bit": 1.0}


def predicted_bytes(method, compression, model, ranks):
    """Cost model per rank and step: reduce-scatter of the gradients plus all-gather of new weights."""
    block, kept = MODELS[model]
    share = (ranks - 1) / ranks
    flags = COMPRESSIONS[compression]
    gradient = WIRE[flags[1]] if "--compress-gradients" in flags else 4.0
    weight = WIRE[flags[flags.index("--compress-weights") + 1]] if "--compress-weights" in flags else 4.0
    code = CODE_BYTES[method] if method.startswith("dqt") else weight
    return share * gradient * (block + kept) + share * (code * block + weight * kept)


def step_time_at(bandwidth, row):
    """Cost model of one step at N = 2 over a network of `bandwidth` bytes/s per rank: the local
    step time measured here (shared-memory transfers, about free), plus the reduce-scatter's time
    beyond what the backward pass hides (taken as 2/3 of the step), plus the all-gather (after
    the update, not hidden)."""
    compute = row["step_seconds"]
    hidden = 2 / 3 * compute
    return compute + max(0.0, row["gradient_bytes"] / bandwidth - hidden) + row["weight_bytes"] / bandwidth


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    block, kept = MODELS["reference"]
    ranks = [2, 3, 4, 8, 16]
    styles = {"fp32": "-", "g8": "--", "g4": "-.", "g4 w4": ":"}
    colors = {"fp": "tab:blue", "bitnet": "tab:orange", "dqt ternary": "tab:green", "dqt 8-bit": "tab:red"}
    for method, compression in [("fp", "fp32"), ("fp", "g8"), ("fp", "g4"), ("fp", "g4 w4"),
                                ("dqt ternary", "fp32"), ("dqt ternary", "g4")]:
        left.plot(ranks, [predicted_bytes(method, compression, "reference", n) / (block + kept) for n in ranks],
                  styles[compression], color=colors[method], label=f"model: {method}, {compression}")
    for row in results["bytes"]:
        b, k = MODELS[row["model"]]
        left.plot(row["ranks"], (row["gradient_bytes"] + row["weight_bytes"]) / (b + k),
                  "o" if row["model"] == "reference" else "s", color=colors[row["method"]], markerfacecolor="none")
    left.plot([], [], "ko", markerfacecolor="none", label="measured, reference model (3.3M)")
    left.plot([], [], "ks", markerfacecolor="none", label="measured, larger model (25M)")
    left.set_xscale("log", base=2)
    left.set_xticks(ranks, [str(n) for n in ranks])
    left.set_xlabel("ranks N")
    left.set_ylabel("bytes sent per rank per step / parameters")
    left.set_title("Traffic per step (bitnet sends what fp sends)")
    left.grid(alpha=0.3)
    left.legend(fontsize=7)

    bandwidths = [10 ** (7 + i / 20) for i in range(0, 61)]  # 10 MB/s .. 10 GB/s
    for row in results["speed"]:
        if row["method"] not in ("bitnet", "dqt ternary"):
            continue
        tokens = row["tokens_per_step"]
        right.plot([b * 8 / 1e9 for b in bandwidths], [tokens / step_time_at(b, row) for b in bandwidths],
                   styles[row["compression"]], color=colors[row["method"]],
                   label=f"{row['method']}, {row['compression']}")
        right.plot(bandwidths[-1] * 8 / 1e9, row["tokens_per_second"], "o", color=colors[row["method"]],
                   markerfacecolor="none")
    right.plot([], [], "ko", markerfacecolor="none", label="measured here (shared memory)")
    right.set_xscale("log")
    right.set_xlabel("network bandwidth per rank (Gbit/s)")
    right.set_ylabel("tokens/s, 2 ranks (model)")
    right.set_title("Reference model at N = 2: when compression pays")
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="docs/data-parallel")
    parser.add_argument("--dqt", default="build/dqt")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot from OUT/compressed.json")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.plot_only:
        with open(os.path.join(args.out, "compressed.json")) as saved:
            plot(json.load(saved), os.path.join(args.out, "compressed.png"))
        return
    skip = 5
    results = {"steps": args.steps, "rounds": args.rounds, "speed": [], "bytes": []}
    rounds = {setting: [] for setting in SETTINGS}
    last = {}
    for round_index in range(args.rounds):
        for method, compression in SETTINGS:
            records = run(args.dqt, 2, 1, METHODS[method] + COMPRESSIONS[compression], args.steps)
            rounds[(method, compression)].append(tokens_per_second(records, skip))
            last[(method, compression)] = records
            print(f"round {round_index + 1}: {method}, {compression}: {rounds[(method, compression)][-1]:.0f} tokens/s",
                  file=sys.stderr)
    for method, compression in SETTINGS:
        records = last[(method, compression)]
        tokens = records[0]["tokens"] // records[0]["step"]
        speed = statistics.median(rounds[(method, compression)])
        results["speed"].append({"method": method, "compression": compression, "tokens_per_step": tokens,
                                 "tokens_per_second": speed, "step_seconds": tokens / speed,
                                 "rounds": rounds[(method, compression)],
                                 "gradient_bytes": records[-1]["gradient_bytes_sent"],
                                 "weight_bytes": records[-1]["weight_bytes_sent"],
                                 "exchange_wait_seconds": statistics.median(
                                     r["exchange_wait_seconds"] for r in records[skip:])})
    for method, compression in SETTINGS:
        for model, extra in [("reference", []), ("larger", LARGER)]:
            for ranks in [2, 4]:
                records = run(args.dqt, ranks, 1, METHODS[method] + COMPRESSIONS[compression], 1, extra,
                              grad_accum=ranks)
                results["bytes"].append({"method": method, "compression": compression, "model": model,
                                         "ranks": ranks, "gradient_bytes": records[-1]["gradient_bytes_sent"],
                                         "weight_bytes": records[-1]["weight_bytes_sent"]})
    with open(os.path.join(args.out, "compressed.json"), "w") as out:
        json.dump(results, out, indent=1)
    plot(results, os.path.join(args.out, "compressed.png"))

    base = {row["method"]: row for row in results["speed"] if row["compression"] == "fp32"}
    print("| method | transfers | tokens/s, 2 ranks | step | vs fp32 transfers | gradients sent | weights sent |"
          " gradient traffic vs fp32 |")
    print("|---|---|---|---|---|---|---|---|")
    for row in results["speed"]:
        b = base[row["method"]]
        print(f"| {row['method']} | {row['compression']} | {row['tokens_per_second']:.0f} |"
              f" {row['step_seconds'] * 1000:.1f} ms | {(row['step_seconds'] / b['step_seconds'] - 1) * 100:+.1f}% |"
              f" {row['gradient_bytes'] / 1e6:.3f} MB | {row['weight_bytes'] / 1e6:.3f} MB |"
              f" {b['gradient_bytes'] / row['gradient_bytes']:.2f}x less |")
    print()
    print("| method | transfers | model | ranks | gradients sent | weights sent | total | cost model |")
    print("|---|---|---|---|---|---|---|---|")
    for row in results["bytes"]:
        total = row["gradient_bytes"] + row["weight_bytes"]
        predicted = predicted_bytes(row["method"], row["compression"], row["model"], row["ranks"])
        print(f"| {row['method']} | {row['compression']} | {row['model']} | {row['ranks']} |"
              f" {row['gradient_bytes'] / 1e6:.3f} MB | {row['weight_bytes'] / 1e6:.3f} MB | {total / 1e6:.3f} MB |"
              f" {predicted / 1e6:.3f} MB |")
    print()
    print("Cost model, tokens/s at N = 2 for network bandwidth per rank (Gbit/s):")
    print("| method | transfers | 1 | 10 | 100 | measured here |")
    print("|---|---|---|---|---|---|")
    for row in results["speed"]:
        cells = [f"{row['tokens_per_step'] / step_time_at(g * 1e9 / 8, row):.0f}" for g in (1, 10, 100)]
        print(f"| {row['method']} | {row['compression']} | " + " | ".join(cells) + f" | {row['tokens_per_second']:.0f} |")


if __name__ == "__main__":
    main()
