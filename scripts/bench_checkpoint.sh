#!/usr/bin/env bash
# How long a checkpoint stops training, written in the step loop against on a background thread
# (--async-checkpoint), on the paper's 130M model (hidden 768, 12 layers, FFN 2048, vocabulary
# 32,000 BPE, seq 512) as dqt ternary with 8-bit state and fused updates (2.3 bytes/param).
# Each mode trains ROUNDS times, alternating, 8 steps of one sequence with a checkpoint every
# 2 steps; the pauses come from metrics.jsonl ("checkpoint" records), the snapshot's memory from
# the run's memory report. docs/results.md holds the output.
#   bash scripts/bench_checkpoint.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
dqt="${DQT:-build/dqt}"
[ -x "$dqt" ] || { echo "bench_checkpoint: $dqt missing: run scripts/setup.sh first" >&2; exit 1; }
[ -d data/sotu ] || bash scripts/fetch_corpus.sh
[ -d data/sotu-bpe32000 ] || "$dqt" data --corpus data/sotu --tokenizer bpe --vocab 32000 --out data/sotu-bpe32000
work=runs/bench-checkpoint
rm -rf "$work"
mkdir -p "$work"

model=(--data data/sotu-bpe32000 --dim 768 --layers 12 --heads 12 --ffn 2048 --seq-len 512 --batch 1
       --method dqt --bits 1.58 --quantize-embedding --quantize-head --optim-state 8 --fused-update
       --steps 8 --checkpoint-every 2 --log-every 1 --eval-every 0 --eval-tokens 512 --no-sample --quiet --threads 2)
for ((round = 1; round <= rounds; ++round)); do
  for mode in sync async; do
    flags=()
    [ "$mode" = async ] && flags=(--async-checkpoint)
    echo "== round $round, $mode" >&2
    "$dqt" train "${model[@]}" "${flags[@]}" --out "$work/$mode-$round"
  done
done

/usr/bin/python3 - "$work" "$rounds" <<'EOF'
import json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]
print("| write | round | pauses per checkpoint (s) | median pause (s) | mean step (s) | 8 steps + pauses (s) | snapshot (MiB) | checkpoint file (MiB) | peak RSS (MiB) |")
print("|---|---|---|---|---|---|---|---|---|")
for mode in ("sync", "async"):
    for r in range(1, rounds + 1):
        run = f"{work}/{mode}-{r}"
        rows = records(f"{run}/metrics.jsonl")
        pauses = [x["pause_seconds"] for x in rows if x.get("type") == "checkpoint"]
        steps = [x["step_seconds"] for x in rows if "step_seconds" in x and x.get("type") != "checkpoint"]
        memory = next(x for x in rows if x.get("type") == "memory")
        size = os.path.getsize(f"{run}/checkpoint.dqt") / 2**20
        print(f"| {mode} | {r} | {', '.join(f'{p:.3f}' for p in pauses)} | {statistics.median(pauses):.3f} | "
              f"{statistics.mean(steps):.2f} | {sum(steps) + sum(pauses):.1f} | {memory['peak_bytes']['snapshot'] / 2**20:.0f} | {size:.0f} | "
              f"{memory['peak_rss_bytes'] / 2**20:.0f} |")
EOF
