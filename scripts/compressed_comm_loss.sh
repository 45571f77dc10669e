#!/usr/bin/env bash
# What compressed communication costs in loss (issue 15): the reproduction setup of
# scripts/reproduce_paper.sh (same model, data, seed, 2450 steps = 5.02 M tokens) trained by 2
# ranks under mpirun, with and without --compress-gradients / --compress-weights, for bitnet,
# dqt ternary and dqt 8-bit (each method's default settings: dqt's tuned recipe). The global
# batch is the same 8 sequences of 256 tokens (--batch 4 --grad-accum 2: one micro-batch per
# rank). Prints a Markdown table of final val loss, its change against the uncompressed run, and
# bytes sent per step per rank (docs/data-parallel.md, docs/results.md).
#
# The runs named *-one-rank are the noise floor: the uncompressed run on one process with the
# global batch as one micro-batch (--batch 8 --grad-accum 1, 2 threads). It differs from the
# 2-rank run only in how the gradient's sum is grouped (float rounding), so its loss change is
# what a perturbation of one rounding per step does to this training setup, before any compression.
# The *-seed2 pair repeats ternary dqt's uncompressed and 4-bit runs with another seed.
#
#   bash scripts/compressed_comm_loss.sh                 every run (about 7 min each on 2 cores)
#   ONLY="bitnet bitnet-g4" bash scripts/compressed_comm_loss.sh     just these runs
# Runs that finished (their metrics hold the final memory report) are skipped; the table is
# printed for whatever runs exist.
set -euo pipefail
cd "$(dirname "$0")/.."
dqt="${DQT:-build/dqt}"
[ -x "$dqt" ] || { echo "compressed_comm_loss: $dqt missing: run scripts/setup.sh first" >&2; exit 1; }
[ -d data/sotu ] || bash scripts/fetch_corpus.sh
[ -d data/sotu-byte ] || "$dqt" data --corpus data/sotu --tokenizer byte --out data/sotu-byte

common=(--data data/sotu-byte --dim 256 --layers 4 --heads 4 --ffn 688 --untie-embeddings --seq-len 256 --batch 4 --grad-accum 2
        --steps 2450 --warmup 30 --beta2 0.95 --weight-decay 0.1 --grad-clip 1.0 --seed 1234
        --eval-every 500 --eval-tokens 131072 --checkpoint-every 0 --no-sample --threads 1 --quiet)
# name|flags
runs=(
  "bitnet|--method bitnet"
  "bitnet-g8|--method bitnet --compress-gradients 8"
  "bitnet-g4|--method bitnet --compress-gradients 4"
  "bitnet-g4-w4|--method bitnet --compress-gradients 4 --compress-weights 4"
  "dqt-1.58|--method dqt --bits 1.58"
  "dqt-1.58-g8|--method dqt --bits 1.58 --compress-gradients 8"
  "dqt-1.58-g4|--method dqt --bits 1.58 --compress-gradients 4"
  "dqt-8|--method dqt --bits 8"
  "dqt-8-g8|--method dqt --bits 8 --compress-gradients 8"
  "dqt-8-g4|--method dqt --bits 8 --compress-gradients 4"
  "bitnet-one-rank|--method bitnet"
  "dqt-1.58-one-rank|--method dqt --bits 1.58"
  "dqt-8-one-rank|--method dqt --bits 8"
  "dqt-1.58-seed2|--method dqt --bits 1.58 --seed 99"
  "dqt-1.58-g4-seed2|--method dqt --bits 1.58 --compress-gradients 4 --seed 99"
)
root=runs/compress
mkdir -p "$root"
finished() { [ -f "$1/metrics.jsonl" ] && grep -q '"peak' "$1/metrics.jsonl"; }
for entry in "${runs[@]}"; do
  name="${entry%%|*}"
  [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $name "* ]] || continue
  if finished "$root/$name"; then echo "== $name: done already"; continue; fi
  read -r -a flags <<< "${entry#*|}"
  rm -rf "${root:?}/$name"
  if [[ "$name" == *-one-rank ]]; then
    echo "== $name: training on 1 rank"
    "$dqt" train "${common[@]}" "${flags[@]}" --batch 8 --grad-accum 1 --threads 2 --out "$root/$name" \
      > "$root/$name.log" 2>&1
  else
    echo "== $name: training on 2 ranks"
    mpirun --allow-run-as-root -np 2 --bind-to core "$dqt" train "${common[@]}" "${flags[@]}" --out "$root/$name" \
      > "$root/$name.log" 2>&1
  fi
done
/usr/bin/python3 scripts/compressed_comm_table.py "$root"
