#!/usr/bin/env bash
# Runs dqt with flag values that cannot work and prints a Markdown table: the command, the exit
# status, how many lines it printed to stderr, whether the run folder appeared, and the message.
# docs/reliability.md holds its output. Every row should read: exit 1, 1 line, no folder.
#   bash scripts/try_bad_flags.sh > /tmp/bad_flags.md
set -euo pipefail
cd "$(dirname "$0")/.."
dqt="${DQT:-build/dqt}"
[ -x "$dqt" ] || { echo "try_bad_flags: $dqt missing: run scripts/setup.sh first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for i in $(seq 1 300); do echo "Fellow citizens, line $i of a small corpus for bad flags."; done > "$work/corpus.txt"
"$dqt" data --corpus "$work/corpus.txt" --tokenizer byte --out "$work/data" > /dev/null
train="train --data $work/data --dim 32 --layers 2 --heads 2 --ffn 64 --seq-len 32 --batch 4 --eval-tokens 1024 --quiet --no-sample"
"$dqt" $train --steps 2 --out "$work/model" > /dev/null
model="$work/model/checkpoint.dqt"

cases=(
  "$train --out RUN --lr -0.1"
  "$train --out RUN --lr inf"
  "$train --out RUN --lr nan"
  "$train --out RUN --lr -1e30"
  "$train --out RUN --init-std inf"
  "$train --out RUN --rope-theta inf"
  "$train --out RUN --adam-eps 0"
  "$train --out RUN --weight-decay -1"
  "$train --out RUN --grad-clip nan"
  "$train --out RUN --compress-gradients 3"
  "$train --out RUN --compress-weights 4 --fused-update"
  "$train --out RUN --min-lr-ratio 2"
  "$train --out RUN --threads -3"
  "$train --out RUN --threads 10000"
  "$train --out RUN --steps 0"
  "$train --out RUN --steps 99999999999999999999"
  "$train --out RUN --batch 0"
  "$train --out RUN --grad-accum 2000000000"
  "$train --out RUN --layers 0"
  "$train --out RUN --layers 2000000000"
  "$train --out RUN --dim 4294967360"
  "$train --out RUN --heads 3"
  "$train --out RUN --seq-len 100000000"
  "$train --out RUN --layers 10000 --heads 16 --batch 1 --seq-len 1500 --eval-tokens 1500"
  "$train --out RUN --layers 1 --ffn 1000000 --batch 400"
  "$train --out RUN --batch 2000000000 --grad-accum 2000000000"
  "$train --out RUN --method dqt --dqt-recipe paper"
  "$train --out RUN --method bitnet --dqt-recipe reference"
  "$train --out RUN --eval-tokens -5"
  "$train --out RUN --bits 3.3 --method dqt"
  "$train --out RUN --method nope"
  "$train --out RUN --no-such-flag 1"
  "eval $model --threads 0.5"
  "eval $model --eval-tokens -1"
  "eval $model --data /nonexistent"
  "eval /dev/zero"
  "generate $model --temperature nan"
  "generate $model --top-p 1.5"
  "generate $model --top-k -2"
  "generate $model --tokens 100000000"
  "generate $model --kv-cache f8"
  "export $model --out $model"
  "export $model --ternary-type q9_9 --out RUN.gguf"
  "export $model --float-type f64 --out RUN.gguf"
  "bench train --seq-len 200000"
  "bench memory --seq-len 100000 --batch 8"
)

echo "| command (tiny model flags left out) | exit | stderr lines | output written | message |"
echo "|---|---|---|---|---|"
for template in "${cases[@]}"; do
  out="$work/run$RANDOM"
  command=${template//RUN/$out}
  set +e
  message=$("$dqt" $command 2>&1 > /dev/null)
  status=$?
  set -e
  lines=$(printf '%s' "$message" | grep -c '' || true)
  written=no
  compgen -G "$out*" > /dev/null && written=yes
  shown=${template//$train/train ...}
  shown=${shown//$model/ckpt}
  shown=${shown//$work\//}
  message=${message//$work\//}
  message=${message//$'\n'/ / }
  echo "| \`dqt $shown\` | $status | $lines | $written | ${message//|/\\|} |"
done
