#!/usr/bin/python3
"""Training-loss curves of runs side by side, from their metrics.jsonl.

    /usr/bin/python3 scripts/plot_train_curves.py OUT.png "TITLE" LABEL=METRICS.jsonl [LABEL=METRICS.jsonl ...]

Draws each run's logged train loss against the tokens seen, and its evaluations as points
(validation loss), one colour a run. Debian's python3-matplotlib (/usr/bin/python3).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_run(path):
    train, evals = [], []
    tokens_per_step = None
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if record["type"] == "train":
                tokens_per_step = record["tokens"] / record["step"]
                train.append((record["tokens"], record["loss"]))
            elif record["type"] == "eval" and tokens_per_step:
                evals.append((record["step"] * tokens_per_step, record["val_loss"]))
    if not train:
        sys.exit(f"plot_train_curves: {path} has no train lines")
    return train, evals


def main():
    if len(sys.argv) < 4 or any("=" not in arg for arg in sys.argv[3:]):
        sys.exit(__doc__)
    out, title = sys.argv[1], sys.argv[2]
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for arg in sys.argv[3:]:
        label, path = arg.split("=", 1)
        train, evals = read_run(path)
        line, = axes.plot([t / 1e6 for t, _ in train], [loss for _, loss in train], label=f"{label} (train)", lw=1.2)
        if evals:
            axes.plot([t / 1e6 for t, _ in evals], [loss for _, loss in evals], "o", color=line.get_color(),
                      label=f"{label} (validation)")
    axes.set_xlabel("tokens seen (millions)")
    axes.set_ylabel("cross-entropy (nats/token)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
