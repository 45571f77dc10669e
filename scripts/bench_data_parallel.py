#!/usr/bin/python3
"""Data-parallel training on this machine: tokens/s and bytes sent per step, 1 vs 2 ranks.

For each method, the same global batch (--batch 8 --grad-accum 2: 16 sequences of 256 tokens
per step) on the reference model (dim 256, 4 layers, FFN 688, byte vocabulary) runs
  - on 1 rank with 1 compute thread,
  - on 2 ranks (mpirun -np 2) with 1 compute thread each,
  - on 1 rank with 2 threads (for context: the same 2 cores used by threads instead),
and tokens/s is the global tokens per step over the median step time after warm-up; each
setting runs --rounds times, interleaved, and the median run is reported. The bytes
each rank sends per step come from the run's metrics (counted by dqt's communicator), also for
3 and 4 ranks (oversubscribed: bytes only, no timing) and for a larger model, to put measured
points on the cost model of docs/data-parallel.md.

    /usr/bin/python3 scripts/bench_data_parallel.py [--steps 30] [--out docs/data-parallel]

Writes OUT/bench.json and OUT/bytes_per_step.png, and prints Markdown tables. Needs
build/dqt, data/sotu-byte (scripts/setup.sh) and an otherwise idle machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
METHODS = [
    ("fp", ["--method", "fp"]),
    ("bitnet", ["--method", "bitnet"]),
    ("dqt ternary", ["--method", "dqt", "--bits", "1.58"]),
    ("dqt 8-bit", ["--method", "dqt", "--bits", "8"]),
]
# Both with a separate lm_head (dqt's default until 2026-11-26), as parameter_split counts.
REFERENCE = ["--ffn", "688", "--untie-embeddings"]
LARGER = ["--dim", "512", "--layers", "8", "--heads", "8", "--ffn", "1376", "--untie-embeddings"]


def parameter_split(dim, layers, ffn, vocab=256):
    """(block-linear weights, fp32-kept weights) of a SubLN model with untied fp32 ends."""
    block = layers * (4 * dim * dim + 3 * dim * ffn)
    kept = 2 * vocab * dim + layers * (3 * dim + ffn) + dim
    return block, kept


MODELS = {"reference": parameter_split(256, 4, 688), "larger": parameter_split(512, 8, 1376)}
CODE_BYTES = {"fp": 4.0, "bitnet": 4.0, "dqt ternary": 0.25, "dqt 8-bit": 1.0}  # per block weight on the wire


def predicted_bytes(method, model, ranks):
    """Cost model per rank and step: reduce-scatter of fp32 gradients plus all-gather of new weights."""
    block, kept = MODELS[model]
    share = (ranks - 1) / ranks
    return share * 4 * (block + kept) + share * (CODE_BYTES[method] * block + 4 * kept)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranks = [2, 3, 4, 8, 16]
    block, kept = MODELS["reference"]
    total = block + kept
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(ranks, [2 * (n - 1) / n * 4 for n in ranks], "k--", zorder=3,
            label="ring all-reduce of fp32 gradients (DDP): the same bytes as fp32 RS + AG")
    colors = {"fp": "tab:blue", "bitnet": "tab:orange", "dqt ternary": "tab:green", "dqt 8-bit": "tab:red"}
    for method in ["fp", "dqt 8-bit", "dqt ternary"]:
        label = "RS + AG, model: " + ("fp32 weights (fp, bitnet)" if method == "fp" else method + " codes")
        ax.plot(ranks, [predicted_bytes(method, "reference", n) / total for n in ranks], color=colors[method],
                linewidth=3 if method == "fp" else 1.5, alpha=0.6 if method == "fp" else 1.0, label=label)
    for row in results["bytes"]:
        block, kept = MODELS[row["model"]]
        ax.plot(row["ranks"], (row["gradient_bytes"] + row["weight_bytes"]) / (block + kept),
                "o" if row["model"] == "reference" else "s", color=colors[row["method"]], markerfacecolor="none",
                markersize=8 if row["method"] == "bitnet" else 5)
    ax.plot([], [], "ko", markerfacecolor="none", label="measured, reference model (3.3M)")
    ax.plot([], [], "ks", markerfacecolor="none", label="measured, larger model (25M)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks, [str(n) for n in ranks])
    ax.set_xlabel("ranks N")
    ax.set_ylabel("bytes sent per rank per step / parameters")
    ax.set_title("Data-parallel traffic: reduce-scatter + all-gather (RS + AG)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run(dqt, ranks, threads, method_flags, steps, extra=(), grad_accum=2):
    """One training run; returns its train metrics records."""
    with tempfile.TemporaryDirectory() as folder:
        command = [dqt, "train", "--data", "data/sotu-byte", "--out", folder + "/run", "--batch", "8",
                   "--grad-accum", str(grad_accum), "--steps", str(steps), "--warmup", "5", "--log-every", "1",
                   "--eval-every", "0", "--eval-tokens", "8192", "--checkpoint-every", "0",
                   "--threads", str(threads), "--no-sample", "--quiet", *method_flags, *extra]
        if ranks > 1:
            command = MPIRUN + ["-np", str(ranks)] + command
        subprocess.run(command, check=True)
        with open(folder + "/run/metrics.jsonl") as log:
            return [r for r in map(json.loads, log) if r.get("type") == "train"]


def tokens_per_second(records, skip):
    tokens_per_step = records[0]["tokens"] // records[0]["step"]
    seconds = statistics.median(r["step_seconds"] for r in records[skip:])
    return tokens_per_step / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per setting (the median is reported)")
    parser.add_argument("--out", default="docs/data-parallel")
    parser.add_argument("--dqt", default="build/dqt")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot from OUT/bench.json")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.plot_only:
        with open(os.path.join(args.out, "bench.json")) as saved:
            plot(json.load(saved), os.path.join(args.out, "bytes_per_step.png"))
        return
    skip = 5  # warm-up steps left out of the median

    results = {"steps": args.steps, "rounds": args.rounds, "speed": [], "bytes": []}
    settings = [("1 rank x 1 thread", 1, 1), ("2 ranks x 1 thread", 2, 1), ("1 rank x 2 threads", 1, 2)]
    rows = {name: {"method": name} for name, _ in METHODS}
    # Rounds interleave every method and setting, so a slow spell of the machine hits all alike.
    for round_index in range(args.rounds):
        for name, flags in METHODS:
            row = rows[name]
            for label, ranks, threads in settings:
                records = run(args.dqt, ranks, threads, flags, args.steps)
                row.setdefault(label + " rounds", []).append(tokens_per_second(records, skip))
                if ranks == 2:
                    row["gradient_bytes"] = records[-1]["gradient_bytes_sent"]
                    row["weight_bytes"] = records[-1]["weight_bytes_sent"]
                print(f"round {round_index + 1}: {name}: {label}: {row[label + ' rounds'][-1]:.0f} tokens/s",
                      file=sys.stderr)
    for name, _ in METHODS:
        row = rows[name]
        for label, _, _ in settings:
            row[label] = statistics.median(row[label + " rounds"])
        results["speed"].append(row)
    for name, flags in METHODS:
        for model, extra in [("reference", REFERENCE), ("larger", LARGER)]:
            for ranks in [2, 3, 4] if model == "reference" else [2, 4]:
                records = run(args.dqt, ranks, 1, flags, 1, extra, grad_accum=ranks)
                results["bytes"].append({"method": name, "model": model, "ranks": ranks,
                                         "gradient_bytes": records[-1]["gradient_bytes_sent"],
                                         "weight_bytes": records[-1]["weight_bytes_sent"]})
    with open(os.path.join(args.out, "bench.json"), "w") as out:
        json.dump(results, out, indent=1)
    plot(results, os.path.join(args.out, "bytes_per_step.png"))

    print("| method | 1 rank x 1 thread | 2 ranks x 1 thread | speed-up | 1 rank x 2 threads |"
          " sent per step per rank: gradients | weights |")
    print("|---|---|---|---|---|---|---|")
    for row in results["speed"]:
        one, two, threads = row["1 rank x 1 thread"], row["2 ranks x 1 thread"], row["1 rank x 2 threads"]
        print(f"| {row['method']} | {one:.0f} | {two:.0f} | {two / one:.2f}x | {threads:.0f} |"
              f" {row['gradient_bytes'] / 1e6:.2f} MB | {row['weight_bytes'] / 1e6:.2f} MB |")
    print()
    print("| method | model | ranks | gradients sent per rank | weights sent per rank | total | cost model |"
          " ring all-reduce would send |")
    print("|---|---|---|---|---|---|---|---|")
    for row in results["bytes"]:
        block, kept = MODELS[row["model"]]
        n = row["ranks"]
        total = row["gradient_bytes"] + row["weight_bytes"]
        print(f"| {row['method']} | {row['model']} | {n} | {row['gradient_bytes'] / 1e6:.3f} MB |"
              f" {row['weight_bytes'] / 1e6:.3f} MB | {total / 1e6:.3f} MB |"
              f" {predicted_bytes(row['method'], row['model'], n) / 1e6:.3f} MB |"
              f" {2 * (n - 1) / n * 4 * (block + kept) / 1e6:.3f} MB |")


if __name__ == "__main__":
    main()
