#!/usr/bin/env bash
# Does a refactor change no arithmetic? Trains the same short runs with two dqt binaries and
# compares their checkpoints byte for byte: fp, bitnet without SubLN, ternary dqt (the tuned
# recipe), dqt 8-bit with 8-bit Adam state and fused updates, and (when mpirun is here) 2 ranks
# with --grad-accum 2 against one process with the same global batch.
#
#   bash scripts/same_arithmetic.sh BEFORE_DQT AFTER_DQT [STEPS]   (default 40 steps, data/sotu-byte)
#
# Each run writes into its own folder under a scratch directory, entered by the same relative
# --out, so the checkpoints record the same run folder name. Exits non-zero on any difference.
set -euo pipefail
if [ $# -lt 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
  echo "same_arithmetic: usage: bash scripts/same_arithmetic.sh BEFORE_DQT AFTER_DQT [STEPS] (two dqt binaries)" >&2
  exit 2
fi
before=$(realpath "$1")
after=$(realpath "$2")
steps=${3:-40}
data=$(realpath "${DATA:-data/sotu-byte}")  # made by `build/dqt data`
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

runs=(
  "fp|--method fp"
  "bitnet|--method bitnet --no-subln"
  "dqt-ternary|--method dqt --bits 1.58"
  "dqt-8bit-fused|--method dqt --bits 8 --optim-state 8 --fused-update"
)
common=(--data "$data" --steps "$steps" --eval-every 0 --eval-tokens 8192 --checkpoint-every 0 --quiet --threads 1)

train() {  # train BINARY SIDE NAME FLAGS... -> $scratch/SIDE/NAME/run/checkpoint.dqt
  local binary=$1 side=$2 name=$3
  shift 3
  mkdir -p "$scratch/$side/$name"
  (cd "$scratch/$side/$name" && "$binary" train "${common[@]}" --out run "$@" >/dev/null)
}

differ=0
compare() {  # compare NAME
  if cmp -s "$scratch/before/$1/run/checkpoint.dqt" "$scratch/after/$1/run/checkpoint.dqt"; then
    echo "same     $1"
  else
    echo "DIFFERENT $1"
    differ=1
  fi
}

for entry in "${runs[@]}"; do
  name=${entry%%|*}
  read -r -a flags <<< "${entry#*|}"
  train "$before" before "$name" "${flags[@]}"
  train "$after" after "$name" "${flags[@]}"
  compare "$name"
done

if command -v mpirun >/dev/null; then
  # 2 ranks x 1 micro-batch of 4 against one process's 2 micro-batches of 4: the same bits.
  ranks=(mpirun --allow-run-as-root --oversubscribe -np 2)
  flags=(--method dqt --bits 1.58 --batch 4 --grad-accum 2)
  train "$after" before ranks "${flags[@]}"
  mkdir -p "$scratch/after/ranks"
  (cd "$scratch/after/ranks" && "${ranks[@]}" "$after" train "${common[@]}" --out run "${flags[@]}" >/dev/null)
  compare ranks
fi
exit $differ
