#!/bin/bash
# Side-by-side on this Zen 3 with the 2.41B F16-head file (BitNet b1.58 2B4T's shape and
# vocabulary): dqt after the AVX2 fp16 decode product around two peer rounds, and the binary
# before it once per thread count.
O=/tmp/zen3b
F=/tmp/b2b16
AFTER=/tmp/dqt_f16c     # main at abe98e0 (the AVX2 + F16C half_gemv)
BEFORE=/tmp/dqt_new     # 325a488: the reference's soft-float widening on AVX2
dqt_round() {
  for t in 1 2; do
    $AFTER bench generate $F/model.gguf --no-llama-cpp --threads $t --kv-cache f16 --repeats 3 --json > $O/after-t$t-r$1.json 2> $O/after-t$t-r$1.err
  done
}
peer_round() {
  /tmp/bitnet/build/bin/llama-bench -m $F/model-i2_s.gguf -p 128 -n 64 -t 1,2 -r 3 > $O/peers-r$1-bitnet.md 2>/dev/null
  /tmp/llama.cpp/build/bin/llama-bench -m $F/model.gguf -p 128 -n 64 -t 1,2 -r 3 > $O/peers-r$1-llama.md 2>/dev/null
}
date -u +%H:%M > $O/times.txt
dqt_round 1; peer_round 1; dqt_round 2; date -u +%H:%M >> $O/times.txt
peer_round 2; dqt_round 3; date -u +%H:%M >> $O/times.txt
for t in 1 2; do
  $BEFORE bench generate $F/model.gguf --no-llama-cpp --threads $t --kv-cache f16 --repeats 1 --json > $O/before-t$t.json 2> $O/before-t$t.err
done
date -u +%H:%M >> $O/times.txt
echo finished >> $O/times.txt
