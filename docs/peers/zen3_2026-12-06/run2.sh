#!/bin/bash
# The final kernel (one row at a time, L2 prefetch) around a third peer round, same session.
O=/tmp/zen3b
F=/tmp/b2b16
FINAL=/tmp/dqt_f16c2   # main at 01ae77b
dqt_round() {
  for t in 1 2; do
    $FINAL bench generate $F/model.gguf --no-llama-cpp --threads $t --kv-cache f16 --repeats 3 --json > $O/final-t$t-r$1.json 2> $O/final-t$t-r$1.err
  done
}
date -u +%H:%M >> $O/times.txt
dqt_round 1
/tmp/bitnet/build/bin/llama-bench -m $F/model-i2_s.gguf -p 128 -n 64 -t 1,2 -r 3 > $O/peers-r3-bitnet.md 2>/dev/null
/tmp/llama.cpp/build/bin/llama-bench -m $F/model.gguf -p 128 -n 64 -t 1,2 -r 3 > $O/peers-r3-llama.md 2>/dev/null
dqt_round 2
/tmp/dqt_f16c2 generate $F/model.gguf --tokens 40 --temperature 0 --threads 2 > $O/final-greedy.txt 2>&1
/tmp/dqt_f16c generate $F/model.gguf --tokens 40 --temperature 0 --threads 2 > $O/after-greedy.txt 2>&1
date -u +%H:%M >> $O/times.txt
echo finished2 >> $O/times.txt
