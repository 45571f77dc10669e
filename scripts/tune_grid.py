#!/usr/bin/env python3
"""The fair comparison of ternary dqt, dqt 8-bit and bitnet: one tuning grid for every method.

    python3 scripts/tune_grid.py                 run what is missing of every stage, in order
    python3 scripts/tune_grid.py --stage prune   only that stage (prune, full, transfer, large)
    python3 scripts/tune_grid.py --plan          list the runs each stage would start, and stop
    python3 scripts/tune_grid.py --report        the tables of docs/results.md from the records
    python3 scripts/tune_grid.py --plot docs/img/tuning_grid.png     its figure (matplotlib)

Stages (the reproduction setup of scripts/ternary_ablations.sh: dim 256, 4 layers, 8 x 256
tokens a step, 2,450 steps = 5.02 M tokens, 131,072 evaluation tokens, one thread a run):
  prune     every point of GRID for every method at a quarter of the budget (612 steps, the
            schedule compressed to it); the same grid and budget for each method
  full      each method's PRUNE_KEEP best points at the full budget, evaluated every 250 steps,
            and its best point with beta1 0.98 (a setting that starts slow, which a quarter budget
            penalises: dqt's recipe, beta1 0.98, overtook beta1 0.9 at the full budget)
  transfer  each method's best full run, unchanged, with a second seed on SOTU and with two
            seeds on Brown and on the email corpus (scripts/fetch_email.sh), which no tuning saw
  large     each method's best settings once on a model about 4x larger (dim 512, 8 heads,
            FFN 1376: 12.9 M parameters against 3.3 M)
The transfer and large stages here run dqt 8-bit only (GRID_CARRIED). Ternary dqt's best
settings are not a grid point: they are the default recipe, the grid's best point plus an
8-bit sub-grid residual, or residual6-h1 (scripts/gap_directions.py found both). Their
transfer and large runs are gap_directions.py's `--beside-bitnet` pairs, each with bitnet at
its best point beside it, so those pairs are bitnet's transfer and large runs too, with its
`bitnet-full-best` arm (records in docs/tuning/directions.jsonl, which --report reads with
this grid's).

Every finished run appends one record to docs/tuning/runs.jsonl (settings, final and
intermediate validation losses, the train-loss curve, the median step time of steps 25-95% of
the run from the run's own log, the commit). A run with a record is never run again, so the
grid continues where it stopped, in another session or on another machine. Runs go JOBS at a
time (default 2, one thread each, the results do not depend on the thread count); grid points are
interleaved across methods so that a stopped grid has covered every method alike.
"""
import argparse
import filecmp
import itertools
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
RECORDS = REPO / "docs" / "tuning" / "runs.jsonl"
RUN_ROOT = REPO / "runs" / "tune"

# What each method is: flags that are not tuned. dqt runs its recipe's learned grid step (the
# scale rule is part of the method, chosen by earlier ablations: docs/results.md); every
# setting the grid tunes is given explicitly, so the recipe's lr, beta1 and schedule never apply.
METHODS = {
    "bitnet": ["--method", "bitnet"],
    "dqt-1.58": ["--method", "dqt", "--bits", "1.58", "--dqt-scale", "learned"],
    "dqt-8": ["--method", "dqt", "--bits", "8", "--dqt-scale", "learned"],
}
# The grid, the same for every method: peak lr x init std x schedule end x beta1 (32 points).
GRID = {
    "lr": [1e-3, 2e-3, 3e-3, 4e-3],
    "init_std": [0.02, 0.04],
    "min_lr_ratio": [0.0, 0.1],
    "beta1": [0.9, 0.98],
}
# The methods whose best settings are a grid point and that no gap_directions.py pair carries.
GRID_CARRIED = ["dqt-8"]
FULL_STEPS = 2450
PRUNE_STEPS = FULL_STEPS // 4
PRUNE_KEEP = 4
SLOW_START = {"beta1": 0.98}  # each method's best prune point with these settings goes to the full stage too
FULL_PER_METHOD = PRUNE_KEEP + 1
SEEDS = [1234, 4321]
CORPORA = {"sotu": "data/sotu-byte", "brown": "data/brown-byte", "email": "data/email-byte"}
SIZES = {
    "base": ["--dim", "256", "--layers", "4", "--heads", "4", "--ffn", "688"],
    "large": ["--dim", "512", "--layers", "4", "--heads", "8", "--ffn", "1376"],
}
COMMON = ["--seq-len", "256", "--batch", "8", "--warmup", "30", "--beta2", "0.95",
          "--weight-decay", "0.1", "--grad-clip", "1.0", "--eval-tokens", "131072",
          "--checkpoint-every", "0", "--no-sample", "--threads", "1", "--quiet"]


def grid_points():
    keys = list(GRID)
    return [dict(zip(keys, values)) for values in itertools.product(*(GRID[k] for k in keys))]


def point_name(point):
    return "lr{lr:g}-std{init_std:g}-end{min_lr_ratio:g}-b{beta1:g}".format(**point)


class Run:
    def __init__(self, stage, method, point, corpus="sotu", size="base", seed=SEEDS[0]):
        self.stage, self.method, self.point = stage, method, point
        self.corpus, self.size, self.seed = corpus, size, seed
        self.steps = PRUNE_STEPS if stage == "prune" else FULL_STEPS
        self.name = f"{stage}-{corpus}-{size}-{method}-{point_name(point)}-s{seed}"

    def flags(self, pinned):
        """pinned: pinned_flags() of the binary that runs it."""
        p = self.point
        eval_every = 0 if self.stage == "prune" else 250
        return (METHODS[self.method] + pinned[self.method] + SIZES[self.size] + COMMON +
                ["--data", CORPORA[self.corpus], "--steps", str(self.steps), "--seed", str(self.seed),
                 "--lr", f"{p['lr']:g}", "--init-std", f"{p['init_std']:g}",
                 "--min-lr-ratio", f"{p['min_lr_ratio']:g}", "--beta1", f"{p['beta1']:g}",
                 "--eval-every", str(eval_every)])


def load_records():
    if not RECORDS.exists():
        return {}
    records = {}
    for line in RECORDS.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            records[record["name"]] = record
    return records


def loss_key(record):
    """Sorts diverged runs last."""
    return record["val_loss"] if record["val_loss"] is not None else float("inf")


def loss_text(record):
    if record["val_loss"] is None:
        return f"diverged at step {record['diverged_at']}"
    return f"{record['val_loss']:.4f}"


def best_points(records, stage, method, count, corpus="sotu", size="base"):
    """The `count` points of `method` with the lowest final validation loss in `stage`."""
    done = [r for r in records.values() if r["stage"] == stage and r["method"] == method
            and r["corpus"] == corpus and r["size"] == size and r["seed"] == SEEDS[0]]
    done.sort(key=loss_key)
    return [r["point"] for r in done[:count]]


def full_stage_points(records, method):
    """The prune points `method` runs at the full budget: its PRUNE_KEEP best and its best with
    the SLOW_START settings (if not among them already, the next best point), the latter run
    second."""
    ranked = best_points(records, "prune", method, len(grid_points()))
    keep = ranked[:PRUNE_KEEP]
    slow = [p for p in ranked if p not in keep and all(p[k] == v for k, v in SLOW_START.items())]
    rest = [p for p in ranked if p not in keep]
    return keep[:1] + (slow or rest)[:FULL_PER_METHOD - PRUNE_KEEP] + keep[1:]


def stage_runs(stage, records):
    """The runs of `stage`, or a sentence saying which earlier stage is not finished."""
    points = grid_points()
    if stage == "prune":
        return [Run("prune", m, p) for p in points for m in METHODS]
    earlier = {"full": ("prune", len(points)), "transfer": ("full", FULL_PER_METHOD),
               "large": ("full", FULL_PER_METHOD)}[stage]
    for method in METHODS:
        have = len([r for r in records.values() if r["stage"] == earlier[0] and r["method"] == method
                    and r["corpus"] == "sotu" and r["size"] == "base" and r["seed"] == SEEDS[0]])
        if have < earlier[1]:
            return f"stage {stage} waits for stage {earlier[0]}: {method} has {have} of {earlier[1]} runs"
    if stage == "full":
        keep = {m: full_stage_points(records, m) for m in METHODS}
        return [Run("full", m, keep[m][rank]) for rank in range(FULL_PER_METHOD) for m in METHODS]
    best = {m: best_points(records, "full", m, 1)[0] for m in GRID_CARRIED}
    if stage == "large":
        return [Run("large", m, best[m], size="large") for m in GRID_CARRIED]
    runs = []
    for corpus, seed in [("sotu", SEEDS[1])] + [(c, s) for c in ("brown", "email") for s in SEEDS]:
        runs += [Run("transfer", m, best[m], corpus=corpus, seed=seed) for m in GRID_CARRIED]
    return runs


def commit():
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()


def prepare_corpora(dqt):
    """Fetches each corpus and writes its byte-level shards where CORPORA says, once."""
    for corpus, fetch in [("sotu", "fetch_corpus.sh"), ("brown", "fetch_brown.sh"), ("email", "fetch_email.sh")]:
        folder = REPO / CORPORA[corpus]
        if not folder.is_dir():
            subprocess.run(["bash", str(REPO / "scripts" / fetch)], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([dqt, "data", "--corpus", f"data/{corpus}", "--tokenizer", "byte",
                            "--out", str(folder)], cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def frozen_binary(dqt):
    """A copy of `dqt` for this invocation, so that rebuilding build/ mid-grid changes no run;
    with the commit it was built from (the checkout's HEAD, "+dirty" with uncommitted changes).
    An earlier frozen copy (runs/tune/dqt-COMMIT, given as --dqt) is used as it is, so a grid resumed in a later
    session runs the binary its first runs ran."""
    given = pathlib.Path(dqt).resolve()
    if given.parent == RUN_ROOT.resolve() and given.name.startswith("dqt-"):
        return str(given), given.name[len("dqt-"):]
    head = commit()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    copy = RUN_ROOT / f"dqt-{head}"
    # An identical copy may be running (a grid beside a gap_directions.py chain): left as it is.
    if not (copy.exists() and filecmp.cmp(dqt, copy, shallow=False)):
        shutil.copy2(dqt, copy)
    return str(copy), head + ("+dirty" if dirty else "")


def untied_head_flags(dqt):
    """The grid's models have a separate lm_head, the default of the binaries that started it;
    binaries since 2026-11-26 tie it unless told, so they are told: every run, one architecture."""
    help_text = subprocess.run([dqt, "train", "--help"], capture_output=True, text=True).stdout
    return ["--untie-embeddings"] if "--untie-embeddings" in help_text else []


def pinned_flags(dqt):
    """Per method, the flags that keep each run what the grid's first runs were, whichever binary
    runs it: a separate lm_head (untied_head_flags), and for ternary dqt no sub-grid residual.
    Binaries since 2026-11-27 give ternary codes the default recipe's 8-bit residual unless told;
    the grid's dqt-1.58 is the method without it (the recipe is a gap_directions.py arm)."""
    help_text = subprocess.run([dqt, "train", "--help"], capture_output=True, text=True).stdout
    no_residual = ["--dqt-residual-bits", "0"] if "--dqt-residual-bits" in help_text else []
    untied = untied_head_flags(dqt)
    return {m: untied + (no_residual if m == "dqt-1.58" else []) for m in METHODS}


def summarize(run, out, elapsed, built_from, pinned):
    """The record of a finished run, read from its metrics.jsonl: one that ended, or one that
    diverged (val_loss None, diverged_at its step: a result of those settings, not run again).
    None when the run did neither (it failed)."""
    metrics = out / "metrics.jsonl"
    lines = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()] if metrics.exists() else []
    evals = [[l["step"], l["val_loss"]] for l in lines if l.get("type") == "eval"]
    train = [l for l in lines if l.get("type") == "train"]
    diverged = [l["step"] for l in lines if l.get("type") == "diverged"]
    ended = evals and evals[-1][0] == run.steps and any(l.get("type") == "memory" for l in lines)
    if not ended and not diverged:
        return None
    middle = [l["step_seconds"] for l in train if 0.25 * run.steps <= l["step"] <= 0.95 * run.steps]
    config = out / "config.json"
    # What the binary ran, as its own config says: a recipe's residual changes with the commit.
    method_config = json.loads(config.read_text())["method"] if config.exists() else None
    return {
        "name": run.name, "stage": run.stage, "method": run.method, "point": run.point,
        "corpus": run.corpus, "size": run.size, "seed": run.seed, "steps": run.steps,
        "val_loss": evals[-1][1] if ended else None, "diverged_at": diverged[0] if diverged else None,
        "evals": evals,
        "train": [[l["step"], round(l["loss"], 5)] for l in train if l["step"] % 50 == 0],
        "median_step_seconds": statistics.median(middle) if middle else None,
        "wall_seconds": round(elapsed, 1), "commit": built_from, "flags": run.flags(pinned),
        "method_config": method_config,
    }


def execute(runs, dqt, built_from, jobs, nice, pinned):
    """Runs `runs` `jobs` at a time; appends each finished run's record as soon as it ends."""
    pending, active = list(runs), []
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    RECORDS.parent.mkdir(parents=True, exist_ok=True)
    while pending or active:
        while pending and len(active) < jobs:
            run = pending.pop(0)
            out = RUN_ROOT / run.name
            log = open(RUN_ROOT / f"{run.name}.log", "w")
            command = ["nice", "-n", str(nice), dqt, "train", *run.flags(pinned), "--out", str(out), "--overwrite"]
            print(f"tune_grid: start {run.name}", flush=True)
            active.append((run, out, subprocess.Popen(command, cwd=REPO, stdout=log, stderr=log), time.time()))
        time.sleep(2)
        for entry in list(active):
            run, out, process, started = entry
            if process.poll() is None:
                continue
            active.remove(entry)
            record = summarize(run, out, time.time() - started, built_from, pinned)
            if record is None:
                print(f"tune_grid: {run.name} failed (exit {process.returncode}): see {RUN_ROOT / run.name}.log",
                      file=sys.stderr, flush=True)
                continue
            with open(RECORDS, "a") as f:
                f.write(json.dumps(record) + "\n")
            (out / "checkpoint.dqt").unlink(missing_ok=True)
            print(f"tune_grid: done  {run.name}: {loss_text(record)}", flush=True)


def report(records):
    """Markdown tables: the prune ranking, each method's best per corpus and size, the gaps."""
    def rows(stage, **match):
        return sorted((r for r in records.values() if r["stage"] == stage and
                       all(r[k] == v for k, v in match.items())), key=loss_key)

    print("### Prune stage (612 steps), val loss by method, best first\n")
    print("| rank | " + " | ".join(METHODS) + " |\n|---|" + "---|" * len(METHODS))
    ranked = {m: rows("prune", method=m) for m in METHODS}
    for i in range(max((len(v) for v in ranked.values()), default=0)):
        cells = [f"{loss_text(ranked[m][i])} {point_name(ranked[m][i]['point'])}"
                 if i < len(ranked[m]) else "" for m in METHODS]
        print(f"| {i + 1} | " + " | ".join(cells) + " |")
    print("\n### Best per corpus and size (seeds 1234 / 4321), median step time\n")
    print("| corpus | size | method | settings | val loss | seed spread | s/step | vs bitnet's best row |")
    print("|---|---|---|---|---|---|---|---|")
    best = best_runs(records, load_direction_records())
    for corpus, size in CORPUS_SIZES:
        runs = best.get((corpus, size), {})
        bitnet = bitnet_best(runs)
        for method, seeds in runs.items():
            losses = [r["val_loss"] for r in seeds if r["val_loss"] is not None]
            gap = spread = ""
            # Against bitnet's best, over the seeds both ran: mean against mean.
            common = [r["seed"] for r in seeds if r["seed"] in bitnet and r["val_loss"] is not None]
            if common:
                ours = statistics.mean(r["val_loss"] for r in seeds if r["seed"] in common)
                gap = f"{100 * (ours / statistics.mean(bitnet[s] for s in common) - 1):+.1f}%"
                if len(common) < len(seeds) or len(common) < len(bitnet):
                    gap += " (seed " + ", ".join(map(str, common)) + ")"
            if len(seeds) > 1:
                spread = f"{max(losses) - min(losses):.4f}" if len(losses) == len(seeds) else "a seed diverged"
            times = [r["median_step_seconds"] for r in seeds if r["median_step_seconds"] is not None]
            step = f"{statistics.median(times):.3f}" if times else ""
            print(f"| {corpus} | {size} | {method} | {seeds[0]['settings']} | "
                  f"{' / '.join(loss_text(r) for r in seeds)} | {spread or 'one seed'} | {step} | {gap} |")


CORPUS_SIZES = [("sotu", "base"), ("brown", "base"), ("email", "base"), ("sotu", "large")]


def bitnet_best(runs):
    """Of bitnet's rows in one corpus and size of best_runs(), the one with the lowest mean over
    its seeds, as {seed: val loss}; {} if bitnet has none there."""
    bitnet_rows = [{r["seed"]: r["val_loss"] for r in runs[row] if r["val_loss"] is not None}
                   for row in runs if row.startswith("bitnet")]
    return min((b for b in bitnet_rows if b), key=lambda b: statistics.mean(b.values()), default={})


def load_direction_records():
    """scripts/gap_directions.py's records (its recipe-beside-bitnet pairs carry two methods' bests)."""
    path = RECORDS.parent / "directions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ran_residual(direction):
    """(residual bits, overhang) that a gap_directions.py record's binary ran, from the run's own
    config; None for records before 2026-11-28, which keep no method_config."""
    ran = direction["phases"][-1].get("method_config")
    return (ran.get("residual_bits"), ran.get("residual_overhang")) if ran else None


def best_runs(records, directions):
    """Each method's best settings, run by run: {(corpus, size): {row: [run, ...] by seed}}, a
    run being {seed, val_loss, diverged_at, median_step_seconds, settings}. dqt 8-bit: its best
    full-stage point wherever this grid ran it. Bitnet: every run at its best full-stage point
    (this grid's, gap_directions.py's bitnet-full-best arm and the runs beside an arm), and in a
    row of their own the runs beside an arm at another point (before 2026-11-28, its prune
    stage's best). Ternary dqt: the recipe and residual6-h1, gap_directions.py's arms."""
    found = {}

    def add(row, corpus, size, seed, run, settings):
        found.setdefault((corpus, size), {}).setdefault(row, {})[seed] = {
            "seed": seed, "val_loss": run["val_loss"], "diverged_at": run.get("diverged_at"),
            "median_step_seconds": run.get("median_step_seconds"), "settings": settings}

    for method in ["bitnet", "dqt-8"]:
        chosen = best_points(records, "full", method, 1)
        for r in records.values():
            if r["stage"] != "prune" and r["method"] == method and [r["point"]] == chosen:
                add(method, r["corpus"], r["size"], r["seed"], r, point_name(r["point"]))
    bitnet_best = best_points(records, "full", "bitnet", 1)

    def add_bitnet(run):
        row = "bitnet" if [run["point"]] == bitnet_best else "bitnet (another point, beside an arm)"
        add(row, run["corpus"], run["size"], run["seed"], run, point_name(run["point"]))

    # A "recipe" record ran the recipe of its day: the 8-bit residual until 2026-11-28 (those
    # records keep no method_config), residual6-h1's settings since.
    arm_rows = {"recipe": ("dqt-1.58 (8-bit residual)", "the recipe until 2026-11-28: grid best + 8-bit residual"),
                "residual6-h1": ("dqt-1.58 (residual6-h1)", "the recipe since 2026-11-28: grid best + 6-bit residual, overhang 1")}
    for r in directions:
        if r["budget"] != "full":
            continue
        arm = "residual6-h1" if ran_residual(r) == (6, 1) else r["arm"]
        if arm in arm_rows:
            add(*arm_rows[arm][:1], r["corpus"], r["size"], r["seed"], r, arm_rows[arm][1])
        if r["arm"] == "bitnet-full-best":
            add_bitnet(r["phases"][-1])
        if r.get("beside"):
            add_bitnet(r["beside"])
    order = ["bitnet", "bitnet (another point, beside an arm)", "dqt-1.58 (8-bit residual)", "dqt-1.58 (residual6-h1)",
             "dqt-8"]
    return {key: {m: [runs[m][seed] for seed in sorted(runs[m])] for m in order if m in runs}
            for key, runs in found.items()}


def plot(records, path):
    """Left: every prune-stage point's val loss, by method, points ordered by lr then the rest of
    the grid. Middle: each method's best full-budget run, val loss against step (SOTU, base).
    Right: each method's best per corpus and size against bitnet's best there, one dot a seed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(19, 4.8))
    points = grid_points()
    labels = [point_name(p) for p in points]
    for method in METHODS:
        losses = {point_name(r["point"]): r["val_loss"] for r in records.values()
                  if r["stage"] == "prune" and r["method"] == method and r["val_loss"] is not None}
        xs = [i for i, label in enumerate(labels) if label in losses]
        left.plot(xs, [losses[labels[i]] for i in xs], "o", label=method, alpha=0.8)
        best = best_points(records, "full", method, 1)
        run = [r for r in records.values() if r["stage"] == "full" and r["method"] == method
               and [r["point"]] == best]
        if run:
            steps, values = zip(*run[0]["evals"])
            middle.plot(steps, values, label=f"{method} {point_name(run[0]['point'])}: {run[0]['val_loss']:.4f}")
    left.set_xticks(range(len(labels)))
    left.set_xticklabels(labels, rotation=90, fontsize=6)
    left.set_ylabel(f"val loss after {PRUNE_STEPS} steps (nats/byte)")
    left.set_title("prune stage: the same grid for every method")
    left.legend()
    middle.set_xlabel("step")
    middle.set_ylabel("val loss (nats/byte)")
    middle.set_title(f"each method's best at the full budget ({FULL_STEPS} steps, SOTU)")
    if middle.lines:
        middle.legend(fontsize=8)
    plot_bests_against_bitnet(right, best_runs(records, load_direction_records()))
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def plot_bests_against_bitnet(axes, best):
    """Each seed's val loss over the mean of bitnet's best row in that corpus and size (over its
    seeds), for bitnet's best row, ternary dqt's recipe and dqt 8-bit; the mean of the seeds as a bar."""
    shown = [("bitnet", "bitnet, best point"), ("dqt-1.58 (residual6-h1)", "dqt ternary, the recipe"),
             ("dqt-8", "dqt 8-bit, best point")]
    width = 0.8 / len(shown)
    for k, (row, label) in enumerate(shown):
        xs, means, dots = [], [], []
        for i, key in enumerate(CORPUS_SIZES):
            runs = best.get(key, {})
            bitnet = bitnet_best(runs)
            losses = [r["val_loss"] for r in runs.get(row, []) if r["val_loss"] is not None]
            if not bitnet or not losses:
                continue
            reference = statistics.mean(bitnet.values())
            gaps = [100 * (loss / reference - 1) for loss in losses]
            x = i + (k - (len(shown) - 1) / 2) * width
            xs.append(x)
            means.append(statistics.mean(gaps))
            dots += [(x, gap) for gap in gaps]
        color = f"C{k}"
        axes.bar(xs, means, width * 0.9, label=label, color=color, alpha=0.5)
        axes.plot([x for x, _ in dots], [gap for _, gap in dots], "o", color=color, markeredgecolor="black",
                  markersize=4)
    axes.axhline(2.0, color="grey", linestyle="--", linewidth=0.8)
    axes.axhline(0.0, color="black", linewidth=0.6)
    axes.set_xticks(range(len(CORPUS_SIZES)))
    axes.set_xticklabels([f"{corpus}, {size}" for corpus, size in CORPUS_SIZES])
    axes.set_ylabel("val loss vs bitnet's best (%)")
    axes.set_title("each method's best by corpus and size (dots: seeds; dashed: +2%)")
    axes.legend(fontsize=8)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=["prune", "full", "transfer", "large", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side, one thread each")
    parser.add_argument("--nice", type=int, default=0, help="niceness of the runs (0-19)")
    parser.add_argument("--dqt", default=str(REPO / "build" / "dqt"))
    parser.add_argument("--plan", action="store_true", help="list the runs still to do and stop")
    parser.add_argument("--report", action="store_true", help="print the result tables and stop")
    parser.add_argument("--plot", metavar="PNG", help="draw the prune stage, the best curves and each best against bitnet's (needs matplotlib)")
    args = parser.parse_args()
    if args.report or args.plot:
        if args.report:
            report(load_records())
        if args.plot:
            plot(load_records(), args.plot)
        return
    if not pathlib.Path(args.dqt).is_file():
        sys.exit(f"tune_grid: {args.dqt} missing: run scripts/setup.sh first")
    prepare_corpora(args.dqt)
    dqt, built_from = (None, None) if args.plan else frozen_binary(args.dqt)
    pinned = {} if args.plan else pinned_flags(dqt)
    stages = ["prune", "full", "transfer", "large"] if args.stage == "all" else [args.stage]
    for stage in stages:
        records = load_records()
        runs = stage_runs(stage, records)
        if isinstance(runs, str):
            print(f"tune_grid: {runs}")
            break
        todo = [r for r in runs if r.name not in records]
        print(f"tune_grid: stage {stage}: {len(runs) - len(todo)} of {len(runs)} runs recorded", flush=True)
        if args.plan:
            for run in todo:
                print(f"  {run.name}")
            continue
        execute(todo, dqt, built_from, args.jobs, args.nice, pinned)


if __name__ == "__main__":
    main()
