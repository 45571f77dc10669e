#!/bin/bash
# Side-by-side rounds on this Zen 3: dqt runs around each peer round; then the serve figures.
cd /work/main
O=/tmp/zen3
dqt_round() {
  for m in m2b m154; do for t in 1 2; do
    build/dqt bench generate /tmp/$m/model.gguf --no-llama-cpp --threads $t --kv-cache f16 --repeats 3 --json > $O/fa4ec49-dqt-$m-t$t-r$1.json 2> $O/fa4ec49-dqt-$m-t$t-r$1.err
  done; done
}
peer_round() {
  for m in m2b m154; do
    /tmp/bitnet/build/bin/llama-bench -m /tmp/$m/model-i2_s.gguf -p 128 -n 64 -t 1,2 -r 3 > $O/peers-r$1-bitnet-$m.md 2>/dev/null
    /tmp/llama.cpp/build/bin/llama-bench -m /tmp/$m/model.gguf -p 128 -n 64 -t 1,2 -r 3 > $O/peers-r$1-llama-$m.md 2>/dev/null
  done
}
date -u +%H:%M > $O/times.txt
dqt_round 1; peer_round 1; dqt_round 2; date -u +%H:%M >> $O/times.txt
peer_round 2; dqt_round 3; date -u +%H:%M >> $O/times.txt
for r in 1 2; do
  build/dqt bench serve --threads 2 --streams 1 8 --repeats 2 > $O/serve-m154-t2-r$r.txt 2>&1
  build/dqt bench serve /tmp/m2b/model.gguf --threads 2 --streams 1 8 --decode-tokens 32 --repeats 2 > $O/serve-m2b-t2-r$r.txt 2>&1
done
build/bench_ternary_batch 1 2 4 8 16 > $O/ternary_batch-m154.txt 2>&1
build/bench_ternary_batch --2b 1 2 4 8 16 > $O/ternary_batch-2b.txt 2>&1
date -u +%H:%M >> $O/times.txt
echo finished >> $O/times.txt
