#!/usr/bin/env bash
# Step time of every training method on the reference config (dim 256, 4 layers, 4 heads,
# FFN 688, seq 256, batch 8, byte vocabulary), interleaved over several rounds so that a
# disturbance of the shared machine hits every method alike; prints a Markdown table of the
# median over rounds. Run on an otherwise idle machine.
#   bash scripts/bench_methods.sh [rounds]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
dqt="${DQT:-build/dqt}"
[ -x "$dqt" ] || { echo "bench_methods: $dqt missing: run scripts/setup.sh first" >&2; exit 1; }

methods=("--method fp" "--method bitnet" "--method dqt --bits 1.58" "--method dqt --bits 4"
         "--method dqt --bits 8" "--method dqt --bits 1.58 --optim-state 16"
         "--method dqt --bits 1.58 --compute-dtype bf16")
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for ((round = 1; round <= rounds; round++)); do
  for flags in "${methods[@]}"; do
    read -r -a args <<< "$flags"
    "$dqt" bench train "${args[@]}" --steps 20 --warmup 3 --json >> "$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1])]
keys = []
for r in records:
    key = (r["method"], r["optim_state"], r["compute_dtype"])
    if key not in keys:
        keys.append(key)
def median(key, field):
    return statistics.median(r[field] for r in records if (r["method"], r["optim_state"], r["compute_dtype"]) == key)
fp_ms = median(("fp", "32", "fp32"), "seconds_per_step") * 1e3
print("| method | Adam state | compute | ms/step | tokens/s | vs fp step time |")
print("|---|---|---|---|---|---|")
for key in keys:
    ms = median(key, "seconds_per_step") * 1e3
    print("| %s | %s-bit | %s | %.1f | %.0f | %+.1f%% |" % (key[0], key[1], key[2], ms,
          median(key, "tokens_per_second"), 100.0 * (ms / fp_ms - 1.0)))
PY
