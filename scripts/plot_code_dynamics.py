#!/usr/bin/python3
"""How ternary codes move during training: runs made with `dqt train --code-stats-every N`.

    /usr/bin/python3 scripts/plot_code_dynamics.py OUT.png RUN_DIR [RUN_DIR ...]

Reads each run's metrics.jsonl ("codes" and "eval" lines) and draws, against the step:
  - the fraction of quantized weights whose code changed in one optimizer step (all linears),
  - the same per kind of linear (q, k, v, o, gate, up, down) for the first run,
  - the learning rate times the grid's reach (lr / grid step, the mean over linears: the move
    in grid units of a unit-size Adam update),
  - validation loss.
Prints two tables for docs/results.md: each run's final validation loss against bitnet's (a run
folder named bitnet), and the movement of the codes at a few steps.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from cycler import cycler  # noqa: E402

# Ten colours solid, then the same ten dashed: up to 20 runs stay distinguishable.
plt.rcParams["axes.prop_cycle"] = cycler(linestyle=["-", "--"]) * cycler(color=plt.get_cmap("tab10").colors)

KINDS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def read_run(folder):
    codes, evals, train = [], [], {}
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            kind = record.get("type")
            if kind == "codes":
                codes.append(record)
            elif kind == "eval":
                evals.append(record)
            elif kind == "train":
                train[record["step"]] = record
    if not codes:
        sys.exit("plot_code_dynamics: %s has no \"codes\" lines: train it with --code-stats-every N" % folder)
    return codes, evals, train


def lr_at(train, step):
    """The logged lr of the nearest logged step at or before `step`."""
    steps = [s for s in train if s <= step]
    return train[max(steps)]["lr"] if steps else float("nan")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, folders = sys.argv[1], sys.argv[2:]
    runs = {os.path.basename(os.path.normpath(f)): read_run(f) for f in folders}
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    (ax_all, ax_kind), (ax_reach, ax_loss) = axes
    for name, (codes, evals, train) in runs.items():
        steps = [r["step"] for r in codes]
        ax_all.plot(steps, [r["changed_in_step"] for r in codes], label=name)
        reach = []
        for r in codes:
            grid = sum(t["grid_step"] for t in r["tensors"]) / len(r["tensors"])
            reach.append(lr_at(train, r["step"]) / grid)
        ax_reach.plot(steps, reach, label=name)
        ax_loss.plot([e["step"] for e in evals], [e["val_loss"] for e in evals], marker="o", label=name)
    first_name = next(iter(runs))
    first_codes = runs[first_name][0]
    for kind in KINDS:
        values = []
        for r in first_codes:
            moved = [t["changed_in_step"] for t in r["tensors"] if t["name"].endswith(kind)]
            values.append(sum(moved) / len(moved) if moved else float("nan"))
        ax_kind.plot([r["step"] for r in first_codes], values, label=kind)
    ax_all.set(title="codes changed in one step (all quantized linears)", xlabel="step", yscale="log")
    ax_kind.set(title="codes changed in one step, by linear (%s)" % first_name, xlabel="step", yscale="log")
    ax_reach.set(title="lr / grid step (a unit Adam step in grid units)", xlabel="step", yscale="log")
    ax_loss.set(title="validation loss (nats/token)", xlabel="step")
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)

    reference = runs.get("bitnet")
    reference_loss = reference[1][-1]["val_loss"] if reference and reference[1] else None
    print("| run | val loss at the end | vs bitnet | codes changed in the last step | grid step at the end |")
    print("|---|---|---|---|---|")
    for name, (codes, evals, _) in runs.items():
        final = evals[-1]
        versus = "%+.1f%%" % (100.0 * (final["val_loss"] / reference_loss - 1.0)) if reference_loss else "-"
        grid = sum(t["grid_step"] for t in codes[-1]["tensors"]) / len(codes[-1]["tensors"])
        print("| %s | %.4f (step %d) | %s | %.2e | %.4f |" % (
            name, final["val_loss"], final["step"], versus, codes[-1]["changed_in_step"], grid))
    print()
    print("| run | step | changed in one step | changed over the last interval | zero codes | lr / grid step |")
    print("|---|---|---|---|---|---|")
    for name, (codes, _, train) in runs.items():
        picks = [codes[0], codes[len(codes) // 4], codes[len(codes) // 2], codes[3 * len(codes) // 4], codes[-1]]
        for r in picks:
            grid = sum(t["grid_step"] for t in r["tensors"]) / len(r["tensors"])
            print("| %s | %d | %.2e | %.2e (steps %d-%d) | %.3f | %.3f |" % (
                name, r["step"], r["changed_in_step"], r["changed_since"], r["since_step"], r["step"], r["zero"],
                lr_at(train, r["step"]) / grid))


if __name__ == "__main__":
    main()
