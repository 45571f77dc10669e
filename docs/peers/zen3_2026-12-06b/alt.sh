#!/bin/bash
# bench train alternated, before/after the AVX2 vectorisation of exp_f32 and max_zero_f32.
for r in 3 4 5 6; do for b in before after; do for m in fp dqt; do
  /tmp/dqt_$b bench train --method $m --steps 30 --json 2>/dev/null > train-$b-$m-r$r.json
done; done; done
echo done > alt.done
