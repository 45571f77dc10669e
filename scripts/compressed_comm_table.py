#!/usr/bin/python3
"""The table of scripts/compressed_comm_loss.sh: one row per finished run in ROOT.

    /usr/bin/python3 scripts/compressed_comm_table.py runs/compress

Per run: the final val loss, its relative change against the method's uncompressed run (the
name without its -g8, -g4, -w4, -one-rank parts) and the bytes rank 0 sent per step (gradients,
weights). Step times come from scripts/bench_compressed_comm.py, on an idle machine.
"""
import json
import os
import re
import sys

ORDER = ["bitnet", "bitnet-g8", "bitnet-g4", "bitnet-g4-w4", "dqt-1.58", "dqt-1.58-g8", "dqt-1.58-g4",
         "dqt-8", "dqt-8-g8", "dqt-8-g4", "bitnet-one-rank", "dqt-1.58-one-rank", "dqt-8-one-rank",
         "dqt-1.58-seed2", "dqt-1.58-g4-seed2"]


def summary(folder):
    with open(os.path.join(folder, "metrics.jsonl")) as log:
        records = [json.loads(line) for line in log]
    evals = [r for r in records if r.get("type") == "eval"]
    train = [r for r in records if r.get("type") == "train"]
    if not evals or not any("peak" in k for r in records for k in r):
        return None  # not finished
    return {"val_loss": evals[-1]["val_loss"], "step": evals[-1]["step"],
            "gradient_bytes": train[0]["gradient_bytes_sent"], "weight_bytes": train[0]["weight_bytes_sent"]}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "runs/compress"
    rows = {}
    for name in ORDER:
        folder = os.path.join(root, name)
        if os.path.isdir(folder):
            row = summary(folder)
            if row:
                rows[name] = row
    print("| run | val loss at 5.02M tokens | vs uncompressed | gradients sent per step | weights sent per step |"
          " total vs uncompressed |")
    print("|---|---|---|---|---|---|")
    for name, row in rows.items():
        base = rows.get(re.sub(r"-(g[48]|w[48]|one-rank)\b", "", name))
        change = f"{(row['val_loss'] / base['val_loss'] - 1) * 100:+.2f}%" if base and base is not row else "-"
        sent = row["gradient_bytes"] + row["weight_bytes"]
        compared = base and base is not row and sent > 0  # one rank sends nothing
        ratio = f"{(base['gradient_bytes'] + base['weight_bytes']) / sent:.2f}x less" if compared else "-"
        print(f"| {name} | {row['val_loss']:.4f} | {change} | {row['gradient_bytes'] / 1e6:.3f} MB |"
              f" {row['weight_bytes'] / 1e6:.3f} MB | {ratio} |")


if __name__ == "__main__":
    main()
