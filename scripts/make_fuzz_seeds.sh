#!/usr/bin/env bash
# Writes the fuzzers' seed files (fuzz/seeds/<reader>/): small valid files of every kind a user
# hands dqt, made by build/dqt itself (and one GGUF file from llama.cpp's converter), so that
# mutations start from the real formats. Run it again when a format changes; test
# FuzzReplay.EverySeedIsAcceptedByItsReader says when.
#   bash scripts/make_fuzz_seeds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dqt="${DQT:-build/dqt}"
[ -x "$dqt" ] || { echo "make_fuzz_seeds: $dqt missing: run scripts/setup.sh first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seeds=fuzz/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{checkpoint,shard,gguf,model_config,tokenizer,corpus_text,safetensors,api_request,corpus_jsonl,hf_config,hf_tokenizer}

# A corpus of a few lines with digits, punctuation, accents and emoji.
for i in $(seq 1 40); do
  printf 'Address %d. Fellow citizens: the state of the union is strong, caf\xc3\xa9 \xf0\x9f\x99\x82 (%d%%).\n' "$i" $((i * 7))
done > "$work/corpus.txt"
head -c 600 "$work/corpus.txt" > "$seeds/corpus_text/lines.txt"
printf 'no newline at all \xe2\x82\xac' > "$seeds/corpus_text/one_line.txt"
printf '{"text": "first record"}\n\n{"text": "caf\\u00e9 \xe2\x82\xac", "id": 2}\n{"text": "no newline"}' > "$seeds/corpus_jsonl/records.jsonl"

"$dqt" data --corpus "$work/corpus.txt" --tokenizer byte --out "$work/byte" > /dev/null
"$dqt" data --corpus "$work/corpus.txt" --tokenizer bpe --vocab 300 --out "$work/bpe" > /dev/null
cp "$work/byte/val.bin" "$seeds/shard/byte_vocabulary.bin"
cp "$work/bpe/val.bin" "$seeds/shard/bpe_vocabulary.bin"
cp "$work/byte/tokenizer.bin" "$seeds/tokenizer/byte.bin"
cp "$work/bpe/tokenizer.bin" "$seeds/tokenizer/bpe.bin"

# Tiny models of each method: checkpoints and their GGUF exports.
tiny=(--dim 16 --layers 1 --heads 2 --kv-heads 1 --ffn 32 --seq-len 16 --batch 1 --steps 1 --eval-tokens 16
      --no-sample --quiet --threads 1)
train() {  # name, dataset, flags...
  local name=$1 data=$2
  shift 2
  "$dqt" train --data "$work/$data" "${tiny[@]}" "$@" --out "$work/$name" > /dev/null
}
train ternary byte --method dqt --bits 1.58 --optim-state 8 --tie-embeddings
train eight_bit bpe --method dqt --bits 8 --tie-embeddings
train fp byte --method fp --tie-embeddings
cp "$work/ternary/checkpoint.dqt" "$seeds/checkpoint/dqt_ternary_state8.dqt"
cp "$work/eight_bit/checkpoint.dqt" "$seeds/checkpoint/dqt_8bit_bpe.dqt"
cp "$work/fp/checkpoint.dqt" "$seeds/checkpoint/fp.dqt"
"$dqt" export "$work/ternary/checkpoint.dqt" --out "$seeds/gguf/ternary_tq2_0.gguf" > /dev/null
"$dqt" export "$work/ternary/checkpoint.dqt" --ternary-type tq1_0 --out "$seeds/gguf/ternary_tq1_0.gguf" > /dev/null
"$dqt" export "$work/eight_bit/checkpoint.dqt" --out "$seeds/gguf/8bit_bpe_q8_0.gguf" > /dev/null
"$dqt" export "$work/fp/checkpoint.dqt" --float-type f16 --out "$seeds/gguf/fp_f16.gguf" > /dev/null
# And one llama.cpp's converter wrote (scripts/llamacpp_gguf_fixtures.py).
cp tests/golden/llamacpp_gguf/tiny-q8_0.gguf "$seeds/gguf/llamacpp_tiny_q8_0.gguf"

# Hugging Face folders: the ternary model's config.json (the shape of the fuzz targets' fixed
# weights, fuzz/reader_targets.cpp), the same without its quantization_config (read as fp);
# tokenizer.json files: the byte vocabulary and the two layouts of the tests' trained BPE.
"$dqt" export "$work/ternary/checkpoint.dqt" --format safetensors --out "$work/ternary_hf" > /dev/null
cp "$work/ternary_hf/config.json" "$seeds/hf_config/dqt_ternary.json"
python3 -c "import json, sys; c = json.load(open(sys.argv[1])); del c['quantization_config']; print(json.dumps(c, indent=2))" \
  "$work/ternary_hf/config.json" > "$seeds/hf_config/unquantized.json"
cp "$work/ternary_hf/tokenizer.json" "$seeds/hf_tokenizer/byte.json"
cp tests/golden/tokenizer_json/llama3_style.json "$seeds/hf_tokenizer/bpe_llama3_style.json"
cp tests/golden/tokenizer_json/gpt2_style.json "$seeds/hf_tokenizer/bpe_gpt2_style.json"

# Model configs: the full key set a run writes, and a short one.
python3 -c "import json; print(json.dumps(json.load(open('$work/fp/config.json'))['model'], indent=2))" \
  > "$seeds/model_config/full.json" 2>/dev/null || cp "$work/fp/config.json" "$seeds/model_config/full.json"
printf '{"dim": 64, "n_layers": 2, "n_heads": 4}\n' > "$seeds/model_config/short.json"

# Hugging Face safetensors files (not made by dqt: dqt only reads them).
python3 scripts/safetensors_seeds.py "$seeds/safetensors"
# Request bodies of `dqt serve` (each carries both a prompt and messages, so that both routes
# accept it).
printf '{"prompt": "Fellow citizens", "messages": [{"role": "user", "content": "Hi"}]}\n' \
  > "$seeds/api_request/minimal.json"
printf '%s\n' '{"model": "tiny", "prompt": "caf\u00e9 \ud83d\ude42", "messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}], "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 3, "stop": ["\n", "."], "stream": true, "n": 1, "frequency_penalty": 0, "logprobs": false, "top_logprobs": 0}' \
  > "$seeds/api_request/every_field.json"
printf '%s\n' '{"prompt": "Hello", "messages": [{"role": "developer", "content": [{"type": "text", "text": "Brief."}]}, {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}], "max_completion_tokens": 4}' \
  > "$seeds/api_request/text_parts.json"
du -b "$seeds"/*/* | sort -k2
