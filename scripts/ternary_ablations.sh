#!/usr/bin/env bash
# Ternary DQT against BitNet (issue: ternary DQT as good as BitNet): the reproduction setup of
# scripts/reproduce_paper.sh (same model, data order, seed, schedule and 5.02 M-token budget)
# with the codes' movement logged every 50 steps, for bitnet, dqt ternary and each ablation;
# then docs/img/ternary_code_dynamics.png and a table on stdout (docs/results.md).
#
#   bash scripts/ternary_ablations.sh              every run (about 15-25 min per pair on 2 cores)
#   ONLY="dqt-1.58-wd0 bitnet" bash scripts/ternary_ablations.sh     just these runs
# Two runs go side by side, one thread each (the results do not depend on the thread count).
# Runs that finished (their metrics hold the final eval) are skipped; others start over.
set -euo pipefail
cd "$(dirname "$0")/.."
dqt="${DQT:-build/dqt}"
[ -x "$dqt" ] || { echo "ternary_ablations: $dqt missing: run scripts/setup.sh first" >&2; exit 1; }
[ -d data/sotu ] || bash scripts/fetch_corpus.sh
[ -d data/sotu-byte ] || "$dqt" data --corpus data/sotu --tokenizer byte --out data/sotu-byte
# The second corpus (the Brown Corpus; scripts/fetch_brown.sh): the runs named brown-*.
[ -d data/brown ] || bash scripts/fetch_brown.sh
[ -d data/brown-byte ] || "$dqt" data --corpus data/brown --tokenizer byte --out data/brown-byte

common=(--data data/sotu-byte --dim 256 --layers 4 --heads 4 --ffn 688 --untie-embeddings --seq-len 256 --batch 8
        --steps 2450 --lr 2e-3 --warmup 30 --min-lr-ratio 0.1 --beta1 0.9 --beta2 0.95
        --weight-decay 0.1 --grad-clip 1.0 --seed 1234 --eval-every 250 --eval-tokens 131072
        --checkpoint-every 500 --no-sample --code-stats-every 50 --threads 1 --quiet)
# name|flags: later flags override the common ones. The common flags give lr, beta1 and the
# schedule explicitly, so a dqt row's --dqt-recipe only picks its scale rule: rows measured under
# the paper's rule say --dqt-recipe reference (the default recipe learns the scale).
runs=(
  "bitnet|--method bitnet"
  "dqt-1.58|--method dqt --dqt-recipe reference --bits 1.58"
  "dqt-1.58-init0.04|--method dqt --dqt-recipe reference --bits 1.58 --init-std 0.04"
  "dqt-1.58-wd0|--method dqt --dqt-recipe reference --bits 1.58 --weight-decay 0"
  "dqt-1.58-lr1e-3|--method dqt --dqt-recipe reference --bits 1.58 --lr 1e-3"
  "dqt-1.58-lr4e-3|--method dqt --dqt-recipe reference --bits 1.58 --lr 4e-3"
  "dqt-1.58-init0.06|--method dqt --dqt-recipe reference --bits 1.58 --init-std 0.06"
  "bitnet-init0.04|--method bitnet --init-std 0.04"
  "dqt-1.58-learned|--method dqt --bits 1.58 --dqt-scale learned"
  "dqt-1.58-learned-b0.98|--method dqt --bits 1.58 --dqt-scale learned --beta1 0.98"
  "dqt-1.58-learned-b0.99|--method dqt --bits 1.58 --dqt-scale learned --beta1 0.99"
  "bitnet-b0.98|--method bitnet --beta1 0.98"
  "dqt-1.58-b0.98|--method dqt --dqt-recipe reference --bits 1.58 --beta1 0.98"
  "dqt-1.58-learned-b0.98-lr3e-3|--method dqt --bits 1.58 --dqt-scale learned --beta1 0.98 --lr 3e-3"
  "dqt-1.58-learned-b0.98-lr4e-3|--method dqt --bits 1.58 --dqt-scale learned --beta1 0.98 --lr 4e-3"
  "dqt-1.58-learned-b0.98-lr6e-3|--method dqt --bits 1.58 --dqt-scale learned --beta1 0.98 --lr 6e-3"
  "brown-bitnet|--data data/brown-byte --method bitnet"
  "brown-dqt-1.58-learned-b0.98-lr3e-3|--data data/brown-byte --method dqt --bits 1.58 --dqt-scale learned --beta1 0.98 --lr 3e-3"
  "brown-dqt-1.58|--data data/brown-byte --method dqt --dqt-recipe reference --bits 1.58"
  "recipe-wd0|--method dqt --bits 1.58 --dqt-scale learned --beta1 0.98 --lr 3e-3 --weight-decay 0"
  "recipe-beta2-0.99|--method dqt --bits 1.58 --dqt-scale learned --beta1 0.98 --lr 3e-3 --beta2 0.99"
  "recipe-minlr0|--method dqt --bits 1.58 --dqt-scale learned --beta1 0.98 --lr 3e-3 --min-lr-ratio 0"
  "bitnet-minlr0|--method bitnet --min-lr-ratio 0"
  "brown-recipe-minlr0|--data data/brown-byte --method dqt --bits 1.58 --dqt-scale learned --beta1 0.98 --lr 3e-3 --min-lr-ratio 0"
  "brown-bitnet-minlr0|--data data/brown-byte --method bitnet --min-lr-ratio 0"
  "dqt-8|--method dqt --dqt-recipe reference --bits 8"
  "dqt-8-recipe|--method dqt --bits 8 --dqt-scale learned --beta1 0.98 --lr 3e-3 --min-lr-ratio 0"
  "dqt-4|--method dqt --dqt-recipe reference --bits 4"
  "dqt-4-recipe|--method dqt --bits 4 --dqt-scale learned --beta1 0.98 --lr 3e-3 --min-lr-ratio 0"
)
root=runs/codes
mkdir -p "$root"
finished() { [ -f "$1/metrics.jsonl" ] && grep -q '"type":"memory"\|"peak' "$1/metrics.jsonl"; }
pending=()
for entry in "${runs[@]}"; do
  name="${entry%%|*}"
  [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $name "* ]] || continue
  if finished "$root/$name"; then echo "== $name: done already"; continue; fi
  pending+=("$entry")
done
for ((i = 0; i < ${#pending[@]}; i += 2)); do
  for entry in "${pending[@]:i:2}"; do
    name="${entry%%|*}"
    read -r -a flags <<< "${entry#*|}"
    rm -rf "${root:?}/$name"
    echo "== $name: training"
    "$dqt" train "${common[@]}" "${flags[@]}" --out "$root/$name" > "$root/$name.log" 2>&1 &
  done
  wait
done
# The default recipe against bitnet with the same schedule, on both corpora, and at 8 and 4 bits.
/usr/bin/python3 scripts/plot_code_dynamics.py docs/img/ternary_recipe.png \
  "$root/recipe-minlr0" "$root/bitnet-minlr0" "$root/brown-recipe-minlr0" "$root/brown-bitnet-minlr0" \
  "$root/dqt-8" "$root/dqt-8-recipe" "$root/dqt-4" "$root/dqt-4-recipe"
/usr/bin/python3 scripts/plot_code_dynamics.py docs/img/ternary_code_dynamics.png \
  "$root/dqt-1.58" "$root/bitnet" "$root/dqt-1.58-init0.04" "$root/dqt-1.58-wd0" "$root/dqt-1.58-lr1e-3" \
  "$root/dqt-1.58-lr4e-3" "$root/dqt-1.58-init0.06" "$root/bitnet-init0.04" "$root/dqt-1.58-learned" \
  "$root/dqt-1.58-learned-b0.98" "$root/dqt-1.58-learned-b0.99" "$root/bitnet-b0.98" "$root/dqt-1.58-b0.98" \
  "$root/dqt-1.58-learned-b0.98-lr3e-3" "$root/dqt-1.58-learned-b0.98-lr4e-3" "$root/dqt-1.58-learned-b0.98-lr6e-3"
