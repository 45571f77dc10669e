#!/usr/bin/env python3
"""Directions to close the gap between ternary dqt and bitnet, each at the budget of one
tuning-grid run and against the grid's best runs (docs/results.md, "Closing the gap").

    python3 scripts/gap_directions.py                     every arm, prune budget (612 steps)
    python3 scripts/gap_directions.py --arms residual8    some arms
    python3 scripts/gap_directions.py --budget full       at the full budget (2,450 steps)
    python3 scripts/gap_directions.py --budget full --arms recipe --beside-bitnet --corpus brown --seed 4321
                                                          the recipe and bitnet's best, side by side, carried
                                                          unchanged to another corpus, seed or --size large
    python3 scripts/gap_directions.py --report            the table of docs/results.md
    python3 scripts/gap_directions.py --windows full      train loss by 250-step window, the arms of that
                                                          budget beside the grid's best runs of each method
    /usr/bin/python3 scripts/gap_directions.py --budget full --plot docs/img/gap_full.png   the same, drawn

Arms:
  residualB          ternary dqt with a B-bit sub-grid residual per weight (--dqt-residual-bits B):
                     the update accumulates below one grid step instead of flipping codes at random
  residualB-hH       the same, its fine position allowed H grid steps past -1 and +1 (--dqt-overhang H):
                     a weight pushed beyond an outer code needs as much push back before it flips
                     (the hysteresis of bitnet's latent weights, which lie up to ~3 steps out)
  warm8-fF           ternary dqt warm-started in 8 bits: dqt-8 for F of the budget, then ternary dqt
                     from it (dqt train --init-from: TWN) for the rest; codes and scales throughout
  bitnet-warmfp-fF   the same warm start given to the baseline: fp for F of the budget, then bitnet
  bitnet-full-best   the baseline alone, at the best point of its full stage (not its prune stage's)
  recipe             `dqt train --method dqt` as a user runs it: the default recipe's residual, the
                     grid point's lr, schedule and beta1 (which the recipe's equal). Its records up
                     to 2026-11-28 ran the 8-bit residual; since then the recipe is residual6-h1's
                     settings, so a new recipe record repeats that arm through the recipe

With --beside-bitnet, a one-run arm trains side by side with bitnet at bitnet's best point of
the same budget (for --budget full the full stage's best; records before 2026-11-28 used its
prune stage's best, and each record keeps its point), one thread each, started together, and
the record keeps both runs' losses and median step times from their own logs: the step-time
comparison of the same machine, the same moment.

A one-run arm trains at its method's best prune point (docs/tuning/runs.jsonl; bitnet-full-best
at bitnet's best full-stage point); a warm start trains its source at the source's best prune
point (fp, which the grid does not tune, at bitnet's) and its target at the target's, each with
its own warm-up and schedule. Every other setting is the tuning grid's (scripts/tune_grid.py). Each finished arm appends one record to
docs/tuning/directions.jsonl; an arm with a record is not run again.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import time

import tune_grid as grid

RECORDS = grid.REPO / "docs" / "tuning" / "directions.jsonl"
BUDGETS = {"prune": grid.PRUNE_STEPS, "full": grid.FULL_STEPS}
SOURCE_FLAGS = {"dqt-8": grid.METHODS["dqt-8"], "fp": ["--method", "fp"]}


def arm_table():
    """name -> (target method, extra flags of the target, warm-start source or None, fraction)."""
    arms = {f"residual{b}": ("dqt-1.58", ["--dqt-residual-bits", str(b)], None, None) for b in (8, 4, 2)}
    for b, h in ((4, 3), (2, 3), (4, 1), (6, 1), (5, 2)):
        arms[f"residual{b}-h{h}"] = ("dqt-1.58", ["--dqt-residual-bits", str(b), "--dqt-overhang", str(h)], None, None)
    arms["recipe"] = ("dqt-1.58", ["--method", "dqt", "--bits", "1.58"], None, None)
    # Binaries since 2026-11-27 give ternary codes the recipe's 8-bit residual unless told: an
    # arm that means plain ternary dqt says so.
    # The baseline alone at the best point of its full stage on SOTU (the prune stage's best
    # differs): "against bitnet's best" on another corpus or seed needs bitnet at that point too.
    arms["bitnet-full-best"] = ("bitnet", [], None, None)
    for fraction in (0.8, 0.5):
        arms[f"warm8-f{fraction:g}"] = ("dqt-1.58", ["--dqt-residual-bits", "0"], "dqt-8", fraction)
        arms[f"bitnet-warmfp-f{fraction:g}"] = ("bitnet", [], "fp", fraction)
    return arms


ARMS = arm_table()
# The grid stage whose best point an arm's target trains at; "prune" unless named here.
POINT_STAGE = {"bitnet-full-best": "full"}
DEFAULT_ARMS = ["residual8", "residual4", "residual2", "warm8-f0.8", "bitnet-warmfp-f0.8"]


class Phase:
    """One training run, with the attributes tune_grid.summarize reads."""

    def __init__(self, name, method, method_flags, point, steps, corpus, size, seed, init_from=None):
        self.name, self.method, self.point, self.steps = name, method, point, steps
        self.stage, self.corpus, self.size, self.seed = "direction", corpus, size, seed
        self.method_flags, self.init_from = method_flags, init_from

    def flags(self, head_flags):
        """head_flags: tune_grid.untied_head_flags() of the binary that runs it."""
        p = self.point
        # A warm-started run takes its shape from the model it starts from.
        shape = [] if self.init_from else grid.SIZES[self.size] + head_flags + ["--init-std", f"{p['init_std']:g}"]
        start = ["--init-from", str(self.init_from)] if self.init_from else []
        return (self.method_flags + shape + grid.COMMON + start +
                ["--data", grid.CORPORA[self.corpus], "--steps", str(self.steps), "--seed", str(self.seed),
                 "--lr", f"{p['lr']:g}", "--min-lr-ratio", f"{p['min_lr_ratio']:g}", "--beta1", f"{p['beta1']:g}",
                 "--eval-every", "0"])


def best_point(records, method, stage="prune"):
    points = grid.best_points(records, stage, "bitnet" if method == "fp" else method, 1)
    if not points:
        sys.exit(f"gap_directions: no {stage} record of {method} in {grid.RECORDS}: run scripts/tune_grid.py first")
    return points[0]


def load_records():
    if not RECORDS.exists():
        return {}
    return {r["name"]: r for r in (json.loads(l) for l in RECORDS.read_text().splitlines() if l.strip())}


def run_phase(phase, dqt, nice, head_flags):
    """Trains one phase; its record (tune_grid.summarize), or None when it failed."""
    out = grid.RUN_ROOT / phase.name
    command = ["nice", "-n", str(nice), dqt, "train", *phase.flags(head_flags), "--out", str(out), "--overwrite"]
    print(f"gap_directions: start {phase.name}", flush=True)
    started = time.time()
    with open(grid.RUN_ROOT / f"{phase.name}.log", "w") as sink:
        subprocess.run(command, cwd=grid.REPO, stdout=sink, stderr=sink)
    return grid.summarize(phase, out, time.time() - started, "", head_flags)


def run_together(phases, dqt, nice, head_flags):
    """Trains phases at the same time; their records (None for a run that failed)."""
    running = []
    for phase in phases:
        out = grid.RUN_ROOT / phase.name
        command = ["nice", "-n", str(nice), dqt, "train", *phase.flags(head_flags), "--out", str(out), "--overwrite"]
        print(f"gap_directions: start {phase.name}", flush=True)
        sink = open(grid.RUN_ROOT / f"{phase.name}.log", "w")
        running.append((phase, out, sink, subprocess.Popen(command, cwd=grid.REPO, stdout=sink, stderr=sink)))
    started = time.time()
    records = []
    for phase, out, sink, process in running:
        process.wait()
        sink.close()
        records.append(grid.summarize(phase, out, time.time() - started, "", head_flags))
    return records


def run_arm(arm, budget, corpus, size, seed, dqt, built_from, nice, head_flags, grid_records, beside_bitnet=False):
    target, extra, source, fraction = ARMS[arm]
    if arm == "recipe":  # the recipe's own flags, not the grid method's
        extra, method_flags = [], ARMS[arm][1]
    else:
        method_flags = grid.METHODS[target] + extra
    if beside_bitnet and source:
        sys.exit("gap_directions: --beside-bitnet times one-run arms; a warm start runs in two phases")
    total = BUDGETS[budget]
    name = f"direction-{corpus}-{size}-{arm}-{budget}-s{seed}"
    phases = []
    init_from = None
    if source:
        first_steps = round(fraction * total)
        first = Phase(name + "-source", source, SOURCE_FLAGS[source], best_point(grid_records, source),
                      first_steps, corpus, size, seed)
        phases.append(run_phase(first, dqt, nice, head_flags))
        if phases[-1] is None or phases[-1]["val_loss"] is None:
            return name, None
        init_from = grid.RUN_ROOT / first.name / "checkpoint.dqt"
        total -= first_steps
    last = Phase(name + ("-target" if source else ""), target, method_flags,
                 best_point(grid_records, target, POINT_STAGE.get(arm, "prune")), total, corpus, size, seed,
                 init_from=init_from)
    beside = None
    if beside_bitnet:
        # Bitnet's best point at this budget: the full stage's best for a full-budget arm.
        bitnet = Phase(name + "-beside-bitnet", "bitnet", grid.METHODS["bitnet"],
                       best_point(grid_records, "bitnet", "full" if budget == "full" else "prune"),
                       total, corpus, size, seed)
        arm_record, beside = run_together([last, bitnet], dqt, nice, head_flags)
        phases.append(arm_record)
        (grid.RUN_ROOT / bitnet.name / "checkpoint.dqt").unlink(missing_ok=True)
    else:
        phases.append(run_phase(last, dqt, nice, head_flags))
    if init_from:
        init_from.unlink(missing_ok=True)
    (grid.RUN_ROOT / last.name / "checkpoint.dqt").unlink(missing_ok=True)
    if phases[-1] is None:
        return name, None
    for record in phases:
        record["commit"] = built_from
    final = phases[-1]
    record = {"name": name, "arm": arm, "target": target, "source": source, "fraction": fraction,
              "budget": budget, "steps": BUDGETS[budget], "corpus": corpus, "size": size, "seed": seed,
              "val_loss": final["val_loss"], "diverged_at": final["diverged_at"],
              "median_step_seconds": final["median_step_seconds"], "phases": phases, "commit": built_from}
    if beside is not None:
        beside["commit"] = built_from
        record["beside"] = beside
    return name, record


def arm_label(record):
    """An arm's name; a recipe record also names the residual its binary ran (the recipe changed
    on 2026-11-28, and records before it keep no method_config)."""
    if record["arm"] != "recipe":
        return record["arm"]
    ran = grid.ran_residual(record)
    return f"recipe ({ran[0]}-bit residual, overhang {ran[1]})" if ran else "recipe (8-bit residual)"


def report(records, grid_records):
    print("| arm | corpus | seed | budget | runs (steps) | final val loss | against the same method's best grid run | "
          "against bitnet's best run |")
    print("|---|---|---|---|---|---|---|---|")

    def best_of(method, budget, corpus, size, seed, with_arms):
        """The lowest val loss of `method`'s grid runs (the full-budget ones are the full,
        transfer and large stages) and, with_arms, of its runs here from the start: an arm's
        (bitnet-full-best) or the runs beside an arm."""
        runs = [g for g in grid_records.values() if (g["stage"] == "prune") == (budget == "prune")]
        for r in records.values():
            if with_arms and r["budget"] == budget and r["source"] is None:
                runs += [r["phases"][-1]] + ([r["beside"]] if r.get("beside") else [])
        losses = [g["val_loss"] for g in runs if g["method"] == method and g["corpus"] == corpus and
                  g["size"] == size and g["seed"] == seed and g["val_loss"] is not None]
        return min(losses, default=None)

    for r in sorted(records.values(), key=lambda r: (r["budget"], r["arm"], r["corpus"] != "sotu", r["corpus"], r["seed"])):
        runs = " + ".join(f"{p['method']} {p['steps']}" for p in r["phases"])
        final = "diverged" if r["val_loss"] is None else f"{r['val_loss']:.4f}"
        cells = []
        for method, with_arms in ((r["target"], False), ("bitnet", True)):
            best = best_of(method, r["budget"], r["corpus"], r["size"], r["seed"], with_arms)
            cells.append("none yet" if best is None or r["val_loss"] is None else
                         f"{best:.4f} ({100 * (r['val_loss'] / best - 1):+.1f}%)")
        print(f"| {arm_label(r)} | {r['corpus']} | {r['seed']} | {r['budget']} | {runs} | {final} | {cells[0]} | {cells[1]} |")
    timed = [r for r in records.values() if r.get("beside")]
    if timed:
        print("\nSide by side with bitnet at its best point (one thread each, started together):\n")
        print("| arm | corpus | size | seed | budget | val loss | bitnet's val loss | gap | median s/step | bitnet's | ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(timed, key=lambda r: (r["size"], r["corpus"] != "sotu", r["corpus"], r["seed"])):
        b = r["beside"]
        gap = (f"{100 * (r['val_loss'] / b['val_loss'] - 1):+.1f}%" if r["val_loss"] and b["val_loss"] else "")
        ratio = (f"{r['median_step_seconds'] / b['median_step_seconds']:.3f}"
                 if r["median_step_seconds"] and b["median_step_seconds"] else "")
        print(f"| {arm_label(r)} | {r['corpus']} | {r['size']} | {r['seed']} | {r['budget']} | {grid.loss_text(r)} | "
              f"{grid.loss_text(b)} | {gap} | "
              f"{r['median_step_seconds']:.3f} | {b['median_step_seconds']:.3f} | {ratio} |")


def curves(records, grid_records, budget):
    """(name, final val loss, train curve [[step, loss], ...] every 50 steps) of each grid
    method's best run at `budget` (SOTU, base, first seed) and of each one-run arm of it."""
    stage = budget  # the grid's stage of the same budget has the same name
    found = []
    for method in grid.METHODS:
        rows = [g for g in grid_records.values() if g["stage"] == stage and g["method"] == method and
                g["corpus"] == "sotu" and g["size"] == "base" and g["seed"] == grid.SEEDS[0] and g["val_loss"]]
        if rows:
            best = min(rows, key=lambda g: g["val_loss"])
            found.append((f"{method} (grid best)", best["val_loss"], best["train"]))
    for r in sorted(records.values(), key=lambda r: r["arm"]):
        if r["budget"] == budget and r["source"] is None and r["corpus"] == "sotu":
            found.append((r["arm"], r["val_loss"], r["phases"][-1]["train"]))
    return found


def window_means(curve, budget, width=250):
    """[(first step, last step, mean train loss of the curve's points in between)]."""
    means = []
    for first in range(1, BUDGETS[budget] + 1, width):
        last = min(first + width - 1, BUDGETS[budget])
        losses = [loss for step, loss in curve if first <= step <= last]
        means.append((first, last, sum(losses) / len(losses) if losses else None))
    return means


def windows(records, grid_records, budget):
    """Markdown: mean train loss over each 250-step window of curves()."""
    columns = curves(records, grid_records, budget)
    print("| steps | " + " | ".join(name for name, _, _ in columns) + " |\n|---|" + "---|" * len(columns))
    table = [window_means(curve, budget) for _, _, curve in columns]
    for row in range(len(table[0]) if table else 0):
        first, last, _ = table[0][row]
        cells = [f"{column[row][2]:.4f}" if column[row][2] is not None else "" for column in table]
        print(f"| {first:,}-{last:,} | " + " | ".join(cells) + " |")


def plot(records, grid_records, budget, path):
    """The curves of windows() against step, the final val loss in the legend (matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for name, val_loss, curve in curves(records, grid_records, budget):
        means = [(0.5 * (first + last), mean) for first, last, mean in window_means(curve, budget) if mean]
        axes.plot(*zip(*means), marker="o", markersize=3,
                  label=f"{name}: val {val_loss:.4f}" if val_loss else name)
    axes.set_xlabel("step")
    axes.set_ylabel("train loss, mean over 250 steps (nats/byte)")
    axes.set_title(f"closing the ternary gap at the {budget} budget ({BUDGETS[budget]} steps, SOTU)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=DEFAULT_ARMS)
    parser.add_argument("--budget", choices=list(BUDGETS), default="prune")
    parser.add_argument("--corpus", choices=list(grid.CORPORA), default="sotu")
    parser.add_argument("--size", choices=list(grid.SIZES), default="base")
    parser.add_argument("--seed", type=int, default=grid.SEEDS[0])
    parser.add_argument("--nice", type=int, default=0, help="niceness of the runs (0-19)")
    parser.add_argument("--dqt", default=str(grid.REPO / "build" / "dqt"))
    parser.add_argument("--beside-bitnet", action="store_true",
                        help="train each one-run arm side by side with bitnet at its best point (step-time comparison)")
    parser.add_argument("--report", action="store_true", help="print the table and stop")
    parser.add_argument("--windows", choices=list(BUDGETS), help="print train loss by window at that budget, and stop")
    parser.add_argument("--plot", metavar="PNG", help="draw the --windows curves of --budget (matplotlib), and stop")
    args = parser.parse_args()
    grid_records = grid.load_records()
    if args.report:
        report(load_records(), grid_records)
        return
    if args.windows:
        windows(load_records(), grid_records, args.windows)
        return
    if args.plot:
        plot(load_records(), grid_records, args.budget, args.plot)
        return
    if not pathlib.Path(args.dqt).is_file():
        sys.exit(f"gap_directions: {args.dqt} missing: run scripts/setup.sh first")
    grid.prepare_corpora(args.dqt)
    dqt, built_from = grid.frozen_binary(args.dqt)
    head_flags = grid.untied_head_flags(dqt)
    for arm in args.arms:
        if f"direction-{args.corpus}-{args.size}-{arm}-{args.budget}-s{args.seed}" in load_records():
            continue
        name, record = run_arm(arm, args.budget, args.corpus, args.size, args.seed, dqt, built_from, args.nice,
                               head_flags, grid_records, args.beside_bitnet)
        if record is None:
            print(f"gap_directions: {name} failed: see {grid.RUN_ROOT}/{name}*.log", file=sys.stderr)
            continue
        with open(RECORDS, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"gap_directions: done  {name}: {grid.loss_text(record)}", flush=True)


if __name__ == "__main__":
    main()
